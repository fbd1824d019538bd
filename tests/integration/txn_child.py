"""The writer of tests/integration/test_txn_kills.py, run in a fresh
interpreter until the test SIGKILLs it:

    python -m tests.integration.txn_child '{"url": ..., "oid": ..., ...}'

Opens `oid` as `owner` with reclaim=True (a restarted child takes its
killed predecessor's lease at once), creates the tables if absent and
emits {"opened": true}. Then `workers` threads of the sync API (or, with
`tasks`, asyncio tasks of the async one) run transfers k = 1, 2, ...: a
transaction reads its turn (the turns taken so far) and its source
account's balance (100 plus its deltas), moves `want` from src to dst (0 if
the balance does not cover it) as two ledger rows, and takes its turn (a
row saying what it wanted); about one in six raises after writing (rolled
back). Once a transaction returned it emits {"ack": [child, worker, k]}.
Beside them one worker writes noise rows outside any transaction and
flushes now and then.

Talks to the test the way tests/integration/children.py does: `emit()`
lines starting with MARK, flushed line by line.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
from typing import Any

from tests.integration.children import emit

TABLES = (
    "CREATE TABLE IF NOT EXISTS ledger (child UInt32, worker UInt32, k UInt32, acct UInt8, "
    "delta Int64) ENGINE = MergeTree ORDER BY (child, worker, k)",
    "CREATE TABLE IF NOT EXISTS turns (n UInt32, child UInt32, worker UInt32, k UInt32, "
    "src UInt8, dst UInt8, want Int64) ENGINE = MergeTree ORDER BY n",
    "CREATE TABLE IF NOT EXISTS noise (child UInt32, i UInt32) ENGINE = MergeTree ORDER BY i",
)
MOVE = "INSERT INTO ledger VALUES ({c:UInt32}, {w:UInt32}, {k:UInt32}, {a:UInt8}, {d:Int64})"
TURN = (
    "INSERT INTO turns VALUES ({n:UInt32}, {c:UInt32}, {w:UInt32}, {k:UInt32}, {src:UInt8}, "
    "{dst:UInt8}, {want:Int64})"
)
TURNS = "SELECT count() FROM turns"
BALANCE = "SELECT 100 + sum(delta) FROM ledger WHERE acct = {a:UInt8}"
NOISE = "INSERT INTO noise VALUES ({c:UInt32}, {i:UInt32})"

_EMIT = threading.Lock()


class Abort(Exception):
    """The transaction's block gives up after writing."""


def say(value: Any) -> None:
    with _EMIT:
        emit(value)


def transfer(rng: random.Random, child: int, w: int, k: int) -> tuple[dict[str, Any], bool]:
    """The k-th transfer of worker w, and whether it gives up."""
    src, dst = rng.sample(range(4), 2)
    key = {"c": child, "w": w, "k": k, "src": src, "dst": dst, "want": rng.randint(1, 150)}
    return key, rng.random() < 1 / 6


def statements(key: dict[str, Any], turn: int, balance: int) -> list[tuple[str, Any]]:
    """A transfer's statements, given what it read."""
    amount = key["want"] if balance >= key["want"] else 0
    ids = {"c": key["c"], "w": key["w"], "k": key["k"]}
    return [
        (MOVE, {**ids, "a": key["src"], "d": -amount}),
        (MOVE, {**ids, "a": key["dst"], "d": amount}),
        (TURN, {**key, "n": turn + 1}),
    ]


def with_threads(p: dict[str, Any]) -> None:
    import durable_obj

    child = p["child"]
    obj = durable_obj.open(
        p["url"], owner=p["owner"], reclaim=True, storage_options=p.get("options") or {}
    )
    obj.write(*TABLES)
    say({"opened": True})

    def worker(w: int) -> None:
        rng = random.Random(p["seed"] + w)
        for k in range(1, 2**31):
            key, abort = transfer(rng, child, w, k)
            try:
                with obj.transaction() as tx:
                    (turn,) = tx.rows(TURNS)[0]
                    (balance,) = tx.rows(BALANCE, params={"a": key["src"]})[0]
                    for sql, params in statements(key, turn, balance):
                        tx.execute(sql, params=params)
                    if abort:
                        raise Abort
            except Abort:
                continue
            say({"ack": [child, w, k]})

    def noise() -> None:
        for i in range(2**31):
            obj.execute(NOISE, params={"c": child, "i": i})
            if i % 5 == 0:
                obj.flush()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(p["workers"])]
    threads.append(threading.Thread(target=noise))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def with_tasks(p: dict[str, Any]) -> None:
    import durable_obj

    child = p["child"]
    obj = await durable_obj.aopen(
        p["url"], owner=p["owner"], reclaim=True, storage_options=p.get("options") or {}
    )
    await obj.awrite(*TABLES)
    say({"opened": True})

    async def worker(w: int) -> None:
        rng = random.Random(p["seed"] + w)
        for k in range(1, 2**31):
            key, abort = transfer(rng, child, w, k)
            try:
                async with obj.atransaction() as tx:
                    (turn,) = (await tx.arows(TURNS))[0]
                    (balance,) = (await tx.arows(BALANCE, params={"a": key["src"]}))[0]
                    for sql, params in statements(key, turn, balance):
                        await tx.aexecute(sql, params=params)
                    if abort:
                        raise Abort
            except Abort:
                continue
            say({"ack": [child, w, k]})

    async def noise() -> None:
        for i in range(2**31):
            await obj.aexecute(NOISE, params={"c": child, "i": i})
            if i % 5 == 0:
                await obj.aflush()

    await asyncio.gather(*(worker(w) for w in range(p["workers"])), noise())


def main(argv: list[str]) -> None:
    params = json.loads(argv[1])
    if params.get("tasks"):
        asyncio.run(with_tasks(params))
    else:
        with_threads(params)


if __name__ == "__main__":
    main(sys.argv)
