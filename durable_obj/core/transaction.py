"""Transactions: read, decide, write, with no other write in between.

    with obj.transaction() as tx:
        (balance,) = tx.rows("SELECT sum(delta) FROM ledger WHERE acct = 'alice'")[0]
        if balance < 30:
            raise NotEnough(balance)    # rolled back: nothing happened; re-raised
        tx.execute("INSERT INTO ledger VALUES ('alice', -30), ('bob', 30)")
    # the transfer is durable here, whole; tx.key names its commit

`write()` makes statements one durable unit; a unit that must read first
(a transfer that checks a balance, a counter that takes the next number)
also needs that nothing else writes between its read and its commit:
Cloudflare Durable Objects' `transaction()`, SQLite's `BEGIN IMMEDIATE`.
What was settled, and why:

* Others wait. While a transaction is open, every call of another caller
  that reaches the engine waits for it to end: writes, whose statements
  would otherwise run between the transaction's and be logged before them
  (a replay would then run them in another order than the local copy did),
  and reads, which would see what the transaction may yet roll back;
  `checkpoint()` and `close()` too. The wait is a condition on the object's
  lock: the transaction holds the lock only during its own calls, so the
  heartbeat still renews the lease while the block decides. `flush()` by
  others goes on: it commits what was executed before the transaction,
  which changes nothing the transaction reads. Folding a long WAL into a
  checkpoint waits for the end: a checkpoint now would store statements of
  the transaction that are not logged.
* Statements buffered before the transaction (by `execute()`, of any
  thread) are not part of it. It sees them (they are in the local copy),
  and its commit makes them durable with its own, as `write()`'s does (a
  commit takes a prefix of the buffer): so what a transaction read is
  durable when it returns, even if it wrote nothing. A rollback leaves them
  buffered.
* It sees its own writes: each `tx.execute()` runs at once on the local
  copy, through the gate `execute()` passes (classified, pinned, bounded,
  limited), and keeps its WAL line aside. The lines join the buffer in one
  step when the block ends, so no flush, from any thread, commits part of
  the transaction (`units.py`).
* Rollback, on an exception in the block or a refused or failed
  `tx.execute()`: nothing of it is logged, and if a statement of it
  changed the local copy the copy is rebuilt from the committed state and
  the buffer (`rebuild.py`, as after a failed unit). chDB cannot undo a
  MergeTree write, and a snapshot before every transaction would cost every
  one; a rebuild costs only a failed one that wrote (one that only read
  costs nothing). A failed statement rolls back at once and raises its own
  error (with a note); the transaction is then over: its later calls are
  refused, and a block that caught the error and ends normally raises
  instead of looking committed.
* A failed commit (`CommitAmbiguous`, `BackendError`, `LeaseFenced`) is
  `write()`'s: the error is raised and the transaction stays buffered,
  whole and applied locally, for the next flush to commit. It is not rolled
  back: an ambiguous commit may have landed, and a copy rolled back behind
  a landed commit would disagree with the store. It is never called durable.
* No nesting: a transaction inside another of the same object, inside a
  `batch()` block, or a batch inside it, is `InvalidArgument` (an inner one
  could not be durable on return; a batch's statements run when its block
  ends, after the reads that should see them). Inside the block the
  caller's own writes on the object itself (`execute`, `write`, `batch`,
  `flush`, `checkpoint`, `close`, `snapshot`) are refused too: they would
  escape the transaction or store what it has not committed. Its reads
  through the object see what `tx`'s see.

The async face (`service/transactions.py`) runs this same `Transaction`,
one lane call per step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from durable_obj.core.queries import Params, Queries
from durable_obj.core.surface import _TXN, Result, Surface
from durable_obj.core.units import Units, _Stopped, collecting
from durable_obj.errors import InvalidArgument
from durable_obj.gate.bounds import Bounds
from durable_obj.gate.classify import speaking_as
from durable_obj.replica import turn

T = TypeVar("T")

_NEW, _OPEN, _FAILED, _ENDED = "new", "open", "rolled back", "ended"

ROLLED_BACK = (
    "The transaction was rolled back: nothing of it was logged, and the local copy is as it "
    "was before the transaction began (statements buffered before it are kept)."
)


def check_entry(obj: Surface) -> None:
    """Refuse a transaction this context (thread or task) would open on
    `obj` inside another of its own on `obj`, or inside a batch block."""
    if id(obj) in _TXN.get():
        raise InvalidArgument(
            f"transaction() inside another transaction() of {obj.url} in the same thread or "
            "task: transactions do not nest; put the statements in the outer one. Nothing was run."
        )
    if collecting(obj) is not None:
        raise InvalidArgument(
            f"transaction() inside a batch() block of {obj.url}: the batch's statements run "
            "when its block ends, so the transaction could not see them nor commit after them. "
            "Open the transaction before or after the batch block. Nothing was run."
        )


@contextlib.contextmanager
def marked(obj: Surface) -> Iterator[None]:
    """The block of a transaction this context opened on `obj`: its own
    calls on the object are refused meanwhile (`surface.refuse_in_transaction`)."""
    token = _TXN.set(_TXN.get() | {id(obj)})
    try:
        yield
    finally:
        _TXN.reset(token)


class Transaction:
    """An open transaction: `execute()` and the object's reads, all inside
    it (see the module docstring). `key` names the commit that made it
    durable once its block ended (None: it logged nothing, and nothing
    else was buffered)."""

    def __init__(self, obj: Transactions) -> None:
        self._obj = obj
        self._ended = threading.Event()
        #: The thread whose calls are the transaction's own: the block's,
        #: or (async) the worker running one step.
        self._owner: int | None = None
        self._lines: list[bytes] = []
        self._size = 0
        #: A statement of it changed the local copy.
        self._changed = False
        self._state = _NEW
        self._failure: BaseException | None = None
        self.key: str | None = None

    # -- what other callers see (lock held) --------------------------------------
    def admits(self) -> bool:
        """Whether the calling thread's call is the transaction's own."""
        return self._owner == threading.get_ident()

    def wait(self) -> None:
        """Wait until the transaction ended, the object's lock released
        meanwhile (then taken back as deep: a caller looks again, another
        may have begun). The lock is taken back after an async worker's
        turn, never before: a worker holding the turn may be waiting for
        the lock (the order `group.py` keeps too)."""
        lock: Any = self._obj._lock
        state = lock._release_save()
        try:
            with turn.released():  # (an async worker's turn too: this waits, runs no Python)
                self._ended.wait()
        finally:
            lock._acquire_restore(state)

    # -- the transaction's own calls ----------------------------------------------
    def execute(
        self, sql: str, *, params: Params = None, allow_nondeterministic: bool = False
    ) -> None:
        """Run one mutation in the transaction, now, on the local copy:
        the reads after it see it. Logged when the block ends, durable when
        it exits. Refused or failed, it rolls the whole transaction back
        and raises its error."""
        with speaking_as("tx.execute()"):
            self._execute(sql, params, allow_nondeterministic)

    def _execute(self, sql: str, params: Params, allow_nondeterministic: bool) -> None:
        obj = self._obj
        with obj._lock:
            self._check()
            try:
                line = obj._run_one(sql, params, allow_nondeterministic, self._size)
            except _Stopped as stopped:  # stopped while it ran: part of it may be in
                self._changed = True
                self._fail(stopped.error)
                raise stopped.error from None
            except BaseException as exc:
                self._fail(exc)
                raise
            if line is not None:
                self._lines.append(line)
                self._size += len(line)
                self._changed = True

    def query(
        self, sql: str, fmt: str = "CSV", *, params: Params = None, bounds: Bounds | None = None
    ) -> Result:
        """`DurableObject.query` inside the transaction."""
        return self._read(
            "tx.query()", lambda: self._obj.query(sql, fmt, params=params, bounds=bounds)
        )

    def query_bytes(
        self,
        sql: str,
        fmt: str = "Parquet",
        *,
        params: Params = None,
        bounds: Bounds | None = None,
    ) -> bytes:
        """`DurableObject.query_bytes` inside the transaction."""
        return self._read(
            "tx.query_bytes()",
            lambda: self._obj.query_bytes(sql, fmt, params=params, bounds=bounds),
        )

    def rows(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[tuple[Any, ...]]:
        """`DurableObject.rows` inside the transaction."""
        return self._read("tx.rows()", lambda: self._obj.rows(sql, params=params, bounds=bounds))

    def dicts(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[dict[str, Any]]:
        """`DurableObject.dicts` inside the transaction."""
        return self._read("tx.dicts()", lambda: self._obj.dicts(sql, params=params, bounds=bounds))

    def arrow(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.arrow` inside the transaction."""
        return self._read("tx.arrow()", lambda: self._obj.arrow(sql, params=params, bounds=bounds))

    def df(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.df` inside the transaction."""
        return self._read("tx.df()", lambda: self._obj.df(sql, params=params, bounds=bounds))

    def tables(self) -> list[str]:
        """`DurableObject.tables` inside the transaction."""
        return self._read("tx.tables()", self._obj.tables)

    def _read(self, call: str, fn: Callable[[], T]) -> T:
        with speaking_as(call):
            return self._guarded(fn)

    def _guarded(self, fn: Callable[[], T]) -> T:
        """A read of the object, in the transaction. A read changes nothing:
        a refused or failed one leaves the transaction as it was."""
        with self._obj._lock:
            self._check()
            return fn()

    # -- the machinery (lock held) ---------------------------------------------------
    def _check(self) -> None:
        url = self._obj.url
        if self._state == _OPEN and not self.admits():
            raise InvalidArgument(
                f"{url}: a transaction is used by the thread that opened it (async: through "
                "its own steps), not from another thread, which would wait for its end. "
                "Nothing was run."
            )
        if self._state == _OPEN:
            return
        if self._state == _FAILED:
            raise InvalidArgument(
                f"{url}: this transaction was rolled back by an earlier error "
                f"({type(self._failure).__name__}); end its block. Nothing was run."
            ) from self._failure
        raise InvalidArgument(
            f"{url}: this transaction is {self._state}: a transaction is used inside its "
            "block only. Nothing was run."
        )

    def _begin(self) -> None:
        """Open it: once no other caller's transaction is open (waited out)."""
        obj = self._obj
        obj._require_writable()  # (waits for another's transaction, rebuilds a diverged copy)
        assert obj._txn is None
        obj._txn = self
        self._state = _OPEN

    def _fail(self, exc: BaseException) -> None:
        """A statement was refused or failed: roll back now."""
        self._state = _FAILED
        self._failure = exc
        exc.add_note(ROLLED_BACK)
        self._undo()

    def _undo(self) -> None:
        self._lines, self._size = [], 0
        if self._changed:
            self._changed = False
            self._obj._heal()  # the copy again what the log says, the buffer replayed

    def _end(self, ok: bool) -> int | None:
        """Its block ended, without an error (`ok`) or with one. `ok`: the
        lines join the buffer as one unit; the buffer position to make
        durable (None: nothing to commit). Else it is rolled back. Either
        way other callers go on."""
        obj = self._obj
        if self._state in (_NEW, _ENDED):
            return None  # (async: it never began; its task was cancelled before its turn)
        try:
            if self._state == _FAILED:
                if ok:
                    raise InvalidArgument(
                        f"{obj.url}: the transaction's block ended normally after its "
                        f"{type(self._failure).__name__} rolled it back. Nothing of it was "
                        "committed."
                    ) from self._failure
                return None
            if not ok:
                self._undo()
                return None
            end = obj._buf.add(*self._lines)
            if not obj._buf and obj._buf.start == end:
                return None  # nothing logged, nothing else buffered
            return end
        finally:
            self._state = _ENDED
            if obj._txn is self:
                obj._txn = None
            self._ended.set()


class Transactions(Queries, Units):
    """`transaction()` of `DurableObject`."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A block that reads, decides and writes with no other write of
        this object in between (Cloudflare's `transaction()`, SQLite's
        `BEGIN IMMEDIATE`). The `Transaction` it yields has `execute()` and
        the read methods (`query`, `rows`, `dicts`, ...); its reads see its
        writes. When the block ends normally its statements are committed as
        one unit and are durable when it exits (with whatever was buffered
        before it); an exception in the block, or a refused or failed
        statement, rolls all of it back (nothing logged, the local copy as
        before) and is raised. Meanwhile other threads' calls on the object
        wait for it. See `durable_obj.core.transaction`."""
        check_entry(self)
        tx = Transaction(self)
        with self._lock, speaking_as("transaction()"):
            tx._begin()
            tx._owner = threading.get_ident()
        try:
            with marked(self):
                yield tx
        except BaseException:
            with self._lock:
                tx._end(ok=False)
            raise
        with self._lock:
            end = tx._end(ok=True)
            if end is not None:
                tx.key = self._durable_through(end)
