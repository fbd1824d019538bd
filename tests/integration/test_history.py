"""Time travel: history, open at=, fork at=, gc inside a retention window,
and the history archive under crashes, lost answers and fences between the
history write and the checkpoint's head commit (FaultyStore)."""

from __future__ import annotations

import time as _time
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import durable_obj
import durable_obj.core.object
from durable_obj import errors
from durable_obj.core import history as histories
from durable_obj.core import ops
from durable_obj.stores.base import Store
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore, SimulatedCrash, abandon
from durable_obj.wire import lease as leases
from durable_obj.wire.head import Head

DDL = "CREATE TABLE t (id UInt32, v UInt32) ENGINE = MergeTree ORDER BY id"
DAY = 24 * 3600.0


class FrozenClock:
    """The wall clock durable_obj.core.object (leases, commit stamps, at=) sees."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now

    monotonic = staticmethod(_time.monotonic)
    sleep = staticmethod(_time.sleep)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FrozenClock]:
    c = FrozenClock()
    monkeypatch.setattr(durable_obj.core.object, "time", c)
    yield c


def rows(obj: durable_obj.DurableObject) -> list[tuple[int, int]]:
    text = obj.query("SELECT id, v FROM t ORDER BY id, v", "TSV")
    return [(int(a), int(b)) for a, b in (line.split("\t") for line in text.splitlines())]


class Recorder:
    """A writer and the state after every acknowledged commit, by seq."""

    def __init__(self, ns: durable_obj.Namespace, clock: FrozenClock | None = None) -> None:
        self.ns, self.clock = ns, clock
        self.obj = ns.open("o")
        self.obj.execute(DDL)
        self.obj.flush()
        self.states: dict[int, list[tuple[int, int]]] = {self.obj.seq: []}
        self.times: dict[int, float] = {}
        self.next = 1

    def insert(self, n: int = 1, *, checkpoint: bool = False) -> int:
        for _ in range(n):
            self.obj.execute(f"INSERT INTO t VALUES ({self.next}, {self.next * 10})")
            self.next += 1
        self.obj.checkpoint() if checkpoint else self.obj.flush()
        self.states[self.obj.seq] = rows(self.obj)
        if self.clock is not None:
            self.times[self.obj.seq] = self.clock.now
            self.clock.now += 60
        return self.obj.seq

    def check_all(self, seqs: list[int] | None = None) -> None:
        for seq in self.states if seqs is None else seqs:
            with self.ns.open("o", read_only=True, at=seq) as past:
                assert past.seq == seq
                assert rows(past) == self.states[seq], f"at seq {seq}"


def one_artifact_per_seq(
    store: Store, oid: str = "o", now: float | None = None
) -> histories.History:
    """The union of head and archives: consecutive seqs, one key each, and
    every archived point is the merged point of its seq."""
    past = ops.history(store, oid, now=now)
    assert past.conflicts == []
    seqs = [p.seq for p in past.points]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    for key, chain in past.files:
        for point in histories._points(chain, {}):
            assert next(p for p in past.points if p.seq == point.seq).key == point.key, key
    return past


def test_history_lists_every_commit_and_opens_at_each(ns_url: str, clock: FrozenClock) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", fold_segments=0)
    rec = Recorder(ns, clock)
    for i in range(9):
        rec.insert(1 + i % 2, checkpoint=i in (3, 6))
    head_seq = rec.obj.seq
    rec.obj.close()
    past = one_artifact_per_seq(ns.store)
    assert [p.seq for p in past.points] == list(range(1, head_seq + 1))
    assert [p.seq for p in past.restorable] == list(range(1, head_seq + 1))
    assert len(past.files) == 2  # two checkpoints, each archived the chain it replaced
    kinds = {p.seq: p.kind for p in past.points}
    assert [s for s, k in kinds.items() if k == "base"] == [5, 8]
    assert all(
        p.owner == "w" and p.generation == 1 and p.time_source == "stamp" for p in past.points
    )
    assert past.points[3].committed_at == datetime.fromtimestamp(rec.times[4], UTC)
    rec.check_all()
    # a datetime: the last commit at or before it
    at = datetime.fromtimestamp(rec.times[7] + 30, UTC)
    with ns.open("o", read_only=True, at=at) as obj:
        assert obj.seq == 7 and rows(obj) == rec.states[7]
    with ns.open("o", read_only=True, at=at.astimezone(timezone(timedelta(hours=9)))) as obj:
        assert obj.seq == 7  # the same instant in another zone
        with pytest.raises(errors.InvalidArgument, match="never moves"):
            obj.refresh()
    with pytest.raises(errors.InvalidArgument, match="naive"):
        ns.open("o", read_only=True, at=datetime(2030, 1, 1))
    with pytest.raises(errors.NotFound, match="oldest restorable point is seq 1"):
        ns.open("o", read_only=True, at=datetime.fromtimestamp(1_000, UTC))
    with pytest.raises(errors.NotFound, match=f"newest is seq {head_seq}"):
        ns.open("o", read_only=True, at=head_seq + 1)
    with pytest.raises(errors.InvalidArgument, match="read-only"):
        ns.open("o", at=3)
    for bad in (True, "3", 0, 2.5):
        with pytest.raises(errors.InvalidArgument):
            ns.open("o", read_only=True, at=bad)  # type: ignore[arg-type]


def test_window_gc_and_not_found(ns_url: str, clock: FrozenClock) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", fold_segments=0, retention=DAY)
    rec = Recorder(ns, clock)
    for i in range(6):
        rec.insert(checkpoint=i == 2)  # seqs 2..7, base at 4
    clock.now += 2 * DAY
    for i in range(5):
        rec.insert(checkpoint=i == 1)  # seqs 8..12, base at 9
    rec.obj.close()
    store = ns.store
    past = ops.history(store, "o", now=clock.now)
    # inside the window: 8.. (committed within the day), plus 7: in effect when it opened
    assert [p.seq for p in past.restorable] == [7, 8, 9, 10, 11, 12]
    with pytest.raises(errors.NotFound, match="oldest restorable point is seq 7"):
        ns.open("o", read_only=True, at=5)
    rec.check_all([7, 8, 9, 10, 11, 12])
    stored = {e.key for e in store.list_keys("o")}
    report = ops.gc(store, "o", grace=0, now=clock.now)
    gone = set(report.deleted)
    # the chain of 1..3 (no base) and its archive are collected; 4.. are needed
    assert gone <= stored
    assert sorted(k.split("-")[0] + "-" + k.split("-")[1] for k in gone) == [
        "o/history/1-3",
        "o/wal/1-1",
        "o/wal/1-2",
        "o/wal/1-3",
    ]
    rec.check_all([7, 8, 9, 10, 11, 12])
    after = one_artifact_per_seq(store, now=clock.now)
    assert [p.seq for p in after.restorable] == [7, 8, 9, 10, 11, 12]
    assert [p.seq for p in after.points] == list(range(4, 13))
    # a week later only the head's chain is left: the window is the current base on
    clock.now += 7 * DAY
    ops.gc(store, "o", grace=0, now=clock.now)
    later = one_artifact_per_seq(store, now=clock.now)
    assert [p.seq for p in later.restorable] == [12]
    assert [p.seq for p in later.points] == [9, 10, 11, 12]  # the head's chain
    assert not [e for e in store.list_keys("o") if "/history/" in e.key]
    rec.check_all([12])
    with pytest.raises(
        errors.NotFound, match="already collected; the oldest restorable point is seq 12"
    ):
        ns.open("o", read_only=True, at=9)


def test_grace_widens_the_window_gc_keeps(clock: FrozenClock) -> None:
    ns = durable_obj.Namespace(MemoryStore(f"h-{uuid.uuid4().hex}"), fold_segments=0, retention=60)
    rec = Recorder(ns, clock)
    rec.insert()
    rec.insert(checkpoint=True)
    clock.now += 600
    rec.insert(checkpoint=True)
    rec.obj.close()
    # the first chain left the window 10 min ago: an hour's grace keeps it
    assert ops.gc(ns.store, "o", now=clock.now).deleted == []
    assert ops.gc(ns.store, "o", grace=0, now=clock.now).deleted


def test_retention_zero_writes_no_history(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, retention=0, fold_segments=0)
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.flush()
        obj.checkpoint()
        obj.checkpoint()
    assert not [e for e in ns.store.list_keys("o") if "/history/" in e.key]
    assert ops.read_head(ns.store, "o").retention == 0
    past = ns.history("o")
    assert [p.seq for p in past.restorable] == [3]


def test_fork_at_a_past_point(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, fold_segments=0)
    rec = Recorder(ns)
    seq = rec.insert(2)
    rec.insert(checkpoint=True)
    rec.obj.execute("ALTER TABLE t DELETE WHERE id = 1")
    rec.obj.flush()
    rec.obj.close()
    info = ns.fork("o", "undo", at=seq)
    assert info.head.extension()["forked_from"] == {"oid": "o", "seq": seq}
    with ns.open("undo") as copy:
        assert rows(copy) == rec.states[seq]
        copy.execute("INSERT INTO t VALUES (99, 0)")  # a writer from there on
    with ns.open("o", read_only=True) as obj:
        assert rows(obj) == [(2, 20), (3, 30)]  # the source is only read


# -- crash safety of the archive ------------------------------------------------------
class Scripted(FaultyStore):
    """Faults at chosen calls only: `plan` is [(op, key part, fault)], each
    used once at the first call that matches; `hook(op, key)` runs after
    every call that reached the inner store."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner, seed=0, rate=0.0)
        self.plan: list[tuple[str, str, Fault]] = []
        self.hook: Any = None

    def _pick(self, op: str, key: str) -> Fault | None:
        for i, (want, part, fault) in enumerate(self.plan):
            if op == want and part in key:
                del self.plan[i]
                self.injected.append((op, key, fault))
                return fault
        return None

    def create(self, key: str, data: bytes) -> Any:
        version = super().create(key, data)
        if self.hook is not None:
            self.hook("create", key)
        return version


@pytest.mark.parametrize(
    "fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.ERROR, Fault.AMBIGUOUS_BEFORE]
)
def test_checkpoint_head_commit_fails_after_the_archive(fault: Fault) -> None:
    """The archive landed, the head commit did not (or did, then the process
    died): the orphan archive is a prefix of the head's chain, the union
    maps each seq to one key, and every committed state opens."""
    inner = MemoryStore(f"h-{uuid.uuid4().hex}")
    store = Scripted(inner)
    ns = durable_obj.Namespace(store, owner="w", fold_segments=0, commit_deadline=0.2)
    rec = Recorder(ns)
    rec.insert(2)
    rec.insert()  # seq 3
    rec.obj.execute("INSERT INTO t VALUES (100, 1)")
    crash = fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER)
    store.plan = [("replace", "head.json", fault)] * (1 if crash else 1000)
    with pytest.raises((SimulatedCrash, errors.BackendError, errors.CommitAmbiguous)):
        rec.obj.checkpoint()
    store.plan = []
    archives = [e.key for e in inner.list_keys("o") if "/history/" in e.key]
    assert len(archives) == 1 and "/history/1-3-" in archives[0]  # before the head commit
    if crash:
        abandon(rec.obj)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the dead writer's lease
            rec.obj = ns.open("o", force=True)
    else:
        assert rec.obj.pending == 1 and rec.obj.seq == 3
        rec.obj.flush()  # the buffered statement goes in as a segment instead
    committed = ops.read_head(inner, "o").manifest
    assert committed.seq == (3 if fault is Fault.CRASH_BEFORE else 4)
    assert (committed.base is not None) == (fault is Fault.CRASH_AFTER)
    if fault is Fault.CRASH_BEFORE:
        assert rows(rec.obj) == rec.states[3]  # never acknowledged, never committed
    else:
        assert (100, 1) in rows(rec.obj)
        rec.states[4] = rows(rec.obj)
    rec.insert()
    rec.insert(checkpoint=True)  # archives the head's chain again
    rec.insert()
    rec.obj.close()
    past = one_artifact_per_seq(inner)
    assert len(past.files) == 2
    # the orphan (chain up to 3) and the later archive name the same keys for 1..3
    orphan = next(c for k, c in past.files if k == archives[0])
    assert orphan.manifest.seq == 3
    rec.check_all()


def test_lost_answer_on_the_archive_is_settled_by_reading_back() -> None:
    inner = MemoryStore(f"h-{uuid.uuid4().hex}")
    store = Scripted(inner)
    ns = durable_obj.Namespace(store, fold_segments=0, commit_deadline=0.2)
    rec = Recorder(ns)
    rec.insert()
    store.plan = [("create", "/history/", Fault.LOST_RESPONSE)]
    rec.insert(checkpoint=True)
    assert store.injected and store.injected[-1][2] is Fault.LOST_RESPONSE
    rec.insert()
    rec.obj.close()
    assert len(one_artifact_per_seq(inner).files) == 1
    rec.check_all()


def test_a_failed_archive_fails_the_checkpoint_and_changes_nothing() -> None:
    inner = MemoryStore(f"h-{uuid.uuid4().hex}")
    store = Scripted(inner)
    ns = durable_obj.Namespace(store, fold_segments=0, commit_deadline=0.2)
    rec = Recorder(ns)
    rec.insert()
    before = inner.get("o/head.json")
    store.plan = [("create", "/history/", Fault.ERROR)]
    with pytest.raises(errors.BackendError):
        rec.obj.checkpoint()
    after = inner.get("o/head.json")
    assert before is not None and after is not None and before.version == after.version
    rec.insert(checkpoint=True)  # a retry archives and commits
    rec.obj.close()
    one_artifact_per_seq(inner)
    rec.check_all()


def test_fenced_between_the_archive_and_the_head_commit() -> None:
    """A rival takes the lease right after the archive landed: the
    checkpoint is fenced, the orphan names only what was committed, and
    the rival's later commits and archives agree with it seq for seq."""
    inner = MemoryStore(f"h-{uuid.uuid4().hex}")
    store = Scripted(inner)
    ns = durable_obj.Namespace(store, owner="a", fold_segments=0)
    rec = Recorder(ns)
    rec.insert(2)
    rec.insert()

    def rival(op: str, key: str) -> None:
        if "/history/" not in key:
            return
        store.hook = None
        blob = inner.get("o/head.json")
        assert blob is not None
        head = Head.parse(blob.data)
        head.lease, _ = leases.acquire(
            head.lease,
            leases.Holder("b", uuid.uuid4().hex),
            _time.time(),
            30,
            clock_skew=5,
            force=True,
        )
        assert inner.replace("o/head.json", head.to_bytes(), blob.version) is not None

    store.hook = rival
    rec.obj.execute("INSERT INTO t VALUES (500, 5)")
    with pytest.raises(errors.LeaseFenced):
        rec.obj.checkpoint()
    rec.obj.close(discard=True)
    assert len([e for e in inner.list_keys("o") if "/history/" in e.key]) == 1
    with pytest.warns(RuntimeWarning, match="force takeover"):
        rec.obj = durable_obj.Namespace(store, owner="b", fold_segments=0).open("o", force=True)
    assert rows(rec.obj) == rec.states[max(rec.states)]  # the fenced insert never landed
    rec.insert()
    rec.insert(checkpoint=True)
    rec.insert()
    rec.obj.close()
    past = one_artifact_per_seq(inner)
    assert len(past.files) == 2
    assert {p.owner for p in past.points} == {"a", "b"}
    rec.check_all()


def test_aopen_at_a_past_point(tmp_path: Any) -> None:
    import asyncio

    url = str(tmp_path / "ns" / "o")
    ns = durable_obj.Namespace(str(tmp_path / "ns"))
    rec = Recorder(ns)
    seq = rec.insert()
    rec.insert()
    rec.obj.close()

    async def main() -> str:
        async with await durable_obj.aopen(url, read_only=True, at=seq) as obj:
            return str(await obj.aquery("SELECT count() FROM t", "TSV"))

    assert asyncio.run(main()) == "1\n"


def test_unreadable_archive_is_ignored_and_kept_and_missing_keys_are_not_found() -> None:
    store = MemoryStore(f"h-{uuid.uuid4().hex}")
    ns = durable_obj.Namespace(store, fold_segments=0)
    rec = Recorder(ns)
    rec.insert()  # seq 2
    rec.insert()  # seq 3
    rec.insert(checkpoint=True)  # seq 4; archives 1..3
    rec.obj.close()
    assert store.create("o/history/1-9-garbage0.json", b"{not json") is not None
    past = ops.history(store, "o")
    assert past.unreadable == ["o/history/1-9-garbage0.json"]
    assert [p.seq for p in past.restorable] == [1, 2, 3, 4]
    assert "o/history/1-9-garbage0.json" not in ops.gc(store, "o", grace=0, retention=0).deleted
    assert store.get("o/history/1-9-garbage0.json") is not None
    # a segment of the archived chain removed behind gc's back: from there on
    # the chain is not restorable (NotFound), never a half-replayed state
    rec2 = Recorder(durable_obj.Namespace(MemoryStore(f"h-{uuid.uuid4().hex}"), fold_segments=0))
    rec2.insert()
    rec2.insert()
    rec2.insert(checkpoint=True)
    rec2.obj.close()
    store2 = rec2.ns.store
    seg2 = next(p for p in ops.history(store2, "o").points if p.seq == 2)
    store2.delete(f"o/{seg2.key}")
    past2 = ops.history(store2, "o")
    assert [p.seq for p in past2.restorable] == [1, 4]
    assert not next(p for p in past2.points if p.seq == 3).available
    with pytest.raises(errors.NotFound, match="already collected"):
        rec2.ns.open("o", read_only=True, at=3)
    rec2.check_all([1, 4])


@pytest.mark.parametrize("fault", [Fault.CRASH_AFTER, Fault.CRASH_BEFORE])
def test_crash_at_the_archive_itself(fault: Fault) -> None:
    """The process dies as the archive is created (after it landed, or
    before): nothing was committed, and history is still one key per seq."""
    inner = MemoryStore(f"h-{uuid.uuid4().hex}")
    store = Scripted(inner)
    ns = durable_obj.Namespace(store, fold_segments=0)
    rec = Recorder(ns)
    rec.insert()
    store.plan = [("create", "/history/", fault)]
    with pytest.raises(SimulatedCrash):
        rec.obj.checkpoint()
    abandon(rec.obj)
    archives = [e for e in inner.list_keys("o") if "/history/" in e.key]
    assert len(archives) == (1 if fault is Fault.CRASH_AFTER else 0)
    assert ops.read_head(inner, "o").manifest.seq == 2  # the base was never committed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rec.obj = ns.open("o", force=True)
    rec.insert(checkpoint=True)
    rec.insert()
    rec.obj.close()
    past = one_artifact_per_seq(inner)
    assert len(past.files) == len(archives) + 1
    rec.check_all()
