"""Transactions (`transaction()`, `atransaction()`): a read-decide-write
unit with no other write of the object in between, durable whole on return
or not there at all. Rollback on an exception, a refusal, a failed
statement; a failed commit is write()'s (kept buffered, never called
durable); nesting refused; statements buffered before it are committed with
it and survive its rollback; other threads' and tasks' calls wait for it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import durable_obj
from durable_obj import (
    BackendError,
    ClassificationRefused,
    EngineError,
    InvalidArgument,
    Nondeterministic,
)
from durable_obj.core.object import DurableObject
from durable_obj.wire.protocol import object_key

DDL = (
    "CREATE TABLE c (n UInt32, who String) ENGINE = MergeTree ORDER BY n",
    "CREATE TABLE t (id UInt32, at DateTime) ENGINE = MergeTree ORDER BY id",
)
NEXT = "INSERT INTO c VALUES ({n:UInt32}, {who:String})"
MAX = "SELECT max(n) FROM c"


@pytest.fixture
def obj(ns_url: str) -> Iterator[DurableObject]:
    o = durable_obj.Namespace(ns_url, owner="txn").open("o")
    o.write(*DDL)
    yield o
    o.close(discard=True)


def stored(o: DurableObject, sql: str) -> list[tuple[Any, ...]]:
    """What a fresh reader of the stored state sees."""
    with durable_obj.Namespace(o._w.store).open(o.oid, read_only=True) as r:
        return r.rows(sql)


def logged(o: DurableObject) -> list[str]:
    """Every statement of every committed WAL segment, in order."""
    assert o.head is not None
    out = []
    for ref in o.head.manifest.wal:
        blob = o._w.store.get(object_key(o.oid, ref.key))
        assert blob is not None
        out += [json.loads(line)["sql"] for line in blob.data.decode().splitlines()]
    return out


def take_next(tx: Any, who: str) -> int:
    (n,) = tx.rows(MAX)[0]
    tx.execute(NEXT, params={"n": n + 1, "who": who})
    return int(n) + 1


def test_a_transaction_reads_its_own_writes_and_is_durable_on_return(obj: DurableObject) -> None:
    seq = obj.seq
    with obj.transaction() as tx:
        assert take_next(tx, "a") == 1
        assert take_next(tx, "a") == 2  # it read its own first write
        assert tx.rows("SELECT count() FROM c") == [(2,)]
        assert obj.rows("SELECT count() FROM c") == [(2,)]  # the block's thread sees it too
        assert obj.pending == 0  # kept aside until the block ends
    assert tx.key is not None and obj.pending == 0 and obj.seq == seq + 1
    assert stored(obj, "SELECT n FROM c ORDER BY n") == [(1,), (2,)]
    with pytest.raises(InvalidArgument, match="used inside its block only"):
        tx.execute(NEXT, params={"n": 9, "who": "late"})


def test_an_exception_in_the_block_rolls_everything_back(obj: DurableObject) -> None:
    obj.execute(NEXT, params={"n": 1, "who": "before"})  # buffered, not part of it
    logged_before = logged(obj)
    with pytest.raises(RuntimeError, match="decided no"), obj.transaction() as tx:
        take_next(tx, "x")
        tx.execute("ALTER TABLE c ADD COLUMN extra UInt8")
        tx.execute("INSERT INTO t VALUES (1, '2024-01-01 00:00:00')")
        raise RuntimeError("decided no")
    assert obj.rows("SELECT n, who FROM c") == [(1, "before")]  # rebuilt: kept, rolled back
    assert obj.rows("SELECT count() FROM system.columns WHERE name = 'extra'") == [(0,)]
    assert obj.rows("SELECT count() FROM t") == [(0,)]
    assert obj.pending == 1 and logged(obj) == logged_before and tx.key is None
    obj.flush()
    assert stored(obj, "SELECT n, who FROM c") == [(1, "before")]


def test_a_read_only_transaction_that_raises_costs_no_rebuild(
    obj: DurableObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    import durable_obj.core.units as units

    def no_rebuild(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a transaction that wrote nothing rebuilt the copy")

    monkeypatch.setattr(units, "rebuild", no_rebuild)
    with pytest.raises(LookupError), obj.transaction() as tx:
        tx.rows(MAX)
        raise LookupError


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("SELECT 1", ClassificationRefused),  # refused by the gate: not a write
        ("INSERT INTO c SELECT rand(), 'r' FROM numbers(2)", Nondeterministic),
        ("INSERT INTO nowhere VALUES (1)", EngineError),  # fails in the engine
    ],
)
def test_a_refused_or_failed_statement_rolls_the_whole_transaction_back(
    obj: DurableObject, statement: str, error: type[Exception]
) -> None:
    with pytest.raises(InvalidArgument, match="ended normally after its"), obj.transaction() as tx:
        take_next(tx, "x")
        with pytest.raises(error) as raised:
            tx.execute(statement)
        assert "rolled back" in " ".join(raised.value.__notes__)
        assert obj.rows("SELECT count() FROM c") == [(0,)]  # rolled back at once
        with pytest.raises(InvalidArgument, match="rolled back by an earlier"):
            tx.rows(MAX)
        # the block goes on after catching it: ending normally is an error
    assert obj.rows("SELECT count() FROM c") == [(0,)] and obj.pending == 0
    assert not any("INSERT INTO c" in s for s in logged(obj))


def test_nondeterministic_functions_are_pinned_as_in_execute(obj: DurableObject) -> None:
    with obj.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (1, now())")
        seen = tx.rows("SELECT at FROM t")
    (line,) = [s for s in logged(obj) if s.startswith("INSERT INTO t")]
    assert "now()" not in line  # logged as the literal it ran with
    assert stored(obj, "SELECT at FROM t") == seen


def test_nesting_batches_and_the_objects_own_writes_inside_are_refused(
    obj: DurableObject,
) -> None:
    with obj.transaction() as tx:
        with pytest.raises(InvalidArgument, match="do not nest"), obj.transaction():
            pass
        with pytest.raises(InvalidArgument, match="inside a transaction"), obj.batch():
            pass
        for call in (
            lambda: obj.execute(NEXT, params={"n": 5, "who": "own"}),
            lambda: obj.write(NEXT, params={"n": 5, "who": "own"}),
            obj.flush,
            obj.checkpoint,
            obj.snapshot,
            obj.close,
        ):
            with pytest.raises(InvalidArgument, match="inside a transaction"):
                call()
        take_next(tx, "still usable")  # a refused call of the object is not the tx's
    with pytest.raises(InvalidArgument, match="inside a batch"), obj.batch(), obj.transaction():
        pass
    with obj.transaction() as tx:
        other: list[BaseException] = []

        def use_from_another_thread() -> None:
            try:
                tx.rows(MAX)
            except InvalidArgument as exc:
                other.append(exc)

        thread = threading.Thread(target=use_from_another_thread)
        thread.start()
        thread.join(30)
        assert other and "the thread that opened it" in str(other[0])
    assert stored(obj, "SELECT n, who FROM c") == [(1, "still usable")]


def test_statements_buffered_before_are_committed_with_it(obj: DurableObject) -> None:
    obj.execute(NEXT, params={"n": 1, "who": "before"})
    with obj.transaction() as tx:
        assert take_next(tx, "tx") == 2  # it sees them
    assert obj.pending == 0
    assert stored(obj, "SELECT n, who FROM c ORDER BY n") == [(1, "before"), (2, "tx")]
    # a transaction that only read still makes what it read durable
    obj.execute(NEXT, params={"n": 3, "who": "before"})
    with obj.transaction() as tx:
        tx.rows(MAX)
    assert tx.key is not None and obj.pending == 0
    assert stored(obj, "SELECT count() FROM c") == [(3,)]
    with obj.transaction() as tx:  # nothing buffered, nothing written: no commit
        tx.rows(MAX)
    assert tx.key is None


def test_a_failed_commit_is_writes_kept_whole_and_never_called_durable(
    obj: DurableObject,
) -> None:
    store = obj._w.store
    create = store.create

    def refused(key: str, data: bytes) -> Any:
        if "/wal/" in key:
            raise BackendError("the store refused the segment")
        return create(key, data)

    store.create = refused  # type: ignore[method-assign]
    seq = obj.seq
    with pytest.raises(BackendError), obj.transaction() as tx:
        take_next(tx, "a")
        take_next(tx, "a")
    assert tx.key is None and obj.seq == seq
    assert obj.pending == 2  # buffered as one unit, applied locally
    assert obj.rows("SELECT count() FROM c") == [(2,)]
    assert stored(obj, "SELECT count() FROM c") == [(0,)]
    store.create = create  # type: ignore[method-assign]
    assert obj.flush() is not None
    assert stored(obj, "SELECT n FROM c ORDER BY n") == [(1,), (2,)]


def test_other_threads_writes_and_reads_wait_for_the_transaction(obj: DurableObject) -> None:
    """Another thread's read-modify-write statement, started between a
    transaction's read and its write, runs after the transaction (else both
    would take n = 1); another thread's read never sees what a transaction
    rolls back."""
    started = threading.Barrier(2)

    def writer() -> None:
        started.wait()
        obj.write("INSERT INTO c SELECT max(n) + 1, 'other' FROM c")

    other = threading.Thread(target=writer)
    with obj.transaction() as tx:
        (n,) = tx.rows(MAX)[0]
        other.start()
        started.wait()
        threading.Event().wait(0.2)  # room for it to cut in, if it could
        tx.execute(NEXT, params={"n": n + 1, "who": "tx"})
    other.join(30)
    assert obj.rows("SELECT n, who FROM c ORDER BY n") == [(1, "tx"), (2, "other")]

    seen: list[Any] = []

    def reader() -> None:
        started.wait()
        seen.append(obj.rows("SELECT count() FROM c WHERE who = 'doomed'"))

    other = threading.Thread(target=reader)
    with pytest.raises(RuntimeError), obj.transaction() as tx:
        tx.execute(NEXT, params={"n": 100, "who": "doomed"})
        other.start()
        started.wait()
        threading.Event().wait(0.2)
        raise RuntimeError("roll back")
    other.join(30)
    assert seen == [[(0,)]]


def test_another_threads_flush_goes_on_and_a_checkpoint_waits(obj: DurableObject) -> None:
    obj.execute(NEXT, params={"n": 1, "who": "before"})
    flushed: list[str | None] = []
    flusher = threading.Thread(target=lambda: flushed.append(obj.flush()))
    checkpointer = threading.Thread(target=obj.checkpoint)
    with pytest.raises(RuntimeError), obj.transaction() as tx:
        take_next(tx, "doomed")
        flusher.start()
        flusher.join(30)
        assert flushed and flushed[0] is not None  # it committed what came before
        checkpointer.start()
        threading.Event().wait(0.2)
        raise RuntimeError("roll back")
    checkpointer.join(30)
    assert obj.head is not None and obj.head.manifest.base is not None
    # the checkpoint ran after the rollback: the base never held the doomed row
    assert stored(obj, "SELECT n, who FROM c") == [(1, "before")]


def test_a_fold_is_put_off_while_a_transaction_is_open(ns_url: str) -> None:
    """With fold_segments=1 every flush folds the WAL into a checkpoint: one
    that ran while a transaction is open would store its unlogged rows."""
    obj = durable_obj.Namespace(ns_url, owner="txn", fold_segments=1).open("f")
    obj.write(*DDL)
    base = obj.head.manifest.base if obj.head else None
    obj.execute(NEXT, params={"n": 1, "who": "before"})
    flusher = threading.Thread(target=obj.flush)
    with pytest.raises(RuntimeError), obj.transaction() as tx:
        take_next(tx, "doomed")
        flusher.start()
        flusher.join(30)
        assert not flusher.is_alive()  # the flush went on and did not fold
        raise RuntimeError("roll back")
    assert obj.head is not None and obj.head.manifest.base == base
    assert stored(obj, "SELECT n, who FROM c") == [(1, "before")]
    obj.write(NEXT, params={"n": 2, "who": "after"})  # folds now
    assert obj.head.manifest.base != base
    assert stored(obj, "SELECT who FROM c ORDER BY n") == [("before",), ("after",)]
    obj.close()


def test_a_reader_or_a_closed_object_refuses_a_transaction(ns_url: str) -> None:
    with durable_obj.Namespace(ns_url, owner="txn").open("o") as obj:
        obj.write(*DDL)
    reader = durable_obj.Namespace(ns_url).open("o", read_only=True)
    with pytest.raises(ClassificationRefused, match="read-only"), reader.transaction():
        pass
    reader.close()
    with pytest.raises(durable_obj.Closed), obj.transaction():
        pass


def test_threads_taking_the_next_number_never_take_the_same_one(obj: DurableObject) -> None:
    def worker(w: int) -> None:
        for _ in range(15):
            with obj.transaction() as tx:
                take_next(tx, f"w{w}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    expected = [(n,) for n in range(1, 61)]
    assert obj.rows("SELECT n FROM c ORDER BY n") == expected
    assert stored(obj, "SELECT n FROM c ORDER BY n") == expected


# -- async -----------------------------------------------------------------------------


def test_atransaction_commits_rolls_back_and_refuses_the_tasks_own_calls(ns_url: str) -> None:
    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/a", owner="txn")
        await o.awrite(*DDL)
        async with o.atransaction() as tx:
            (n,) = (await tx.arows(MAX))[0]
            await tx.aexecute(NEXT, params={"n": n + 1, "who": "a"})
            assert await tx.adicts("SELECT n FROM c") == [{"n": 1}]
            with pytest.raises(InvalidArgument, match="inside a transaction"):
                await o.aquery("SELECT 1")
            with pytest.raises(InvalidArgument, match="inside a transaction"):
                await o.aexecute("INSERT INTO c VALUES (9, 'own')")
            with pytest.raises(InvalidArgument, match="do not nest"):
                async with o.atransaction():
                    pass
        assert tx.key is not None and o.sync.pending == 0
        with pytest.raises(ClassificationRefused, match="changes nothing"):
            async with o.atransaction() as tx:
                await tx.aexecute(NEXT, params={"n": 2, "who": "b"})
                await tx.aexecute("SELECT 1")
        with pytest.raises(InvalidArgument, match="inside a batch"):
            async with o.abatch(), o.atransaction():
                pass
        assert await o.arows("SELECT n FROM c") == [(1,)]
        assert stored(o.sync, "SELECT n FROM c") == [(1,)]
        await o.aclose()

    asyncio.run(main())


def test_other_tasks_calls_wait_and_run_after_it_in_order(ns_url: str) -> None:
    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/a", owner="txn")
        await o.awrite(*DDL)
        inside, release = asyncio.Event(), asyncio.Event()

        async def transaction() -> None:
            async with o.atransaction() as tx:
                await tx.aexecute(NEXT, params={"n": 1, "who": "tx"})
                inside.set()
                await release.wait()

        held = asyncio.create_task(transaction())
        await inside.wait()
        read = asyncio.create_task(o.arows("SELECT who FROM c ORDER BY n"))
        write = asyncio.create_task(o.awrite(NEXT, params={"n": 2, "who": "after"}))
        cancelled = asyncio.create_task(o.aexecute(NEXT, params={"n": 3, "who": "never"}))
        await asyncio.sleep(0.2)  # room for them to cut in, if they could
        assert not (read.done() or write.done() or cancelled.done())
        cancelled.cancel()  # parked: it never runs
        release.set()
        await held
        assert await read == [("tx",)]  # after the transaction, before the write
        assert await write is not None
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await o.asettle()
        assert await o.arows("SELECT who FROM c ORDER BY n") == [("tx",), ("after",)]
        await o.aclose()

    asyncio.run(main())


def test_a_task_cancelled_inside_rolls_back_and_opens_the_way(ns_url: str) -> None:
    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/a", owner="txn")
        await o.awrite(*DDL)
        inside = asyncio.Event()

        async def stuck() -> None:
            async with o.atransaction() as tx:
                await tx.aexecute(NEXT, params={"n": 1, "who": "doomed"})
                inside.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(stuck())
        await inside.wait()
        waiting = asyncio.create_task(o.arows("SELECT count() FROM c"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await waiting == [(0,)]
        async with o.atransaction() as tx:
            await tx.aexecute(NEXT, params={"n": 1, "who": "next"})
        assert stored(o.sync, "SELECT who FROM c") == [("next",)]
        await o.aclose()

    asyncio.run(main())


def test_tasks_taking_the_next_number_never_take_the_same_one(ns_url: str) -> None:
    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/a", owner="txn")
        await o.awrite(*DDL)

        async def worker(w: int) -> None:
            for _ in range(8):
                async with o.atransaction() as tx:
                    (n,) = (await tx.arows(MAX))[0]
                    await asyncio.sleep(0)  # another task runs here, and waits
                    await tx.aexecute(NEXT, params={"n": n + 1, "who": f"w{w}"})

        async def noise() -> None:
            for i in range(20):
                await o.aquery("SELECT count() FROM c")
                await o.aexecute("INSERT INTO t VALUES ({i:UInt32}, now())", params={"i": i})

        await asyncio.gather(*(worker(w) for w in range(5)), noise())
        await o.aflush()
        expected = [(n,) for n in range(1, 41)]
        assert await o.arows("SELECT n FROM c ORDER BY n") == expected
        assert stored(o.sync, "SELECT n FROM c ORDER BY n") == expected
        await o.aclose()

    asyncio.run(main())
