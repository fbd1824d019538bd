"""What the LangGraph checkpointer and store share: the object they sit on
(opened from a URL, or one the caller already holds), SQL literals computed
in Python, the flush policy, and the lease seen as LangGraph's write
ownership.

Only the public API is used here (`durable_obj.open`, `DurableObject`,
`durable_obj.errors`): this module sits on top, as any user code would.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import durable_obj
from durable_obj.errors import InvalidArgument, LeaseFenced, LeaseHeld

T = TypeVar("T")

FlushMode = Literal["every", "step", "batch"]
_MODES = ("every", "step", "batch")


class WriteOwnerHeld(LeaseHeld):
    """Another saver or store holds the object's lease: this one may not write.

    LangGraph's name for the condition is a stale write owner; the attribute
    `is_stale_write_owner_error` lets callers test for it without importing
    durable_obj. `holder`, `generation` and `wait` are the `LeaseHeld`'s."""

    is_stale_write_owner_error = True


def write_owner_held(
    what: str, target: str, exc: LeaseHeld, owner: str | None, *, reclaim: bool
) -> WriteOwnerHeld:
    """`exc` in the saver's and store's words, keeping what it knows (who
    holds the lease, when a writer open succeeds) and the arguments that
    really apply: reclaim=True for an earlier process of this same owner
    name, force=True only for a writer known to be gone."""
    who = "another writer" if exc.holder is None else f"another writer ({exc.holder!r})"
    text = (
        f"{what}: {who} holds the lease on {target}, so this one may not write (a stale "
        "write owner). Nothing was written."
    )
    if exc.wait is not None:
        text += f" A writer open succeeds in {exc.wait:.1f} s if that lease is not renewed."
    if exc.holder is not None and owner and exc.holder == owner:
        text += (
            f" It carries this {what}'s owner name: if it is an earlier process of {owner!r} "
            "(a killed or restarted worker), pass reclaim=True to take it at once (that "
            "process, if it still runs, is fenced at its next write)."
        )
    elif not owner:
        text += (
            f" This {what} has no owner=, so it can never reclaim an earlier process of its "
            "own: give each worker a stable owner= and pass reclaim=True, and a restarted "
            "worker takes its lease over at once."
        )
    elif reclaim:
        text += (
            f" reclaim=True takes only a lease held under this {what}'s own owner name "
            f"({owner!r}), and this one is another writer's."
        )
    text += (
        " Otherwise wait until that writer closes or its lease expires, open read_only=True "
        "to read, or pass force=True only when that writer is known to be gone (what it did "
        "not flush is lost)."
    )
    return WriteOwnerHeld(text, holder=exc.holder, generation=exc.generation, wait=exc.wait)


class StaleWriteOwner(LeaseFenced):
    """This saver or store lost the object's lease to a newer writer: it
    never writes again (reads still work). Statements it had not flushed
    are lost; the newer writer continues from the last flushed state."""

    is_stale_write_owner_error = True


# -- literals ------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def check_table_name(name: object, what: str) -> str:
    """`name` if it is a table name the engine takes unquoted (an ASCII
    letter or '_' first, then letters, digits and '_'); `InvalidArgument`
    otherwise, before anything is opened."""
    if isinstance(name, str) and _TABLE_NAME.fullmatch(name):
        return name
    raise InvalidArgument(
        f"{what} must be ASCII letters, digits and '_', not starting with a digit: {name!r}"[:200]
    )


def lit_str(text: str) -> str:
    """`text` as a ClickHouse string literal that reads back exactly:
    backslash and quote escaped, control characters as \\xHH. A string that
    is not valid Unicode text (a lone surrogate) is refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            "a string holds a lone surrogate and is not valid text; pass valid Unicode"
        ) from exc
    body = text.replace("\\", "\\\\").replace("'", "\\'")
    body = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02X}", body)
    return "'" + body + "'"


def lit_bytes(data: bytes) -> str:
    """`data` as a ClickHouse String expression: base64 in the WAL, exact bytes
    in the table."""
    if not data:
        return "''"
    return "base64Decode('" + base64.b64encode(data).decode("ascii") + "')"


def lit_opt_str(text: str | None) -> str:
    return "NULL" if text is None else lit_str(text)


def lit_int(value: int) -> str:
    return str(int(value))


def lit_float(value: float) -> str:
    if not math.isfinite(value):
        raise InvalidArgument(f"a non-finite number ({value!r}) cannot be stored here")
    return repr(float(value))


def lit_str_array(items: Sequence[str]) -> str:
    return "[" + ", ".join(lit_str(s) for s in items) + "]"


def lit_float_array(items: Sequence[float]) -> str:
    return "[" + ", ".join(lit_float(float(x)) for x in items) + "]::Array(Float64)"


def unb64(text: str) -> bytes:
    return base64.b64decode(text) if text else b""


# -- the object ----------------------------------------------------------------
class Handle:
    """The durable object under a saver or store, with the flush policy and
    the write-ownership translation of lease errors.

    `target` is a URL (the handle opens the object and closes it on close()),
    an open `DurableObject`, or an `AsyncDurableObject`; those stay the
    caller's to close. The async methods of the saver and store run through
    the object's async face (`face`), one lane call per method."""

    def __init__(
        self,
        target: Any,
        *,
        what: str,
        flush: FlushMode,
        batch_puts: int,
        batch_seconds: float | None,
        owner: str | None,
        read_only: bool,
        storage_options: dict[str, Any] | None,
        options: dict[str, Any],
        reclaim: bool | Callable[[str], bool] = False,
    ) -> None:
        if flush not in _MODES:
            raise InvalidArgument(f"flush must be one of {', '.join(_MODES)}, not {flush!r}")
        if isinstance(batch_puts, bool) or not isinstance(batch_puts, int) or batch_puts < 1:
            raise InvalidArgument(
                f"batch_puts must be a whole number >= 1, not {batch_puts!r}"[:120]
            )
        if batch_seconds is not None and (
            isinstance(batch_seconds, bool)
            or not isinstance(batch_seconds, int | float)
            or not 0 <= batch_seconds < math.inf  # NaN fails this too
        ):
            raise InvalidArgument(
                f"batch_seconds must be a finite number >= 0 or None, not {batch_seconds!r}"[:120]
            )
        self.what = what
        self.flush_mode: FlushMode = flush
        self.batch_puts = batch_puts
        self.batch_seconds = batch_seconds
        self.lock = threading.RLock()
        self.fenced = False
        self._puts = 0
        self._oldest: float | None = None
        self.owns = isinstance(target, str)
        self._face: durable_obj.AsyncDurableObject | None = None
        if isinstance(target, str):
            try:
                self.obj = durable_obj.open(
                    target,
                    owner=owner,
                    read_only=read_only,
                    reclaim=reclaim,
                    storage_options=storage_options,
                    **options,
                )
            except LeaseHeld as exc:
                raise write_owner_held(what, target, exc, owner, reclaim=bool(reclaim)) from exc
        elif isinstance(target, durable_obj.DurableObject):
            self.obj = target
        elif isinstance(target, durable_obj.AsyncDurableObject):
            self.obj = target.sync
            self._face = target
        else:
            raise InvalidArgument(
                f"{what} needs a URL, a DurableObject or an AsyncDurableObject, "
                f"not {type(target).__name__}"
            )
        if not self.owns and (
            owner is not None or storage_options or options or read_only or reclaim
        ):
            raise InvalidArgument(
                f"{what}: owner, read_only, reclaim, storage_options and open options apply "
                "only when it opens the object from a URL"
            )

    @property
    def read_only(self) -> bool:
        return bool(self.obj.read_only)

    # -- the async face ------------------------------------------------------------
    @property
    def face(self) -> durable_obj.AsyncDurableObject:
        """The object's async face: the AsyncDurableObject given as target
        (so our calls are ordered with the caller's), else one made here."""
        with self.lock:
            if self._face is None:
                self._face = durable_obj.AsyncDurableObject.wrap(self.obj)
            return self._face

    def may_flush(self, *, put: bool) -> bool:
        """Whether a write (`put`: a checkpoint or store put) may flush, i.e.
        touch storage, under the policy: it then runs on the face's storage
        side, else on its local side."""
        return self.flush_mode != "step" or put

    async def arun(self, fn: Callable[..., T], *args: Any, io: bool, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` as one call of the object's lane (aio's
        AsyncDurableObject.arun): in a worker thread, never on the loop, with
        the face's cancellation guarantee (cancelled before its turn it never
        runs; once started it finishes, flush included)."""
        return await self.face.arun(lambda: fn(*args, **kwargs), io=io)

    # -- reads -------------------------------------------------------------------
    def rows(self, sql: str) -> list[list[Any]]:
        """The rows of a read-only query, each a list of JSON values."""
        text = str(self.obj.query(sql, fmt="JSONCompactEachRow"))
        return [json.loads(line) for line in text.splitlines() if line]

    # -- writes ------------------------------------------------------------------
    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock for a write, and turn a lost lease into
        `StaleWriteOwner` for good."""
        with self.lock:
            if self.fenced:
                raise StaleWriteOwner(
                    f"{self.what}: a newer writer took this object's lease; this one never "
                    "writes again (reads still work). Reopen to continue from the last "
                    "flushed state."
                )
            try:
                yield
            except LeaseFenced as exc:
                self.fenced = True
                if isinstance(exc, StaleWriteOwner):
                    raise
                raise StaleWriteOwner(
                    f"{self.what}: a newer writer took this object's lease (a stale write "
                    "owner); what this one had not flushed is lost, and it never writes "
                    "again. Reopen to continue from the last flushed state."
                ) from exc

    def execute(self, sql: str) -> None:
        """Run one logged statement (call inside `writing()`)."""
        if self._oldest is None:
            self._oldest = time.monotonic()
        self.obj.execute(sql)

    def wrote(self, *, put: bool) -> None:
        """After a mutating call: flush as the policy says (inside `writing()`).
        `put` is True for a checkpoint put (a step) or a store put."""
        if put:
            self._puts += 1
        if self.flush_mode == "every" or (self.flush_mode == "step" and put):
            self.flush_locked()
        elif self.flush_mode == "batch":
            aged = (
                self.batch_seconds is not None
                and self._oldest is not None
                and time.monotonic() - self._oldest >= self.batch_seconds
            )
            if self._puts >= self.batch_puts or aged:
                self.flush_locked()

    def flush_locked(self) -> None:
        """Flush now (call inside `writing()`)."""
        self.obj.flush()
        self._puts = 0
        self._oldest = None

    def flush(self) -> None:
        """Make every buffered write durable now."""
        with self.writing():
            self.flush_locked()

    def close(self) -> None:
        """Flush what this handle buffered and close the object if it opened it."""
        with self.lock:
            if self.owns:
                if not self.obj.closed:
                    try:
                        self.obj.close()
                    except LeaseFenced:
                        self.fenced = True
                        self.obj.close(discard=True)
            elif not self.fenced and not self.read_only and not self.obj.closed:
                with self.writing():
                    self.flush_locked()
