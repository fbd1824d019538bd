"""AsyncPool: `Pool` for asyncio, a bounded cache of open objects that a
service's tasks share.

    pool = durable_obj.AsyncPool("s3://bucket/tenants", owner="api-1", max_open=64)
    pool.preload()                     # before serving: chDB, threads, the store's client
    async with pool:
        async with pool.object("tenant-7") as obj:      # an AsyncDurableObject
            await obj.awrite("INSERT INTO memories VALUES ('k', 'v')")   # durable here

The rules are `Pool`'s (`durable_obj.service.pool` says them), kept by the
same code (`durable_obj.service.cache`): one object per id; an object in
use is never closed; fenced or closed objects are dropped and reopened; an
id being closed is reopened only once its close released the lease; a
failed close keeps the object, its statements buffered, and is retried.

What is the async pool's own:

* An open belongs to the pool, not to the task that asked: it runs on the
  process's open threads (`durable_obj.aio.OPEN_WORKERS`), at most
  `open_concurrency` of this pool's at once; the rest wait here, in the
  order asked, holding no thread. Tasks asking for an id while it opens
  wait for that open. Cancelling a task cancels its wait only: the open
  goes on, and the object is cached (or closed, if the pool closed).
* Closes (evicted, idle, fenced, the pool's) are the pool's tasks too, so a
  cancelled task never leaves an id half closed; leaving `object()` starts
  evictions and does not wait for them. `await pool.asweep()` runs a sweep
  and waits for it; a timer task on the loop sweeps every `idle_close / 4`
  seconds (1 to 60 s).
* It takes back its own leases: a writer pool with an `owner` opens with
  `reclaim=True` unless told otherwise, so after a crash (kill -9) of the
  process that held its objects under that owner name, the restarted
  service reopens them at once rather than after `lease_ttl`. Give each
  live replica of a service its own owner name: two processes of one name
  would take each other's leases.
* Where the loop waits: the pool makes its `Namespace` (and so its store,
  importing the store's client library: s3fs ~0.3 s) when constructed,
  and its `preload()` loads chDB, builds the store's clients (on S3,
  botocore's ~0.1 s of Python and obstore's, which holds the GIL ~45 ms),
  sends a first request and freezes the heap out of the cyclic GC's
  scans (a full collection held the GIL 42-48 ms). Each holds the
  interpreter whatever thread runs it. Construct the pool and call
  `preload()` before the loop starts, or before the service takes
  requests: the first open then has nothing of the process's to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from durable_obj.aio import AsyncDurableObject, _open_on_threads, preload
from durable_obj.core.object import DurableObject
from durable_obj.errors import DurableError, InvalidArgument
from durable_obj.service.cache import CLOSE, USE, Cache, Entry
from durable_obj.service.namespace import Namespace, check_oid
from durable_obj.service.pool import DEFAULT_IDLE_CLOSE, DEFAULT_MAX_OPEN

if TYPE_CHECKING:
    from durable_obj.stores.base import Store

__all__ = ["DEFAULT_OPEN_CONCURRENCY", "AsyncPool"]

log = logging.getLogger("durable_obj")
T = TypeVar("T")
_Entry = Entry[AsyncDurableObject, asyncio.Event]

#: Opens of one pool at once (each on the process's open threads, which
#: are `durable_obj.aio.OPEN_WORKERS`, four by default, for every opener).
DEFAULT_OPEN_CONCURRENCY = 4


class AsyncPool(Cache[AsyncDurableObject, asyncio.Event]):
    """A bounded cache of open objects of one namespace, for asyncio tasks.

    `namespace_url`: a namespace URL or a `Store`. `owner`, `read_only`,
    `storage_options` and `**options` are those of `Namespace` /
    `durable_obj.open`, for every object the pool opens. `max_open`:
    objects kept open at most (default 64; exceeded only while all are in
    use). `idle_close`: seconds after its last use an unused object is
    closed (default 300; None: never for idleness). `open_concurrency`:
    opens of this pool running at once (default 4). `clock`: the monotonic
    clock idleness is measured with (a test drives it). `reclaim`: as
    `Pool`'s (True: live leases held under `owner` by an earlier process are
    taken at once; a callable: which owners are an earlier self); None, the
    default, is True for a writer pool with an `owner`, else False.

    Use it on one event loop. Everything but `preload()` and the
    constructor is cheap bookkeeping on the loop; opens and closes run on
    worker threads.
    """

    def __init__(
        self,
        namespace_url: str | Store,
        *,
        owner: str | None = None,
        read_only: bool = False,
        max_open: int = DEFAULT_MAX_OPEN,
        idle_close: float | None = DEFAULT_IDLE_CLOSE,
        open_concurrency: int = DEFAULT_OPEN_CONCURRENCY,
        storage_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        reclaim: bool | Callable[[str], bool] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(max_open, idle_close, clock)
        if (
            isinstance(open_concurrency, bool)
            or not isinstance(open_concurrency, int)
            or open_concurrency < 1
        ):
            raise InvalidArgument(f"open_concurrency must be an int >= 1, not {open_concurrency!r}")
        if reclaim is None:
            reclaim = bool(owner) and not read_only
        self.namespace = Namespace(
            namespace_url,
            owner=owner,
            reclaim=reclaim,
            storage_options=storage_options,
            **options,
        )
        self.read_only = read_only
        self.reclaim = reclaim
        self.open_concurrency = open_concurrency
        self._opens = asyncio.Semaphore(open_concurrency)
        #: The pool's tasks (opens, closes) still running.
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The background closes among them.
        self._closes: set[asyncio.Task[int]] = set()
        self._timer: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return self.namespace.url

    def _sync(self, obj: AsyncDurableObject) -> DurableObject:
        return obj.sync

    def _signal(self) -> asyncio.Event:
        return asyncio.Event()

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def preload(self) -> None:
        """Make ready now what the first open would otherwise do while the
        loop runs: `durable_obj.aio.preload()` (chDB, the worker threads),
        the store's clients (`Store.prepare`: on S3, botocore's and
        obstore's) and its first request (a read of the namespace's absent
        `head.json`: the first connection). Blocks: call it before the loop
        starts or before the service takes requests. A store that cannot
        be reached fails here.

        Last, it collects garbage and freezes what is alive (`gc.freeze()`:
        the modules and clients loaded so far are never scanned again; the
        process's, not only this pool's). A full collection of that heap
        (~100,000 objects with S3's clients) took 42-48 ms in which it held
        the GIL, whatever thread ran it: the largest stall of the loop while
        a restarted service reopened 50 objects. `gc.unfreeze()` undoes it."""
        preload()
        store = self.namespace.store
        store.prepare()
        store.get("head.json")
        gc.collect()
        gc.freeze()

    # -- use -------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def object(self, oid: str) -> AsyncIterator[AsyncDurableObject]:
        """The open object `oid` as an `AsyncDurableObject`, opened (as the
        pool's writer or reader) on first use and kept for the next; not
        closed while this block runs. Leaving the block does not flush:
        `awrite` is durable on return, `aexecute` needs `aflush()` (the pool
        flushes when it closes the object)."""
        entry = await self._acquire(check_oid(oid))
        try:
            assert entry.obj is not None
            yield entry.obj
        finally:
            await self._release(oid, entry)

    async def _acquire(self, oid: str) -> _Entry:
        while True:
            what, entry, signal = self._claim(oid)
            if what == USE and entry is not None:
                break
            if signal is not None:  # WAIT: a close or another task's open ends first
                await signal.wait()
                continue
            assert entry is not None
            if what == CLOSE:
                await self._run(self._close_entry(oid, entry, discard=True, requeue=None))
                continue
            opening = self._spawn(self._open(oid, entry))
            try:
                await asyncio.shield(opening)
            except asyncio.CancelledError:  # the open goes on: this use ends with it
                self._spawn(self._release_after(opening, oid, entry))
                raise
            break
        self._maintain()
        return entry

    async def _open(self, oid: str, entry: _Entry) -> None:
        open_one = functools.partial(self.namespace.open, oid, read_only=self.read_only)
        try:
            async with self._opens:
                obj = await _open_on_threads(open_one)
        except BaseException:
            self._open_failed(oid, entry)
            raise
        self._opened(entry, obj)
        self._start_timer()

    async def _release(self, oid: str, entry: _Entry) -> None:
        to_close = self._unuse(oid, entry)
        if to_close is not None:
            await self._run(self._close_entry(oid, to_close, self._discard, requeue=False))
        self._maintain()

    async def _release_after(self, opening: asyncio.Task[None], oid: str, entry: _Entry) -> None:
        """The use of a cancelled ask, released when its open ends. A task of
        the pool from the moment of the cancel (not a callback of the open's,
        which made its task only later): `aclose()` waits for it, and so for
        the close it owes once the pool is closed."""
        await asyncio.wait([opening])
        await self._release(oid, entry)

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """`work` as a task of the pool: it runs to its end whoever awaits it."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, work: Coroutine[Any, Any, T]) -> T:
        """Await `work`, a task of the pool: cancelling the caller cancels its wait only."""
        return await asyncio.shield(self._spawn(work))

    # -- eviction ----------------------------------------------------------------
    async def asweep(self) -> int:
        """Close the unused objects idle for `idle_close` seconds and those
        beyond `max_open`, least recently used first, and wait for it and
        for the closes already under way; the number this sweep closed.
        Every use of the pool starts a sweep without waiting for it, and a
        timer task runs one every `idle_close / 4` seconds."""
        under_way = list(self._closes)
        closes = [self._close_later(oid, entry) for oid, entry in self._victims()]
        if under_way:
            await asyncio.wait(under_way)
        return sum(await asyncio.gather(*closes)) if closes else 0

    def _maintain(self) -> None:
        for oid, entry in self._victims():
            self._close_later(oid, entry)

    def _close_later(self, oid: str, entry: _Entry) -> asyncio.Task[int]:
        """A background close (evicted, idle): its failure is logged, the object kept."""
        task = self._spawn(self._close_entry(oid, entry, discard=False, requeue=True))
        self._closes.add(task)
        task.add_done_callback(self._closes.discard)
        task.add_done_callback(_log_failure)
        return task

    async def _close_entry(
        self, oid: str, entry: _Entry, discard: bool, *, requeue: bool | None
    ) -> int:
        """Close one entry taken out of the cache (`Cache._close_ended`)."""
        assert entry.obj is not None
        try:
            await entry.obj.aclose(discard=discard)
        except BaseException as exc:
            return self._close_ended(oid, entry, exc, requeue=requeue)
        return self._close_ended(oid, entry, None, requeue=requeue)

    def _start_timer(self) -> None:
        every = self._timer_every()
        if every is None or self._timer is not None or self._closed:
            return
        self._timer = self._spawn(self._sweep_every(every))

    async def _sweep_every(self, every: float) -> None:
        while not self._closed:
            await asyncio.sleep(every)
            with contextlib.suppress(DurableError):
                await self.asweep()

    # -- close -------------------------------------------------------------------
    async def aclose(self, *, discard: bool = False) -> None:
        """Close every cached object: flush it and release its lease (with
        `discard=True`, drop unflushed statements instead of flushing), and
        wait for the pool's closes under way. An object in use (or still
        opening) is closed when its `async with` block ends. Later
        `pool.object()` calls raise `Closed`.

        Every object is attempted; the first error is raised after all were
        tried, and an object whose flush failed stays in the pool, open with
        its statements buffered: call aclose() again, or aclose(discard=True).
        """
        victims = self._close_all(discard)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        closes = [
            self._spawn(self._close_entry(oid, entry, discard, requeue=False))
            for oid, entry in victims
        ]
        running = [t for t in self._tasks if t is not timer and t not in closes]
        outcomes = await asyncio.shield(asyncio.gather(*closes, return_exceptions=True))
        if running:
            await asyncio.wait(running)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


def _log_failure(task: asyncio.Task[int]) -> None:
    """A background close that failed other than as `_close_ended` logs."""
    if not task.cancelled() and task.exception() is not None:
        log.error("pool: a close failed", exc_info=task.exception())
