"""The Pool (issue 14): a bounded cache of open objects for a service, with
LRU and idle closing of unused objects only, one object per id across
threads, and fenced objects replaced."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

import durable_obj
from durable_obj import Pool
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore

T = TypeVar("T")

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _taken_by_another(url: str, oid: str) -> bool:
    """Whether a writer of another owner can open `oid` now (its lease is free)."""
    try:
        with durable_obj.Namespace(url, owner="other").open(oid) as obj:
            assert obj.generation >= 1
    except durable_obj.LeaseHeld:
        return False
    return True


def test_hit_returns_the_same_object(tmp_path: Path) -> None:
    with Pool(str(tmp_path), owner="svc") as pool:
        with pool.object("a") as first:
            first.execute(DDL)
            first.execute("INSERT INTO t VALUES (1)")
        with pool.object("a") as again:
            assert again is first
            assert again.pending == 2
        assert len(pool) == 1
        assert "a" in pool
    assert first.closed  # pool.close() flushed and closed it
    with durable_obj.Namespace(str(tmp_path)).open("a", read_only=True) as obj:
        assert obj.query("SELECT k FROM t") == "1\n"


def test_lru_eviction_flushes_and_releases_the_lease(tmp_path: Path) -> None:
    pool = Pool(str(tmp_path), owner="svc", max_open=2)
    try:
        objs = {}
        for oid in ("a", "b"):
            with pool.object(oid) as obj:
                obj.execute(DDL)
                obj.execute(f"INSERT INTO t VALUES ({ord(oid)})")
                objs[oid] = obj
        with pool.object("a"):
            pass  # a is now the most recently used: b goes first
        with pool.object("c"):
            pass
        assert len(pool) == 2
        assert objs["b"].closed and not objs["a"].closed
        assert "b" not in pool
        assert not _taken_by_another(str(tmp_path), "a")  # still leased by the pool
        assert _taken_by_another(str(tmp_path), "b")  # released
        with durable_obj.Namespace(str(tmp_path)).open("b", read_only=True) as obj:
            assert obj.query("SELECT k FROM t") == f"{ord('b')}\n"  # flushed on eviction
        with pool.object("b") as obj:  # reopened on the next use
            assert obj is not objs["b"]
            assert obj.query("SELECT k FROM t") == f"{ord('b')}\n"
        assert objs["a"].closed  # a was the least recently used now
    finally:
        pool.close()


def test_idle_objects_are_closed(tmp_path: Path) -> None:
    clock = Clock()
    pool = Pool(str(tmp_path), owner="svc", idle_close=60, clock=clock)
    try:
        with pool.object("a") as a:
            a.execute(DDL)
        clock.now += 30
        with pool.object("b") as b:
            pass
        clock.now += 40  # a idle for 70 s, b for 40 s
        assert pool.sweep() == 1
        assert a.closed and not b.closed
        assert _taken_by_another(str(tmp_path), "a")
        assert a.pending == 0 and a.seq == 1  # its CREATE was flushed by the close
        clock.now += 20
        with pool.object("c"):  # any use sweeps too
            pass
        assert b.closed
        assert len(pool) == 1
    finally:
        pool.close()


def test_in_use_objects_are_never_evicted(tmp_path: Path) -> None:
    clock = Clock()
    pool = Pool(str(tmp_path), owner="svc", max_open=1, idle_close=10, clock=clock)
    try:
        with pool.object("a") as a, pool.object("b") as b:
            assert len(pool) == 2  # over max_open while both are in use
            clock.now += 100
            assert pool.sweep() == 0
            assert not a.closed and not b.closed
            a.execute(DDL)
        # b was released first, while a was still in use: b went (over
        # max_open, and idle by the clock); a, released just now, stays
        assert b.closed and not a.closed
        assert len(pool) == 1
        with pool.object("a") as again:
            assert again is a
    finally:
        pool.close()


def test_threads_asking_for_one_id_share_one_object(tmp_path: Path) -> None:
    pool = Pool(str(tmp_path), owner="svc", max_open=3)
    seen: dict[str, set[int]] = {f"o{i}": set() for i in range(4)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(n: int) -> None:
        try:
            oid = f"o{n % 4}"
            barrier.wait()
            for k in range(5):
                with pool.object(oid) as obj:
                    seen[oid].add(id(obj))
                    obj.execute("CREATE TABLE IF NOT EXISTS t (k UInt32) ENGINE = Log")
                    obj.execute(f"INSERT INTO t VALUES ({n * 10 + k})")
                    obj.flush()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(pool) <= 3
    pool.close()
    assert len(pool) == 0
    for i in range(4):
        with durable_obj.Namespace(str(tmp_path)).open(f"o{i}", read_only=True) as obj:
            assert obj.query("SELECT count() FROM t") == "10\n"  # 2 threads x 5 rows


def test_same_id_opened_once_under_a_race(tmp_path: Path) -> None:
    pool = Pool(str(tmp_path), owner="svc")
    got: list[int] = []
    barrier = threading.Barrier(6)
    hold = threading.Event()

    def work() -> None:
        barrier.wait()
        with pool.object("shared") as obj:
            got.append(id(obj))
            hold.wait(30)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for th in threads:
        th.start()
    hold.set()
    for th in threads:
        th.join()
    assert len(got) == 6 and len(set(got)) == 1
    pool.close()


def test_a_fenced_object_is_replaced(tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path))
    pool = Pool(str(tmp_path), owner="svc")
    try:
        with pool.object("a") as first:
            first.execute(DDL)
            first.flush()
        ns.release("a")  # administrative: the pool's writer is fenced at its next commit
        with pool.object("a") as obj:
            assert obj is first
            obj.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(durable_obj.LeaseFenced):
                obj.flush()
        assert first.closed  # dropped from the cache once unused
        with pool.object("a") as second:
            assert second is not first and second.state == "open"
            assert second.query("SELECT count() FROM t") == "0\n"
            second.execute("INSERT INTO t VALUES (2)")
            second.flush()
    finally:
        pool.close()
    with ns.open("a", read_only=True) as obj:
        assert obj.query("SELECT k FROM t") == "2\n"


def test_an_object_closed_by_its_user_is_reopened(tmp_path: Path) -> None:
    with Pool(str(tmp_path), owner="svc") as pool:
        with pool.object("a") as first:
            first.execute(DDL)
            first.close()
        with pool.object("a") as second:
            assert second is not first
            assert second.tables() == ["t"]


def test_close_flushes_all_and_refuses_new_uses(tmp_path: Path) -> None:
    pool = Pool(str(tmp_path), owner="svc")
    objs = []
    for oid in ("a", "b", "c"):
        with pool.object(oid) as obj:
            obj.execute(DDL)
            obj.execute("INSERT INTO t VALUES (7)")
            objs.append(obj)
    with pool.object("c") as in_use:
        pool.close()
        assert objs[0].closed and objs[1].closed
        assert not in_use.closed  # never closed under its user
        assert len(pool) == 1
        with pytest.raises(durable_obj.Closed), pool.object("a"):
            pass
    assert in_use.closed and len(pool) == 0  # closed when its use ended
    for oid in ("a", "b", "c"):
        assert _taken_by_another(str(tmp_path), oid)
        with durable_obj.Namespace(str(tmp_path)).open(oid, read_only=True) as obj:
            assert obj.query("SELECT k FROM t") == "7\n"


def test_close_discard_drops_unflushed(tmp_path: Path) -> None:
    pool = Pool(str(tmp_path), owner="svc")
    with pool.object("a") as obj:
        obj.execute(DDL)
        obj.flush()
        obj.execute("INSERT INTO t VALUES (1)")
    pool.close(discard=True)
    assert obj.closed
    with durable_obj.Namespace(str(tmp_path)).open("a", read_only=True) as back:
        assert back.query("SELECT count() FROM t") == "0\n"


def test_a_failed_open_leaves_nothing_cached(tmp_path: Path) -> None:
    with Pool(str(tmp_path), owner="svc", read_only=True) as pool:
        with pytest.raises(durable_obj.NotFound), pool.object("missing"):
            pass
        assert len(pool) == 0
        with pytest.raises(durable_obj.InvalidArgument), pool.object("a/b"):
            pass


@pytest.mark.parametrize("bad", [{"max_open": 0}, {"idle_close": 0}, {"max_open": True}])
def test_limits_are_checked(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(durable_obj.InvalidArgument):
        Pool(str(tmp_path), **bad)  # type: ignore[arg-type]


def test_the_timer_closes_idle_objects_without_a_use(tmp_path: Path) -> None:
    """No call to the pool: its timer on the heartbeat scheduler closes an
    object once the (injected) clock says it is idle."""
    clock = Clock()
    pool = Pool(str(tmp_path), owner="svc", idle_close=4, clock=clock)
    try:
        with pool.object("a") as a:
            a.execute(DDL)
        clock.now += 5
        deadline = time.monotonic() + 60  # only bounds a hang
        while not a.closed:
            assert time.monotonic() < deadline, "the timer never closed the idle object"
            time.sleep(0.05)
        assert len(pool) == 0
        assert _taken_by_another(str(tmp_path), "a")
    finally:
        pool.close()


class DownStore(FaultyStore):
    """A store whose writes under the folder `down` fail (known not applied)."""

    def __init__(self) -> None:
        super().__init__(MemoryStore(f"pool-{uuid.uuid4().hex}"), seed=0, rate=0.0)
        self.down = ""

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        if self.down and key.startswith(self.down) and op in ("create", "create_file", "replace"):
            raise durable_obj.BackendError(f"store down: {op}")
        return super()._call(op, key, fn)


def test_a_failed_eviction_keeps_the_object_and_retries() -> None:
    store = DownStore()
    pool = Pool(store, owner="svc", max_open=1, commit_deadline=0.2)
    try:
        with pool.object("a") as a:
            a.execute(DDL)
        store.down = "a/"  # a's flush on eviction fails: it stays, buffered
        with pool.object("b"):
            pass
        assert not a.closed and a.pending == 1 and "a" in pool
        assert len(pool) == 2
        store.down = ""
        assert pool.sweep() == 1  # retried: flushed, released
        assert a.closed and a.seq == 1 and len(pool) == 1
    finally:
        pool.close()
