"""The workload families, one module (or small package) each, every one run
by `python benchmarks/run.py --only <group>` in a fresh interpreter
(`python -m workloads.<family>`):

- `versus`: durable_obj against chdb.durable and the floor under both, on a
  folder and on S3 (groups writes, bases, segments, wal, list);
- `multi`: many objects in one process against one process per object;
- `aio`, `service`, `restart`, `cpu`, `ray`: serving many objects (the
  async face, a service under load, restarts, CPU per unit, Ray actors);
- `sealing`, `chains`, `history`, `follow`, `telemetry`: one feature's
  cost each (encryption and zstd, incremental checkpoints, time travel,
  followers, telemetry hooks);
- `obstore`, `obstore_clouds`: the S3, GCS and Azure transports against
  obstore;
- `langgraph`: the saver and store against SQLite and InMemoryStore.

Each imports `harness` for what all share, never another family (sealing
reuses the versus family's figures and children: it measures the same
figures on variants of one object). Nothing here is imported by durable_obj.
"""
