"""The programs of tests/integration/test_multi_crash.py, run in fresh
interpreters:

    python -m tests.integration.multi_crash_child write '{"url": ..., ...}'
    python -m tests.integration.multi_crash_child verify '{"url": ..., ...}'

`write`: `objects` objects in one process, written from `threads` threads
(thread t owns the objects i with i % threads == t). Each thread opens its
objects, creates their table, then writes batches round robin until the
process is SIGKILLed: a batch is `statements` INSERTs of `rows` rows each,
then flush(); only after flush() returned does it emit the acknowledgement
{"ack": [oid, batch]}. Every `checkpoint_every`-th batch of an object is
followed by a checkpoint, so some kills land inside one.

`verify`: open every object as its writer, without force (so only an
expired lease lets it in), all at once in this one process; emit each
object's batches as [batch, rows, distinct (statement, row) pairs], and
close them all.

Talks to the test the way tests/integration/children.py does: `emit()`
lines starting with MARK, flushed line by line (no fsync: a SIGKILL keeps
what was written to the pipe).
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from tests.integration.children import LEFT_OPEN, emit

Params = dict[str, Any]

TABLE = "CREATE TABLE t (batch UInt32, stmt UInt8, row UInt8) ENGINE = MergeTree ORDER BY batch"
BATCHES = "SELECT batch, count(), uniqExact(stmt, row) FROM t GROUP BY batch ORDER BY batch"

_EMIT = threading.Lock()


def oid_of(i: int) -> str:
    return f"agent-{i:03d}"


def _say(value: Any) -> None:
    with _EMIT:  # one whole line per emit, whatever the threads do
        emit(value)


def insert(batch: int, stmt: int, rows: int) -> str:
    values = ", ".join(f"({batch}, {stmt}, {row})" for row in range(rows))
    return f"INSERT INTO t VALUES {values}"


def write(p: Params) -> None:
    import durable_obj

    ns = durable_obj.Namespace(p["url"], owner="crasher", lease_ttl=p["ttl"])
    threads: int = p["threads"]

    def work(t: int) -> None:
        try:
            objs = []
            for i in range(t, p["objects"], threads):
                obj = ns.open(oid_of(i))
                LEFT_OPEN.append(obj)  # never closed: the process is killed
                obj.execute(TABLE)
                obj.flush()
                objs.append(obj)
                _say({"ready": oid_of(i)})
            batch = 0
            while True:
                for obj in objs:
                    for stmt in range(p["statements"]):
                        obj.execute(insert(batch, stmt, p["rows"]))
                    obj.flush()
                    _say({"ack": [obj.oid, batch]})
                    if batch % p["checkpoint_every"] == p["checkpoint_every"] - 1:
                        obj.checkpoint()
                batch += 1
        except BaseException as exc:  # the test must hear of it, not wait for acks
            _say({"error": f"thread {t}: {type(exc).__name__}: {exc}"})
            raise

    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def verify(p: Params) -> None:
    import durable_obj

    # clock_skew=0: the crashed writer's lease lets us in once it expired,
    # with no allowance to wait for (the test waited for the expiry itself).
    ns = durable_obj.Namespace(p["url"], owner="recoverer", lease_ttl=30.0, clock_skew=0.0)
    objs = [ns.open(oid_of(i)) for i in range(p["objects"])]
    seen: dict[str, Any] = {}
    try:
        for obj in objs:
            rows = obj.query(BATCHES, "JSONCompactEachRow").data()
            seen[obj.oid] = {
                "generation": obj.generation,
                "batches": [json.loads(line) for line in rows.splitlines() if line],
            }
    finally:
        for obj in objs:
            obj.close()
    emit(seen)


PROGRAMS = {"write": write, "verify": verify}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]](json.loads(sys.argv[2]))
