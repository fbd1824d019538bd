"""Async transactions: `async with obj.atransaction() as tx:`.

    async with obj.atransaction() as tx:
        (n,) = (await tx.arows("SELECT max(n) FROM counter"))[0]
        await tx.aexecute("INSERT INTO counter VALUES ({n:UInt32})", params={"n": n + 1})
    # durable here, whole; or (an error in the block) none of it happened

The transaction is `core/transaction.py`'s, with the same semantics; this
is how it runs on a lane. Each step (its begin, each `aexecute()` or read,
its end) is one call of the object's lane, in a worker thread like any
other call, as the transaction's own (`Transaction.admits`). Between steps
no thread is held and the object's lock is free, so the heartbeat renews
the lease while the block awaits something else.

Other tasks' calls on the face must wait for the transaction to end, but
neither in a worker thread each (four local workers blocked are four
objects stalled) nor in the lane's queue, where the transaction's own
steps, which the block awaits, would queue behind them (a deadlock). So
the face's lane sits behind a `Gate`. While a transaction holds the gate,
a call made through the face is parked, in order, as a future no thread
runs; the transaction's steps go to the lane itself; when it ends, the
parked calls go to the lane in the order they were made. A call cancelled
while parked never runs, as one cancelled in the lane's queue. A
transaction waits at the gate as a call does: it begins after every call
made before it and before every call made after it. (Calls of the same
object from other threads, not through this face, wait in the object as
in the sync API.)

Calls on the face from the transaction's own task inside the block (and
from tasks it starts there, which inherit its context) are refused: they
would wait for the block that waits for them. The end of a transaction,
commit or rollback, is a lane call that cancelling the task does not stop:
a task cancelled inside the block rolls back, and the gate opens once that
call has run, whatever became of the task. The commit is `awrite()`'s: the
lines join the buffer in one step, the gate opens, and the face's group
commit makes them durable (the face's group commits, `rounds.py`), so other tasks
go on during the round trip.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from durable_obj.core.queries import Params
from durable_obj.core.surface import Result, Surface, refuse_in_transaction
from durable_obj.core.transaction import Transaction, check_entry, marked
from durable_obj.gate.bounds import Bounds
from durable_obj.gate.classify import speaking_as
from durable_obj.service.lanes import Lane, settle, wait_for
from durable_obj.service.rounds import Rounds

if TYPE_CHECKING:
    from durable_obj.core.object import DurableObject

T = TypeVar("T")
#: A call parked at the gate: its future, the function, its side (io or local).
_Parked = tuple[concurrent.futures.Future[Any], Callable[[], Any], bool]


def _claiming(fut: concurrent.futures.Future[T], fn: Callable[[], T]) -> Callable[[], None]:
    """A parked call as the lane runs it: only if not cancelled by then."""

    return lambda: settle(fut, fn)


class Gate:
    """A face's lane, with a place for transactions (the module docstring).
    `submit` is the lane's; `hold` and `release` are a transaction's, on
    the event loop."""

    def __init__(self, lane: Lane, obj: Surface) -> None:
        self.lane = lane
        self._obj = obj
        self._lock = threading.Lock()
        self._held = False
        self._parked: collections.deque[_Parked | asyncio.Future[None]] = collections.deque()

    def submit(self, fn: Callable[[], T], *, io: bool) -> concurrent.futures.Future[T]:
        """A call of the face: to the lane, or parked while a transaction
        holds the gate (or waits for it)."""
        refuse_in_transaction(self._obj, "a call of the async object itself")
        with self._lock:
            if not self._held and not self._parked:
                return self.lane.submit(fn, io=io)
            fut: concurrent.futures.Future[T] = concurrent.futures.Future()
            self._parked.append((fut, fn, io))
            return fut

    async def hold(self) -> None:
        """Hold the gate: once every call made before went to the lane and
        every transaction that waited before ended."""
        with self._lock:
            if not self._held and not self._parked:
                self._held = True
                return
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._parked.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # handed the gate, cancelled before it woke: pass it on
            raise

    def release(self) -> None:
        """The transaction holding the gate ended: the calls parked behind
        it go to the lane in order, up to the next transaction waiting,
        which holds the gate then."""
        with self._lock:
            self._held = False
            while self._parked:
                item = self._parked.popleft()
                if isinstance(item, asyncio.Future):
                    if item.done():
                        continue  # its task was cancelled while it waited
                    self._held = True
                    item.set_result(None)
                    return
                fut, fn, io = item
                if not fut.cancelled():
                    self.lane.submit(_claiming(fut, fn), io=io)


class AsyncTransaction:
    """The transaction of an `atransaction()` block: `aexecute()` and the
    reads, each one step on the object's lane. `key` names the commit that
    made it durable once the block ended (None: it logged nothing, and
    nothing else was buffered)."""

    def __init__(self, face: AsyncTransactions, gate: Gate) -> None:
        self._face = face
        self._gate = gate
        self._txn = Transaction(face._sync)
        self.key: str | None = None

    async def aexecute(
        self, sql: str, *, params: Params = None, allow_nondeterministic: bool = False
    ) -> None:
        """`Transaction.execute`: runs now, seen by the reads after it,
        durable when the block exits; refused or failed, it rolls the
        transaction back and raises."""
        txn = self._txn
        await self._step("tx.aexecute()", lambda: txn._execute(sql, params, allow_nondeterministic))

    async def aquery(
        self, sql: str, fmt: str = "CSV", *, params: Params = None, bounds: Bounds | None = None
    ) -> Result:
        """`DurableObject.query` inside the transaction."""
        sync = self._face._sync
        return await self._read(
            "tx.aquery()", lambda: sync.query(sql, fmt, params=params, bounds=bounds)
        )

    async def aquery_bytes(
        self,
        sql: str,
        fmt: str = "Parquet",
        *,
        params: Params = None,
        bounds: Bounds | None = None,
    ) -> bytes:
        """`DurableObject.query_bytes` inside the transaction."""
        sync = self._face._sync
        return await self._read(
            "tx.aquery_bytes()", lambda: sync.query_bytes(sql, fmt, params=params, bounds=bounds)
        )

    async def arows(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[tuple[Any, ...]]:
        """`DurableObject.rows` inside the transaction."""
        sync = self._face._sync
        return await self._read("tx.arows()", lambda: sync.rows(sql, params=params, bounds=bounds))

    async def adicts(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[dict[str, Any]]:
        """`DurableObject.dicts` inside the transaction."""
        sync = self._face._sync
        return await self._read(
            "tx.adicts()", lambda: sync.dicts(sql, params=params, bounds=bounds)
        )

    async def aarrow(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.arrow` inside the transaction."""
        sync = self._face._sync
        return await self._read(
            "tx.aarrow()", lambda: sync.arrow(sql, params=params, bounds=bounds)
        )

    async def adf(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.df` inside the transaction."""
        sync = self._face._sync
        return await self._read("tx.adf()", lambda: sync.df(sql, params=params, bounds=bounds))

    async def atables(self) -> list[str]:
        """`DurableObject.tables` inside the transaction."""
        return await self._read("tx.atables()", self._face._sync.tables)

    async def _read(self, call: str, fn: Callable[[], T]) -> T:
        txn = self._txn
        return await self._step(call, lambda: txn._guarded(fn))

    async def _step(self, call: str, fn: Callable[[], T]) -> T:
        with speaking_as(call):  # a refusal names the caller's own call
            return await wait_for(self._submit(fn, io=False))

    def _submit(self, fn: Callable[[], T], *, io: bool) -> concurrent.futures.Future[T]:
        """`fn` as one step: a call of the lane itself (past the gate),
        run under the object's lock as the transaction's own."""
        txn, lock = self._txn, self._face._sync._lock

        def run() -> T:
            with lock:
                txn._owner = threading.get_ident()
                try:
                    return fn()
                finally:
                    txn._owner = None

        return self._gate.lane.submit(run, io=io)

    async def _end(self, ok: bool, task: asyncio.Task[Any] | None) -> int | None:
        """The end step (`Transaction._end`), which no cancellation stops;
        the gate opens once it has run, whatever became of this task."""
        txn, face = self._txn, self._face

        def end() -> int | None:
            target = txn._end(ok)
            if ok and task is not None:
                face._owed.discard(task)  # its commit tells this task a key
            return target

        fut = self._submit(end, io=not ok)  # a rollback may rebuild from the store
        loop, gate = asyncio.get_running_loop(), self._gate

        def opened(_: concurrent.futures.Future[int | None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits at the gate
                loop.call_soon_threadsafe(gate.release)

        fut.add_done_callback(opened)
        waiting = asyncio.wrap_future(fut)
        waiting.add_done_callback(_retrieved)
        return await asyncio.shield(waiting)


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """(an end nobody awaits any more: its task was cancelled) its error,
    if any, was handled where the transaction ended."""
    if not fut.cancelled():
        fut.exception()


def gate_of(face: AsyncTransactions) -> Gate:
    """The face's gate, put in front of its lane on its first transaction."""
    lane = face._lane
    if isinstance(lane, Gate):
        return lane
    gate = face._lane = Gate(lane, face._sync)
    return gate


class AsyncTransactions:
    """`atransaction()` of `AsyncDurableObject`."""

    _sync: DurableObject
    _rounds: Rounds
    _owed: weakref.WeakSet[asyncio.Task[Any]]

    @property
    def _lane(self) -> Lane | Gate:
        """The object's lane, shared by every face over it (two lanes over one
        object deadlocked: a worker holding the turn waited for the object's
        lock, held by the other lane's worker waiting for the turn)."""
        lane: Lane | Gate = self._sync._async_lane
        return lane

    @_lane.setter
    def _lane(self, lane: Lane | Gate) -> None:
        self._sync._async_lane = lane

    async def _durable(self, target: int) -> str | None:
        """Every line before `target` committed by the face's group commits."""
        return await self._rounds.through(target)

    def atransaction(self) -> contextlib.AbstractAsyncContextManager[AsyncTransaction]:
        """`DurableObject.transaction` for this task: the `AsyncTransaction`
        it yields has `aexecute()` and the reads (`aquery`, `arows`,
        `adicts`, ...), each run on this object's lane; its reads see its
        writes. Meanwhile other tasks' calls on this object wait, parked (no
        thread held), and run after it in the order they were made. Ending
        normally, the block's statements are committed as one unit, durable
        when it exits; an exception (cancellation too) rolls all of it back
        and is raised. See `durable_obj.service.transactions`."""
        return _transaction(self)


@contextlib.asynccontextmanager
async def _transaction(face: AsyncTransactions) -> AsyncIterator[AsyncTransaction]:
    check_entry(face._sync)
    gate = gate_of(face)
    await gate.hold()
    tx = AsyncTransaction(face, gate)
    task = asyncio.current_task()
    try:
        await tx._step("atransaction()", tx._txn._begin)
        with marked(face._sync):
            yield tx
    except BaseException:
        await tx._end(False, task)
        raise
    target = await tx._end(True, task)
    if target is not None:
        tx.key = await face._durable(target)
