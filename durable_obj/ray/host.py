"""The actor side of `durable_obj.ray`: `ObjectHost`, one incarnation of a
named actor serving the objects of its shard from a `Pool`, and what the
other modules share (`shard_of`, the lazy `_ray` import, the defaults).

An incarnation's lease owner name is `<owner>/<actor name>#<incarnation>`,
the incarnation a token that sorts by start time: an incarnation takes back
at once (reclaim) the leases of an earlier one of the same actor, never of a
later one, and takes over every such object before it serves, so a zombie is
fenced on all of them. Each call carries the caller's session token (which
incarnation, which epoch of the object holds its unflushed statements), so a
flush never reports as committed statements that died elsewhere.
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

from durable_obj import DurableObject, Pool
from durable_obj.errors import (
    ClassificationRefused,
    Closed,
    DurableError,
    EngineError,
    HostLost,
    InvalidArgument,
    LeaseError,
    LeaseFenced,
    LimitExceeded,
    MissingDependency,
    Nondeterministic,
    SecretRefused,
)

log = logging.getLogger("durable_obj")

#: Named actors per Hosts unless `shards=` says otherwise.
DEFAULT_SHARDS = 8
#: Concurrent calls one actor serves (each object's calls are serialised by its lock).
DEFAULT_CONCURRENCY = 16
#: The Ray namespace the named actors live in.
RAY_NAMESPACE = "durable_obj"
_HINT = 'durable_obj.ray needs Ray: pip install "durable_obj[ray]"'


#: Errors of `DurableObject.write` that refused or failed a statement of the
#: unit before the unit joined the buffer: none of its statements was kept.
_NOT_BUFFERED = (
    ClassificationRefused,
    Closed,
    EngineError,
    InvalidArgument,
    LimitExceeded,
    Nondeterministic,
    SecretRefused,
)


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
            for info in self.pool.namespace.list(stored=False, verify=True)
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
            lost = self._lost_lease(oid, exc)
            if lost is not exc and hasattr(exc, "session"):  # a write's unit may be buffered
                lost.session = exc.session  # type: ignore[attr-defined]
            raise lost from exc

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
        statements: list[str | tuple[str, Mapping[str, Any] | None]],
        params: Mapping[str, Any] | None,
        allow_nondeterministic: bool,
        expect: str | None,
    ) -> str | None:
        """`DurableObject.write` on the object, in one call: the statements
        run as one unit and are flushed with everything buffered before
        them; durable on return, all or none.

        A unit refused or failed before it joined the buffer (one of
        `_NOT_BUFFERED`) left nothing of it behind, and its error is raised as
        it is. Any other error may come after the unit was buffered (its
        commit failed: a storage error, a timeout, a lease error), where it
        stays, whole: that error carries the session token (`session`), so
        the handle counts the unit as pending on this incarnation and never
        lets a flush elsewhere report it as committed."""
        with self.use(oid) as (obj, session):
            self._same_session(oid, session, expect, "write")
            try:
                return obj.write(
                    *statements, params=params, allow_nondeterministic=allow_nondeterministic
                )
            except _NOT_BUFFERED:
                raise
            except DurableError as exc:
                exc.session = session  # type: ignore[attr-defined]
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
