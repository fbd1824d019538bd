"""Followers (`durable_obj.core.follow`): read-only objects kept current by
the process's one heartbeat scheduler, one shared conditional read of the
head per interval, while a writer commits; and what they cost idle.

The big test runs a writer flushing FLUSHES times at random small intervals
(a checkpoint in the middle) against two followers sharing one poll, a
change-feed consumer, and a follower in another process, on a folder and on
an S3 server. A follower's view may skip seqs that landed within one interval;
what it must do is move forward only, show at every seq it reports exactly
the state committed at that seq, and reach the last one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core import follow
from durable_obj.core.feed import Change
from durable_obj.core.follow import Update
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore
from tests.integration import _proc

#: Flushes of the writer in the big test (the issue's soak: FOLLOW_FLUSHES=1000).
FLUSHES = int(os.environ.get("FOLLOW_FLUSHES", "200"))
DDL = "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"
COUNT = "SELECT count() FROM m"
#: A failure bound for waits on events, never a measure of anything.
PATIENCE = 120.0


@pytest.fixture(params=["file", "moto_s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "file":
        return str(tmp_path / "ns"), {}
    root, options = request.getfixturevalue(request.param)
    return f"{root}/follow-{uuid.uuid4().hex[:12]}", dict(options)


class Watch:
    """A follower's on_change: every update, with the view's row count read
    at that seq (on_change runs between the follower's refreshes)."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.obj: durable_obj.DurableObject | None = None
        self.seen: list[tuple[int, int]] = []
        self.updates: list[Update] = []
        self.done = threading.Event()

    def __call__(self, update: Update) -> None:
        assert self.obj is not None
        self.updates.append(update)
        self.seen.append((update.seq, int(self.obj.query(COUNT))))
        if update.seq >= self.until:
            self.done.set()

    def check(self, counts: dict[int, int]) -> None:
        seqs = [s for s, _ in self.seen]
        assert seqs == sorted(set(seqs)), "a follower moved back or reported a seq twice"
        assert seqs[-1] == self.until
        for seq, count in self.seen:
            assert count == counts[seq], f"the view at seq {seq}"
        assert [u.previous for u in self.updates[1:]] == seqs[:-1]


def test_followers_and_a_consumer_reach_every_seq_in_order(
    target: tuple[str, dict[str, Any]],
) -> None:
    with contextlib.ExitStack() as stack:
        _soak(target, stack)


def _soak(target: tuple[str, dict[str, Any]], stack: contextlib.ExitStack) -> None:
    url, options = target
    rng = random.Random(30)
    ns = durable_obj.Namespace(
        url, owner="w", storage_options=options, fold_segments=0, close_fold_segments=0
    )
    writer = stack.enter_context(ns.open("o"))
    writer.execute(DDL)
    writer.flush()
    start = writer.seq
    final = start + FLUSHES + 1  # FLUSHES flushes and one checkpoint
    watches = [Watch(final), Watch(final)]
    followers = []
    for watch in watches:  # two namespaces, one object, one interval: one poll
        fns = durable_obj.Namespace(url, storage_options=options, follow=0.02, on_change=watch)
        obj = watch.obj = stack.enter_context(fns.open("o", read_only=True))
        followers.append(obj)
    assert followers[0]._follow_poll is followers[1]._follow_poll is not None
    assert all(f.following for f in followers)

    consumed: list[Change] = []

    def consume() -> None:
        for change in ns.changes("o", since=start, poll=0.02):
            consumed.append(change)
            if change.seq >= final:
                return

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    # a follower in another process too
    params = {"url": url, "options": options, "interval": 0.02, "until": final, "query": COUNT}
    child = stack.enter_context(_proc.Script("follower", params))
    assert child.next_marked(PATIENCE) == {"ready": start}

    counts = {start: 0}
    statements = {}
    for i in range(FLUSHES):
        sql = f"INSERT INTO m VALUES ({i})"
        writer.execute(sql)
        writer.flush()
        counts[writer.seq], statements[writer.seq] = i + 1, sql
        if i == FLUSHES // 2:
            writer.checkpoint()
            counts[writer.seq] = i + 1
        if rng.random() < 0.5:
            threading.Event().wait(rng.uniform(0, 0.005))  # shape the load, prove nothing
    assert writer.seq == final
    writer.close()

    for watch in watches:
        assert watch.done.wait(PATIENCE)
        watch.check(counts)
    assert any(u.rebased for u in watches[0].updates)  # it restored the new base
    consumer.join(PATIENCE)
    assert [c.seq for c in consumed] == list(range(start + 1, final + 1))  # each once, in order
    for c in consumed:
        if c.seq in statements:
            assert c.kind == "commit" and len(c.statements) == 1
            assert statements[c.seq].split(" VALUES")[0] in c.statements[0]
            assert c.statements[0].endswith(statements[c.seq].split(" VALUES")[1])
        else:
            assert c.kind == "checkpoint" and c.statements == ()
    got = child.next_marked(PATIENCE)
    assert got["seq"] == final
    seen = [(seq, int(text)) for seq, text in got["seen"]]
    assert [s for s, _ in seen] == sorted({s for s, _ in seen}) and seen[-1][0] == final
    assert all(count == counts[seq] for seq, count in seen)
    for obj in followers:
        assert obj.seq == final and obj.query(COUNT) == f"{FLUSHES}\n"
        poll = obj._follow_poll
        obj.close()
    assert poll is not None and poll._beat() is False  # no follower left: it stops
    assert poll.key not in follow._POLLS


# -- what an idle follower costs ----------------------------------------------------


class Counting(FaultyStore):
    """Counts every call (no fault), and sets `reached` at the n-th read of the head."""

    def __init__(self, inner: MemoryStore, n: int) -> None:
        super().__init__(inner, seed=0, rate=0.0)
        self.n, self.reads = n, 0
        self.reached = threading.Event()

    def _pick(self, op: str, key: str) -> Fault | None:
        if op == "get" and key.endswith("head.json"):
            self.reads += 1
            if self.reads >= self.n:
                self.reached.set()
        return super()._pick(op, key)


def _object(ns: durable_obj.Namespace) -> None:
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")


def test_an_idle_follower_costs_one_conditional_read_per_interval_and_no_listing() -> None:
    ns = durable_obj.Namespace(MemoryStore(f"follow-{uuid.uuid4().hex}"), owner="w")
    _object(ns)
    counting = Counting(ns.store, n=6)  # type: ignore[arg-type]
    with durable_obj.Namespace(counting, follow=0.01).open("o", read_only=True) as reader:
        counting.calls.clear()
        counting.reads = 0
        assert counting.reached.wait(PATIENCE)  # the scheduler polled 6 times by itself
        calls = list(counting.calls)
        assert set(calls) == {("get_if_changed", "o/head.json")}, calls
        assert reader.seq == 1 and reader.following
    # driven one beat at a time: exactly one request per poll
    with durable_obj.Namespace(counting, follow=3600).open("o", read_only=True) as reader:
        poll = reader._follow_poll
        assert poll is not None
        counting.calls.clear()
        for _ in range(4):
            assert poll._beat() is True
        assert counting.calls == [("get_if_changed", "o/head.json")] * 4
        # a second follower of the object joins the same poll: still one read per beat
        other = durable_obj.Namespace(counting, follow=3600).open("o", read_only=True)
        assert other._follow_poll is poll
        counting.calls.clear()
        assert poll._beat() is True
        assert counting.calls == [("get_if_changed", "o/head.json")]
        with ns.open("o") as obj:
            obj.execute("INSERT INTO m VALUES (2)")
        counting.calls.clear()
        assert poll._beat() is True
        assert counting.calls[0] == ("get_if_changed", "o/head.json")
        # the one new segment, read by each follower into its own copy
        assert [op for op, _ in counting.calls[1:]] == ["get_many", "get_many"]
        assert reader.seq == 2 and reader.query(COUNT) == "2\n"
        assert other.seq == 2  # from the head the poll read: one read for both
        assert counting.calls.count(("get_if_changed", "o/head.json")) == 1
        other.close()


@pytest.mark.slow
def test_an_idle_follower_on_s3_is_one_get_answered_304(moto_s3: tuple[str, Any]) -> None:
    from tests.stores.test_conditional_get import _is_listing, _through, _upstream, s3proxy

    root, options = moto_s3
    upstream = _upstream(options)
    proxy = s3proxy.LatencyProxy(upstream, latency=0.0).start()
    try:
        url = f"{root}/idle-{uuid.uuid4().hex[:12]}"
        _object(durable_obj.Namespace(url, owner="w", storage_options=options))
        proxied = _through(options, upstream, proxy.endpoint)
        fns = durable_obj.Namespace(url, storage_options=proxied, follow=3600)
        with fns.open("o", read_only=True) as reader:
            poll = reader._follow_poll
            assert poll is not None
            poll._beat()  # the client's session is warm now
            proxy.requests.clear()
            for _ in range(3):
                assert poll._beat() is True
            seen = list(proxy.requests)
            assert [(s.method, s.status, s.body_bytes) for s in seen] == [("GET", 304, 0)] * 3
            assert all("head.json" in s.path and not _is_listing(s.path) for s in seen)
    finally:
        proxy.stop()


# -- failures, busy followers, callbacks ------------------------------------------------


def _pair(
    **follow_options: Any,
) -> tuple[durable_obj.Namespace, durable_obj.DurableObject, Any]:
    """(the writer's namespace, a follower polled only by hand, its poll)."""
    ns = durable_obj.Namespace(MemoryStore(f"follow-{uuid.uuid4().hex}"), owner="w")
    _object(ns)
    reader = durable_obj.Namespace(ns.store, follow=3600, **follow_options).open(
        "o", read_only=True
    )
    return ns, reader, reader._follow_poll


def _commit(ns: durable_obj.Namespace, value: int) -> None:
    with ns.open("o") as obj:
        obj.execute(f"INSERT INTO m VALUES ({value})")


def test_the_network_failing_is_retried_at_the_next_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ns = durable_obj.Namespace(MemoryStore(f"follow-{uuid.uuid4().hex}"), owner="w")
    _object(ns)
    flaky = FaultyStore(ns.store, seed=1, rate=1.0, faults=(Fault.ERROR,))
    flaky.enabled = False
    with durable_obj.Namespace(flaky, follow=3600).open("o", read_only=True) as reader:
        poll = reader._follow_poll
        _commit(ns, 2)
        flaky.enabled = True
        with caplog.at_level(logging.INFO, logger="durable_obj"):
            assert poll._beat() is True  # the head read fails
        assert "will retry" in caplog.text and reader.seq == 1 and reader.following
        flaky.enabled, flaky.ops = True, frozenset({"get"})  # the head reads, a segment not
        flaky.faults = (Fault.ERROR,)
        assert poll._beat() is True
        assert reader.seq == 1 and reader.following
        flaky.enabled = False
        assert poll._beat() is True
        assert reader.seq == 2 and reader.query(COUNT) == "2\n"


def test_a_corrupt_segment_stops_following_and_the_next_call_says_so() -> None:
    ns, reader, poll = _pair()
    with ns.open("o") as obj:
        obj.execute("INSERT INTO m VALUES (2)")
        key = obj.flush()
    assert key is not None
    ns.store.delete(f"o/{key}")
    ns.store.create(f"o/{key}", b'{"sql": "INSERT INTO m VALUES (9)"}\n')
    assert poll._beat() is True
    assert not reader.following and reader.seq == 1
    with pytest.raises(errors.Corrupt, match="following stopped at seq 1"):
        reader.query(COUNT)
    assert reader.query(COUNT) == "1\n"  # once; the view stays where it was
    reader.close()


def test_the_head_gone_stops_every_follower_with_not_found() -> None:
    ns, reader, poll = _pair()
    other = durable_obj.Namespace(ns.store, follow=3600).open("o", read_only=True)
    assert other._follow_poll is poll
    ns.store.delete("o/head.json")
    assert poll._beat() is False  # the poll stops with them
    for obj in (reader, other):
        assert not obj.following
        with pytest.raises(errors.NotFound, match="following stopped"):
            obj.refresh()
        obj.close()


def test_a_busy_follower_is_asked_again_never_waited_for() -> None:
    ns, reader, poll = _pair()
    _commit(ns, 2)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with reader._lock:  # a long query of the caller's
            held.set()
            release.wait(PATIENCE)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(PATIENCE)
    assert poll._beat() == "busy"
    release.set()
    t.join()
    assert poll._beat() is True and reader.seq == 2
    reader.close()


def test_on_change_errors_are_logged_and_the_follower_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[Update] = []

    def broken(update: Update) -> None:
        calls.append(update)
        raise RuntimeError("a bug in the callback")

    ns, reader, poll = _pair(on_change=broken)
    for value in (2, 3):
        _commit(ns, value)
        with caplog.at_level(logging.ERROR, logger="durable_obj"):
            assert poll._beat() is True
    assert [(u.previous, u.seq, u.rebased) for u in calls] == [(1, 2, False), (2, 3, False)]
    assert "on_change raised" in caplog.text and reader.following
    reader.close()


def test_follow_is_refused_on_a_writer_and_at_a_past_point(tmp_path: Path) -> None:
    url = str(tmp_path / "ns")
    with pytest.raises(errors.InvalidArgument, match="read_only=True to follow"):
        durable_obj.open(f"{url}/o", follow=1.0)
    ns = durable_obj.Namespace(url, owner="w")
    _object(ns)
    assert ns.store.list_keys("o")  # (the refused open above wrote nothing: no head)
    with pytest.raises(errors.InvalidArgument, match="at= do not mix"):
        durable_obj.open(f"{url}/o", read_only=True, at=1, follow=1.0)
    with pytest.raises(errors.InvalidArgument, match="follow"):
        durable_obj.open(f"{url}/o", read_only=True, follow=0)
    with durable_obj.open(f"{url}/o", read_only=True) as plain:
        assert not plain.following


def test_pool_and_aopen_pass_follow_through(tmp_path: Path) -> None:
    import asyncio

    url = str(tmp_path / "ns")
    _object(durable_obj.Namespace(url, owner="w"))
    with durable_obj.Pool(url, read_only=True, follow=3600) as pool, pool.object("o") as obj:
        assert obj.following

    async def main() -> bool:
        async with await durable_obj.aopen(f"{url}/o", read_only=True, follow=3600) as obj:
            return obj.sync.following

    assert asyncio.run(main())


def test_a_poll_behind_the_followers_own_refresh_never_moves_it_back() -> None:
    ns, reader, poll = _pair()
    stale = poll.latest  # the head at seq 1, as this poll last read it
    _commit(ns, 2)
    assert reader.refresh() is True and reader.seq == 2  # the caller's own refresh
    # a poll that read the head before that
    assert follow._step(reader, stale, time.monotonic()) is True
    assert reader.seq == 2 and reader.query(COUNT) == "2\n"
    assert poll._beat() is True and reader.seq == 2  # and the poll catches up with it
    reader.close()
