"""The async face: `await durable_obj.aopen(url)` and `AsyncDurableObject`;
`durable_obj.AsyncPool` (module `pool`) opens many objects on first use.
May import every layer below it (`service` and down), never a face.

    async with await durable_obj.aopen("s3://bucket/agents/alice", owner="svc-1") as obj:
        await obj.aexecute("INSERT INTO memories VALUES ('k', 'v')")
        await obj.aflush()          # the durability boundary, as flush() is
        print(await obj.aquery("SELECT * FROM memories"))

Nothing here runs on the event loop but bookkeeping. Each call runs the
whole sync call (validation, lexing, pinning, chDB, JSON, hashing, the
store's requests) in a worker thread: not only the blocking parts, because
our own Python work on the way would otherwise hold the loop for as long as
it takes (a service that wrapped only the I/O saw the loop stall 42-52 ms).

Threads: one bounded executor shared by every object of the process, not a
thread per object. It has two sides. Local calls (aexecute, awrite's
statements, aquery, atables: lexing, pinning and chDB, no network) run on
`LOCAL_WORKERS` threads, four by default, that take turns (`turn.py`): one
runs at a time, as if there were one thread (every thread running Python at
once is another wait for the loop's thread at the GIL), but once a call's
engine statement has run 20 ms (chDB releases the GIL while it runs) the next
waiting call, of another object, goes on beside it. So a long query or a large
INSERT of one object never holds up the others' calls beyond the engine's own
sharing of the CPU. Storage calls (aopen, aflush, acheckpoint, arefresh,
aclose and awrite's commits), which mostly wait on the network or the disk
with the GIL released, run on up to `IO_WORKERS` threads so that fifty agents'
flushes wait on the store together, not in turn. A service sets
`durable_obj.aio.LOCAL_WORKERS` (and `IO_WORKERS`) before its first async call
to change them. Each object has a *lane*: its calls run one at a time, in the
order they were started (the order their coroutines first ran: the order of
the awaits, or of `create_task`/`gather`), each on whichever thread of its
side is free. A long call of one object (a checkpoint) holds one thread, never
the others' turns. Units of work (`awrite`, `abatch`) queued one behind the
other on a lane run as one call (`lanes.py`), their INSERTs merged per table,
and their commits are group commits: one commit of an object in flight at a
time, taking every unit buffered by then (`group.py`, `rounds.py`).

Backpressure. A write (awrite, abatch, aexecute) first waits for admission:
at most the object's `max_units_in_flight` writes are in flight at once,
tasks and threads alike; the others wait, first come first admitted, holding
no thread, and take their place in the lane when admitted; a unit then,
if `MAX_UNITS_IN_FLIGHT` is set, by the process. Cancelled while it waits, a
write leaves nothing behind (`core/admission.py`).

Cancellation. Cancelling the task that awaits a call cancels the call only if
it has not started: it then never runs (an `aflush` cancelled in the queue
left the buffer intact). A call that has started runs to completion in its
worker thread, and only the awaiting task gets `CancelledError`. Which of the
two is decided inside `task.cancel()` itself (so also by `asyncio.timeout`,
`wait_for` and a cancelled `gather`), atomically with the worker's claim of
the call: a call not yet claimed by a worker when `task.cancel()` returns
never runs, even if the call ahead of it finishes before the loop's next turn.
The commit path publishes a head by one compare-and-swap, so there is never a
half-committed head: a cancelled `aflush` either committed every buffered
statement or left the buffer intact. `await obj.flush_outcome()` says which
(waiting for the worker if it still runs); so do `obj.sync.pending` and
`obj.sync.seq` once `await obj.asettle()` returned. A cancelled `aopen` closes
the object it opened in the background (releasing its lease). Errors are the
sync API's. Transactions (`atransaction`): `durable_obj.service.transactions`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from durable_obj.aio.expiry import AsyncExpiry
from durable_obj.core import admission
from durable_obj.core.feed import Change, achanges
from durable_obj.core.object import DurableObject, Result
from durable_obj.core.queries import Params
from durable_obj.core.units import Batch, Statement, collect, collecting, plan
from durable_obj.errors import InvalidArgument
from durable_obj.gate.bounds import Bounds
from durable_obj.gate.classify import speaking_as
from durable_obj.replica import server
from durable_obj.service import lanes
from durable_obj.service.lanes import FlushOutcome, Lane, UnitCall, start_threads, wait_for
from durable_obj.service.namespace import open as _open_sync
from durable_obj.service.rounds import Rounds
from durable_obj.service.transactions import AsyncTransactions

__all__ = [
    "IO_WORKERS",
    "LOCAL_WORKERS",
    "MAX_UNITS_IN_FLIGHT",
    "OPEN_WORKERS",
    "AsyncDurableObject",
    "FlushOutcome",
    "aopen",
    "preload",
]

T = TypeVar("T")
P = ParamSpec("P")

log = logging.getLogger("durable_obj")

#: Threads for local calls (lexing, pinning, chDB; see the module docstring).
#: Read when the first async call starts.
LOCAL_WORKERS = 4
#: Threads for storage calls (open, flush, checkpoint, refresh, close).
IO_WORKERS = 16
#: Units (awrite, abatch) in flight across every object of the process (None:
#: only each object's own `max_units_in_flight`); read at the first unit. See
#: `core/admission.py` for when it helps.
MAX_UNITS_IN_FLIGHT: int | None = None

#: Threads for opens (`aopen`): each open is mostly Python (the head, the
#: restore, the replay), and sixteen of them at once kept the event loop from
#: the GIL for 50 ms at a time where four kept it under 11 ms, opening 50
#: objects as fast.
OPEN_WORKERS = 4

_opens: list[concurrent.futures.ThreadPoolExecutor] = []
_cold_warned = False
_pools: dict[bool, concurrent.futures.ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _shared_pool(io: bool = True) -> concurrent.futures.ThreadPoolExecutor:
    """The storage side (io) or the local side of the shared executor."""
    with _pools_lock:
        pool = _pools.get(io)
        if pool is None:
            pool = _pools[io] = concurrent.futures.ThreadPoolExecutor(
                max_workers=IO_WORKERS if io else LOCAL_WORKERS,
                thread_name_prefix="durable_obj-aio-io" if io else "durable_obj-aio-local",
            )
        return pool


def _open_pool() -> concurrent.futures.ThreadPoolExecutor:
    with _pools_lock:
        if not _opens:
            _opens.append(
                concurrent.futures.ThreadPoolExecutor(
                    max_workers=OPEN_WORKERS, thread_name_prefix="durable_obj-aio-open"
                )
            )
        return _opens[0]


def preload() -> None:
    """Load chDB and start the process's engine now. Call it before the
    event loop starts (at import, or before `asyncio.run`): loading chDB
    holds the interpreter for ~0.2 s whatever thread does it, so the first
    `aopen` of a process that did not preload stalls a running loop that
    long (it says so in the log, once). It also starts every worker
    thread of the shared executor: a thread pool starts its threads on
    demand, and `Thread.start()` waits until the new thread runs, which on
    a busy interpreter is a stall of the loop that submitted the call."""
    server.start()
    for pool, workers in (
        (_open_pool(), OPEN_WORKERS),
        (_shared_pool(True), IO_WORKERS),
        (_shared_pool(False), LOCAL_WORKERS),
    ):
        start_threads(pool, workers)


class AsyncDurableObject(AsyncExpiry, AsyncTransactions):
    """A `DurableObject` for asyncio code. Use `await durable_obj.aopen(...)`,
    or `AsyncDurableObject.wrap(obj)` for an object already open.

    `sync` is the underlying `DurableObject`: its properties (oid, url, seq,
    pending, read_only, state, ...) are cheap to read from the loop; its
    methods block, so call them from threads only.
    """

    def __init__(self, sync: DurableObject) -> None:
        if not isinstance(sync, DurableObject):
            raise InvalidArgument(
                f"AsyncDurableObject wraps a DurableObject, not {type(sync).__name__}"
            )
        self._sync = sync
        if sync._async_lane is None:  # one lane per object, whatever its faces
            self._lane = Lane(_shared_pool)
        #: Tasks that executed statements through this face since a call of
        #: theirs was told a key (aflush's answer is per task, as flush()'s is
        #: per thread). Touched only by this object's lane, one call at a time.
        self._owed: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._last_flush: concurrent.futures.Future[str | None] | None = None
        #: The group commits `awrite`/`abatch` wait for (`rounds.py`).
        self._rounds = Rounds(sync, _shared_pool)

    @classmethod
    def wrap(cls, sync: DurableObject) -> AsyncDurableObject:
        """An async face over an object already open (opened with
        `durable_obj.open` or `Namespace.open`). Do not mix its blocking
        methods with this face's calls from other threads if call order
        matters: only calls made through one face are ordered."""
        return cls(sync)

    @property
    def sync(self) -> DurableObject:
        return self._sync

    def __repr__(self) -> str:
        return f"AsyncDurableObject({self._sync!r})"

    async def __aenter__(self) -> AsyncDurableObject:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- calls -----------------------------------------------------------------
    def _call(self, fn: Callable[[], T], *, io: bool = True) -> concurrent.futures.Future[T]:
        return self._lane.submit(fn, io=io)

    async def aexecute(
        self, sql: str, *, params: Params = None, allow_nondeterministic: bool = False
    ) -> None:
        """`DurableObject.execute` in a worker: local, NOT durable until aflush()."""
        batch = collecting(self._sync)
        if batch is not None:  # an abatch() block of this task: joins its unit
            batch.execute(sql, params=params, allow_nondeterministic=allow_nondeterministic)
            return
        task = asyncio.current_task()

        def run() -> None:
            self._sync.execute(sql, params=params, allow_nondeterministic=allow_nondeterministic)
            if task is not None:
                self._owed.add(task)

        async with self._sync._admission.aslot():  # a slot until it ran (admission.py)
            await self._read("aexecute()", run)

    async def awrite(
        self, *statements: Statement, params: Params = None, allow_nondeterministic: bool = False
    ) -> str | None:
        """`DurableObject.write`: run `statements` as one unit and make it
        durable; on return every one of them survives the machine, or (an
        error) none of them ran or was kept. Each is a SQL string (bound with
        `params`) or a `(sql, params)` pair. Returns the commit's key.

        The statements run as one call of this object's lane (local work);
        the commit then joins the group commit of this face: one commit of
        the object in flight at a time, taking every unit buffered by then,
        so fifty tasks writing to one object share a few commits and none
        waits behind another's network round trips. If the commit fails the
        unit stays buffered whole (as after a failed aflush): the next flush
        commits it. Inside an `abatch()` block of this task it joins that
        unit instead and returns None."""
        planned = plan(statements, params, allow_nondeterministic)
        batch = collecting(self._sync)
        if batch is not None:
            batch.planned += planned
            return None
        return await self._write(planned, "awrite()")

    @contextlib.asynccontextmanager
    async def abatch(self) -> AsyncIterator[Batch]:
        """`DurableObject.batch` for this task: `aexecute` (or the yielded
        batch's `execute`) inside the block collects statements; when the
        block ends without an error they run as one unit and are durable
        when it exits (`awrite`); if it raises, none of them runs."""
        with collect(self._sync) as (batch, new):
            yield batch
        if new and batch.planned:
            batch.key = await self._write(batch.planned, "abatch()")

    async def _write(self, planned: list[Any], name: str) -> str | None:
        every = admission.process(MAX_UNITS_IN_FLIGHT)  # backpressure: the object's, the process's
        async with self._sync._admission.aslot() as mine, every.aslot() as ours:
            call = UnitCall(self, planned, asyncio.current_task())
            with speaking_as(name):  # the UnitCall itself: the lane merges it with those queued
                return await self._rounds.unit(self._call(call, io=False), mine, ours)

    async def aquery(
        self, sql: str, fmt: str = "CSV", *, params: Params = None, bounds: Bounds | None = None
    ) -> Result:
        """`DurableObject.query` in a worker: local, read-only, nothing logged."""
        query = self._sync.query
        return await self._read("aquery()", query, sql, fmt, params=params, bounds=bounds)

    async def aquery_bytes(
        self,
        sql: str,
        fmt: str = "Parquet",
        *,
        params: Params = None,
        bounds: Bounds | None = None,
    ) -> bytes:
        """`DurableObject.query_bytes` in a worker."""
        query = self._sync.query_bytes
        return await self._read("aquery_bytes()", query, sql, fmt, params=params, bounds=bounds)

    async def arows(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[tuple[Any, ...]]:
        """`DurableObject.rows` in a worker."""
        return await self._read("arows()", self._sync.rows, sql, params=params, bounds=bounds)

    async def adicts(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[dict[str, Any]]:
        """`DurableObject.dicts` in a worker."""
        return await self._read("adicts()", self._sync.dicts, sql, params=params, bounds=bounds)

    async def aarrow(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.arrow` in a worker (a pyarrow.Table)."""
        return await self._read("aarrow()", self._sync.arrow, sql, params=params, bounds=bounds)

    async def adf(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """`DurableObject.df` in a worker (a pandas.DataFrame)."""
        return await self._read("adf()", self._sync.df, sql, params=params, bounds=bounds)

    async def _read(self, call: str, fn: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
        with speaking_as(call):  # a refusal names the caller's own call
            return await wait_for(self._call(lambda: fn(*args, **kw), io=False))

    async def atables(self) -> list[str]:
        """`DurableObject.tables` in a worker."""
        return await wait_for(self._call(self._sync.tables, io=False))

    async def aflush(self) -> str | None:
        """`DurableObject.flush` in a worker: on return, every statement
        executed before the call survives the machine. Returns the new
        segment's key. When nothing was buffered: the key of the last commit
        if this task executed statements since a call of its own was told a
        key (an auto-flush, a checkpoint or another task's aflush committed
        them), once; else None. That is flush()'s answer, per task where the
        sync one is per thread.

        Cancelled while it runs, it still finishes: `flush_outcome()` says
        whether it committed."""
        task = asyncio.current_task()
        fut = self._call(lambda: self._flush(task))
        self._last_flush = fut
        return await wait_for(fut)

    def _flush(self, task: asyncio.Task[Any] | None) -> str | None:
        sync = self._sync
        # The object's own reentrant lock: no auto-flush between the look
        # at the buffer and the flush, so the answer below is exact. (The
        # sync answer is per thread; on a pool thread it would be arbitrary.)
        with sync._lock:
            buffered = sync.pending > 0
            key = sync.flush()
        if not buffered:
            key = self._last_commit_key() if task in self._owed else None
        if task is not None:
            self._owed.discard(task)
        return key

    def _last_commit_key(self) -> str | None:
        head = self._sync.head
        if head is None:
            return None
        manifest = head.manifest
        if manifest.wal:
            return manifest.wal[-1].key
        return None if manifest.base is None else manifest.base.key

    async def flush_outcome(self) -> FlushOutcome | None:
        """The outcome of the last `aflush()` called on this face (None: none
        was), waiting for its worker if it still runs. Cancelling this wait
        cancels nothing."""
        fut = self._last_flush
        if fut is None:
            return None
        if not fut.done():
            await asyncio.wait([asyncio.wrap_future(fut)])
        if fut.cancelled():
            return FlushOutcome(ran=False)
        error = fut.exception()
        if error is not None:
            return FlushOutcome(ran=True, error=error)
        return FlushOutcome(ran=True, key=fut.result())

    async def acheckpoint(self, *, full: bool = False) -> str:
        """`DurableObject.checkpoint` in a worker (the BACKUP, its upload and
        hashing all off the loop). Makes buffered statements durable too."""
        task = asyncio.current_task()

        def run() -> str:
            key = self._sync.checkpoint(full=full)
            if task is not None:
                self._owed.discard(task)
            return key

        return await wait_for(self._call(run))

    async def arefresh(self) -> bool:
        """`DurableObject.refresh` in a worker: a reader's view moves to the newest state."""
        return await wait_for(self._call(self._sync.refresh))

    def achanges(
        self, since: int | None = None, *, follow: bool = True, poll: float | None = None
    ) -> AsyncIterator[Change]:
        """`DurableObject.changes` for `async for`: reads in worker threads."""
        return achanges(*self._sync._feed(since, poll), follow=follow)

    async def asettle(self) -> None:
        """Wait until every call started on this face so far has finished
        (cancelled ones included). Cancelling this wait cancels nothing."""
        fut = self._call(lambda: None, io=False)
        await asyncio.wait([asyncio.wrap_future(fut)])

    async def aclose(self, *, discard: bool = False) -> None:
        """`DurableObject.close` in a worker, after every call queued before
        it: flush, release the lease, drop the local copy."""
        await wait_for(self._call(lambda: self._sync.close(discard=discard)))

    # -- composite calls (for integrations built on this face) -------------------
    async def arun(self, fn: Callable[[], T], *, io: bool = True) -> T:
        """Run `fn()` as ONE call of this object's lane, in order with every
        other call of this face, and return what it returns.

        For work that must not be split: serialization, a read that decides
        a write, the write and its flush (a LangGraph saver's put). `fn`
        uses the blocking methods of `self.sync`; it runs in a worker thread,
        never on the loop. `io=True` for a call that may touch storage
        (flush, checkpoint), False for local work only.

        Cancellation is that of every call here: cancelled before its turn,
        `fn` never runs; once started it runs to completion (a flush inside
        it either commits or leaves the buffer intact) and only the awaiting
        task gets `CancelledError`. Statements `fn` executes do not count
        for `aflush()`'s per-task answer."""
        return await wait_for(self._call(fn, io=io))


async def aopen(
    url: str,
    *,
    owner: str | None = None,
    read_only: bool = False,
    force: bool = False,
    create: bool = True,
    storage_options: dict[str, Any] | None = None,
    at: int | datetime | None = None,
    **options: Any,
) -> AsyncDurableObject:
    """`durable_obj.open` in a worker thread: the same arguments, options
    (`reclaim=True` too) and errors, returning an `AsyncDurableObject`::

        async with await durable_obj.aopen(url, owner="svc-1") as obj: ...

    Cancelled while it opens, the open still finishes in its thread and the
    object is then closed there (its lease released), never left leased;
    cancelled before a worker took it, it never opens.
    """

    def run() -> DurableObject:
        return _open_sync(
            url,
            owner=owner,
            read_only=read_only,
            force=force,
            create=create,
            storage_options=storage_options,
            at=at,
            **options,
        )

    return await _open_on_threads(run)


async def _open_on_threads(run: Callable[[], DurableObject]) -> AsyncDurableObject:
    """`run()`, an open, on the open threads, as `aopen` runs it (and
    `AsyncPool`, which opens through its `Namespace`)."""
    global _cold_warned
    if not server.started() and not _cold_warned:
        _cold_warned = True
        log.info(
            "durable_obj: the first aopen() loads chDB, which holds the interpreter ~0.2 s and "
            "stalls the event loop that long; call durable_obj.aio.preload() before the loop "
            "starts to load it then"
        )
    fut = _open_pool().submit(run)
    try:
        return AsyncDurableObject(await wait_for(fut))
    except asyncio.CancelledError:
        fut.add_done_callback(functools.partial(lanes.close_orphan, _shared_pool()))
        raise
