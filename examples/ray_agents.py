"""Agents whose memories live in durable objects hosted by Ray actors, and the
analytics across all of them read from a Parquet export (issue 18).

    pip install "durable_obj[ray]"
    python examples/ray_agents.py            # a local Ray node; ./durable-data/fleet

Each agent's memory is one durable object. The agents reach it through
`durable_obj.ray.Hosts`: a handle whose calls run in the Ray actor hosting
the object (here 2 actors share 6 objects), wherever Ray placed it. A flush
is durable on return, on any machine; if an actor dies, Ray restarts it and
it reopens its objects from storage.

Questions across agents do not go through the actors (each holds its own
objects, one writer each): every object is exported to Parquet (a Ray task
per object, beside the data's storage), and any engine reads the files
together. Here chDB, in this process; ClickHouse, DuckDB or Spark read the
same files from S3 the same way.
"""

from __future__ import annotations

import os

# Every Ray address on 127.0.0.1 (set before Ray is imported); no usage report.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray

import durable_obj
from durable_obj.ray import Hosts

NAMESPACE = os.path.abspath("durable-data/fleet")
EXPORT = os.path.abspath("durable-data/fleet-export")
AGENTS = [f"agent-{i}" for i in range(6)]
DDL = (
    "CREATE TABLE IF NOT EXISTS memories (at DateTime64(3), kind String, text String) "
    "ENGINE = MergeTree ORDER BY at"
)


@ray.remote
def export(oid: str) -> list[str]:
    """Write `oid`'s tables as Parquet under EXPORT/<oid>/ (read-only: no lease)."""
    return durable_obj.Namespace(NAMESPACE).export(oid, f"{EXPORT}/{oid}")


def main() -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    hosts = Hosts(NAMESPACE, shards=2, name="fleet")
    try:
        for i, oid in enumerate(AGENTS):
            agent = hosts.get(oid)  # runs where the object lives
            agent.execute(DDL)
            for step in range(i + 1):
                agent.execute(
                    "INSERT INTO memories VALUES (now64(3), {kind:String}, {text:String})",
                    params={"kind": "tool" if step % 2 else "note", "text": f"step {step}"},
                )
            agent.flush()  # durable on return
            count = agent.query("SELECT count() FROM memories", "TSV").strip()
            print(f"{oid} on {hosts.actor_name(oid)}: {count} memories")
    finally:
        hosts.shutdown()  # flush, release every lease, end the actors

    written = ray.get([export.remote(oid) for oid in AGENTS])
    print(f"exported {sum(len(files) for files in written)} Parquet file(s) to {EXPORT}")
    ray.shutdown()

    # Across every agent: one query over all the files (the path is the agent).
    import chdb

    sql = (
        "SELECT splitByChar('/', _path)[-2] AS agent, countIf(kind = 'tool') AS tools, "
        f"count() AS memories FROM file('{EXPORT}/*/memories.parquet', Parquet) "
        "GROUP BY agent ORDER BY agent"
    )
    print(chdb.query(sql, "PrettyCompactMonoBlock"))
    total = chdb.query(f"SELECT count() FROM file('{EXPORT}/*/memories.parquet', Parquet)", "TSV")
    print(f"fleet total: {str(total).strip()} memories")


if __name__ == "__main__":
    main()
