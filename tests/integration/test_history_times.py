"""The time of a history point: an aware UTC datetime in the API, ISO 8601
text in JSON, and exactly that point when given back as `at=`, even when the
stamp (epoch seconds in the head) has more digits than a datetime holds."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

import durable_obj
import durable_obj.core.object
from durable_obj.core import history as histories
from durable_obj.core import ops
from durable_obj.stores.memory import MemoryStore
from durable_obj.wire.head import EXTENSION, Head
from tests.integration.test_history import DDL, FrozenClock

#: Sub-microsecond parts (the float grid at 1.8e9 s is ~0.24 us): the first
#: two round DOWN to a datetime, so the stamp is later than its datetime.
FRACTIONS = [4.7e-7, 2.4e-7, 9.6e-7, 0.0, 0.5]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FrozenClock]:
    c = FrozenClock()
    monkeypatch.setattr(durable_obj.core.object, "time", c)
    yield c


def commit_at_odd_times(clock: FrozenClock) -> tuple[durable_obj.Namespace, dict[int, float]]:
    """An object with one commit per time in FRACTIONS (a second apart) and
    the exact stamp of each seq."""
    ns = durable_obj.Namespace(MemoryStore(f"t-{uuid.uuid4().hex}"), owner="w", fold_segments=0)
    stamps: dict[int, float] = {}
    base = clock.now
    with ns.open("o") as obj:
        for i, fraction in enumerate(FRACTIONS):
            clock.now = base + i + fraction
            obj.execute(DDL if i == 0 else f"INSERT INTO t VALUES ({i}, {i})")
            obj.checkpoint() if i == 3 else obj.flush()
            stamps[obj.seq] = clock.now
    return ns, stamps


def test_committed_at_is_an_aware_utc_datetime(clock: FrozenClock) -> None:
    ns, stamps = commit_at_odd_times(clock)
    past = ns.history("o")
    assert [p.seq for p in past.points] == sorted(stamps)
    for p in past.points:
        assert isinstance(p.committed_at, datetime)
        assert p.committed_at.tzinfo is UTC
        assert p.committed_at == datetime.fromtimestamp(stamps[p.seq], UTC)
        assert abs(p.committed_at.timestamp() - stamps[p.seq]) <= 5e-7
    # the rounding the test is about really happens
    assert past.points[0].committed_at is not None
    assert past.points[0].committed_at.timestamp() < stamps[1]
    assert isinstance(past.cutoff, datetime) and past.cutoff.tzinfo is UTC


def test_a_points_time_given_back_as_at_names_that_point(clock: FrozenClock) -> None:
    ns, stamps = commit_at_odd_times(clock)
    clock.now += 1
    past = ns.history("o")
    # stamps later than their datetime: compared as floats, at= would miss them
    times = {p.seq: p.committed_at for p in past.points}
    assert len([s for s, t in times.items() if t and t.timestamp() < stamps[s]]) >= 2
    for p in past.points:
        assert p.committed_at is not None
        text = p.to_json()["committed_at"]
        assert isinstance(text, str) and text.endswith("+00:00"), text
        assert datetime.fromisoformat(text) == p.committed_at
        json.dumps(p.to_json())  # JSON as it is
        for at in (
            p.committed_at,
            datetime.fromisoformat(text),
            p.committed_at.astimezone(timezone(timedelta(hours=-7))),
        ):
            assert past.resolve(at).seq == p.seq, (p.seq, at)
            with ns.open("o", read_only=True, at=at) as obj:
                assert obj.seq == p.seq
        # a microsecond before is the point before
        before = past.resolve(p.committed_at - timedelta(microseconds=1)) if p.seq > 1 else None
        assert before is None or before.seq == p.seq - 1


def test_the_window_opens_at_a_datetime_and_keeps_its_edge(clock: FrozenClock) -> None:
    ns, stamps = commit_at_odd_times(clock)
    # a window opening exactly at seq 3's stamp: 3 is inside, 2 was in effect then
    now = stamps[3] + 3600.0
    assert now - 3600.0 == stamps[3]
    past = ops.history(ns.store, "o", retention=3600.0, now=now)
    assert past.cutoff == datetime.fromtimestamp(stamps[3], UTC)
    assert [p.seq for p in past.restorable] == [2, 3, 4, 5]
    # a window reaching before year 1 holds everything, and says when it opens
    huge = ops.history(ns.store, "o", retention=2.0**53 - 1, now=now)
    assert huge.cutoff == datetime.min.replace(tzinfo=UTC)
    assert [p.seq for p in huge.restorable] == [1, 2, 3, 4, 5]
    assert histories.when(past.restorable[0].committed_at).startswith(
        "committed " + datetime.fromtimestamp(stamps[2], UTC).strftime("%Y-%m-%dT%H:%M")
    )
    assert histories.when(None) == "commit time unknown"


@pytest.mark.parametrize("bad", [1e300, float("inf"), -1e12, "soon", True])
def test_a_stamp_no_datetime_holds_falls_back_to_the_store_time(
    clock: FrozenClock, bad: object
) -> None:
    ns, _ = commit_at_odd_times(clock)
    head = Head.parse(ns.store.get("o/head.json").data)  # type: ignore[union-attr]
    ref = head.manifest.wal[0]
    assert ref.model_extra is not None
    ref.model_extra[EXTENSION] = {**ref.model_extra[EXTENSION], "committed_at": bad}
    entries = ns.store.list_keys("o")
    past = histories.build("o", head, [], entries, retention=3600.0, now=clock.now)
    point = next(p for p in past.points if p.key == ref.key)
    modified = next(e.modified for e in entries if e.key == f"o/{ref.key}")
    assert point.time_source == "store"
    assert point.committed_at == histories.utc(modified)
    assert point.committed_at is not None and point.committed_at.tzinfo is UTC
