"""`reclaim=`: a restarted host takes back at once only a lease its own
earlier incarnation held; every other live holder keeps `LeaseHeld`, and the
earlier incarnation is fenced at its next commit (issue 18)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

import durable_obj
from durable_obj import InvalidArgument, LeaseFenced, LeaseHeld, Namespace, Pool
from tests.integration import _proc

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"


def _earlier_self(owner: str) -> bool:
    return owner.startswith("host-a#")


def test_reclaim_takes_an_earlier_self_at_once_and_fences_it(ns_url: str) -> None:
    old = Namespace(ns_url, owner="host-a#1", lease_ttl=60).open("o")
    old.execute(DDL)
    old.execute("INSERT INTO t VALUES (1)")
    old.flush()
    old.execute("INSERT INTO t VALUES (2)")  # buffered in the old incarnation
    new = Namespace(ns_url, owner="host-a#2", lease_ttl=60).open("o", reclaim=_earlier_self)
    try:
        assert new.generation == old.generation + 1
        assert new.query("SELECT k FROM t ORDER BY k", "CSV").strip() == "1"
        with pytest.raises(LeaseFenced):
            old.flush()  # the zombie's commit is refused by the head's CAS
        new.execute("INSERT INTO t VALUES (3)")
        new.flush()
    finally:
        old.close(discard=True)
        new.close()
    with durable_obj.Namespace(ns_url).open("o", read_only=True) as obj:
        assert obj.query("SELECT k FROM t ORDER BY k", "CSV").split() == ["1", "3"]


def test_reclaim_never_takes_another_owner_nor_a_namesake(ns_url: str) -> None:
    holder = Namespace(ns_url, owner="someone-else", lease_ttl=60).open("o")
    try:
        with pytest.raises(LeaseHeld):
            Namespace(ns_url, owner="host-a#2").open("o", reclaim=_earlier_self)
    finally:
        holder.close()
    # the same owner name with another instance may be a live namesake: refused
    twin = Namespace(ns_url, owner="host-a#1", lease_ttl=60).open("o")
    try:
        with pytest.raises(LeaseHeld):
            Namespace(ns_url, owner="host-a#1").open("o", reclaim=lambda _: True)
    finally:
        twin.close()


def test_pool_reclaims_with_its_predicate(ns_url: str) -> None:
    old = Namespace(ns_url, owner="host-a#1", lease_ttl=60).open("o")
    old.execute(DDL)
    old.flush()
    with Pool(ns_url, owner="host-a#2", reclaim=_earlier_self, lease_ttl=60) as pool:
        with pool.object("o") as obj:
            obj.execute("INSERT INTO t VALUES (7)")
            obj.flush()
        with pytest.raises(LeaseFenced):
            old.execute("INSERT INTO t VALUES (8)")
            old.flush()
    old.close(discard=True)


# -- reclaim=True: the owner name is the writer's identity (issue 27) ---------------------


def _takeover_records(caplog: pytest.LogCaptureFixture, previous: str) -> list[logging.LogRecord]:
    """The log records that speak of taking a lease from `previous`."""
    return [
        r
        for r in caplog.records
        if r.name == "durable_obj"
        and "took the lease" in r.getMessage()
        and previous in r.getMessage()
    ]


def _rows(ns_url: str) -> list[str]:
    """What the store holds now, read back by a fresh read-only open."""
    with Namespace(ns_url).open("o", read_only=True) as obj:
        return obj.query("SELECT k FROM t ORDER BY k", "CSV").split()


def test_reclaim_true_takes_its_own_name_at_once_and_fences_the_old_process(
    ns_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    old = Namespace(ns_url, owner="svc", lease_ttl=60).open("o")
    old.execute(DDL)
    old.execute("INSERT INTO t VALUES (1)")
    old.flush()
    old.execute("INSERT INTO t VALUES (2)")  # buffered in the old process
    # Without reclaim the same name still waits: the lease is live for ~65 s.
    with pytest.raises(LeaseHeld, match="reclaim=True") as held:
        Namespace(ns_url, owner="svc").open("o")
    assert held.value.holder == "svc" and held.value.wait is not None and held.value.wait > 30
    with caplog.at_level(logging.DEBUG, logger="durable_obj"):
        new = Namespace(ns_url, owner="svc", lease_ttl=60).open("o", reclaim=True)
    try:
        assert new.generation == old.generation + 1
        records = _takeover_records(caplog, "'svc'")
        assert len(records) == 1 and records[0].levelno == logging.WARNING, caplog.text
        assert "fenced at its next commit" in records[0].getMessage()
        with pytest.raises(LeaseFenced):
            old.flush()  # the old process's commit is refused by the head's CAS
        with pytest.raises(LeaseFenced):
            old.execute("INSERT INTO t VALUES (4)")  # and it never writes again
        new.execute("INSERT INTO t VALUES (3)")
        new.flush()
    finally:
        old.close(discard=True)
        new.close()
    assert _rows(ns_url) == ["1", "3"]  # nothing of the old process after the takeover


def test_reclaim_true_never_takes_another_owner(ns_url: str) -> None:
    holder = Namespace(ns_url, owner="svc-a", lease_ttl=60).open("o")
    try:
        generation = holder.generation
        for opener in (
            lambda: Namespace(ns_url, owner="svc-b").open("o", reclaim=True),
            lambda: Namespace(ns_url, owner="svc-b", reclaim=True).open("o"),
            lambda: durable_obj.open(f"{ns_url}/o", owner="svc-b", reclaim=True),
        ):
            with pytest.raises(LeaseHeld) as held:
                opener()
            message = str(held.value)
            assert "'svc-a'" in message and "succeeds in" in message
            assert "reclaim=True takes only a lease held under this writer's own" in message
            assert held.value.holder == "svc-a"
        holder.execute(DDL)
        holder.flush()  # untouched: still the writer, at its generation
        assert holder.generation == generation
    finally:
        holder.close()


def test_reclaim_true_needs_an_owner(ns_url: str) -> None:
    for attempt in (
        lambda: durable_obj.open(f"{ns_url}/o", reclaim=True),
        lambda: Namespace(ns_url).open("o", reclaim=True),
        lambda: Namespace(ns_url, reclaim=True),
        lambda: Pool(ns_url, reclaim=True),
        lambda: Namespace(ns_url, owner="").open("o", reclaim=True),
    ):
        with pytest.raises(InvalidArgument, match=r"no owner= was given.*Nothing was opened"):
            attempt()
    with pytest.raises(InvalidArgument, match="True, False or a callable"):
        Namespace(ns_url, owner="svc").open("o", reclaim="yes")  # type: ignore[arg-type]
    assert Namespace(ns_url).list() == []  # nothing was created


def test_reclaim_true_on_the_namespace_the_pool_and_aopen(ns_url: str) -> None:
    """Each restart leaves its lease live behind it (a crash: `_abandon`),
    and the next one, under the same name, takes it at once."""
    first = Namespace(ns_url, owner="svc", lease_ttl=60).open("o")
    first.execute(DDL)
    first.flush()
    first._abandon()
    generation = first.generation

    obj = Namespace(ns_url, owner="svc", reclaim=True, lease_ttl=60).open("o")
    obj.execute("INSERT INTO t VALUES (1)")
    obj.flush()
    obj._abandon()

    async def restart() -> int:
        url = f"{ns_url}/o"
        aobj = await durable_obj.aopen(url, owner="svc", reclaim=True, lease_ttl=60)
        await aobj.aexecute("INSERT INTO t VALUES (2)")
        await aobj.aflush()
        aobj.sync._abandon()
        return aobj.sync.generation

    assert asyncio.run(restart()) == generation + 2

    with Pool(ns_url, owner="svc", reclaim=True, lease_ttl=60) as pool, pool.object("o") as obj:
        obj.execute("INSERT INTO t VALUES (3)")
        obj.flush()
        assert obj.generation == generation + 3
    assert _rows(ns_url) == ["1", "2", "3"]


def test_one_log_record_per_takeover(ns_url: str, caplog: pytest.LogCaptureFixture) -> None:
    oids = ["a", "b", "c"]
    for oid in oids:
        Namespace(ns_url, owner=f"gone-{oid}", lease_ttl=60).open(oid)._abandon()
    ns = Namespace(ns_url, owner="ops", lease_ttl=60)
    with (
        caplog.at_level(logging.DEBUG, logger="durable_obj"),
        pytest.warns(RuntimeWarning, match="force takeover") as warned,
    ):
        for oid in oids:
            ns.open(oid, force=True).close()
    assert len(warned) == len(oids)  # what a caller sees: one warning per takeover
    for oid in oids:
        records = _takeover_records(caplog, f"'gone-{oid}'")
        assert len(records) == 1, (
            caplog.text
        )  # and one log record, at INFO: not the same line twice
        assert records[0].levelno == logging.INFO and "by force" in records[0].getMessage()


@pytest.mark.slow
def test_a_restarted_process_reclaims_at_once_and_its_stopped_twin_is_fenced(
    tmp_path: Path,
) -> None:
    """A child writes as "svc" and is frozen (SIGSTOP: alive, holding a live
    60 s lease, like a process a supervisor gave up on). This process opens
    as "svc" with reclaim=True and serves at once; the child, thawed, cannot
    commit anything more."""
    url = str(tmp_path / "ns")
    with _proc.Worker() as child:
        child.open(url, "o", owner="svc", lease_ttl=60)
        child.execute(DDL)
        child.execute("INSERT INTO t VALUES (1)")
        child.flush()
        os.kill(child.pid, signal.SIGSTOP)
        try:
            # Not waiting: without reclaim the live lease is refused outright.
            with pytest.raises(LeaseHeld, match="reclaim=True"):
                Namespace(url, owner="svc", lease_ttl=60).open("o")
            new = Namespace(url, owner="svc", lease_ttl=60).open("o", reclaim=True)
            try:
                new.execute("INSERT INTO t VALUES (3)")
                new.flush()
            finally:
                new.close()
        finally:
            os.kill(child.pid, signal.SIGCONT)
        after = [
            child.request("execute", sql="INSERT INTO t VALUES (2)"),
            child.request("flush"),
        ]
        assert not after[-1]["ok"], after  # the thawed twin's flush never lands
        assert all(r["category"] == "lease_fenced" for r in after if not r["ok"]), after
        assert child.info()["fenced"] is True
    assert _rows(url) == ["1", "3"]
