"""durable_obj.ray's actor logic in one process, without Ray: two
incarnations of one actor as two ObjectHosts on one namespace (issue 18).
The Ray cluster tests (test_ray.py) prove the same with real deaths."""

from __future__ import annotations

import contextlib
import pickle
import sys
import types
import zlib
from typing import Any

import pytest

from durable_obj import (
    BackendError,
    CommitAmbiguous,
    DurableError,
    EngineError,
    HostLost,
    InvalidArgument,
    LeaseFenced,
    LeaseHeld,
    MissingDependency,
    Namespace,
)
from durable_obj.ray import Hosts, ObjectHost, _ray, shard_of

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"
INSERT = "INSERT INTO t VALUES ({k:UInt32})"


def _store_down(*args: object, **kwargs: object) -> None:
    raise BackendError("the store is down (a test's fault); nothing was written")


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


def test_write_is_one_unit_with_params_and_shard_of_is_stable(
    ns_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = host(ns_url)
    try:
        assert h.write("a", [DDL, (INSERT, {"k": 5})], None, False, None) is not None
        # a statement of the unit refused: nothing of it kept, nothing to track
        with pytest.raises(DurableError) as refused:
            h.write("a", [INSERT, ("INSERT INTO missing VALUES (1)", None)], {"k": 6}, False, None)
        assert refused.value.category == "engine", refused.value
        assert not hasattr(refused.value, "session")
        # the commit failed: the unit stays buffered, whole, and the error
        # names the session holding it
        with monkeypatch.context() as patch, pytest.raises(BackendError) as failed:
            patch.setattr("durable_obj.core.publishing.commit_segment", _store_down)
            h.write("a", [(INSERT, {"k": 7}), INSERT], {"k": 8}, False, None)
        session = failed.value.session  # type: ignore[attr-defined]
        assert h.flush("a", session) is not None
    finally:
        h.shutdown()
    assert rows(ns_url, "a") == ["5", "7", "8"]
    # crc32, not hash(): the same shard in every process, whatever PYTHONHASHSEED
    assert [shard_of(f"agent-{i}", 8) for i in range(4)] == [
        zlib.crc32(f"agent-{i}".encode()) % 8 for i in range(4)
    ]


def test_a_missing_ray_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependency, match=r'pip install "durable_obj\[ray\]"'):
        _ray()


# -- Handle, over a stand-in for Ray -------------------------------------------------------


class _TaskError(Exception):
    """Ray's RayTaskError: the actor's exception, as `cause`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _ActorDied(Exception):
    """Ray's RayActorError."""


class _ActorUnavailable(_ActorDied):
    """Ray's ActorUnavailableError: the actor is restarting; the call did not run."""


class _Actor:
    """One named actor: an ObjectHost, replaced by a new incarnation on restart()."""

    def __init__(self, cls: type[ObjectHost], args: tuple[Any, ...]) -> None:
        self.cls, self.args = cls, args
        self.host = cls(*args)
        #: The next call runs on the actor, which then dies before answering.
        self.die_after_call = False
        #: This many next calls find the actor restarting and do not run.
        self.restarting_for = 0

    def restart(self) -> ObjectHost:
        """Ray restarts the actor: a new incarnation; the old one is returned."""
        old, self.host = self.host, self.cls(*self.args)
        return old

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any) -> Any:
            if self.restarting_for:
                self.restarting_for -= 1
                return _ActorUnavailable("the actor is restarting")
            try:
                # through pickle, as Ray sends arguments, results and errors
                out = getattr(self.host, method)(*pickle.loads(pickle.dumps(args)))
                result: Any = pickle.loads(pickle.dumps(out))
            except Exception as exc:
                result = _TaskError(pickle.loads(pickle.dumps(exc)))
            if self.die_after_call:
                self.die_after_call = False
                result = _ActorDied("the actor died")
            return result

        return types.SimpleNamespace(remote=call)


class _FakeRay(types.ModuleType):
    """Just enough of Ray for Hosts and Handle in one process: an actor call
    runs at once; `ray.get` returns its result or raises its error."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.exceptions = types.SimpleNamespace(
            RayTaskError=_TaskError,
            RayActorError=_ActorDied,
            ActorUnavailableError=_ActorUnavailable,
            GetTimeoutError=TimeoutError,
        )
        self.actors: list[_Actor] = []

    def remote(self, cls: type[ObjectHost]) -> Any:
        def options(**_: Any) -> Any:
            def start(*args: Any) -> _Actor:
                self.actors.append(_Actor(cls, args))
                return self.actors[-1]

            return types.SimpleNamespace(remote=start)

        return types.SimpleNamespace(options=options)

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if isinstance(ref, Exception):
            raise ref
        return ref

    def kill(self, actor: _Actor, no_restart: bool = True) -> None:
        pass


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> _FakeRay:
    ray = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    return ray


@pytest.mark.parametrize("ns_url", ["file"], indirect=True)
def test_handle_write_is_one_unit_with_params(ns_url: str, fake_ray: _FakeRay) -> None:
    hosts = Hosts(ns_url, shards=1, lease_ttl=60, idle_close=None)
    h = hosts.get("a")
    try:
        h.write(DDL)
        assert h.write((INSERT, {"k": 1}), INSERT, params={"k": 2}) is not None
        assert h.pending == 0
        # a unit refused on the actor keeps nothing of it; what this handle
        # executed before stays pending, and is the only thing flushed
        h.execute(INSERT, params={"k": 3})
        with pytest.raises(EngineError):
            h.write((INSERT, {"k": 4}), "INSERT INTO missing VALUES (5)")
        assert h.pending == 1
        h.flush()
        with pytest.raises(InvalidArgument, match="at least one statement"):
            h.write()
    finally:
        hosts.shutdown()
    assert rows(ns_url, "a") == ["1", "2", "3"]


@pytest.mark.parametrize("ns_url", ["file"], indirect=True)
def test_a_unit_whose_commit_failed_is_never_reported_committed_by_another_incarnation(
    ns_url: str, fake_ray: _FakeRay, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = Hosts(ns_url, shards=1, lease_ttl=60, idle_close=None)
    h = hosts.get("a")
    h.write(DDL)
    with monkeypatch.context() as patch, pytest.raises(BackendError):
        patch.setattr("durable_obj.core.publishing.commit_segment", _store_down)
        h.write((INSERT, {"k": 1}), (INSERT, {"k": 2}))
    assert h.pending == 2  # buffered on the actor, whole
    (actor,) = fake_ray.actors
    old = actor.restart()  # the actor died with the unit; Ray started another
    try:
        with pytest.raises(HostLost, match="another incarnation"):
            h.flush()
        assert h.pending == 0
        # the unit is written again through the handle; the actor dies just
        # after running it: whether it landed is unknown, never re-sent
        actor.die_after_call = True
        with pytest.raises(CommitAmbiguous, match="2 statement"):
            h.write((INSERT, {"k": 1}), (INSERT, {"k": 2}))
    finally:
        with contextlib.suppress(DurableError):
            old.shutdown(discard=True)
        hosts.shutdown()
    assert rows(ns_url, "a") == ["1", "2"]


@pytest.mark.parametrize("ns_url", ["file"], indirect=True)
def test_shutdown_waits_for_an_actor_ray_is_restarting(ns_url: str, fake_ray: _FakeRay) -> None:
    """An actor killed a moment before shutdown() is still restarting: its
    shutdown is asked again until it answers, and what it buffered is flushed."""
    hosts = Hosts(ns_url, shards=1, lease_ttl=60, idle_close=None, timeout=30)
    h = hosts.get("a")
    h.write(DDL)
    h.execute(INSERT, params={"k": 1})
    (actor,) = fake_ray.actors
    actor.restarting_for = 3
    hosts.shutdown()
    assert actor.restarting_for == 0
    assert rows(ns_url, "a") == ["1"]
