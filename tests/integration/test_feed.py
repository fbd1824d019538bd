"""The change feed (`durable_obj.core.feed`): every commit after a seq, once,
in order, across checkpoints (through history/), across a consumer's
restart, and `FeedGap` when gc collected what it would need."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core import feed, ops
from durable_obj.core.feed import Change
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore
from tests.integration.test_history import FrozenClock

DDL = "CREATE TABLE t (id UInt32) ENGINE = MergeTree ORDER BY id"
DAY = 24 * 3600.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FrozenClock]:
    c = FrozenClock()
    monkeypatch.setattr(durable_obj.core.object, "time", c)
    monkeypatch.setattr(feed, "time", c)
    yield c


class Writer:
    """A writer that remembers what each seq committed: the statement of a
    flush, or None for a checkpoint."""

    def __init__(self, ns: durable_obj.Namespace) -> None:
        self.obj = ns.open("o")
        self.obj.execute(DDL)
        self.obj.flush()
        self.log: dict[int, str | None] = {1: DDL}
        self.next = 1

    def insert(self) -> int:
        sql = f"INSERT INTO t VALUES ({self.next})"
        self.next += 1
        self.obj.execute(sql)
        self.obj.flush()
        self.log[self.obj.seq] = sql
        return self.obj.seq

    def checkpoint(self) -> int:
        self.obj.checkpoint()
        self.log[self.obj.seq] = None
        return self.obj.seq


def check(changes: list[Change], log: dict[int, str | None], since: int = 0) -> None:
    """`changes` are exactly the commits after `since`, once each, in order."""
    assert [c.seq for c in changes] == [s for s in sorted(log) if s > since]
    for c in changes:
        if log[c.seq] is None:
            assert c.kind == "checkpoint" and c.statements == () and "checkpoints/" in c.key
        else:
            assert c.kind == "commit" and len(c.statements) == 1 and "wal/" in c.key
            assert (log[c.seq] or "").split(" VALUES")[0] in c.statements[0]
        assert c.generation == 1 and c.owner == "w"
        assert c.committed_at is not None and c.committed_at.tzinfo == UTC


def test_each_commit_once_in_order_across_checkpoints_and_a_restart(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", fold_segments=0)
    w = Writer(ns)
    for i in range(12):
        w.checkpoint() if i in (4, 9) else w.insert()
    # a consumer reads 5 events, keeps the last seq, stops ("restart") ...
    first: list[Change] = []
    for change in ns.changes("o", since=0, follow=False):
        first.append(change)
        if len(first) == 5:
            break
    kept = first[-1].seq
    # ... meanwhile more commits and a checkpoint supersede what it did not read
    for i in range(4):
        w.checkpoint() if i == 1 else w.insert()
    rest = list(ns.changes("o", since=kept, follow=False))
    check(first + rest, w.log)
    assert any(c.kind == "checkpoint" for c in rest)
    # the writer object reads what is committed too, from its own seq or any
    assert list(w.obj.changes(follow=False)) == []
    check(list(w.obj.changes(since=3, follow=False)), w.log, since=3)
    w.obj.close()
    with ns.open("o", read_only=True) as reader:
        check(list(reader.changes(since=0, follow=False)), w.log)
        assert [c.seq for c in reader.changes(since=reader.seq - 1, follow=False)] == [reader.seq]


def test_a_following_feed_sees_commits_as_they_land(tmp_path: object) -> None:
    ns = durable_obj.Namespace(f"memory://feed-{uuid.uuid4().hex}", owner="w", fold_segments=3)
    w = Writer(ns)
    stream = ns.changes("o", since=w.obj.seq, poll=0.01)  # follows
    got: list[Change] = []
    for _ in range(10):
        seq = w.insert()  # folds every 3 segments: checkpoints of its own
        while not got or got[-1].seq < w.obj.seq:
            got.append(next(stream))
        assert got[-1].seq == w.obj.seq >= seq
    stream.close()  # type: ignore[attr-defined]
    w.obj.close()
    kinds = [c.kind for c in got]
    assert "checkpoint" in kinds and [c.seq for c in got] == list(range(2, got[-1].seq + 1))


def test_achanges(tmp_path: object) -> None:
    url = f"memory://afeed-{uuid.uuid4().hex}/o"

    async def main() -> list[int]:
        async with await durable_obj.aopen(url, owner="w") as writer:
            await writer.aexecute(DDL)
            await writer.aflush()
            await writer.aexecute("INSERT INTO t VALUES (1)")
            await writer.aflush()
            seqs = [c.seq async for c in writer.achanges(since=0, follow=False)]
            it = writer.achanges(poll=0.01)
            await writer.aexecute("INSERT INTO t VALUES (2)")
            await writer.aflush()
            nxt = await anext(it)
            await it.aclose()  # type: ignore[attr-defined]
            return [*seqs, nxt.seq]

    assert asyncio.run(main()) == [1, 2, 3]


def test_resuming_from_a_seq_gc_collected_is_feed_gap(ns_url: str, clock: FrozenClock) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", fold_segments=0, retention=DAY)
    w = Writer(ns)
    for i in range(6):
        w.checkpoint() if i == 2 else w.insert()  # seqs 2..7, a base at 4
        clock.now += 60
    clock.now += 2 * DAY
    for i in range(5):
        w.checkpoint() if i == 1 else w.insert()  # seqs 8..12, a base at 9
        clock.now += 60
    w.obj.close()
    # outside the window (7 is the state when it opens: the feed serves 7 on),
    # whether or not gc collected it yet: what is served never depends on gc's timing
    with pytest.raises(errors.FeedGap, match="oldest commit it can serve is seq 7") as info:
        list(ns.changes("o", since=2, follow=False))
    assert isinstance(info.value, errors.NotFound) and info.value.category == "not_found"
    assert (info.value.since, info.value.oldest) == (2, 7)
    check(list(ns.changes("o", since=6, follow=False)), w.log, since=6)
    ops.gc(ns.store, "o", grace=0, now=clock.now)
    with pytest.raises(errors.FeedGap, match="since=6"):
        list(ns.changes("o", since=1, follow=False))
    check(list(ns.changes("o", since=6, follow=False)), w.log, since=6)
    # a week on, gc leaves the head's chain only: base 9 is the oldest served
    clock.now += 7 * DAY
    ops.gc(ns.store, "o", grace=0, now=clock.now)
    with pytest.raises(errors.FeedGap) as info:
        list(ns.changes("o", since=6, follow=False))
    assert info.value.oldest == 9
    check(list(ns.changes("o", since=8, follow=False)), w.log, since=8)


def test_no_history_serves_the_head_chain_only(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", fold_segments=0, retention=0)
    w = Writer(ns)
    for i in range(5):
        w.checkpoint() if i == 2 else w.insert()  # base at 4
    w.obj.close()
    check(list(ns.changes("o", since=3, follow=False)), w.log, since=3)
    with pytest.raises(errors.FeedGap, match="oldest commit it can serve is seq 4"):
        list(ns.changes("o", since=2, follow=False))


def test_a_segment_gone_after_planning_is_a_gap_and_altered_is_corrupt() -> None:
    ns = durable_obj.Namespace(MemoryStore(f"feed-{uuid.uuid4().hex}"), owner="w")
    w = Writer(ns)
    for _ in range(3):
        w.insert()
    w.obj.close()
    head = ops.read_head(ns.store, "o")
    key = f"o/{head.manifest.wal[1].key}"
    data = ns.store.get(key)
    assert data is not None
    ns.store.delete(key)
    with pytest.raises(errors.FeedGap, match="collected by gc before"):
        list(ns.changes("o", since=0, follow=False))
    ns.store.create(key, data.data.replace(b"VALUES (1)", b"VALUES (7)"))
    with pytest.raises(errors.Corrupt, match="altered"):
        list(ns.changes("o", since=0, follow=False))


def test_bad_arguments_are_refused_before_anything_is_read(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    w = Writer(ns)
    w.obj.close()
    for bad in (-1, True, "3", 1.5):
        with pytest.raises(errors.InvalidArgument, match="since="):
            ns.changes("o", since=bad)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="poll="):
        ns.changes("o", since=0, poll=0)
    with pytest.raises(errors.InvalidArgument, match="past the newest commit"):
        list(ns.changes("o", since=5, follow=False))
    with pytest.raises(errors.NotFound):
        list(ns.changes("ghost", since=0, follow=False))


def test_an_idle_feed_costs_one_conditional_read_per_poll_and_no_listing() -> None:
    ns = durable_obj.Namespace(MemoryStore(f"feed-{uuid.uuid4().hex}"), owner="w")
    w = Writer(ns)
    for i in range(4):
        w.checkpoint() if i == 1 else w.insert()
    counting = FaultyStore(ns.store, seed=0, rate=0.0)
    source = feed.Feed(counting, "o", since=0)
    check(source.next_batch(), w.log)  # from history: one listing, here only
    assert ("list_keys", "o") in counting.calls
    counting.calls.clear()
    for _ in range(5):
        assert source.next_batch() == []
    assert counting.calls == [("get_if_changed", "o/head.json")] * 5
    w.insert()
    counting.calls.clear()
    assert [c.seq for c in source.next_batch()] == [w.obj.seq]  # the head's chain: no listing
    assert not any(op.startswith("list") for op, _ in counting.calls)
    w.obj.close()


def test_a_hole_in_an_archived_chain_names_the_oldest_seq_served_from_on() -> None:
    ns = durable_obj.Namespace(MemoryStore(f"feed-{uuid.uuid4().hex}"), owner="w", fold_segments=0)
    w = Writer(ns)
    for i in range(7):
        w.checkpoint() if i in (3, 6) else w.insert()  # seqs 2..8, bases at 5 and 8
    w.insert()
    w.obj.close()
    past = ns.history("o")
    (three,) = [p for p in past.points if p.seq == 3]
    ns.store.delete(f"o/{three.key}")  # behind gc's back: seqs 3 and 4 cannot be served
    with pytest.raises(errors.FeedGap, match="seq 3 is outside") as info:
        list(ns.changes("o", since=1, follow=False))
    assert info.value.oldest == 5  # not 1: from 5 on every seq is served
    check(list(ns.changes("o", since=4, follow=False)), w.log, since=4)


def test_an_encrypted_compressed_object_feeds_with_its_key_and_follows(tmp_path: Path) -> None:
    key = durable_obj.StaticKey(os.urandom(32))
    url = str(tmp_path / "ns")
    ns = durable_obj.Namespace(url, owner="w", fold_segments=0, encryption=key, compression="zstd")
    w = Writer(ns)
    for i in range(6):
        w.checkpoint() if i == 2 else w.insert()  # a new data key at the checkpoint
    check(list(ns.changes("o", since=0, follow=False)), w.log)  # through a sealed archive
    with pytest.raises(durable_obj.KeyRefused, match=key.key_id):
        list(durable_obj.Namespace(url).changes("o", since=0, follow=False))
    moved = threading.Event()
    reader = durable_obj.Namespace(
        url, encryption=key, follow=0.01, on_change=lambda u: moved.set()
    ).open("o", read_only=True)
    with reader:
        check(list(reader.changes(since=0, follow=False)), w.log)
        w.insert()
        assert moved.wait(60) and reader.seq == w.obj.seq
        assert reader.query("SELECT count() FROM t") == "6\n"
    w.obj.close()
