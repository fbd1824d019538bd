"""An agent's long-term memory that outlives the machine it runs on.

    python examples/agent_memory.py                      # a local folder: ./durable-data
    python examples/agent_memory.py s3://bucket/agents/checkout-api

Every memory is versioned in `memory_history`; `memories` is the current view.
remember / revise / forget append a version, recall and history read locally.
Run it twice: the second run starts from what the first one flushed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import uuid

import durable_obj

SCHEMA = [
    """
    CREATE TABLE IF NOT EXISTS memory_history (
        memory_id  String,
        version    UInt32,
        op         LowCardinality(String),
        content    String CODEC(ZSTD(3)),
        edited_by  String,
        edited_at  DateTime64(3, 'UTC'),
        prev_id    String,
        note       String
    ) ENGINE = MergeTree ORDER BY (memory_id, version)
    """,
    """
    CREATE VIEW IF NOT EXISTS memories AS
    SELECT memory_id,
           argMax(content, version)   AS content,
           max(version)               AS latest,
           argMax(edited_by, version) AS edited_by,
           argMax(edited_at, version) AS edited_at
    FROM memory_history
    GROUP BY memory_id
    HAVING argMax(op, version) != 'forget'
    """,
]


class AgentMemory:
    """Every value goes in as a query parameter ({name:Type}): model output
    and user text are never pasted into SQL, and the WAL logs each value's
    exact literal, so every replay reads the same value."""

    def __init__(self, obj: durable_obj.DurableObject, agent: str) -> None:
        self.obj = obj
        self.agent = agent
        for ddl in SCHEMA:
            obj.execute(ddl)

    def _append(self, memory_id: str, op: str, content: str, note: str) -> int:
        [(current,)] = self.obj.rows(
            "SELECT max(version) FROM memory_history WHERE memory_id = {id:String}",
            params={"id": memory_id},
        )
        version = int(current or 0) + 1
        now = dt.datetime.now(dt.UTC)
        self.obj.execute(
            "INSERT INTO memory_history VALUES ({id:String}, {version:UInt32}, {op:String}, "
            "{content:String}, {agent:String}, {at:DateTime64(3, 'UTC')}, {prev:String}, "
            "{note:String})",
            params={
                "id": memory_id,
                "version": version,
                "op": op,
                "content": content,
                "agent": self.agent,
                # computed here, logged as a literal: replay sees the writer's time
                # (to the millisecond: a DateTime64(3) parameter must fit exactly)
                "at": now.replace(microsecond=now.microsecond // 1000 * 1000),
                "prev": f"{memory_id}@{version - 1}" if version > 1 else "",
                "note": note,
            },
        )
        return version

    def remember(self, content: str, note: str = "") -> str:
        memory_id = uuid.uuid4().hex[:12]
        self._append(memory_id, "remember", content, note)
        return memory_id

    def revise(self, memory_id: str, content: str, note: str = "") -> int:
        return self._append(memory_id, "revise", content, note)

    def forget(self, memory_id: str, note: str = "") -> int:
        return self._append(memory_id, "forget", "", note)

    def recall(self, contains: str = "") -> str:
        return self.obj.query(
            "SELECT memory_id, latest AS version, content FROM memories "
            "WHERE positionCaseInsensitive(content, {q:String}) > 0 ORDER BY edited_at",
            "PrettyCompactMonoBlock",
            params={"q": contains},
        )

    def history(self, memory_id: str) -> str:
        return self.obj.query(
            "SELECT version, op, content, edited_by, edited_at, note FROM memory_history "
            "WHERE memory_id = {id:String} ORDER BY version",
            "PrettyCompactMonoBlock",
            params={"id": memory_id},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "url",
        nargs="?",
        default=os.path.join(os.getcwd(), "durable-data", "agents", "checkout-api"),
        help="object URL (default: a local folder ./durable-data/agents/checkout-api)",
    )
    parser.add_argument("--owner", default=f"example-{os.getpid()}")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.storage_option)

    with durable_obj.open(args.url, owner=args.owner, storage_options=options or None) as obj:
        print(f"opened {obj.url}: generation {obj.generation}, seq {obj.seq}")
        memory = AgentMemory(obj, args.owner)
        region = memory.remember("deploy region is eu-central-1", note="from the runbook")
        memory.remember("the flaky test is test_checkout_timeout; retry once")
        memory.revise(region, "deploy region moved to eu-west-1", note="migration done")
        obj.flush()  # the durability boundary: only now has it survived the machine
        print(f"flushed: seq {obj.seq}")
        print(memory.recall())
        print(memory.history(region))
        if obj.seq >= 8:
            obj.checkpoint()  # fold the WAL into a new base; the next open is faster
            print(f"checkpointed: seq {obj.seq}")
    print("closed; run again and the memories are still there")


if __name__ == "__main__":
    main()
