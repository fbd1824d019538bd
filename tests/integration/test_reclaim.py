"""`reclaim=`: a restarted host takes back at once only a lease its own
earlier incarnation held; every other live holder keeps `LeaseHeld`, and the
earlier incarnation is fenced at its next commit (issue 18)."""

from __future__ import annotations

import pytest

import durable_obj
from durable_obj import LeaseFenced, LeaseHeld, Namespace, Pool

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
