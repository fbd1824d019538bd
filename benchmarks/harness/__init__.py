"""What every workload family shares, and nothing workload-specific.

- `procs`: a measurement in a fresh interpreter (`python -m <module>`, the
  benchmarks folder on its path) whose last stdout line is JSON;
- `report`: statistics, table rows, the one table renderer, the JSON
  results and the closing lines of a run;
- `servers`: an S3 server for a run (SeaweedFS or any endpoint), behind
  the latency proxy of `s3proxy`;
- `workload`: the agent-memory table, its bulk rows and single-row INSERTs.

Imports only the standard library at module level (children import parts of
it inside their cold-open timers); never durable_obj.
"""
