"""durable_obj.ray's actor logic in one process, without Ray: two
incarnations of one actor as two ObjectHosts on one namespace (issue 18).
The Ray cluster tests (test_ray.py) prove the same with real deaths."""

from __future__ import annotations

import sys
import zlib

import pytest

from durable_obj import HostLost, LeaseFenced, LeaseHeld, MissingDependency, Namespace
from durable_obj.ray import ObjectHost, _ray, shard_of

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"


def host(url: str, name: str = "h-0", owner: str = "svc") -> ObjectHost:
    return ObjectHost(url, name, owner, None, {"lease_ttl": 60, "idle_close": None})


def rows(url: str, oid: str) -> list[str]:
    with Namespace(url).open(oid, read_only=True) as obj:
        return obj.query("SELECT k FROM t ORDER BY k", "CSV").split()


def test_a_restarted_incarnation_takes_over_before_serving_and_fences_the_old(
    ns_url: str,
) -> None:
    old = host(ns_url)
    s = old.execute("a", DDL, None, False, None)
    old.flush("a", s)
    s = old.execute("b", DDL, None, False, None)
    old.flush("b", s)
    zombie_session = old.execute("a", "INSERT INTO t VALUES (1)", None, False, None)
    new = host(ns_url)  # Ray restarted it: the old one still runs (a zombie)
    try:
        assert sorted(new.reclaimed) == ["a", "b"]
        assert new.incarnation > old.incarnation
        # the zombie's flush is fenced, and then it refuses everything
        with pytest.raises(LeaseFenced, match="Call again through the handle"):
            old.flush("a", zombie_session)
        assert old.superseded == new.owner
        with pytest.raises(LeaseFenced, match="superseded"):
            old.query("b", "SELECT 1", "CSV", None)
        # the caller's statement executed on the zombie is not flushed by the new one
        with pytest.raises(HostLost):
            new.flush("a", zombie_session)
        s = new.execute("a", "INSERT INTO t VALUES (2)", None, False, None)
        assert new.flush("a", s) is not None
    finally:
        old.shutdown(discard=True)
        new.shutdown()
    assert rows(ns_url, "a") == ["2"]


def test_an_older_incarnation_never_takes_back_from_a_newer_one(ns_url: str) -> None:
    first = host(ns_url)
    second = host(ns_url)
    try:
        s = second.execute("a", DDL, None, False, None)
        second.flush("a", s)
        with pytest.raises(LeaseFenced, match="Call again through the handle"):
            first.execute("a", "INSERT INTO t VALUES (9)", None, False, None)
        assert first.superseded == second.owner
        # another actor's name is another owner: the normal LeaseHeld rule
        other = host(ns_url, name="h-1")
        with pytest.raises(LeaseHeld):
            other.execute("a", "INSERT INTO t VALUES (9)", None, False, None)
        other.shutdown()
    finally:
        first.shutdown(discard=True)
        second.shutdown()


def test_write_is_one_call_and_shard_of_is_stable(ns_url: str) -> None:
    h = host(ns_url)
    try:
        h.write("a", [(DDL, None), ("INSERT INTO t VALUES ({k:UInt32})", {"k": 5})], None)
    finally:
        h.shutdown()
    assert rows(ns_url, "a") == ["5"]
    # crc32, not hash(): the same shard in every process, whatever PYTHONHASHSEED
    assert [shard_of(f"agent-{i}", 8) for i in range(4)] == [
        zlib.crc32(f"agent-{i}".encode()) % 8 for i in range(4)
    ]


def test_a_missing_ray_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependency, match=r'pip install "durable_obj\[ray\]"'):
        _ray()
