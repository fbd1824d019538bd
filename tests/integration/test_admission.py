"""Admission (`max_units_in_flight`): at most that many writes of one object
in flight, from tasks and threads alike; the rest wait, first come first
admitted, holding nothing of the object's; a writer cancelled while it
waits leaves nothing behind; a failing write or commit gives its slot back.

Units in flight are counted from outside: a unit enters when the engine
pass that runs it starts (`_run_units`) and leaves when its call returned
or raised, so the count is never above the real one."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import durable_obj
import durable_obj.aio
from durable_obj import BackendError, ClassificationRefused
from durable_obj.aio import AsyncDurableObject
from durable_obj.core import admission
from durable_obj.core.object import DurableObject
from durable_obj.wire.protocol import object_key

DDL = "CREATE TABLE m (id UInt32, v String) ENGINE = MergeTree ORDER BY id"
MEMORY = "INSERT INTO m VALUES ({id:UInt32}, {v:String})"


class Counter:
    """Units inside the objects watched: entered `_run_units`, call not over yet."""

    def __init__(self, *objs: DurableObject) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        for obj in objs:
            self.watch(obj)

    def watch(self, obj: DurableObject) -> None:
        run_units = obj._run_units

        def counted(units: list[Any]) -> Any:
            with self.lock:
                self.inside += len(units)
                self.most = max(self.most, self.inside)
            return run_units(units)

        obj._run_units = counted  # type: ignore[method-assign]

    def left(self) -> None:
        with self.lock:
            self.inside -= 1


class SlowWal:
    """The store's WAL segment creates wait `delay` seconds, or for `gate`
    when one is set; `fail` makes them raise BackendError instead."""

    def __init__(self, obj: DurableObject, delay: float = 0.0) -> None:
        self.delay = delay
        self.gate: threading.Event | None = None
        self.fail = False
        self.store = obj._w.store
        self.create = self.store.create

        def create(key: str, data: bytes) -> Any:
            if "/wal/" in key:
                if self.fail:
                    raise BackendError("the store is down (test)")
                if self.gate is not None:
                    assert self.gate.wait(60)
                time.sleep(self.delay)
            return self.create(key, data)

        self.store.create = create  # type: ignore[method-assign]

    def restore(self) -> None:
        self.store.create = self.create  # type: ignore[method-assign]


def ids_by_segment(o: DurableObject) -> list[list[int]]:
    """The ids each committed WAL segment inserted, in order."""
    assert o.head is not None
    out = []
    for ref in o.head.manifest.wal:
        blob = o._w.store.get(object_key(o.oid, ref.key))
        assert blob is not None
        sqls = [json.loads(line)["sql"] for line in blob.data.decode().splitlines()]
        out.append([int(n) for s in sqls for n in re.findall(r"\(CAST\('(\d+)', 'UInt32'\)", s)])
    return out


async def until(check: Any, what: str) -> None:
    """Wait (on the loop) until `check()` holds."""
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def opened(url: str, limit: int) -> AsyncDurableObject:
    o = await durable_obj.aopen(url, owner="admit", max_units_in_flight=limit)
    await o.awrite(DDL)
    return o


def test_the_option_is_checked() -> None:
    with pytest.raises(durable_obj.InvalidArgument, match="max_units_in_flight"):
        durable_obj.open("memory://admit-opt/o", max_units_in_flight=0)


def test_awrites_in_flight_never_pass_the_bound(ns_url: str) -> None:
    async def main() -> None:
        o = await opened(f"{ns_url}/bound", 3)
        counter = Counter(o.sync)
        slow = SlowWal(o.sync, delay=0.01)

        async def write(n: int) -> None:
            try:
                await o.awrite((MEMORY, {"id": n, "v": "b"}))
            finally:
                counter.left()

        await asyncio.gather(*(write(n) for n in range(40)))
        slow.restore()
        assert 0 < counter.most <= 3, f"{counter.most} units in flight at once"
        assert o.sync._admission.in_flight == 0 and o.sync._admission.waiting == 0
        assert o.sync.rows("SELECT count() FROM m") == [(40,)] and o.sync.pending == 0
        await o.aclose()

    asyncio.run(main())


def test_sync_writers_respect_the_same_bound(ns_url: str) -> None:
    obj = durable_obj.Namespace(ns_url, owner="admit", max_units_in_flight=2).open("sync")
    obj.write(DDL)
    counter = Counter(obj)
    slow = SlowWal(obj, delay=0.01)

    def writer(t: int) -> None:
        for n in range(4):
            try:
                obj.write((MEMORY, {"id": t * 10 + n, "v": "s"}))
            finally:
                counter.left()

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    slow.restore()
    assert 0 < counter.most <= 2, f"{counter.most} units in flight at once"
    assert obj._admission.in_flight == 0
    assert obj.rows("SELECT count() FROM m") == [(40,)] and obj.pending == 0
    obj.close()


def test_a_slow_store_makes_awrite_wait_at_admission_not_in_a_queue(ns_url: str) -> None:
    async def main() -> None:
        o = await opened(f"{ns_url}/slow", 2)
        slow = SlowWal(o.sync)
        slow.gate = threading.Event()
        writes = [asyncio.ensure_future(o.awrite((MEMORY, {"id": n, "v": "w"}))) for n in range(50)]
        admission = o.sync._admission
        await until(lambda: admission.waiting == 48, "48 writers waiting for admission")
        await asyncio.sleep(0.1)  # time for anything that would queue to queue
        # inside the object: the two admitted units, nothing more
        assert admission.in_flight == 2
        assert len(o._lane._queue) == 0 and o.sync.pending <= 2
        assert not any(w.done() for w in writes)
        slow.gate.set()
        await asyncio.gather(*writes)
        slow.restore()
        assert o.sync.rows("SELECT count() FROM m") == [(50,)] and o.sync.pending == 0
        await o.aclose()

    asyncio.run(main())


def test_tasks_and_threads_are_admitted_in_the_order_they_came(ns_url: str) -> None:
    """One slot: each unit runs and commits alone, so the WAL's order is
    the order of admission."""

    async def main() -> None:
        o = await opened(f"{ns_url}/fifo", 1)
        admission = o.sync._admission
        slow = SlowWal(o.sync)
        slow.gate = threading.Event()
        first = asyncio.ensure_future(o.awrite((MEMORY, {"id": 0, "v": "f"})))
        await until(lambda: admission.in_flight == 1 and o.sync.pending == 1, "unit 0 in")
        tasks: list[asyncio.Future[Any]] = [first]
        threads = []
        for n in range(1, 9):
            if n % 3 == 2:  # a thread, through the sync API
                t = threading.Thread(
                    target=o.sync.write, args=((MEMORY, {"id": n, "v": "f"}),), daemon=True
                )
                t.start()
                threads.append(t)
            else:
                tasks.append(asyncio.ensure_future(o.awrite((MEMORY, {"id": n, "v": "f"}))))
            await until(lambda n=n: admission.waiting == n, f"writer {n} waiting")
        slow.gate.set()
        await asyncio.gather(*tasks)
        for t in threads:
            await asyncio.to_thread(t.join, 60)
        slow.restore()
        order = [n for seg in ids_by_segment(o.sync) for n in seg]
        assert order == list(range(9))
        await o.aclose()

    asyncio.run(main())


def test_a_writer_cancelled_while_it_waits_leaves_nothing(ns_url: str) -> None:
    async def main() -> None:
        o = await opened(f"{ns_url}/cancel", 1)
        admission = o.sync._admission
        slow = SlowWal(o.sync)
        slow.gate = threading.Event()
        held = asyncio.ensure_future(o.awrite((MEMORY, {"id": 1, "v": "held"})))
        await until(lambda: admission.in_flight == 1, "unit 1 admitted")
        cancelled = asyncio.ensure_future(o.awrite((MEMORY, {"id": 2, "v": "gone"})))
        executed = asyncio.ensure_future(o.aexecute("INSERT INTO m VALUES (3, 'gone')"))
        after = asyncio.ensure_future(o.awrite((MEMORY, {"id": 4, "v": "after"})))
        await until(lambda: admission.waiting == 3, "three writers waiting")
        cancelled.cancel()
        executed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        with pytest.raises(asyncio.CancelledError):
            await executed
        assert admission.waiting == 1
        slow.gate.set()
        await held
        await after
        slow.restore()
        assert admission.in_flight == 0 and admission.waiting == 0
        assert o.sync.pending == 0
        assert o.sync.rows("SELECT id FROM m ORDER BY id") == [(1,), (4,)]
        assert sorted(n for seg in ids_by_segment(o.sync) for n in seg) == [1, 4]
        await o.aclose()

    asyncio.run(main())


def test_a_writer_cancelled_while_its_unit_runs_holds_its_slot_until_it_ran(
    ns_url: str,
) -> None:
    """A lane call that started runs to completion: its unit is in flight
    (and holds its slot) until then, though its task has left."""

    async def main() -> None:
        o = await opened(f"{ns_url}/running", 1)
        admission_ = o.sync._admission
        inside, go_on = threading.Event(), threading.Event()
        run_units = o.sync._run_units

        def held(units: list[Any]) -> Any:
            inside.set()
            assert go_on.wait(60)
            return run_units(units)

        o.sync._run_units = held  # type: ignore[method-assign]
        write = asyncio.ensure_future(o.awrite((MEMORY, {"id": 1, "v": "ran"})))
        await until(inside.is_set, "the unit running")
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert admission_.in_flight == 1, "the slot went back while the unit still ran"
        go_on.set()
        await until(lambda: admission_.in_flight == 0, "the slot back once it ran")
        assert o.sync.pending == 1  # it ran and is buffered; its task left before the commit
        await o.aflush()
        assert o.sync.rows("SELECT id FROM m") == [(1,)]
        await o.aclose()

    asyncio.run(main())


def test_failing_writes_and_commits_give_their_slots_back(ns_url: str) -> None:
    async def main() -> None:
        o = await opened(f"{ns_url}/fail", 2)
        admission = o.sync._admission
        slow = SlowWal(o.sync)
        slow.fail = True
        writes = [asyncio.ensure_future(o.awrite((MEMORY, {"id": n, "v": "x"}))) for n in range(6)]
        await asyncio.wait(writes, timeout=60)  # (a leaked slot would hold the rest forever)
        assert all(w.done() and isinstance(w.exception(), BackendError) for w in writes)
        assert admission.in_flight == 0 and admission.waiting == 0
        with pytest.raises(BackendError):
            await asyncio.to_thread(o.sync.write, (MEMORY, {"id": 7, "v": "x"}))
        with pytest.raises(ClassificationRefused):
            await o.awrite("SELECT 1")  # refused before it ran
        assert admission.in_flight == 0
        slow.restore()
        # every slot free again: the bound's worth of writes goes through
        await asyncio.wait_for(
            asyncio.gather(*(o.awrite((MEMORY, {"id": n, "v": "ok"})) for n in (8, 9))), 60
        )
        # the failed units stayed buffered, whole, and went with that commit
        assert o.sync.pending == 0
        assert o.sync.rows("SELECT count() FROM m") == [(9,)]
        await o.aclose()

    asyncio.run(main())


def test_a_write_inside_a_lane_call_takes_no_slot(ns_url: str) -> None:
    """`arun(fn)` whose fn writes: the unit queued behind that call holds
    the only slot, so waiting for one there would never end."""

    async def main() -> None:
        o = await opened(f"{ns_url}/lane", 1)
        gate = threading.Event()

        def composite() -> str | None:
            assert gate.wait(60)
            return o.sync.write((MEMORY, {"id": 1, "v": "inside"}))

        inside = asyncio.ensure_future(o.arun(composite, io=True))
        await asyncio.sleep(0.05)
        behind = asyncio.ensure_future(o.awrite((MEMORY, {"id": 2, "v": "behind"})))
        await until(lambda: o.sync._admission.in_flight == 1, "the unit behind admitted")
        gate.set()
        done, _ = await asyncio.wait([inside, behind], timeout=60)
        assert len(done) == 2, "the write inside the lane call waited for a slot"
        assert o.sync.rows("SELECT id FROM m ORDER BY id") == [(1,), (2,)]
        await o.aclose()

    asyncio.run(main())


@pytest.fixture
def process_bound(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`durable_obj.aio.MAX_UNITS_IN_FLIGHT = 3` for this test's writes
    (the process's admission is made afresh, and dropped after)."""
    monkeypatch.setattr(admission, "_process", [])
    monkeypatch.setattr(durable_obj.aio, "MAX_UNITS_IN_FLIGHT", 3)
    yield


def test_the_process_bound_holds_across_objects(ns_url: str, process_bound: None) -> None:
    """Each object admits up to 2, the process 3 in all: four objects with
    ten writers each never have more than 3 units inside them together."""

    async def main() -> None:
        objs = [await opened(f"{ns_url}/p{n}", 2) for n in range(4)]
        counter = Counter(*(o.sync for o in objs))
        slows = [SlowWal(o.sync, delay=0.01) for o in objs]

        async def write(o: AsyncDurableObject, n: int) -> None:
            try:
                await o.awrite((MEMORY, {"id": n, "v": "p"}))
            finally:
                counter.left()

        await asyncio.wait_for(asyncio.gather(*(write(o, n) for n in range(10) for o in objs)), 120)
        for slow in slows:
            slow.restore()
        assert 0 < counter.most <= 3, f"{counter.most} units in flight at once"
        every = admission._process[0]
        assert every.limit == 3 and every.in_flight == 0 and every.waiting == 0
        for o in objs:
            assert o.sync.rows("SELECT count() FROM m") == [(10,)]
            await o.aclose()

    asyncio.run(main())


def test_cancelled_while_the_process_bound_holds_it_leaves_nothing(
    ns_url: str, process_bound: None
) -> None:
    async def main() -> None:
        a, b = await opened(f"{ns_url}/a", 8), await opened(f"{ns_url}/b", 8)
        slow = SlowWal(a.sync)
        slow.gate = threading.Event()
        held = [asyncio.ensure_future(a.awrite((MEMORY, {"id": n, "v": "a"}))) for n in range(3)]
        every = admission._process[0]
        await until(lambda: every.in_flight == 3, "three units of a admitted")
        waiting = asyncio.ensure_future(b.awrite((MEMORY, {"id": 9, "v": "gone"})))
        await until(lambda: every.waiting == 1, "b's unit waiting for the process")
        assert b.sync._admission.in_flight == 1  # admitted by its object first
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert every.waiting == 0 and b.sync._admission.in_flight == 0
        slow.gate.set()
        await asyncio.gather(*held)
        slow.restore()
        assert b.sync.rows("SELECT count() FROM m") == [(0,)] and b.sync.pending == 0
        assert every.in_flight == 0
        await a.aclose()
        await b.aclose()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_sync_write_on_the_loop_thread_takes_no_slot(ns_url: str) -> None:
    """The sync API on the loop blocks it (a misuse), but the awrite holding
    the only slot can give it back only when the loop runs: no waiting there."""

    async def main() -> None:
        o = await opened(f"{ns_url}/loop", 1)
        slow = SlowWal(o.sync)
        slow.gate = threading.Event()
        held = asyncio.ensure_future(o.awrite((MEMORY, {"id": 1, "v": "task"})))
        await until(lambda: o.sync.pending == 1, "the task's unit on the wire")
        threading.Timer(0.2, slow.gate.set).start()
        assert o.sync.write((MEMORY, {"id": 2, "v": "loop"})) is not None
        await held
        slow.restore()
        assert o.sync.rows("SELECT id FROM m ORDER BY id") == [(1,), (2,)]
        await o.aclose()

    asyncio.run(main())


@pytest.fixture
def sync_obj(ns_url: str) -> Iterator[DurableObject]:
    o = durable_obj.Namespace(ns_url, owner="admit", max_units_in_flight=1).open("o")
    o.write(DDL)
    yield o
    o.close(discard=True)


def test_a_batch_waits_for_admission_like_a_write(sync_obj: DurableObject) -> None:
    slow = SlowWal(sync_obj)
    slow.gate = threading.Event()
    first = threading.Thread(target=sync_obj.write, args=((MEMORY, {"id": 1, "v": "a"}),))
    first.start()
    deadline = time.monotonic() + 60
    while sync_obj.pending < 1 and time.monotonic() < deadline:  # on the wire
        time.sleep(0.01)

    def batch() -> None:
        with sync_obj.batch() as b:
            b.execute(MEMORY, params={"id": 2, "v": "b"})

    second = threading.Thread(target=batch)
    second.start()
    while sync_obj._admission.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sync_obj._admission.waiting == 1 and sync_obj.pending == 1
    slow.gate.set()
    first.join(60)
    second.join(60)
    slow.restore()
    assert sync_obj.rows("SELECT id FROM m ORDER BY id") == [(1,), (2,)]
    assert sync_obj._admission.in_flight == 0
