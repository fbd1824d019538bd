"""Units of work: statements that become durable together, or not at all.

    key = obj.write(
        "INSERT INTO memories VALUES ('k', 'v', now())",
        ("INSERT INTO log VALUES ({k:String}, 'remembered')", {"k": "k"}),
    )                                   # durable on return, both or neither

    with obj.batch():                   # or: with obj.batch() as b: b.execute(...)
        obj.execute("INSERT INTO memories VALUES ('k', 'v', now())")
        obj.execute("INSERT INTO log VALUES ({k:String}, 'remembered')", params={"k": "k"})
    # the block ended without an error: both ran and were flushed as one unit

A unit's statements join the WAL buffer in one step, after all of them ran,
and a commit takes a prefix of the buffer that ends on a unit's boundary
(`pending.py`, `group.py`): no flush, whoever calls it, from whatever
thread or task, ever commits part of a unit. A statement of the unit that
is refused or fails leaves nothing of the unit buffered; if others of it had
already run, the local copy is rebuilt from the committed state and the
buffer (`rebuild.py`), so what is read is again what is logged.

Inside a batch block the statements are collected, not run: they are
checked, run and flushed when the block ends without an error (a read
inside the block does not see them yet); an error in the block runs none of
them. Blocks nest into the outermost one. The batch belongs to the thread
or task that opened it (a context variable): another thread's `execute()`
on the same object runs as usual.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from durable_obj.core import observed, publishing
from durable_obj.core.admission import Admission
from durable_obj.core.group import GroupCommit
from durable_obj.core.pending import Outgoing
from durable_obj.core.queries import Params
from durable_obj.core.rebuild import rebuild
from durable_obj.core.surface import Surface, refuse_in_transaction
from durable_obj.errors import DurableError, EngineError, InvalidArgument, LeaseFenced, Timeout
from durable_obj.gate.classify import speaking_as
from durable_obj.gate.control import DEFINING, escaped_names
from durable_obj.gate.known import fires_views
from durable_obj.gate.params import placeholders
from durable_obj.gate.pipeline import first_word
from durable_obj.gate.reading import ONE_BLOCK_BYTES, expression_refused, unread
from durable_obj.gate.replay import MAX_BATCH_BYTES, Replayer
from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import is_insert, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

log = logging.getLogger("durable_obj")

#: One statement of a unit: its text, or its text and its query parameters.
Statement = str | tuple[str, Params]

#: A statement ready to run: text, params, allow_nondeterministic.
_Planned = tuple[str, Params, bool]

#: The batches open in this context (thread or task), by object.
_OPEN: contextvars.ContextVar[dict[int, Batch] | None] = contextvars.ContextVar(
    "durable_obj_batches", default=None
)


def plan(
    statements: tuple[Statement, ...], params: Params, allow_nondeterministic: bool
) -> list[_Planned]:
    """Each statement with its params (a pair's own, else the names of the
    shared `params` its placeholders use), checked for shape before anything
    runs. A shared param no statement uses is an error, as for one statement."""
    if not statements:
        raise InvalidArgument("write() needs at least one statement; nothing was run")
    if params is not None and not isinstance(params, Mapping):
        raise InvalidArgument(
            f"params must be a dict of name -> value, not {type(params).__name__}"
        )
    planned: list[_Planned] = []
    used: set[str] = set()
    for n, item in enumerate(statements, start=1):
        if isinstance(item, str):
            own = params
            if params is not None and len(statements) > 1:
                names = {p.name for p in placeholders(item)}
                used |= names
                own = {k: v for k, v in params.items() if k in names} or None
            planned.append((item, own, allow_nondeterministic))
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and (item[1] is None or isinstance(item[1], Mapping))
        ):
            planned.append((item[0], item[1], allow_nondeterministic))
        else:
            raise InvalidArgument(
                f"statement {n} of the unit is a {type(item).__name__}; each is a SQL string "
                "or a (sql, params) pair with params a mapping. Nothing was run."
            )
    unused = sorted(set(params or ()) - used) if len(statements) > 1 else []
    if unused:
        raise InvalidArgument(
            f"params {', '.join(map(repr, unused))} appear in no {{name:Type}} placeholder "
            "of the unit's statements; nothing was run or logged"
        )
    return planned


class Batch:
    """The statements of one `batch()` block, collected until it ends.
    `key` is the commit that made them durable, once the block ended."""

    def __init__(self) -> None:
        self.planned: list[_Planned] = []
        self.key: str | None = None

    def execute(
        self, sql: str, *, params: Params = None, allow_nondeterministic: bool = False
    ) -> None:
        """Add one statement to the unit; it runs when the block ends."""
        self.planned += plan((sql,), params, allow_nondeterministic)

    def write(self, *statements: Statement, params: Params = None) -> None:
        """Add several statements to the unit; they run when the block ends."""
        self.planned += plan(statements, params, False)

    def __len__(self) -> int:
        return len(self.planned)


def collecting(obj: Surface) -> Batch | None:
    """The batch open on `obj` in this context, if any. Inside a transaction
    of this context on `obj`, a write of `obj`'s own is refused instead."""
    refuse_in_transaction(obj, "a write of the object itself (execute, write, batch)")
    open_ = _OPEN.get()
    return None if open_ is None else open_.get(id(obj))


@contextlib.contextmanager
def collect(obj: Surface) -> Iterator[tuple[Batch, bool]]:
    """A batch of `obj` for this context: a new one (True), or the one already
    open here (False: a nested block joins it)."""
    outer = collecting(obj)
    if outer is not None:
        yield outer, False
        return
    batch = Batch()
    token = _OPEN.set({**(_OPEN.get() or {}), id(obj): batch})
    try:
        yield batch, True
    finally:
        _OPEN.reset(token)


class _Queued:
    """A unit waiting for a thread to run it (`Units._write_queued`)."""

    __slots__ = ("outcome", "planned")

    def __init__(self, planned: list[_Planned]) -> None:
        self.planned = planned
        self.outcome: int | Exception | None = None


class _Stopped(Exception):
    """A statement's bound stopped it while it ran (`Units._run_one`): a
    signal inside Units, turned into the error a caller sees by `_undo`."""

    def __init__(self, error: DurableError) -> None:
        super().__init__(str(error))
        self.error = error


def _half_run(exc: BaseException) -> bool:
    """Whether a statement that failed so, while it ran, may have applied
    part of itself: stopped by its time or memory bound (an INSERT ...
    SELECT keeps the blocks it already wrote; a mutation keeps going)."""
    return isinstance(exc, Timeout) or "MEMORY_LIMIT_EXCEEDED" in str(exc)


#: Statements whose failure in the engine leaves nothing of them: a change of
#: the catalogue (an Atomic database's), with no SELECT to fill anything.
_CATALOGUE_ONLY = frozenset({"create", "drop", "rename", "exchange", "attach", "detach"})


def all_or_nothing(engine: Engine, text: str) -> bool:
    """Whether `text`, failing in the engine, provably applied none of itself.
    Anything else may have applied part: an INSERT ... SELECT keeps the blocks
    it wrote before `throwIf` fired, a mutation keeps the parts it rewrote
    (and stays behind, failing every later mutation of the table), an
    INSERT into a table a materialized view reads keeps its block when the
    view fails (found by attack), so its failure rebuilds the local copy
    (`_run_one`). An INSERT ... VALUES of one block (`ONE_BLOCK_BYTES`) into
    a table no view reads writes all of it or nothing."""
    tokens = tokenize_head(text)
    words = [t.word for t in tokens if t.kind == "ident"]
    if not words:
        return False
    if words[0] in _CATALOGUE_ONLY:
        return "select" not in words and "populate" not in words and "with" not in words
    if words[0] != "insert" or words[-1] != "values" or len(text) >= ONE_BLOCK_BYTES:
        return False
    shape = insert_shape(tokens)
    return shape is not None and not fires_views(engine, shape.database, shape.table)


class Units(Surface):
    """`write()`, `batch()` and the group commit under every flush of
    `DurableObject`."""

    _group: GroupCommit
    #: The slots of the writes in flight (`admission.py`).
    _admission: Admission
    #: A unit failed half-run and the rebuild of the local copy did not finish.
    _diverged: bool
    #: Units of threads waiting to run (`_write_queued`), and their lock.
    _queued: list[_Queued]
    _queue_lock: threading.Lock

    def write(
        self, *statements: Statement, params: Params = None, allow_nondeterministic: bool = False
    ) -> str | None:
        """Run `statements` as one unit and flush it: on return they are all
        durable (with everything buffered before them); if any is refused or
        fails, none of them is logged or kept. Each is a SQL string (bound
        with `params`, if given) or a `(sql, params)` pair. Returns the key
        of the commit that made them durable (None if none of them changed
        anything, e.g. a `CREATE ... IF NOT EXISTS` of an existing name, and
        nothing else was buffered). Inside a `batch()` block of this thread
        or task, it joins that unit instead and returns None."""
        planned = plan(statements, params, allow_nondeterministic)
        batch = collecting(self)
        if batch is not None:
            batch.planned += planned
            return None
        with speaking_as("write()"):
            return self._write_queued(planned)

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """A block whose statements (`execute()` on this object, or on the
        batch it yields) become one unit: run and flushed when the block ends
        without an error, durable when it exits; none of them run if it
        raises. The batch's `key` names the commit afterwards."""
        with collect(self) as (batch, new):
            yield batch
        if new and batch.planned:
            with speaking_as("batch()"):
                batch.key = self._write_queued(batch.planned)

    # -- the machinery ----------------------------------------------------------
    def _run_one(self, sql: str, params: Params, allow: bool, extra: int = 0) -> bytes | None:
        """Check, pin, run one mutation (lock held), under `write_bounds`; its
        WAL line, or None when it provably changed nothing and is not logged.
        `_Stopped` when the bounds stopped it while it ran."""
        engine = self._require_writable()
        sql = self._local.bind(sql, None)  # a str, or InvalidArgument
        self._buf.buf.fits(sql, extra)  # limits before anything runs
        ran = False
        try:
            with engine.bounded(self._opts.write_bounds, write=True):
                sql = self._local.bind(sql, params)
                text = self._local.prepare(engine, sql, self.db, allow_nondeterministic=allow)
                line = self._buf.buf.admit(text, extra)
                ran = True
                try:
                    logged = self._local.run_logged(engine, text, self.db)
                except EngineError as exc:
                    retry = expression_refused(str(exc)) and unread(text) is not None
                    if not retry or _half_run(exc) or not all_or_nothing(engine, text):
                        raise
                    # A row the engine would not read as a literal (`toDate(...)`):
                    # its reader refused it before the one block was written, and
                    # the text is one statement (`unread`: no `;`). It runs again
                    # with its rows read.
                    log.debug("%s: a row is no literal; its rows are read the usual way", self.url)
                    ran = False
                    text = self._local.prepare(
                        engine, sql, self.db, allow_nondeterministic=allow, unread_rows=False
                    )
                    line = self._buf.buf.admit(text, extra)
                    ran = True
                    logged = self._local.run_logged(engine, text, self.db)
        except DurableError as exc:
            if ran and (_half_run(exc) or not all_or_nothing(engine, text)):
                raise _Stopped(exc) from None  # part of it may be in: the copy is rebuilt
            raise
        finally:
            # what a table is may have changed, also by one that failed (`gate.known`)
            if ran and not is_insert(text):
                engine.known.forget()
                if self._local.pinner is not None:
                    self._local.pinner.schema_changed()
        if logged and first_word(text) in DEFINING and (refused := escaped_names(engine)):
            raise _Stopped(refused)  # it ran: the copy is rebuilt without it
        return line if logged else None

    def _undo(self, stopped: _Stopped) -> DurableError:
        """A statement stopped by its bound while it ran may have applied part
        of itself (an INSERT ... SELECT keeps the blocks it wrote): the local
        copy is rebuilt from the committed state and the buffer, as after a
        unit that failed half-run. The error to raise, saying so."""
        self._heal()
        what = str(stopped.error).removesuffix("; nothing changed")
        return type(stopped.error)(
            f"{what}. It was not logged, and the local copy was rebuilt from the committed "
            "state and the buffer, so nothing changed; buffered statements are kept."
        )

    @observed.ack
    def _write_queued(self, planned: list[_Planned]) -> str | None:
        """Run a unit and make it durable. Threads writing at once combine:
        the unit waits in a queue, and whichever thread next takes the lock
        runs every unit queued by then together (`_run_units`: merged
        INSERTs, each unit buffered whole with its own outcome), so threads
        share engine calls as their commits share a round (`group.py`).
        The unit first waits for admission (`admission.py`): a slot of the
        object's `max_units_in_flight`, held until it returns or raises."""
        with self._admission.slot():
            mine = _Queued(planned)
            with self._queue_lock:
                self._queued.append(mine)
            with self._lock:
                if mine.outcome is None:
                    with self._queue_lock:
                        queued, self._queued = self._queued, []
                    outcomes = self._run_units([q.planned for q in queued])
                    for q, done in zip(queued, outcomes, strict=True):
                        q.outcome = done
                outcome = mine.outcome
                assert outcome is not None
                if isinstance(outcome, Exception):
                    raise outcome
                if not self._buf and self._buf.start == outcome:
                    return None  # nothing of the unit logged, nothing else buffered
                return self._durable_through(outcome)

    def _run_unit(self, planned: list[_Planned]) -> int:
        """Run a unit (lock held) and buffer it whole; the position after it."""
        lines: list[bytes] = []
        size = 0
        try:
            for sql, params, allow in planned:
                line = self._run_one(sql, params, allow, size)
                if line is not None:
                    lines.append(line)
                    size += len(line)
        except _Stopped as stopped:
            raise self._undo(stopped) from None
        except BaseException:
            if lines:
                self._heal()
            raise
        return self._buf.add(*lines)

    def _run_units(self, units: list[list[_Planned]]) -> list[int | Exception]:
        """Several units of several callers (lock held), each buffered whole:
        per unit the position after it, or its own error. Units made only of
        batchable INSERTs run in one engine call per target (`_run_merged`);
        any other mix runs unit by unit."""
        merged = self._run_merged(units) if len(units) > 1 else None
        if merged is not None:
            return merged
        outcomes: list[int | Exception] = []
        for planned in units:
            try:
                outcomes.append(self._run_unit(planned))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    def _run_merged(self, units: list[list[_Planned]]) -> list[int | Exception] | None:
        """Run `units` made only of plain `INSERT ... VALUES` into tables where
        one INSERT of rows A+B equals INSERT A then INSERT B and no view
        depends on them (the replay rule, `gate.replay`), grouped by target:
        one engine call per target, and logged in that order, which is the
        order they ran in (rows into one table keep their order; INSERTs into
        independent tables commute). None when they are not all such
        INSERTs, or when a merged INSERT failed (the copy is then rebuilt):
        the caller runs them one by one instead, so each gets its own error.
        A unit the gate refuses gets its error and the others go on."""
        engine = self._require_writable()
        splitter = Replayer(engine, self.db)
        outcomes: list[int | Exception | None] = [None] * len(units)
        groups: dict[str, tuple[list[str], list[bytes]]] = {}
        size = 0
        for i, planned in enumerate(units):
            parts: list[tuple[str, list[str], bytes]] = []
            try:
                for sql, params, allow in planned:
                    self._buf.buf.fits(sql, size)
                    with engine.bounded(self._opts.write_bounds, write=True):
                        sql = self._local.bind(sql, params)
                        text = self._local.prepare(
                            engine, sql, self.db, allow_nondeterministic=allow
                        )
                    split = splitter.split(text)
                    if split is None:
                        return None
                    line = self._buf.buf.admit(text, size)
                    parts.append((split[0], split[1], line))
                    size += len(line)
            except Exception as exc:
                size -= sum(len(line) for _, _, line in parts)
                outcomes[i] = exc
                continue
            for prefix, rows, line in parts:
                group = groups.setdefault(prefix, ([], []))
                group[0].extend(rows)
                group[1].append(line)
        if size > MAX_BATCH_BYTES:
            return None
        ran = False
        try:
            for prefix, (rows, _) in groups.items():
                try:
                    with engine.bounded(self._opts.write_bounds, write=True):
                        engine.run(engine.localize(f"{prefix} {', '.join(rows)}"))
                except Exception as exc:
                    # stopped while it ran, or more than one block: part may be in
                    ran = ran or _half_run(exc) or sum(map(len, rows)) >= ONE_BLOCK_BYTES
                    raise
                ran = True
        except Exception:
            if ran:
                self._heal()
            return None
        end = self._buf.add(*(line for _, lines in groups.values() for line in lines))
        return [end if outcome is None else outcome for outcome in outcomes]

    def _heal(self) -> None:
        """Rebuild the local copy from the committed state and the buffer
        (lock held); on failure the copy stays marked diverged."""
        self._diverged = True
        self._group.idle()
        try:
            lines = self._buf.buf.lines()
            rebuild(self._w, self._local, self._opts, lines, progress=self._progress)
        except Exception as exc:
            raise DurableError(
                f"{self.url}: a unit of work failed after some of its statements ran, and the "
                f"local copy could not be rebuilt from the store ({type(exc).__name__}). Nothing "
                "stored changed and no buffered statement was lost: flush() still commits them. "
                "Reads and writes are refused until a later call rebuilds the copy."
            ) from exc
        self._diverged = False

    def _durable_through(self, target: int) -> str | None:
        """Commit every buffered line before `target` (lock held; released
        while a commit is on the wire); the key of the commit that did."""
        key = self._group.through(target, self._commit_payload)
        self._buf.told()
        if key is None and self._buf.start >= target > 0:
            key = self._buf.last_key
        self._maybe_fold()
        return key

    @observed.flush
    def _commit_payload(self, outgoing: Outgoing) -> str:
        """Publish `outgoing` as the next segment and commit it (lock released)."""
        try:
            ref = publishing.commit_segment(
                self._w, outgoing.lines, frame=outgoing.frame, scratch=self._local.work
            )
        except LeaseFenced as exc:
            self._fenced_by(exc)
            raise
        log.debug("%s: flushed %d statement(s) as %s", self.url, len(outgoing.lines), ref.key)
        return ref.key

    def _maybe_fold(self, segments: int | None = None) -> None:
        raise NotImplementedError  # durability.Durability
