"""`Hosts`: the driver's view of the actors of one namespace (which shard
hosts an object, the named actor of each shard, created on first use) and
the handles on its objects."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from durable_obj import Namespace
from durable_obj.errors import InvalidArgument
from durable_obj.ray.handle import Handle
from durable_obj.ray.host import (
    DEFAULT_CONCURRENCY,
    DEFAULT_SHARDS,
    RAY_NAMESPACE,
    ObjectHost,
    _ray,
    shard_of,
)

#: Seconds shutdown() waits for an actor Ray is restarting, when no timeout is set.
RESTART_WAIT = 60.0


class Hosts:
    """Durable objects of one namespace, hosted in Ray actors.

    `namespace_url`: the namespace (any store URL; every Ray node must reach
    it with `storage_options`). `shards`: named actors the objects are hashed
    onto (one actor per object when it is at least the number of objects).
    `name`: prefix of the actor names (`<name>-<i>`), unique per namespace in
    one Ray cluster. `owner`: prefix of every lease owner name.
    `max_restarts`: Ray restarts of an actor (-1: forever). `max_open`,
    `idle_close`: each actor's Pool. `actor_options`: more Ray actor options
    (num_cpus, memory, resources, scheduling_strategy, runtime_env).
    `timeout`: seconds a call waits for its answer (None: no limit; when it
    passes, `Timeout`: the call may still run). `**options`: object options
    (lease_ttl, commit_deadline, ...), as for `durable_obj.open`.

    The actors are detached: they outlive the driver; `shutdown()` flushes,
    closes and ends them. `ray.init()` is the caller's.
    """

    def __init__(
        self,
        namespace_url: str,
        *,
        shards: int = DEFAULT_SHARDS,
        name: str = "durable_obj",
        owner: str = "durable_obj.ray",
        storage_options: dict[str, Any] | None = None,
        max_restarts: int = -1,
        max_concurrency: int = DEFAULT_CONCURRENCY,
        max_open: int | None = None,
        idle_close: float | None = 300.0,
        actor_options: dict[str, Any] | None = None,
        host_class: type[ObjectHost] = ObjectHost,
        timeout: float | None = None,
        **options: Any,
    ) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise InvalidArgument(f"shards must be an int >= 1, not {shards!r}")
        if not isinstance(namespace_url, str) or not namespace_url:
            raise InvalidArgument("Hosts needs a namespace URL (every Ray node opens it)")
        Namespace(namespace_url, storage_options=storage_options, **options)  # check early
        self.url = namespace_url
        self.shards = shards
        self.name = name
        self.timeout = timeout
        pool_options: dict[str, Any] = {"idle_close": idle_close, **options}
        if max_open is not None:
            pool_options["max_open"] = max_open
        self._args = (namespace_url, owner, storage_options, pool_options)
        self._actor_options = {
            "namespace": RAY_NAMESPACE,
            "lifetime": "detached",
            "max_restarts": max_restarts,
            "max_task_retries": 0,  # at most once: a call is never re-sent by Ray
            "max_concurrency": max_concurrency,
            "get_if_exists": True,
            **(actor_options or {}),
        }
        self._host_class = host_class
        self._cls: Any = None
        self._actors: dict[int, Any] = {}
        self._lock = threading.Lock()

    def actor_name(self, oid: str) -> str:
        return f"{self.name}-{shard_of(oid, self.shards)}"

    def actor(self, oid: str) -> Any:
        """The Ray actor handle of the shard hosting `oid` (created if absent)."""
        return self.actor_by_index(shard_of(oid, self.shards))

    def actor_by_index(self, index: int) -> Any:
        """The Ray actor handle of shard `index`: the named actor, created if
        absent (`get_if_exists`: every driver reaches the same one)."""
        with self._lock:
            actor = self._actors.get(index)
            if actor is None:
                if self._cls is None:
                    self._cls = _ray().remote(self._host_class)
                name = f"{self.name}-{index}"
                namespace_url, owner, storage_options, pool_options = self._args
                actor = self._cls.options(name=name, **self._actor_options).remote(
                    namespace_url, name, owner, storage_options, pool_options
                )
                self._actors[index] = actor
            return actor

    def get(self, url_or_id: str) -> Handle:
        """A handle on the object (an id, or an object URL in this namespace)."""
        oid = url_or_id
        if "/" in url_or_id:
            namespace, _, oid = url_or_id.rstrip("/").rpartition("/")
            if namespace.rstrip("/") != self.url.rstrip("/"):
                raise InvalidArgument(
                    f"{url_or_id!r} is not in this Hosts' namespace {self.url!r}; "
                    "make a Hosts for that namespace"
                )
        if not oid:
            raise InvalidArgument(f"{url_or_id!r} names no object")
        return Handle(self, oid)

    def stats(self) -> list[dict[str, Any]]:
        """`ObjectHost.stats()` of every shard's actor (started if absent)."""
        ray = _ray()
        actors = [self.actor_by_index(i) for i in range(self.shards)]
        return list(ray.get([a.stats.remote() for a in actors], timeout=self.timeout))

    def _shutdown_one(self, actor: Any, discard: bool) -> None:
        """One actor's shutdown; an actor Ray is still restarting (killed a
        moment ago) is waited for (up to the timeout, or RESTART_WAIT s
        without one) and then asked."""
        ray = _ray()
        deadline = time.monotonic() + (RESTART_WAIT if self.timeout is None else self.timeout)
        while True:
            try:
                ray.get(actor.shutdown.remote(discard), timeout=self.timeout)
                return
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def shutdown(self, *, discard: bool = False) -> None:
        """Flush and close every object of every started actor (releasing
        the leases), then end the actors. The first error is raised after
        every actor was ended."""
        ray = _ray()
        with self._lock:
            actors, self._actors = dict(self._actors), {}
        first: BaseException | None = None
        for actor in actors.values():
            try:
                self._shutdown_one(actor, discard)
            except Exception as exc:  # Ray's errors, or ours through it
                first = first or exc
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if first is not None:
            raise first
