"""Units of work (`write`, `batch`, `awrite`, `abatch`) and the group commit
under every flush: a unit is durable whole on return or not at all, no
flush from any thread or task ever commits part of one, a unit that fails
half-run leaves the local copy equal to the log, and flushes that meet a
commit in flight join the next one while statements keep running."""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import durable_obj
from durable_obj import DurableError, EngineError, InvalidArgument
from durable_obj.core.object import DurableObject
from durable_obj.wire.protocol import object_key

DDL = (
    "CREATE TABLE m (id UInt32, v String) ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE g (id UInt32) ENGINE = MergeTree ORDER BY id",
)
MEMORY = "INSERT INTO m VALUES ({id:UInt32}, {v:String})"
LOG = "INSERT INTO g VALUES ({id:UInt32})"


@pytest.fixture
def obj(ns_url: str) -> Iterator[DurableObject]:
    o = durable_obj.Namespace(ns_url, owner="units").open("o")
    o.write(*DDL)
    yield o
    o.close(discard=True)


def stored(o: DurableObject, sql: str) -> list[tuple[Any, ...]]:
    """What a fresh reader of the stored state sees."""
    with durable_obj.Namespace(o._w.store).open(o.oid, read_only=True) as r:
        return r.rows(sql)


def segments(o: DurableObject) -> list[list[str]]:
    """The statements of every committed WAL segment, in order."""
    assert o.head is not None
    out = []
    for ref in o.head.manifest.wal:
        blob = o._w.store.get(object_key(o.oid, ref.key))
        assert blob is not None
        out.append([json.loads(line)["sql"] for line in blob.data.decode().splitlines()])
    return out


def test_write_is_durable_on_return_with_its_params(obj: DurableObject) -> None:
    key = obj.write((MEMORY, {"id": 1, "v": "a'b"}), (LOG, {"id": 1}))
    assert key is not None and obj.pending == 0
    assert stored(obj, "SELECT id, v FROM m") == [(1, "a'b")]
    assert stored(obj, "SELECT id FROM g") == [(1,)]
    # string statements take the shared params each of them names
    obj.write(MEMORY, LOG, params={"id": 2, "v": "c"})
    assert stored(obj, "SELECT id FROM g ORDER BY id") == [(1,), (2,)]
    with pytest.raises(InvalidArgument, match="'typo'"):
        obj.write(MEMORY, LOG, params={"id": 3, "v": "c", "typo": 1})
    assert stored(obj, "SELECT count() FROM m") == [(2,)] and obj.pending == 0


def test_a_unit_failing_half_run_keeps_nothing_of_it(obj: DurableObject) -> None:
    obj.execute("INSERT INTO m VALUES (10, 'buffered before')")
    with pytest.raises(EngineError):
        obj.write((MEMORY, {"id": 11, "v": "x"}), "INSERT INTO nowhere VALUES (1)")
    # the first statement ran, then the unit failed: the local copy was
    # rebuilt from the log, the earlier buffered statement kept
    assert obj.rows("SELECT id FROM m ORDER BY id") == [(10,)]
    assert obj.pending == 1
    obj.flush()
    assert stored(obj, "SELECT id FROM m ORDER BY id") == [(10,)]
    assert all("11" not in s for seg in segments(obj) for s in seg)


def test_a_refused_statement_runs_nothing_of_the_unit(obj: DurableObject) -> None:
    with pytest.raises(InvalidArgument):
        obj.write((MEMORY, {"id": 1, "v": "a"}), 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        obj.write()
    with pytest.raises(DurableError):
        obj.write("SELECT 1", (MEMORY, {"id": 1, "v": "a"}))
    assert obj.rows("SELECT count() FROM m") == [(0,)] and obj.pending == 0


def test_batch_runs_on_exit_and_nothing_on_error(obj: DurableObject) -> None:
    with obj.batch() as b:
        obj.execute(MEMORY, params={"id": 1, "v": "a"})
        b.execute(LOG, params={"id": 1})
        with obj.batch():  # nested: joins the outer unit
            obj.write((MEMORY, {"id": 2, "v": "b"}))
        assert obj.rows("SELECT count() FROM m") == [(0,)]  # collected, not run yet
        assert len(b) == 3
    assert b.key is not None and obj.pending == 0
    assert stored(obj, "SELECT id FROM m ORDER BY id") == [(1,), (2,)]
    with pytest.raises(RuntimeError), obj.batch():
        obj.execute(MEMORY, params={"id": 3, "v": "c"})
        raise RuntimeError("the block failed")
    assert obj.rows("SELECT count() FROM m") == [(2,)] and obj.pending == 0


def test_another_threads_execute_is_not_part_of_a_batch(obj: DurableObject) -> None:
    with obj.batch():
        obj.execute(MEMORY, params={"id": 1, "v": "in the batch"})
        other = threading.Thread(target=obj.execute, args=("INSERT INTO g VALUES (99)",))
        other.start()
        other.join()
        assert obj.rows("SELECT id FROM g") == [(99,)]  # ran at once, buffered alone
    assert obj.rows("SELECT id FROM m") == [(1,)]


def test_a_diverged_copy_is_rebuilt_or_refused_while_flush_still_commits(
    obj: DurableObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    import durable_obj.core.units as units

    obj.execute("INSERT INTO m VALUES (5, 'kept')")

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise OSError("the store is unreachable")

    monkeypatch.setattr(units, "rebuild", unreachable)
    with pytest.raises(DurableError, match="could not be rebuilt"):
        obj.write((MEMORY, {"id": 6, "v": "x"}), "INSERT INTO nowhere VALUES (1)")
    with pytest.raises(DurableError, match="could not be rebuilt"):
        obj.rows("SELECT 1")  # a read would see the half-run unit: refused
    assert obj.flush() is not None  # the buffer never held the unit
    monkeypatch.undo()
    assert obj.rows("SELECT id FROM m ORDER BY id") == [(5,)]  # healed on the next call
    assert stored(obj, "SELECT id FROM m ORDER BY id") == [(5,)]


def test_statements_run_while_a_commit_is_on_the_wire_and_join_the_next(
    obj: DurableObject,
) -> None:
    store = obj._w.store
    on_wire, release = threading.Event(), threading.Event()
    create = store.create

    def slow_create(key: str, data: bytes) -> Any:
        if key.startswith(f"{obj.oid}/wal/") or "/wal/" in key:
            on_wire.set()
            assert release.wait(30)
        return create(key, data)

    store.create = slow_create  # type: ignore[method-assign]
    seq = obj.seq
    first = threading.Thread(target=obj.write, args=((MEMORY, {"id": 1, "v": "a"}),))
    first.start()
    assert on_wire.wait(30)
    # the lock is free while the commit waits on the store: a unit runs now
    # and its flush waits for the next round
    keys: list[str | None] = []
    second = threading.Thread(target=lambda: keys.append(obj.write((LOG, {"id": 1}))))
    third = threading.Thread(target=lambda: keys.append(obj.write((LOG, {"id": 2}))))
    second.start()
    third.start()
    deadline = 300
    while obj.pending < 3 and deadline:  # 1 on the wire + 2 buffered behind it
        threading.Event().wait(0.01)
        deadline -= 1
    assert obj.pending == 3
    assert obj.rows("SELECT id FROM g ORDER BY id") == [(1,), (2,)]
    store.create = create  # type: ignore[method-assign]
    release.set()
    for t in (first, second, third):
        t.join(30)
    assert obj.seq == seq + 2, "the two waiting writes shared one commit"
    assert keys[0] == keys[1]
    assert stored(obj, "SELECT count() FROM g") == [(2,)]


def _check_whole(o: DurableObject, units_: int) -> None:
    """Every unit's two statements in one segment; every unit committed once."""
    seen: dict[str, int] = {}
    for n, seg in enumerate(segments(o)):
        for sql in seg:
            if sql.startswith("INSERT INTO m") or sql.startswith("INSERT INTO g"):
                found = re.search(r"\b(\d{4})\b", sql)
                assert found, sql
                ident = found.group(1)
                if ident in seen:
                    assert seen[ident] == n, f"unit {ident} split across segments"
                seen[ident] = n
    assert len(seen) == units_
    assert stored(o, "SELECT count() FROM m") == [(units_,)]
    assert stored(o, "SELECT count() FROM g") == [(units_,)]


def test_threads_writing_units_beside_flushes_never_split_one(obj: DurableObject) -> None:
    rng = random.Random(7)

    def writer(t: int) -> None:
        for n in range(12):
            ident = 1000 + t * 100 + n
            if n % 2:
                obj.write((MEMORY, {"id": ident, "v": "w"}), (LOG, {"id": ident}))
            else:
                with obj.batch():
                    obj.execute(MEMORY, params={"id": ident, "v": "b"})
                    obj.execute(LOG, params={"id": ident})

    def flusher() -> None:
        for _ in range(30):
            obj.flush()
            threading.Event().wait(rng.uniform(0, 0.01))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    threads.append(threading.Thread(target=flusher))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    _check_whole(obj, 6 * 12)


def test_tasks_awriting_beside_aflush_never_split_a_unit(ns_url: str) -> None:
    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/a", owner="units")
        await o.awrite(*DDL)

        async def writer(t: int) -> None:
            for n in range(10):
                ident = 1000 + t * 100 + n
                if n % 2:
                    key = await o.awrite((MEMORY, {"id": ident, "v": "w"}), (LOG, {"id": ident}))
                    assert key is not None
                else:
                    async with o.abatch() as b:
                        await o.aexecute(MEMORY, params={"id": ident, "v": "b"})
                        await o.aexecute(LOG, params={"id": ident})
                    assert b.key is not None

        async def flusher() -> None:
            for _ in range(20):
                await o.aflush()
                await asyncio.sleep(0.005)

        await asyncio.gather(*(writer(t) for t in range(8)), flusher())
        assert o.sync.pending == 0
        _check_whole(o.sync, 80)
        await o.aclose()

    asyncio.run(main())


def test_a_long_query_on_one_object_never_holds_up_anothers_write(ns_url: str) -> None:
    """Objects do not queue behind each other: while one object's query runs
    in the engine, another object's unit runs and commits beside it."""

    async def main() -> None:
        slow = await durable_obj.aopen(f"{ns_url}/slow", owner="units")
        quick = await durable_obj.aopen(f"{ns_url}/quick", owner="units")
        await quick.awrite(*DDL)
        query = asyncio.ensure_future(
            slow.aquery(
                "SELECT sum(sipHash64(number)) FROM numbers(40000000000)",
                bounds=durable_obj.Bounds(seconds=4),  # the engine stops it then
            )
        )
        await asyncio.sleep(0.2)  # the query is in the engine
        assert not query.done()
        await quick.awrite((MEMORY, {"id": 1, "v": "beside"}), (LOG, {"id": 1}))
        assert not query.done(), "the write waited for the other object's query"
        with pytest.raises(durable_obj.DurableError):
            await query  # stopped by its bound

        await quick.aclose()
        await slow.aclose()

    asyncio.run(main())


def test_awrites_queued_on_a_lane_run_as_one_call_and_share_a_commit(ns_url: str) -> None:
    """Units queued behind a busy call of their object's lane run together:
    one engine pass over all of them (`_run_units`), one commit."""

    async def main() -> None:
        o = await durable_obj.aopen(f"{ns_url}/q", owner="units")
        await o.awrite(*DDL)
        passes: list[int] = []
        run_units = o.sync._run_units

        def counted(units: list[Any]) -> Any:
            passes.append(len(units))
            return run_units(units)

        o.sync._run_units = counted  # type: ignore[method-assign]
        gate = threading.Event()
        busy = asyncio.ensure_future(o.arun(lambda: gate.wait(30), io=False))
        writes = [
            asyncio.ensure_future(o.awrite((MEMORY, {"id": n, "v": "q"}), (LOG, {"id": n})))
            for n in range(10)
        ]
        for _ in range(500):  # every unit queued behind the busy call
            if len(o._lane._queue) == 10:
                break
            await asyncio.sleep(0.01)
        assert len(o._lane._queue) == 10
        seq = o.sync.seq
        gate.set()
        await busy
        keys = await asyncio.gather(*writes)
        assert passes == [10], "the queued units ran one by one"
        assert o.sync.seq == seq + 1 and len(set(keys)) == 1
        await o.aclose()

    asyncio.run(main())
