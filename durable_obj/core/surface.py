"""What a durable object shows, and the gates every call passes: its
identity and state as read-only properties, `Result`, and the checks that
an object is open, or open for writing. The state machine that moves these
states is `object.py`; this is only the surface it shows.
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import TYPE_CHECKING

from durable_obj.core import observed, unclosed
from durable_obj.errors import (
    ClassificationRefused,
    Closed,
    DurableError,
    InvalidArgument,
    LeaseFenced,
)

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.core.commit import HeadWriter
    from durable_obj.core.heartbeat import Heartbeat
    from durable_obj.core.options import Options
    from durable_obj.core.pending import Pending
    from durable_obj.core.transaction import Transaction
    from durable_obj.replica.engine import Engine
    from durable_obj.replica.local import LocalCopy
    from durable_obj.wire.head import Head

_NEW, _OPEN, _CLOSING, _CLOSED = "new", "open", "closing", "closed"

#: The objects (by id) this context (thread or task) has a transaction open on.
_TXN: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "durable_obj_transactions", default=frozenset()
)


def refuse_in_transaction(obj: Surface, call: str) -> None:
    """`InvalidArgument` when this context has a `transaction()` open on
    `obj`: a call of its own on the object inside the block would escape
    the transaction (a write), wait for the block that waits for it, or
    store what it has not committed (`transaction.py`)."""
    if id(obj) in _TXN.get():
        raise InvalidArgument(
            f"{call} on {obj.url} inside a transaction() block of this thread or task: "
            "inside the block, write with tx.execute() and read with tx.query() or tx.rows() "
            "(async: tx.aexecute(), tx.aquery()); the block commits when it ends. Nothing was "
            "run."
        )


class Result(str):
    """A query's output: a `str`, with `.data()` for chdb.durable-style callers."""

    def data(self) -> str:
        return str(self)


class Surface:
    """The state of one durable object, as `DurableObject` keeps it."""

    _oid: str
    _opts: Options
    _read_only: bool
    _progress: Callback | None
    _lock: threading.RLock
    _state: str
    _w: HeadWriter
    _local: LocalCopy
    _buf: Pending
    _hb: Heartbeat | None
    #: Why this writer accepts no more writes, once it is fenced.
    _fence_note: str
    _warned: bool
    _follow_poll: object | None
    _follow_error: DurableError | None
    #: When (monotonic) a follower's view was last the store's newest head.
    _follow_current: float
    #: The transaction open on this object, if any (`transaction.py`).
    _txn: Transaction | None

    # -- introspection -------------------------------------------------------
    @property
    def oid(self) -> str:
        return self._oid

    @property
    def url(self) -> str:
        return self._w.url

    @property
    def db(self) -> str:
        return self._opts.db if self._w.head is None else self._w.head.manifest.db

    @property
    def generation(self) -> int:
        return 0 if self._w.head is None else self._w.head.lease.generation

    @property
    def seq(self) -> int:
        return 0 if self._w.head is None else self._w.head.manifest.seq

    @property
    def pending(self) -> int:
        """Statements executed here and not yet made durable by flush()."""
        return len(self._buf)

    @property
    def fenced(self) -> bool:
        return self._w.fenced

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def following(self) -> bool:
        """A follower (follow=) whose view still moves by itself."""
        return self.__dict__.get("_follow_poll") is not None

    @property
    def timezone(self) -> str:
        """The object's session time zone: every statement runs and replays in it."""
        return self._local.timezone

    @property
    def head(self) -> Head | None:
        """A copy of the head as this object last read or wrote it."""
        return None if self._w.head is None else self._w.head.model_copy(deep=True)

    @property
    def state(self) -> str:
        """new, open, fenced (open for reads only: this writer lost its
        lease), closing or closed."""
        return "fenced" if self._state == _OPEN and self._w.fenced else self._state

    def _gauges(self) -> tuple[int, float | None]:
        """What the telemetry gauges read (`durable_obj.telemetry`): the bytes
        the head names in the store (base, its links, WAL segments), and a
        follower's lag: seconds since its view was last the store's newest
        head (None: not following). Read without the lock: a head is
        replaced whole, and a gauge may be a moment old."""
        head = self._w.head
        current = self.__dict__.get("_follow_current")
        lag = None if current is None or not self.following else time.monotonic() - current
        return observed.stored_bytes(head), None if lag is None else max(0.0, lag)

    def __repr__(self) -> str:
        return (
            f"DurableObject({self.url!r}, state={self.state}, generation={self.generation}, "
            f"seq={self.seq}, pending={self.pending})"
        )

    def _require_open(self, *, engine: bool = True) -> Engine:
        """The engine of an open object (lock held). Unless `engine` is False
        (a flush or close, which commit the buffer and need no engine): a
        copy left diverged by a failed unit (`units.py`) is rebuilt first,
        and a transaction another caller has open ends first
        (`transaction.py`): its writes are not logged yet."""
        failed = self.__dict__.get("_follow_error")
        if failed is not None:  # once: a follower's poll stopped on it (`follow.py`)
            self._follow_error = None
            raise failed
        while True:
            if self._state in (_CLOSED, _CLOSING):
                raise Closed(f"{self.url} is closed")
            if not engine:
                break
            if self.__dict__.get("_diverged"):
                self._heal()  # (it may wait for a commit, the lock released: look again)
            txn = self.__dict__.get("_txn")
            if txn is None or txn.admits():
                break
            refuse_in_transaction(self, "a call")  # its own block waits for it: never wait
            txn.wait()
        if self._state != _OPEN or self._local.engine is None:
            raise DurableError(f"{self.url} is not open")
        return self._local.engine

    def _await_transaction(self) -> None:
        """(lock held) Wait until no transaction of another caller is open."""
        while (txn := self.__dict__.get("_txn")) is not None and not txn.admits():
            txn.wait()

    def _heal(self) -> None:
        raise NotImplementedError  # units.Units

    def _require_writable(self, *, engine: bool = True) -> Engine:
        engine_ = self._require_open(engine=engine)
        if self._read_only:
            raise ClassificationRefused(
                f"{self.url} is read-only (opened with read_only=True): execute(), flush() "
                "and checkpoint() need a writer; open it without read_only to write"
            )
        if self._w.fenced:
            raise LeaseFenced(
                f"{self.url}: this writer was fenced ({self._fence_note or self._why_fenced()}); "
                "it accepts no writes (its local copy can still be read). Close it and reopen "
                "to continue from the last flushed state."
            )
        return engine_

    def _closed_fenced(self, lost: int) -> LeaseFenced:
        """What close() of a fenced writer raises when it dropped `lost` statements."""
        landed = self._w.landed_seq
        why = self._fence_note or self._why_fenced()
        what = (
            "were never committed"
            if landed is None
            else f"were never proven: those of the commit that landed as seq {landed} are in "
            "it, the rest were never committed"
        )
        return LeaseFenced(
            f"{self.url}: this writer was fenced ({why}); {lost} unflushed statement(s) {what}. "
            "The object is closed; reopen to continue from the last flushed state."
        )

    def _why_fenced(self) -> str:
        """Why, when no refusal said it (a fence the heartbeat met)."""
        landed = self._w.landed_seq
        if landed is None:
            return "it lost its lease"
        return f"an earlier commit of its own, never proven, landed as seq {landed}"

    def _proof(self) -> tuple[object, str | None]:
        """The writer's last proof (a new object with each commit proven)
        and the key its head committed last: a segment, else its base."""
        proven = self._w.proven
        if proven is None:
            return None, None
        manifest = proven.head.manifest
        base = manifest.base
        return proven, manifest.wal[-1].key if manifest.wal else base.key if base else None

    def _fenced_by(self, exc: LeaseFenced) -> None:
        """Remember what fenced us, for every later refusal."""
        text, depth = str(exc), 0
        start = text.find("(")
        for at in range(max(start, 0), len(text)):
            depth += {"(": 1, ")": -1}.get(text[at], 0)
            if start >= 0 and depth == 0:  # the parenthesis that closes the first
                self._fence_note = text[start + 1 : at]
                return
        self._fence_note = ""

    def _left_open(self, when: str) -> None:
        """ResourceWarning + log (once) if open with a lease or a buffer."""
        if self.__dict__.get("_state") != _OPEN or self._warned:
            return
        leased = not self._read_only and not self._w.fenced
        if leased or self._buf:
            self._warned = True
            unclosed.report(self.url, pending=len(self._buf), leased=leased, when=when)
