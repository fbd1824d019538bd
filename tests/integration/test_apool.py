"""AsyncPool (issue 37): `Pool`'s rules for asyncio tasks. Lazy opens, at
most `open_concurrency` at once, one open per id shared by every task that
asks, idle and LRU closing of unused objects only, fenced objects
replaced, leases released on close, and, after the service is killed, its
leases taken back at once (`reclaim`). Plain tests around `asyncio.run`."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import durable_obj
from durable_obj import AsyncDurableObject, AsyncPool
from durable_obj.stores import s3writes
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore
from tests.integration import _proc
from tests.integration.test_aio import run
from tests.integration.test_pool import Clock, _taken_by_another

T = TypeVar("T")

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"


class Opens:
    """Wraps a pool's `namespace.open`: counts the opens of each id and the
    most running at once; each open first waits at `barrier` if one is set
    (so a test knows that many run together) and on `gate` (held shut by
    the test)."""

    def __init__(self, pool: AsyncPool, barrier: int = 0) -> None:
        self._open = pool.namespace.open
        self.count: dict[str, int] = {}
        self.running = self.most = 0
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(barrier) if barrier else None
        self.gate = threading.Event()
        self.gate.set()
        pool.namespace.open = self  # type: ignore[method-assign]

    def __call__(self, oid: str, **kw: Any) -> durable_obj.DurableObject:
        with self.lock:
            self.count[oid] = self.count.get(oid, 0) + 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.barrier is not None:
                self.barrier.wait(60)
            assert self.gate.wait(60)
            return self._open(oid, **kw)
        finally:
            with self.lock:
                self.running -= 1


def _rows(url: str, oid: str, options: dict[str, Any] | None = None) -> list[str]:
    ns = durable_obj.Namespace(url, storage_options=options)
    with ns.open(oid, read_only=True) as obj:
        return obj.query("SELECT k FROM t ORDER BY k", "TSV").split()


def test_opens_on_first_use_and_keeps_one_object_per_id(ns_url: str) -> None:
    async def main() -> None:
        async with AsyncPool(ns_url, owner="svc") as pool:
            opens = Opens(pool)
            assert len(pool) == 0 and opens.count == {}  # nothing opened before a use
            async with pool.object("a") as first:
                assert isinstance(first, AsyncDurableObject)
                await first.aexecute(DDL)
                await first.aexecute("INSERT INTO t VALUES (1)")
            async with pool.object("a") as again:
                assert again is first and again.sync.pending == 2
            assert opens.count == {"a": 1} and len(pool) == 1 and "a" in pool
        assert first.sync.closed  # aclose() flushed and closed it
        assert _rows(ns_url, "a") == ["1"]

    run(main)


def test_tasks_asking_for_one_id_at_once_share_one_open(ns_url: str) -> None:
    async def main() -> None:
        async with AsyncPool(ns_url, owner="svc") as pool:
            opens = Opens(pool)
            opens.gate.clear()  # the open is held until every task asked
            got: list[int] = []

            async def use() -> None:
                async with pool.object("shared") as obj:
                    got.append(id(obj))
                    await asyncio.sleep(0)

            tasks = [asyncio.create_task(use()) for _ in range(20)]
            await asyncio.sleep(0.05)
            assert got == [] and opens.count == {"shared": 1}  # one open, twenty waiting
            opens.gate.set()
            await asyncio.gather(*tasks)
            assert len(got) == 20 and len(set(got)) == 1 and opens.count == {"shared": 1}

    run(main)


def test_at_most_open_concurrency_opens_run_at_once(tmp_path: Path) -> None:
    url = str(tmp_path / "ns")

    async def main() -> None:
        async with AsyncPool(url, owner="svc", open_concurrency=2) as pool:
            # Two opens must meet at the barrier (so two do run together);
            # a third running beside them would show in `most`.
            opens = Opens(pool, barrier=2)

            async def use(oid: str) -> None:
                async with pool.object(oid) as obj:
                    assert obj.sync.oid == oid

            await asyncio.gather(*(use(f"o{i}") for i in range(8)))
            assert opens.most == 2
            assert sorted(opens.count) == [f"o{i}" for i in range(8)]
            assert set(opens.count.values()) == {1}

    run(main)


def test_idle_objects_are_closed_by_a_sweep_and_by_the_timer(ns_url: str) -> None:
    clock = Clock()

    async def main() -> None:
        async with AsyncPool(ns_url, owner="svc", idle_close=4, clock=clock) as pool:
            async with pool.object("a") as a:
                await a.awrite(DDL)
            async with pool.object("b") as b:
                await b.awrite(DDL)
            clock.now += 3
            async with pool.object("b"):
                pass
            clock.now += 2  # a idle 5 s, b 2 s
            assert await pool.asweep() == 1
            assert a.sync.closed and not b.sync.closed and len(pool) == 1
            assert _taken_by_another(ns_url, "a")
            clock.now += 5  # no call to the pool: its timer task closes b
            deadline = time.monotonic() + 60  # only bounds a hang
            while not b.sync.closed:
                assert time.monotonic() < deadline, "the timer never closed the idle object"
                await asyncio.sleep(0.05)
            assert len(pool) == 0

    run(main)


def test_least_recently_used_beyond_max_open_are_closed_never_one_in_use(ns_url: str) -> None:
    async def main() -> None:
        async with AsyncPool(ns_url, owner="svc", max_open=2) as pool:
            objs: dict[str, AsyncDurableObject] = {}
            for oid in ("a", "b", "c"):
                async with pool.object(oid) as obj:
                    objs[oid] = obj
                    await obj.aexecute(DDL)
                    await obj.aexecute("INSERT INTO t VALUES (1)")  # flushed by the close
            await pool.asweep()  # waits for the eviction started by the last use
            assert objs["a"].sync.closed and len(pool) == 2
            assert not objs["b"].sync.closed and not objs["c"].sync.closed
            assert _rows(ns_url, "a") == ["1"] and _taken_by_another(ns_url, "a")
            async with pool.object("a") as a2, pool.object("b"), pool.object("c"):
                assert a2 is not objs["a"]
                assert await pool.asweep() == 0  # all three in use: over max_open
                assert len(pool) == 3
            await pool.asweep()
            assert len(pool) == 2 and objs["b"].sync.closed  # b was the least recent

    run(main)


def test_a_fenced_object_is_reopened(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url)

    async def main() -> None:
        async with AsyncPool(ns_url, owner="svc") as pool:
            async with pool.object("a") as first:
                await first.awrite(DDL)
            ns.release("a")  # administrative: the pool's writer is fenced at its next commit
            async with pool.object("a") as obj:
                assert obj is first
                with pytest.raises(durable_obj.LeaseFenced):
                    await obj.awrite("INSERT INTO t VALUES (1)")
            async with pool.object("a") as second:
                assert second is not first and second.sync.state == "open"
                await second.awrite("INSERT INTO t VALUES (2)")
            assert first.sync.closed

    run(main)
    assert _rows(ns_url, "a") == ["2"]


def test_aclose_releases_every_lease_and_closes_one_in_use_at_its_end(ns_url: str) -> None:
    async def main() -> None:
        pool = AsyncPool(ns_url, owner="svc")
        objs = []
        for oid in ("a", "b", "c"):
            async with pool.object(oid) as obj:
                await obj.aexecute(DDL)
                await obj.aexecute("INSERT INTO t VALUES (7)")  # not flushed
                objs.append(obj)
        async with pool.object("c") as in_use:
            await pool.aclose()
            assert objs[0].sync.closed and objs[1].sync.closed
            assert not in_use.sync.closed and len(pool) == 1  # never closed under its user
            with pytest.raises(durable_obj.Closed):
                async with pool.object("a"):
                    pass
        assert in_use.sync.closed and len(pool) == 0

    run(main)
    for oid in ("a", "b", "c"):
        assert _taken_by_another(ns_url, oid)
        assert _rows(ns_url, oid) == ["7"]


async def _cancel_an_ask(pool: AsyncPool, opens: Opens) -> None:
    """Ask for "a", cancel the ask while its open waits at `opens.gate`, then
    let the open go on."""
    opens.gate.clear()

    async def use() -> None:
        async with pool.object("a"):
            raise AssertionError("cancelled before the open ended")

    task = asyncio.create_task(use())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    opens.gate.set()


def test_a_cancelled_ask_leaves_the_open_to_the_pool(ns_url: str) -> None:
    async def main() -> None:
        pool = AsyncPool(ns_url, owner="svc")
        opens = Opens(pool)
        await _cancel_an_ask(pool, opens)
        await pool.asweep()
        deadline = time.monotonic() + 60
        while "a" not in pool:  # the open went on; the object is cached
            assert time.monotonic() < deadline, "the open never ended"
            await asyncio.sleep(0.02)
        assert not _taken_by_another(ns_url, "a")  # held by the pool
        async with pool.object("a"):
            assert opens.count == {"a": 1}
        await pool.aclose()

    run(main)
    assert _taken_by_another(ns_url, "a")


def test_aclose_in_the_step_a_cancelled_asks_open_ended_closes_it(ns_url: str) -> None:
    """Found by CI on a loaded machine: the release a cancelled ask owes ran
    as a callback of its open, scheduled for the loop's next step. A task
    that saw the object cached in the step the open ended, used it and
    called aclose() found it still in use and left it to that release,
    which aclose() did not wait for: the loop ended, the lease stayed held.
    Polling with sleep(0) wakes this test in exactly that step."""

    async def main() -> None:
        pool = AsyncPool(ns_url, owner="svc")
        opens = Opens(pool)
        await _cancel_an_ask(pool, opens)
        deadline = time.monotonic() + 60
        while "a" not in pool:
            assert time.monotonic() < deadline, "the open never ended"
            await asyncio.sleep(0)
        async with pool.object("a"):  # no await between here and aclose()
            pass
        await pool.aclose()

    run(main)
    assert _taken_by_another(ns_url, "a")


class SlowStore(FaultyStore):
    """A store whose writes under `held` wait for `go` (a close in progress)."""

    def __init__(self) -> None:
        super().__init__(MemoryStore(f"apool-{uuid.uuid4().hex}"), seed=0, rate=0.0)
        self.held = ""
        self.down = ""
        self.go = threading.Event()

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        if op in ("create", "create_file", "replace"):
            if self.down and key.startswith(self.down):
                raise durable_obj.BackendError(f"store down: {op}")
            if self.held and key.startswith(self.held):
                assert self.go.wait(60)
        return super()._call(op, key, fn)


def test_an_id_being_closed_is_reopened_after_its_lease_is_released() -> None:
    store = SlowStore()

    async def main() -> None:
        # reclaim=False: a reopen meeting the lease of the close under way fails
        pool = AsyncPool(store, owner="svc", max_open=1, reclaim=False)
        async with pool.object("a") as a:
            await a.awrite(DDL)
        store.held = "a/"  # a's close (flush + release) waits
        async with pool.object("b"):
            pass  # a is evicted: its close starts, and waits
        again = asyncio.create_task(_first_use(pool, "a"))
        await asyncio.sleep(0.1)
        assert not again.done()  # waits for the close, does not meet its lease
        store.go.set()
        reopened = await again
        assert reopened is not a and a.sync.closed
        await pool.aclose()

    run(main)


async def _first_use(pool: AsyncPool, oid: str) -> AsyncDurableObject:
    async with pool.object(oid) as obj:
        return obj


def test_a_failed_close_keeps_the_object_and_retries() -> None:
    store = SlowStore()

    async def main() -> None:
        pool = AsyncPool(store, owner="svc", max_open=1, commit_deadline=0.2)
        async with pool.object("a") as a:
            await a.aexecute(DDL)
        store.down = "a/"  # a's flush on eviction fails: it stays, buffered
        async with pool.object("b"):
            pass
        assert await pool.asweep() == 0
        assert not a.sync.closed and a.sync.pending == 1 and "a" in pool and len(pool) == 2
        store.down = ""
        assert await pool.asweep() == 1  # retried: flushed, released
        assert a.sync.closed and a.sync.seq == 1 and len(pool) == 1
        await pool.aclose()

    run(main)


@pytest.mark.parametrize(
    "bad", [{"max_open": 0}, {"idle_close": 0}, {"open_concurrency": 0}, {"open_concurrency": 1.5}]
)
def test_limits_are_checked(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(durable_obj.InvalidArgument):
        AsyncPool(str(tmp_path), **bad)  # type: ignore[arg-type]


def test_preload_readies_the_s3_clients_and_writes_nothing(
    seaweed_s3: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `preload()` readies before serving: the store's clients, so the
    first open builds none (obstore's holds the GIL ~45 ms: a loop stall).
    The process's shared transports start empty here: another test on the
    same server (another secret, `test_wrong_credentials`) may have built
    one of its own in the process's shared transport before."""
    monkeypatch.setattr(s3writes, "_SHARED", {})
    root, options = seaweed_s3
    url = f"{root}/apool-{uuid.uuid4().hex[:12]}"
    pool = AsyncPool(url, owner="svc", storage_options=options)
    try:
        pool.preload()
        assert gc.get_freeze_count() > 0  # the heap so far: out of the GC's scans
    finally:
        gc.unfreeze()  # this test process's heap is the tests' own
    store = pool.namespace.store
    assert store.list_keys() == []  # nothing written
    writes = store._writes  # type: ignore[attr-defined]
    assert writes is not None and len(writes._clients) == 1

    async def main() -> None:
        async with pool, pool.object("a") as obj:
            await obj.awrite(DDL)
        assert len(writes._clients) == 1  # the one preload built

    run(main)
    assert _rows(url, "a", options) == []


@pytest.fixture(params=["file", "seaweed_s3"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if request.param == "file":
        yield str(tmp_path / "ns"), {}
        return
    root, options = request.getfixturevalue(request.param)
    yield f"{root}/apool-{uuid.uuid4().hex[:12]}", dict(options)


@pytest.mark.slow
def test_after_a_kill_the_restarted_pool_takes_its_leases_back_at_once(
    shared: tuple[str, dict[str, Any]],
) -> None:
    """A service (a child) holds three objects through an AsyncPool with 60 s
    leases and is killed (SIGKILL). Its restart, under the same owner, opens
    them at once with everything flushed and nothing else; a pool told not to
    reclaim meets the live leases (`LeaseHeld`)."""
    url, options = shared
    oids = ["t1", "t2", "t3"]
    with _proc.Script(
        "pool_holder", {"url": url, "owner": "svc", "oids": oids, "options": options}
    ) as child:
        held = child.next_marked(120)
        assert held["held"] == 3
        child.kill()

    async def main() -> None:
        async with AsyncPool(
            url, owner="svc", reclaim=False, storage_options=options, lease_ttl=60
        ) as refused:
            with pytest.raises(durable_obj.LeaseHeld):
                async with refused.object("t1"):
                    pass
        async with AsyncPool(url, owner="svc", storage_options=options, lease_ttl=60) as pool:
            for oid, generation in zip(oids, held["generations"], strict=True):
                async with pool.object(oid) as obj:
                    assert obj.sync.generation == generation + 1  # taken back, not waited for
                    assert await obj.arows("SELECT k FROM t") == [(oid,)]  # 'lost' is lost
                    await obj.awrite("INSERT INTO t VALUES ('after')")

    run(main)
    for oid in oids:
        assert _rows(url, oid, options) == ["after", oid]
