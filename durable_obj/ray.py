"""durable_obj.ray: durable objects hosted in Ray actors, addressed by id,
fenced by our lease (issue 18). Needs the `ray` extra.

    import ray
    from durable_obj.ray import Hosts

    ray.init(address="auto")
    hosts = Hosts("s3://bucket/agents", shards=8, lease_ttl=30)
    h = hosts.get("user-42")               # or "s3://bucket/agents/user-42"
    h.execute("INSERT INTO memories VALUES (...)")
    h.flush()                              # durable on return, wherever it ran
    print(h.query("SELECT count() FROM memories"))

What Ray does: placement (which machine hosts an actor), routing (a handle
reaches the actor wherever it lives) and failure detection (a dead worker or
node is noticed and its actors are restarted elsewhere). What durable_obj
does: the state, in object storage, and one writer per object.

Layout: objects are hashed (crc32 of the id) onto `shards` named, detached
actors; each holds a `durable_obj.Pool` of the objects it serves (opened on
first use, lease kept while cached, flushed and closed when idle or beyond
`max_open`). One actor per object would cost a process (and a chDB engine)
per object; a shard serves many objects from one engine, as the Pool does in
a single process. Pass `shards=` to choose (the benchmark measures both).

Failure handling:

* Each start of an actor is an *incarnation* with its own lease owner name,
  `<owner>/<actor name>#<start time><random>`. A restarted actor (Ray saw its
  worker or node die) takes back at once, with `reclaim=`, the leases an
  earlier incarnation of the same actor held, instead of waiting for them to
  expire: the owner changes, so the generation moves and the earlier
  incarnation is fenced by the head's compare-and-swap at its next commit.
  Every other holder keeps the normal `LeaseHeld` rule.
* Before it serves, a new incarnation takes over every object an earlier
  incarnation of it still holds, so a zombie (an actor whose node Ray
  declared dead, still running) cannot commit to any of them afterwards:
  its next flush, heartbeat or close fails with `LeaseFenced`. An actor that
  finds itself superseded refuses every later call with `LeaseFenced`.
* Every acknowledged flush is in storage (the durability boundary does not
  move); statements executed but not flushed die with their actor, as they
  die with a process. The handle knows which incarnation holds its
  unflushed statements, and never lets a flush on a new incarnation report
  them as committed:

  - `execute()` whose actor died, or that finds its earlier statements lost,
    raises `HostLost` and runs nothing again (at most once): execute them
    again through the same handle (it reaches the new actor), then flush.
  - `flush()` whose actor died during the call, with statements of this
    handle pending, is `CommitAmbiguous` (they may have been committed just
    before the death): read back, then execute what is missing again. With
    nothing pending it is retried once.
  - `query()` is retried once: a read is safe to repeat.
  - a call that reached a superseded incarnation raises `LeaseFenced`;
    call again through the handle.

Configure: `ray.init()` / `ray start` (node addresses: pin each node with
`--node-ip-address`), the namespace URL and its storage_options, `shards`,
`lease_ttl` (it bounds how long a crashed writer blocks anyone *else*, not a
restarted actor), `idle_close` and `max_open` per actor, and `actor_options`
(num_cpus, memory, resources, scheduling_strategy). Cross-object analytics
do not go through the actors: export the namespace to Parquet
(`Namespace.export`) and read it with ClickHouse, DuckDB or Spark.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from durable_obj import DurableObject, Namespace, Pool, Result
from durable_obj.errors import (
    CommitAmbiguous,
    DurableError,
    HostLost,
    InvalidArgument,
    LeaseError,
    LeaseFenced,
    MissingDependency,
    Timeout,
)

log = logging.getLogger("durable_obj")

#: Named actors per Hosts unless `shards=` says otherwise.
DEFAULT_SHARDS = 8
#: Concurrent calls one actor serves (each object's calls are serialised by its lock).
DEFAULT_CONCURRENCY = 16
#: The Ray namespace the named actors live in.
RAY_NAMESPACE = "durable_obj"
_HINT = 'durable_obj.ray needs Ray: pip install "durable_obj[ray]"'


def _ray() -> Any:
    """The `ray` module, imported on first use (so `import durable_obj` never
    imports Ray, and mypy never reads it)."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise MissingDependency(_HINT) from exc


def shard_of(oid: str, shards: int) -> int:
    """The shard hosting `oid`: the same in every process (crc32, not hash())."""
    return zlib.crc32(oid.encode("utf-8")) % shards


def _incarnation() -> str:
    """A token that sorts by start time: 16 hex digits of ns, then random."""
    return f"{time.time_ns():016x}{uuid.uuid4().hex[:8]}"


class ObjectHost:
    """The actor (one incarnation of it): a Pool of the objects of one shard.

    Created by `Hosts` through Ray; every method takes the object id. A
    subclass may add methods that run next to the data (pass it as
    `Hosts(host_class=...)`) and use `self.use(oid)` as the methods here do.
    """

    def __init__(
        self,
        namespace_url: str,
        name: str,
        owner: str,
        storage_options: dict[str, Any] | None,
        pool_options: dict[str, Any],
    ) -> None:
        self.name = name
        self.incarnation = _incarnation()
        self._prefix = f"{owner}/{name}#"
        self.owner = self._prefix + self.incarnation
        self.pool = Pool(
            namespace_url,
            owner=self.owner,
            reclaim=self._earlier_self,
            storage_options=storage_options,
            **pool_options,
        )
        self._lock = threading.Lock()
        #: oid -> (the object last used, its epoch): the epoch moves when an
        #: object was dropped with statements (fenced), so a caller's session
        #: token stops matching and its flush cannot claim them.
        self._last: dict[str, tuple[DurableObject, int]] = {}
        #: Set once a later incarnation of this actor took an object over.
        self.superseded: str | None = None
        self.reclaimed = self._take_over()
        log.info(
            "durable_obj.ray: %s incarnation %s up (pid %d), took over %d object(s)",
            name,
            self.incarnation,
            os.getpid(),
            len(self.reclaimed),
        )

    # -- incarnations ------------------------------------------------------------
    def _earlier_self(self, owner: str) -> bool:
        """Is `owner` an earlier incarnation of this actor (same name, older start)?"""
        if not owner.startswith(self._prefix):
            return False
        other = owner[len(self._prefix) :]
        return len(other) == len(self.incarnation) and other < self.incarnation

    def _take_over(self) -> list[str]:
        """Open, before serving, every object an earlier incarnation still
        holds: each open takes its lease (reclaim), so a zombie of that
        incarnation is fenced on all of them at its next commit, not only on
        those a caller happens to touch again."""
        held = [
            info.oid
            for info in self.pool.namespace.list(stored=False)
            if info.owner is not None and self._earlier_self(info.owner)
        ]

        def take(oid: str) -> str | None:
            try:
                with self.pool.object(oid):
                    return oid
            except DurableError as exc:
                log.warning("durable_obj.ray: %s could not take over %s: %s", self.name, oid, exc)
                return None

        if not held:
            return []
        with ThreadPoolExecutor(min(8, len(held))) as workers:
            return [oid for oid in workers.map(take, held) if oid is not None]

    def _check_current(self) -> None:
        if self.superseded is not None:
            raise LeaseFenced(
                f"{self.name} incarnation {self.incarnation} was superseded by "
                f"{self.superseded!r} (Ray restarted this actor elsewhere and the new one took "
                "its objects over); nothing it executes reaches storage. Call again through "
                "the handle: it reaches the new actor."
            )

    def _lost_lease(self, oid: str, exc: LeaseError) -> DurableError:
        """After a lease error on `oid`: if a later self holds it now, this
        incarnation is a zombie (mark it, for every object); the error for
        the caller either way."""
        with contextlib.suppress(DurableError):
            owner = self.pool.namespace.info(oid).owner
            if (
                owner is not None
                and owner.startswith(self._prefix)
                and owner != self.owner
                and not self._earlier_self(owner)
            ):
                self.superseded = owner
                log.warning(
                    "durable_obj.ray: %s incarnation %s superseded by %s",
                    self.name,
                    self.incarnation,
                    owner,
                )
        if self.superseded is not None:
            return LeaseFenced(
                f"{oid}: {self.name} incarnation {self.incarnation} was fenced: {exc} "
                "Call again through the handle: it reaches the actor that holds the object now."
            )
        return exc

    @contextlib.contextmanager
    def use(self, oid: str) -> Iterator[tuple[DurableObject, str]]:
        """The open object `oid` and the session token of its statements
        (incarnation and epoch), for one call."""
        self._check_current()
        try:
            with self.pool.object(oid) as obj:
                with self._lock:
                    last = self._last.get(oid)
                    epoch = 0
                    if last is not None:
                        epoch = last[1] + (last[0] is not obj and last[0].fenced)
                    self._last[oid] = (obj, epoch)
                yield obj, f"{self.incarnation}.{epoch}"
        except LeaseError as exc:
            raise self._lost_lease(oid, exc) from exc

    def _same_session(self, oid: str, session: str, expect: str | None, verb: str) -> None:
        if expect is not None and expect != session:
            raise HostLost(
                f"{oid}: the statements this handle executed since its last flush were on "
                f"another incarnation of {self.name} ({expect}), which died or lost the "
                f"object; they were not committed by this handle and are not here. Nothing "
                f"was run by this {verb}(). Execute them again through the handle, then flush."
            )

    # -- the calls -----------------------------------------------------------------
    def execute(
        self,
        oid: str,
        sql: str,
        params: Mapping[str, Any] | None,
        allow_nondeterministic: bool,
        expect: str | None,
    ) -> str:
        with self.use(oid) as (obj, session):
            self._same_session(oid, session, expect, "execute")
            obj.execute(sql, params=params, allow_nondeterministic=allow_nondeterministic)
            return session

    def flush(self, oid: str, expect: str | None) -> str | None:
        with self.use(oid) as (obj, session):
            self._same_session(oid, session, expect, "flush")
            return obj.flush()

    def write(
        self,
        oid: str,
        statements: list[tuple[str, Mapping[str, Any] | None]],
        expect: str | None,
    ) -> str | None:
        """Execute each statement, then flush: one call for a whole batch. A
        failure leaves the statements executed before it buffered (as
        execute() does), and its error carries the session token and their
        number, so the handle keeps track of them."""
        with self.use(oid) as (obj, session):
            self._same_session(oid, session, expect, "write")
            executed = 0
            try:
                for sql, params in statements:
                    obj.execute(sql, params=params)
                    executed += 1
                return obj.flush()
            except DurableError as exc:
                exc.session = session  # type: ignore[attr-defined]
                exc.executed = executed  # type: ignore[attr-defined]
                raise

    def query(self, oid: str, sql: str, fmt: str, params: Mapping[str, Any] | None) -> str:
        with self.use(oid) as (obj, _):
            return str(obj.query(sql, fmt, params=params))

    def checkpoint(self, oid: str, expect: str | None) -> str:
        with self.use(oid) as (obj, session):
            self._same_session(oid, session, expect, "checkpoint")
            return obj.checkpoint()

    def stats(self) -> dict[str, Any]:
        """Who this incarnation is and where it runs (for tests and operators)."""
        return {
            "name": self.name,
            "incarnation": self.incarnation,
            "owner": self.owner,
            "pid": os.getpid(),
            "node_id": _ray().get_runtime_context().get_node_id(),
            "open": len(self.pool),
            "superseded": self.superseded,
            "reclaimed": list(self.reclaimed),
        }

    def shutdown(self, discard: bool = False) -> None:
        """Flush and close every object, releasing its lease."""
        self.pool.close(discard=discard)


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
                ray.get(actor.shutdown.remote(discard), timeout=self.timeout)
            except Exception as exc:  # Ray's errors, or ours through it
                first = first or exc
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if first is not None:
            raise first


class Handle:
    """Calls on one object, run by the actor that hosts it. Thread-safe; a
    handle remembers which incarnation holds its unflushed statements."""

    def __init__(self, hosts: Hosts, oid: str) -> None:
        self.hosts = hosts
        self.oid = oid
        self._lock = threading.Lock()
        #: Session token of the statements executed since the last flush.
        self._pending: str | None = None
        self._count = 0

    def __repr__(self) -> str:
        return f"Handle({self.oid!r} on {self.hosts.actor_name(self.oid)})"

    @property
    def pending(self) -> int:
        """Statements executed through this handle since its last flush."""
        return self._count

    def _call(self, method: str, *args: Any) -> Any:
        ray = _ray()
        actor = self.hosts.actor(self.oid)
        try:
            return ray.get(
                getattr(actor, method).remote(self.oid, *args), timeout=self.hosts.timeout
            )
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, DurableError):
                raise cause from None
            raise
        except ray.exceptions.GetTimeoutError as exc:
            raise Timeout(
                f"{self.oid}: {method}() got no answer in {self.hosts.timeout} s; it may still "
                "run on the actor. Its outcome is unknown: a flush may commit later."
            ) from exc

    def _died(self, exc: BaseException) -> bool:
        return isinstance(exc, _ray().exceptions.RayActorError)

    def execute(
        self,
        sql: str,
        *,
        params: Mapping[str, Any] | None = None,
        allow_nondeterministic: bool = False,
    ) -> None:
        """Run one mutation on the object's actor and buffer it there. NOT
        durable until flush(). Never sent twice."""
        with self._lock:
            expect = self._pending
            try:
                session = self._call("execute", sql, params, allow_nondeterministic, expect)
            except HostLost:
                self._forget()
                raise
            except Exception as exc:
                if not self._died(exc):
                    raise
                lost = self._count
                self._forget()
                raise HostLost(
                    f"{self.oid}: the actor hosting it ({self.hosts.actor_name(self.oid)}) died "
                    f"during execute() ({type(exc).__name__}). Whether this statement ran there "
                    "is unknown; it was not sent again. Neither it nor the "
                    f"{lost} statement(s) this handle executed before it since its last flush "
                    "were committed by this handle. Ray restarts the actor: execute them again "
                    "through this handle, then flush."
                ) from exc
            self._pending = session
            self._count += 1

    def flush(self) -> str | None:
        """Commit the object's buffered statements where it lives; on return
        they survive any machine. Retried once when the actor died and this
        handle had nothing pending (nothing of it could be lost)."""
        with self._lock:
            expect = self._pending
            for attempt in (1, 2):
                try:
                    key: str | None = self._call("flush", expect)
                except HostLost:
                    self._forget()
                    raise
                except Exception as exc:
                    if not self._died(exc):
                        raise
                    if expect is None and attempt == 1:
                        continue
                    count = self._count
                    self._forget()
                    if expect is None:
                        raise HostLost(
                            f"{self.oid}: the actor hosting it died twice during flush() "
                            f"({type(exc).__name__}); call again through the handle"
                        ) from exc
                    raise CommitAmbiguous(
                        f"{self.oid}: the actor hosting it died during flush() "
                        f"({type(exc).__name__}); whether the {count} statement(s) this handle "
                        "executed since its last flush were committed is unknown. Read back "
                        "(query) through this handle, which reaches the restarted actor, then "
                        "execute what is missing again and flush."
                    ) from exc
                self._forget()
                return key
        raise AssertionError("unreachable")

    def write(self, *statements: str | tuple[str, Mapping[str, Any] | None]) -> str | None:
        """Execute the statements (each a SQL string, or `(sql, params)`) and
        flush, in one call to the actor: a batch costs one round trip instead
        of one per statement plus the flush. Durable on return; the key of the
        segment committed, as flush() returns it.

        If the actor dies during the call, whether the batch (and whatever
        this handle executed before it) was committed is unknown:
        `CommitAmbiguous`, never a re-run. A statement refused on the actor
        leaves the ones before it buffered, as execute() would."""
        batch = [(s, None) if isinstance(s, str) else (s[0], s[1]) for s in statements]
        with self._lock:
            expect = self._pending
            try:
                key: str | None = self._call("write", batch, expect)
            except HostLost:
                self._forget()
                raise
            except DurableError as exc:
                session: str | None = getattr(exc, "session", None)
                executed: int = getattr(exc, "executed", 0)
                if session is not None and executed:
                    self._pending = session
                    self._count += executed
                raise
            except Exception as exc:
                if not self._died(exc):
                    raise
                count = self._count + len(batch)
                self._forget()
                raise CommitAmbiguous(
                    f"{self.oid}: the actor hosting it died during write() "
                    f"({type(exc).__name__}); whether its {count} statement(s) (this batch and "
                    "what this handle executed before it since its last flush) were committed "
                    "is unknown; nothing was sent again. Read back (query) through this "
                    "handle, which reaches the restarted actor, then write what is missing."
                ) from exc
            self._forget()
            return key

    def query(
        self, sql: str, fmt: str = "CSV", *, params: Mapping[str, Any] | None = None
    ) -> Result:
        """Run a read on the object's actor (retried once if the actor died:
        a read is safe to repeat). Sees the statements buffered there."""
        for attempt in (1, 2):
            try:
                return Result(self._call("query", sql, fmt, params))
            except Exception as exc:
                if not self._died(exc) or attempt == 2:
                    if self._died(exc):
                        raise HostLost(
                            f"{self.oid}: the actor hosting it died twice during query() "
                            f"({type(exc).__name__}); call again through the handle"
                        ) from exc
                    raise
        raise AssertionError("unreachable")

    def checkpoint(self) -> str:
        """Checkpoint the object where it lives (commits buffered statements too)."""
        with self._lock:
            try:
                key: str = self._call("checkpoint", self._pending)
            except HostLost:
                self._forget()
                raise
            self._forget()
            return key

    def _forget(self) -> None:
        self._pending = None
        self._count = 0


__all__ = ["DEFAULT_SHARDS", "Handle", "Hosts", "ObjectHost", "shard_of"]
