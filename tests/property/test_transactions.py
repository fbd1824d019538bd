"""Concurrent transactions on one object behave as if run one at a time.

Hypothesis picks a few workers (threads of the sync API, or asyncio tasks
of the async one) and a list of transfers for each, between four accounts
of a ledger that starts at 100 each. Each transfer is a transaction that
reads its turn (how many transactions committed before it) and every
balance, records what it read, writes the transfer if the source covers
it, and takes its turn; some then raise, or run a statement that fails,
after writing. Beside them a worker writes rows of another table outside
any transaction.

The order the transactions took their turns in is a serial order, and the
check is that running them one at a time in that order, on a plain dict,
gives exactly what each one read, its turn, and the final balances, in
the local copy and in a fresh read of the store. Turns are 1..M, each
taken once, by exactly the transactions that returned; nothing of one that
raised is anywhere. If two could interleave, two would read the same turn,
or one would read a balance the serial order never had.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj import EngineError

#: What the proofs covered (`tests/proofs.py`).
STATS = {"examples": 0, "transactions": 0, "committed": 0, "rolled back": 0}

ACCOUNTS = 4
START = 100
DDL = (
    "CREATE TABLE ledger (tx UInt32, acct UInt8, delta Int64) ENGINE = MergeTree ORDER BY tx",
    "CREATE TABLE turns (n UInt32, tx UInt32) ENGINE = MergeTree ORDER BY n",
    "CREATE TABLE noise (i UInt32) ENGINE = MergeTree ORDER BY i",
    "INSERT INTO ledger SELECT 0, number, 100 FROM numbers(4)",
)
BALANCES = "SELECT acct, sum(delta) FROM ledger GROUP BY acct ORDER BY acct"
MOVE = "INSERT INTO ledger VALUES ({tx:UInt32}, {a:UInt8}, {d:Int64})"
TURN = "INSERT INTO turns VALUES ({n:UInt32}, {tx:UInt32})"


class Abort(Exception):
    """A transaction's block decided to give up after writing."""


@dataclass(frozen=True)
class Transfer:
    tx: int
    src: int
    dst: int
    amount: int
    end: str  # "commit", "raise" (in the block) or "fail" (a failed statement)


@dataclass
class Seen:
    """What one transaction read: its turn and every balance."""

    turn: int
    balances: dict[int, int]


def plan(transfer: Transfer, turn: int, balances: dict[int, int]) -> list[tuple[str, Any]]:
    """The statements of a transfer, given what it read."""
    out: list[tuple[str, Any]] = []
    if balances[transfer.src] >= transfer.amount:
        out.append((MOVE, {"tx": transfer.tx, "a": transfer.src, "d": -transfer.amount}))
        out.append((MOVE, {"tx": transfer.tx, "a": transfer.dst, "d": transfer.amount}))
    out.append((TURN, {"n": turn + 1, "tx": transfer.tx}))
    return out


def read_state(rows: list[tuple[Any, ...]]) -> dict[int, int]:
    return {int(a): int(b) for a, b in rows}


def run_threads(obj: Any, workers: list[list[Transfer]], seen: dict[int, Seen]) -> set[int]:
    done: set[int] = set()
    errors: list[BaseException] = []

    def one(transfer: Transfer) -> None:
        with obj.transaction() as tx:
            (turn,) = tx.rows("SELECT count() FROM turns")[0]
            balances = read_state(tx.rows(BALANCES))
            seen[transfer.tx] = Seen(int(turn), balances)
            for sql, params in plan(transfer, int(turn), balances):
                tx.execute(sql, params=params)
            if transfer.end == "raise":
                raise Abort
            if transfer.end == "fail":
                tx.execute("INSERT INTO nowhere VALUES (1)")
        done.add(transfer.tx)

    def worker(transfers: list[Transfer]) -> None:
        try:
            for transfer in transfers:
                with contextlib.suppress(Abort, EngineError):
                    one(transfer)
        except BaseException as exc:
            errors.append(exc)

    def noise() -> None:
        for i in range(10):
            obj.execute("INSERT INTO noise VALUES ({i:UInt32})", params={"i": i})
            if i % 3 == 0:
                obj.flush()

    threads = [threading.Thread(target=worker, args=(w,)) for w in workers]
    threads.append(threading.Thread(target=noise))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    obj.flush()
    return done


def run_tasks(
    url: str, workers: list[list[Transfer]], seen: dict[int, Seen]
) -> tuple[set[int], dict[int, int]]:
    done: set[int] = set()

    async def one(obj: Any, transfer: Transfer) -> None:
        async with obj.atransaction() as tx:
            (turn,) = (await tx.arows("SELECT count() FROM turns"))[0]
            balances = read_state(await tx.arows(BALANCES))
            seen[transfer.tx] = Seen(int(turn), balances)
            for sql, params in plan(transfer, int(turn), balances):
                await tx.aexecute(sql, params=params)
            if transfer.end == "raise":
                raise Abort
            if transfer.end == "fail":
                await tx.aexecute("INSERT INTO nowhere VALUES (1)")
        done.add(transfer.tx)

    async def worker(obj: Any, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            with contextlib.suppress(Abort, EngineError):
                await one(obj, transfer)

    async def noise(obj: Any) -> None:
        for i in range(10):
            await obj.aexecute("INSERT INTO noise VALUES ({i:UInt32})", params={"i": i})
            if i % 3 == 0:
                await obj.aflush()

    local: dict[int, int] = {}

    async def main() -> None:
        obj = await durable_obj.aopen(url)
        await asyncio.gather(*(worker(obj, w) for w in workers), noise(obj))
        await obj.aflush()
        local.update(read_state(await obj.arows(BALANCES)))
        await obj.aclose()

    asyncio.run(main())
    return done, local


transfers = st.tuples(
    st.integers(0, ACCOUNTS - 1),
    st.integers(0, ACCOUNTS - 1),
    st.integers(1, 150),
    st.sampled_from(["commit", "commit", "commit", "raise", "fail"]),
)


@given(
    mode=st.sampled_from(["threads", "tasks"]),
    workers=st.lists(st.lists(transfers, min_size=1, max_size=5), min_size=2, max_size=4),
)
def test_concurrent_transactions_are_serial(mode: str, workers: list[list[Any]]) -> None:
    url = f"memory://txn-{uuid.uuid4().hex}/bank"
    with durable_obj.open(url) as obj:
        obj.write(*DDL)
    ids = iter(range(1, 10_000))
    plans = [[Transfer(next(ids), *t) for t in w] for w in workers]
    seen: dict[int, Seen] = {}
    if mode == "threads":
        with durable_obj.open(url) as obj:
            done = run_threads(obj, plans, seen)
            local = read_state(obj.rows(BALANCES))
    else:
        done, local = run_tasks(url, plans, seen)
    with durable_obj.open(url, read_only=True) as reader:
        turns = [(int(n), int(tx)) for n, tx in reader.rows("SELECT n, tx FROM turns ORDER BY n")]
        stored = read_state(reader.rows(BALANCES))
        moved = {int(tx) for (tx,) in reader.rows("SELECT DISTINCT tx FROM ledger WHERE tx > 0")}
        assert reader.rows("SELECT count() FROM noise") == [(10,)]
    by_id = {t.tx: t for w in plans for t in w}
    model = check_serial(turns, done, moved, seen, by_id)
    assert stored == model and local == model
    STATS["examples"] += 1
    STATS["transactions"] += len(by_id)
    STATS["committed"] += len(done)
    STATS["rolled back"] += len(by_id) - len(done)


def check_serial(
    turns: list[tuple[int, int]],
    done: set[int],
    moved: set[int],
    seen: dict[int, Seen],
    by_id: dict[int, Transfer],
) -> dict[int, int]:
    """Check the history is the serial one its turns say; the balances that
    serial order ends with."""
    # The turns: 1..M, each taken once, by exactly the transactions that returned.
    assert [n for n, _ in turns] == list(range(1, len(turns) + 1)), "turns taken twice or skipped"
    order = [tx for _, tx in turns]
    assert sorted(order) == sorted(done), "a turn of a transaction that did not return"
    assert moved <= set(done), "a rolled-back transaction's transfer is stored"
    # One at a time in that order, on a dict: what each read.
    model = dict.fromkeys(range(ACCOUNTS), START)
    for n, tx in enumerate(order):
        transfer = by_id[tx]
        assert seen[tx] == Seen(n, dict(model)), f"transaction {tx} (turn {n + 1}) read {seen[tx]}"
        if model[transfer.src] >= transfer.amount:
            model[transfer.src] -= transfer.amount
            model[transfer.dst] += transfer.amount
    assert sum(model.values()) == ACCOUNTS * START
    return model


_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
test_concurrent_transactions_are_serial = settings(
    max_examples={"ci": 40, "nightly": 1000}.get(_PROFILE, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)(test_concurrent_transactions_are_serial)


def test_the_serial_check_refuses_an_interleaved_history() -> None:
    """The check can fail: two transfers that both read the start state (as
    they would if the second ran between the first's read and its write)
    are no serial order, even when their turns look right."""
    a, b = Transfer(1, 0, 1, 80, "commit"), Transfer(2, 0, 2, 80, "commit")
    start = dict.fromkeys(range(ACCOUNTS), START)
    serial = {1: Seen(0, dict(start)), 2: Seen(1, {0: 20, 1: 180, 2: 100, 3: 100})}
    assert check_serial([(1, 1), (2, 2)], {1, 2}, {1}, serial, {1: a, 2: b})[0] == 20
    interleaved = {1: Seen(0, dict(start)), 2: Seen(1, dict(start))}
    with pytest.raises(AssertionError, match="transaction 2"):
        check_serial([(1, 1), (2, 2)], {1, 2}, {1, 2}, interleaved, {1: a, 2: b})
    with pytest.raises(AssertionError, match="taken twice"):
        check_serial([(1, 1), (1, 2)], {1, 2}, {1, 2}, interleaved, {1: a, 2: b})
