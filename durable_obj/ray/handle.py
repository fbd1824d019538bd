"""`Handle`: the calls on one object, sent to the actor hosting it, and the
bookkeeping that keeps them honest across actor deaths: which incarnation
holds this handle's unflushed statements, and how many there are."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from durable_obj import Result
from durable_obj.errors import CommitAmbiguous, DurableError, HostLost, InvalidArgument, Timeout
from durable_obj.ray.host import _ray

if TYPE_CHECKING:
    from durable_obj.ray.hosts import Hosts

#: One statement of `Handle.write`: its text, or its text and its parameters.
Statement = str | tuple[str, Mapping[str, Any] | None]


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

    def write(
        self,
        *statements: Statement,
        params: Mapping[str, Any] | None = None,
        allow_nondeterministic: bool = False,
    ) -> str | None:
        """`DurableObject.write` on the object's actor, in one call: the
        statements (each a SQL string, bound with `params` if given, or a
        `(sql, params)` pair) run there as one unit and are flushed with
        everything buffered before them. Durable on return, all or none; the
        key of the commit, as `DurableObject.write` returns it (None if
        nothing was logged and nothing was buffered).

        A statement refused or failing on the actor leaves nothing of the
        unit there (what this handle executed before stays pending). If the
        commit failed, the unit stays buffered there, whole, and counts as
        this handle's pending statements: a later flush() commits it, or says
        `HostLost` if the actor died meanwhile. If the actor dies during the
        call, whether the unit (and whatever this handle executed before it)
        was committed is unknown: `CommitAmbiguous`, never a re-run."""
        if not statements:
            raise InvalidArgument("write() needs at least one statement; nothing was run")
        with self._lock:
            expect = self._pending
            try:
                key: str | None = self._call(
                    "write", list(statements), params, allow_nondeterministic, expect
                )
            except HostLost:
                self._forget()
                raise
            except DurableError as exc:
                session: str | None = getattr(exc, "session", None)
                if session is not None:  # the unit may still be buffered there, whole
                    self._pending = session
                    self._count += len(statements)
                raise
            except Exception as exc:
                if not self._died(exc):
                    raise
                count = self._count + len(statements)
                self._forget()
                raise CommitAmbiguous(
                    f"{self.oid}: the actor hosting it died during write() "
                    f"({type(exc).__name__}); whether its {count} statement(s) (this unit and "
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
