"""Many objects open at once in one process (issue 14): any mix of writers
and readers, each from its own thread, one heartbeat scheduler for all, and
one object's slow store never blocking another's calls."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import durable_obj
from durable_obj.core import heartbeat
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore

T = TypeVar("T")
DDL = "CREATE TABLE t (k UInt32, v String) ENGINE = MergeTree ORDER BY k"


def _wait_for(cond: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll `cond` until it holds (a generous limit only bounds a hang)."""
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_objects_used_from_their_own_threads(tmp_path: Path) -> None:
    """16 writers, each in a thread of its own, executing and flushing at
    once; each object then holds exactly its own rows."""
    ns = durable_obj.Namespace(str(tmp_path), owner="multi")
    objs = [ns.open(f"o{i}") for i in range(16)]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            obj = objs[i]
            obj.execute(DDL)
            for n in range(20):
                obj.execute(f"INSERT INTO t VALUES ({n}, 'o{i}')")
                if n % 5 == 4:
                    obj.flush()
            obj.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for i in range(16):
        with ns.open(f"o{i}", read_only=True) as obj:
            assert obj.query("SELECT count(), countDistinct(k), any(v) FROM t") == (
                f'20,20,"o{i}"\n'
            )


def test_one_heartbeat_scheduler_for_every_writer(tmp_path: Path) -> None:
    """20 writers renew their leases through one scheduler (a few threads in
    all, none per object), and closing them stops every renewal."""
    ns = durable_obj.Namespace(str(tmp_path), owner="beats", lease_ttl=3.0)
    objs = [ns.open(f"b{i}") for i in range(20)]
    try:
        first = [obj.head for obj in objs]
        assert not [t for t in threading.enumerate() if t.name.startswith("durable_obj-lease")]

        def renewed() -> bool:
            return all(
                (h := o.head) is not None
                and f is not None
                and (h.lease.expires_at or 0) > (f.lease.expires_at or 0)
                for o, f in zip(objs, first, strict=True)
            )

        _wait_for(renewed, "every writer renewed by the heartbeat")
        assert heartbeat.live_threads() <= heartbeat.WORKERS + 1
        assert all(
            o.generation == f.lease.generation for o, f in zip(objs, first, strict=True) if f
        )
    finally:
        for obj in objs:
            obj.close()
    assert all(obj.closed for obj in objs)


class BlockingStore(FaultyStore):
    """A store whose next write waits until the test lets it go."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner, seed=0, rate=0.0)
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        if self.armed and op in ("create", "create_file", "replace"):
            self.armed = False
            self.entered.set()
            self.release.wait()
        return super()._call(op, key, fn)


def test_a_stuck_store_blocks_no_other_object() -> None:
    """While one object's flush waits on its store (holding that object's
    lock), another object opens, executes, flushes, queries and closes."""
    slow = BlockingStore(MemoryStore(f"m-{uuid.uuid4().hex}"))
    stuck = durable_obj.Namespace(slow, owner="stuck").open("a")
    stuck.execute(DDL)
    stuck.execute("INSERT INTO t VALUES (1, 'a')")
    slow.armed = True
    outcome: list[Any] = []
    flusher = threading.Thread(target=lambda: outcome.append(stuck.flush()))
    flusher.start()
    try:
        assert slow.entered.wait(60)
        other = durable_obj.Namespace(f"memory://m-{uuid.uuid4().hex}", owner="free")
        with other.open("b") as free:
            free.execute(DDL)
            free.execute("INSERT INTO t VALUES (2, 'b')")
            assert free.flush() is not None
            assert free.query("SELECT k, v FROM t") == '2,"b"\n'
        assert flusher.is_alive()  # still waiting on its store all along
    finally:
        slow.release.set()
        flusher.join()
    assert outcome and outcome[0] is not None
    stuck.close()
    with durable_obj.Namespace(slow, owner="check").open("a", read_only=True) as again:
        assert again.query("SELECT k, v FROM t") == '1,"a"\n'


def test_busy_objects_never_starve_another_objects_renewals() -> None:
    """More objects than the heartbeat has workers sit with their locks held
    (a long call in another thread): their beats answer busy instead of
    waiting, and a free object's lease is still renewed on time; once the
    locks are free, the busy ones renew too."""
    ns = durable_obj.Namespace(f"memory://m-{uuid.uuid4().hex}", owner="w", lease_ttl=3.0)
    busy = [ns.open(f"busy-{i}") for i in range(heartbeat.WORKERS + 4)]
    free = ns.open("free")
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        for obj in busy:
            obj._lock.acquire()
        held.set()
        done.wait()
        for obj in busy:
            obj._lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        renewed_from = free._w.expires_at
        expiries = [o._w.expires_at for o in busy]
        deadline = time.monotonic() + 30
        while free._w.expires_at == renewed_from and time.monotonic() < deadline:
            time.sleep(0.05)
        assert free._w.expires_at > renewed_from  # renewed while every busy lock was held
        assert [o._w.expires_at for o in busy] == expiries  # no busy object beat meanwhile
    finally:
        done.set()
        holder.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        o._w.expires_at == e for o, e in zip(busy, expiries, strict=True)
    ):
        time.sleep(0.05)
    assert all(o._w.expires_at > e for o, e in zip(busy, expiries, strict=True))
    assert not free.fenced and not any(o.fenced for o in busy)
    for obj in (*busy, free):
        obj.close()


def test_closing_crashing_or_fencing_one_object_leaves_the_others(tmp_path: Path) -> None:
    """An object closed, abandoned (a crash) or fenced takes its database
    with it (at close) and nothing of any other object."""
    from durable_obj.testing import abandon

    ns = durable_obj.Namespace(str(tmp_path), owner="x")
    keep, crash, fence = ns.open("keep"), ns.open("crash"), ns.open("fence")
    for i, obj in enumerate((keep, crash, fence)):
        obj.execute(DDL)
        obj.execute(f"INSERT INTO t VALUES ({i}, 'x')")
    engines = [o._local.engine for o in (crash, fence)]
    assert all(e is not None for e in engines)
    names = [e.database for e in engines if e is not None]
    abandon(crash)
    with (
        pytest.warns(RuntimeWarning, match="force takeover"),
        durable_obj.Namespace(str(tmp_path), owner="rival").open("fence", force=True),
    ):
        pass
    with pytest.raises(durable_obj.errors.LeaseFenced):
        fence.flush()
    assert fence.fenced
    fence.close(discard=True)
    assert keep.query("SELECT k FROM t") == "0\n"
    keep.execute("INSERT INTO t VALUES (9, 'y')")
    keep.flush()
    engine = keep._local.engine
    assert engine is not None
    left = engine.json_rows("SELECT name FROM system.databases")
    assert not [n for (n,) in left if n in names]
    keep.close()
