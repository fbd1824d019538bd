"""TTL as logged, pinned deletes (`durable_obj.core.expiry`): the policy API
and its errors, what a sweep logs and when it commits, the background
sweep's tick, and that no replica expires a row on its own.

The writer's wall clock is frozen (`obj._w.clock`), so no test sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time as _time
from datetime import UTC, datetime, timedelta

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core.expiry import MAX_SECONDS, POLICY_TABLE, TtlPolicy, cutoff_literal
from durable_obj.core.heartbeat import BUSY

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
DDL = (
    "CREATE TABLE ev (id UInt32, ts DateTime64(3, 'UTC'), n Nullable(DateTime), d Date) "
    "ENGINE = MergeTree ORDER BY id"
)


class FrozenClock:
    """The writer's `time` module with a wall clock moved only by the test."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    monotonic = staticmethod(_time.monotonic)
    sleep = staticmethod(_time.sleep)


def at(seconds_ago: float) -> str:
    """A DateTime64(3) literal `seconds_ago` before NOW."""
    when = datetime.fromtimestamp(NOW - seconds_ago, UTC)
    return "'" + when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "'"


def ids(obj: durable_obj.DurableObject, table: str = "ev") -> list[int]:
    return [int(r[0]) for r in obj.rows(f"SELECT id FROM {table} ORDER BY id")]


@pytest.fixture
def obj(ns_url: str) -> durable_obj.DurableObject:
    o = durable_obj.open(f"{ns_url}/o", owner="w", ttl_sweep_interval=0)
    o._w.clock = FrozenClock()
    o.execute(DDL)
    o.execute(
        f"INSERT INTO ev VALUES (1, {at(7200)}, NULL, '2000-01-01'), "
        f"(2, {at(1800)}, NULL, '2000-01-01'), (3, {at(10)}, NULL, '2000-01-01')"
    )
    o.flush()
    yield o
    if not o.closed:
        o.close(discard=True)


def test_a_sweep_deletes_what_the_policy_expires_and_logs_a_literal_cutoff(
    obj: durable_obj.DurableObject,
) -> None:
    obj.set_ttl("ev", "ts", 3600)
    assert obj.ttl() == [TtlPolicy("ev", "ts", 3600.0)]
    seq = obj.seq
    assert obj.sweep_ttl() == 1
    assert ids(obj) == [2, 3]
    assert obj.seq == seq + 1 and obj.pending == 0  # alone: committed at once
    (change,) = list(obj.changes(since=seq, follow=False))
    assert change.statements == (
        "DELETE FROM `ev` WHERE `ts` < toDateTime64('2027-01-15 07:00:00.000000', 6, 'UTC')",
    )
    assert obj.sweep_ttl() == 0 and obj.seq == seq + 1  # nothing expired: nothing logged
    obj._w.clock.now += 1800.5
    assert obj.sweep_ttl() == 1 and ids(obj) == [3]


def test_the_cutoff_is_exact_to_the_microsecond_and_null_never_expires(
    obj: durable_obj.DurableObject,
) -> None:
    assert cutoff_literal(NOW + 0.5, 0.25) == (
        "toDateTime64('2027-01-15 08:00:00.250000', 6, 'UTC')"
    )
    assert cutoff_literal(NOW, MAX_SECONDS) is None  # before 1900: nothing expires
    obj.execute(f"INSERT INTO ev VALUES (4, {at(0)}, '2020-01-01 00:00:00', '2000-01-01')")
    obj.set_ttl("ev", "n", timedelta(days=1))
    assert obj.sweep_ttl() == 1  # rows 1-3 have n NULL: kept
    assert ids(obj) == [1, 2, 3]
    obj.set_ttl("ev", "d", 86400)  # replaces the policy of ev
    assert obj.ttl() == [TtlPolicy("ev", "d", 86400.0)]
    assert obj.sweep_ttl() == 3 and ids(obj) == []


def test_set_ttl_refuses_what_cannot_expire(obj: durable_obj.DurableObject) -> None:
    obj.execute("CREATE TABLE mem (ts DateTime) ENGINE = Memory")
    obj.execute(
        "CREATE TABLE al (id UInt32, ts DateTime ALIAS toDateTime(id)) "
        "ENGINE = MergeTree ORDER BY id"
    )
    obj.flush()
    seq = obj.seq
    cases = [
        (("nope", "ts", 1), "no table 'nope'"),
        (("al", "ts", 1), "is an ALIAS, computed when read"),
        (("ev", "nope", 1), "no column 'nope'"),
        (("ev", "id", 1), "UInt32; a TTL needs a Date"),
        (("mem", "ts", 1), "MergeTree-family"),
        (("", "ts", 1), "table must be a non-empty string"),
        (("ev", "", 1), "column must be a non-empty string"),
        ((POLICY_TABLE, "tbl", 1), "holds the policies"),
        (("ev", "ts", 0), "over 0"),
        (("ev", "ts", -5), "over 0"),
        (("ev", "ts", float("nan")), "over 0"),
        (("ev", "ts", float("inf")), "over 0"),
        (("ev", "ts", MAX_SECONDS * 2), "at most"),
        (("ev", "ts", True), "not bool"),
        (("ev", "ts", "60"), "not str"),
    ]
    for args, message in cases:
        with pytest.raises(errors.InvalidArgument, match=message):
            obj.set_ttl(*args)  # type: ignore[arg-type]
    assert obj.seq == seq and obj.pending == 0 and obj.ttl() == []
    with pytest.raises(errors.InvalidArgument, match="non-empty"):
        obj.remove_ttl("")
    assert obj.remove_ttl("ev") is None  # no policy: nothing written
    assert obj.seq == seq


def test_a_name_is_quoted_never_spliced(obj: durable_obj.DurableObject) -> None:
    name = "we'ird; DROP TABLE ev --"
    obj.execute(f"CREATE TABLE `{name}` (`t s` DateTime) ENGINE = MergeTree ORDER BY tuple()")
    obj.execute(f"INSERT INTO `{name}` VALUES ({at(100)})")
    obj.set_ttl(name, "t s", 50)
    assert obj.sweep_ttl() == 1
    assert ids(obj) == [1, 2, 3]
    assert obj.ttl() == [TtlPolicy(name, "t s", 50.0)]


def test_the_policy_replicates_and_no_replica_expires_on_its_own(
    ns_url: str, obj: durable_obj.DurableObject
) -> None:
    obj.set_ttl("ev", "ts", 3600)
    assert obj.sweep_ttl() == 1
    obj._w.clock.now += 7200  # rows 2 and 3 are now expired, but no sweep logged it
    seq = obj.seq
    reader = durable_obj.open(f"{ns_url}/o", read_only=True)
    fork = durable_obj.fork(f"{ns_url}/o", f"{ns_url}/f")
    assert fork.seq >= 1
    with reader, durable_obj.open(f"{ns_url}/f", read_only=True) as copy:
        for replica in (reader, copy):
            assert ids(replica) == [2, 3]
            assert replica.ttl() == [TtlPolicy("ev", "ts", 3600.0)]
        assert reader.seq == seq
        with pytest.raises(errors.ClassificationRefused, match="read-only"):
            reader.sweep_ttl()
        assert reader._ttl_hb is None  # a reader never sweeps
        assert obj.sweep_ttl() == 2
        assert reader.refresh() and ids(reader) == [] and reader.seq == obj.seq
    obj.close()
    with durable_obj.open(f"{ns_url}/o", owner="another") as later:
        assert later.ttl() == [TtlPolicy("ev", "ts", 3600.0)]  # every later writer applies it
        assert later._ttl_hb is not None


def test_a_sweep_never_commits_a_callers_statements(obj: durable_obj.DurableObject) -> None:
    obj.set_ttl("ev", "ts", 3600)
    obj.execute(f"INSERT INTO ev VALUES (9, {at(0)}, NULL, '2000-01-01')")
    seq = obj.seq
    assert obj.sweep_ttl() == 1
    assert obj.seq == seq and obj.pending == 2  # the deletes wait with the caller's insert
    obj.flush()
    assert obj.seq == seq + 1 and ids(obj) == [2, 3, 9]


def test_sweeps_and_policy_changes_stay_out_of_transactions(
    obj: durable_obj.DurableObject,
) -> None:
    obj.set_ttl("ev", "ts", 3600)
    with obj.transaction() as tx:
        for call in (
            obj.sweep_ttl,
            lambda: obj.set_ttl("ev", "ts", 1),
            lambda: obj.remove_ttl("ev"),
        ):
            with pytest.raises(errors.InvalidArgument, match="inside a transaction"):
                call()
        assert obj._sweep_tick() == BUSY  # the background sweep waits its turn
        tx.execute(f"INSERT INTO ev VALUES (9, {at(0)}, NULL, '2000-01-01')")
    assert obj._sweep_tick() is True
    assert ids(obj) == [2, 3, 9]


def test_the_background_tick_never_waits_never_raises(
    obj: durable_obj.DurableObject, caplog: pytest.LogCaptureFixture
) -> None:
    obj.set_ttl("ev", "ts", 3600)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with obj._lock:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        assert obj._sweep_tick() == BUSY
    finally:
        release.set()
        t.join()
    obj.execute("DROP TABLE ev")  # the policy is stale: skipped, with a warning
    obj.flush()
    with caplog.at_level(logging.WARNING, logger="durable_obj"):
        assert obj._sweep_tick() is True
    assert "TTL policy of 'ev' skipped: there is no table 'ev'" in caplog.text

    def boom() -> int:
        raise errors.BackendError("the store is down")

    obj._sweep_locked = boom  # type: ignore[method-assign]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="durable_obj"):
        assert obj._sweep_tick() is True
    assert "TTL sweep failed, will retry: the store is down" in caplog.text
    obj.close()
    assert obj._sweep_tick() is False and obj._ttl_hb is None


def test_the_sweeper_runs_only_for_a_writer_with_an_interval(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as w:
        hb = w._ttl_hb
        assert hb is not None and hb._interval == 60.0
    assert w._ttl_hb is None and hb._stopped
    with durable_obj.open(f"{ns_url}/o", ttl_sweep_interval=None) as w:
        assert w._ttl_hb is None
    with durable_obj.open(f"{ns_url}/o", ttl_sweep_interval=5) as w:
        assert w._ttl_hb is not None and w._ttl_hb._interval == 5
    with pytest.raises(errors.InvalidArgument, match="ttl_sweep_interval"):
        durable_obj.open(f"{ns_url}/o", ttl_sweep_interval=-1)


def test_the_gate_points_a_table_ttl_to_set_ttl(obj: durable_obj.DurableObject) -> None:
    with pytest.raises(errors.Nondeterministic, match=r"obj\.set_ttl\(table, column, seconds\)"):
        obj.execute("ALTER TABLE ev MODIFY TTL toDateTime(ts) + INTERVAL 1 DAY")


def test_the_async_face(ns_url: str) -> None:
    async def main() -> None:
        async with await durable_obj.aopen(f"{ns_url}/a", ttl_sweep_interval=0) as a:
            a.sync._w.clock = FrozenClock()
            await a.awrite(DDL, f"INSERT INTO ev VALUES (1, {at(7200)}, NULL, '2000-01-01')")
            assert await a.aset_ttl("ev", "ts", 60) is not None
            assert await a.attl() == [TtlPolicy("ev", "ts", 60.0)]
            assert await a.asweep_ttl() == 1
            assert await a.aremove_ttl("ev") is not None
            assert await a.attl() == []
            with pytest.raises(errors.InvalidArgument):
                await a.aset_ttl("ev", "id", 60)

    asyncio.run(main())
