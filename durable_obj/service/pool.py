"""Pool: a bounded cache of open objects, for a service that serves many
agents or users from one process.

    pool = durable_obj.Pool("s3://bucket/agents", owner="api-1", max_open=64)
    with pool.object("user-42") as obj:      # opened on first use, then cached
        obj.execute("INSERT INTO memories VALUES (...)")
        obj.flush()
    pool.close()                             # flush + release every lease

Why a cache: opening an object downloads and replays it, and a writer takes
its lease. A service that opens and closes per request pays that on every
request; one that never closes holds every lease it ever took. The pool
keeps the recently used objects open (each keeps its lease, renewed by the
process's one heartbeat scheduler) and closes, with a flush and a lease
release, the least recently used beyond `max_open` and the ones unused for
`idle_close` seconds.

The rules it keeps:

* One object per id: two threads asking for the same id at once get the
  same object (opened once; the other waits for that open). Its calls are
  serialised by the object's own lock.
* An object inside a `with pool.object(...)` is never closed under it.
  Eviction picks only unused objects; when every cached object is in use,
  the pool goes over `max_open` for as long as that lasts rather than wait
  (a thread holding two objects at once could otherwise wait forever), and
  comes back under it as uses end.
* An object that got fenced (another writer took its lease, or it could not
  renew) or closed by its user is dropped and reopened on the next use.
* An id being closed (evicted, idle) is reopened only after that close has
  released its lease, so the reopen does not meet its own lease.
* A close that fails (the flush could not reach the store) keeps the object
  cached, its statements buffered, and is retried at the next sweep.
* Idle objects are closed on every use of the pool and by a light timer on
  the process's heartbeat scheduler (no thread of its own, none per object).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from durable_obj.core.heartbeat import Heartbeat
from durable_obj.core.object import DurableObject
from durable_obj.errors import DurableError
from durable_obj.service.cache import CLOSE, USE, Cache, Entry
from durable_obj.service.namespace import Namespace, check_oid
from durable_obj.stores.base import Store

_Entry = Entry[DurableObject, threading.Event]

#: Objects kept open at most (exceeded only while every one is in use).
DEFAULT_MAX_OPEN = 64
#: An unused object is closed after this many seconds.
DEFAULT_IDLE_CLOSE = 300.0


class Pool(Cache[DurableObject, threading.Event]):
    """A bounded, thread-safe cache of open objects of one namespace.

    `namespace_url`: a namespace URL or a `Store`. `owner`, `read_only`,
    `storage_options` and `**options` are those of `Namespace` /
    `durable_obj.open`, for every object the pool opens. `max_open`: objects
    kept open at most (default 64; exceeded only while all are in use).
    `idle_close`: seconds after its last use an unused object is closed
    (default 300; None: never for idleness). `clock`: the monotonic clock
    idleness is measured with (a test drives it). `reclaim`: True when
    `owner` is this pool's identity (a service replica restarted under the
    same name): a live lease an earlier process held under that name is
    taken at once (`durable_obj.open`); or a callable, for a pool inside a
    supervised host restarted under a new owner name each time (see
    `Namespace.open`), saying which live leases are an earlier self's.
    Either way instead of waiting for them to expire; True without `owner`
    is `InvalidArgument`.

    A read-only pool's cached objects see new writes only on `obj.refresh()`.

    A pool serving SQL it does not trust (tenants, a model through MCP)
    bounds both sides: `Pool(url, owner=..., query_bounds=Bounds(seconds=10,
    memory_bytes=1 << 30), write_bounds=Bounds(seconds=10, memory_bytes=1 <<
    30))`: every read and every statement written then stops at its bound,
    planning included, and a write stopped is `Timeout` with nothing logged.
    """

    def __init__(
        self,
        namespace_url: str | Store,
        *,
        owner: str | None = None,
        read_only: bool = False,
        max_open: int = DEFAULT_MAX_OPEN,
        idle_close: float | None = DEFAULT_IDLE_CLOSE,
        storage_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        reclaim: bool | Callable[[str], bool] | None = False,
        **options: Any,
    ) -> None:
        super().__init__(max_open, idle_close, clock)
        self.namespace = Namespace(
            namespace_url,
            owner=owner,
            reclaim=reclaim or False,
            storage_options=storage_options,
            **options,
        )
        self.read_only = read_only
        self.reclaim = reclaim
        self._timer: Heartbeat | None = None

    @property
    def url(self) -> str:
        return self.namespace.url

    def _sync(self, obj: DurableObject) -> DurableObject:
        return obj

    def _signal(self) -> threading.Event:
        return threading.Event()

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- use -------------------------------------------------------------------
    @contextlib.contextmanager
    def object(self, oid: str) -> Iterator[DurableObject]:
        """The open object `oid`, opened (as the pool's writer or reader) on
        first use and kept for the next; not closed while this block runs.
        Leaving the block does not flush: call `obj.flush()` for durability
        (the pool flushes when it closes the object)."""
        entry = self._acquire(check_oid(oid))
        try:
            assert entry.obj is not None
            yield entry.obj
        finally:
            self._release(oid, entry)

    def _acquire(self, oid: str) -> _Entry:
        while True:
            what, entry, signal = self._claim(oid)
            if what == USE and entry is not None:
                break
            if signal is not None:  # WAIT: a close or another thread's open ends first
                signal.wait()
                continue
            assert entry is not None
            if what == CLOSE:
                self._close_entry(oid, entry, discard=True, requeue=None)
                continue
            try:
                obj = self.namespace.open(oid, read_only=self.read_only)
            except BaseException:
                self._open_failed(oid, entry)
                raise
            self._opened(entry, obj)
            self._start_timer()
            break
        self._maintain()
        return entry

    def _release(self, oid: str, entry: _Entry) -> None:
        to_close = self._unuse(oid, entry)
        if to_close is not None:
            self._close_entry(oid, to_close, self._discard, requeue=False)
        self._maintain()

    # -- eviction ----------------------------------------------------------------
    def sweep(self) -> int:
        """Close the unused objects idle for `idle_close` seconds and those
        beyond `max_open`, least recently used first; the number closed.
        Runs on every use of the pool and on a light timer."""
        return self._maintain()

    def _maintain(self) -> int:
        return sum(
            self._close_entry(oid, entry, discard=False, requeue=True)
            for oid, entry in self._victims()
        )

    def _close_entry(
        self,
        oid: str,
        entry: _Entry,
        discard: bool,
        *,
        requeue: bool | None,
    ) -> int:
        """Close one entry taken out of the cache (`Cache._close_ended`)."""
        assert entry.obj is not None
        try:
            entry.obj.close(discard=discard)
        except BaseException as exc:
            return self._close_ended(oid, entry, exc, requeue=requeue)
        return self._close_ended(oid, entry, None, requeue=requeue)

    def _start_timer(self) -> None:
        every = self._timer_every()
        with self._lock:
            if every is None or self._timer is not None or self._closed:
                return
            self._timer = Heartbeat(self._on_timer, every, name=f"pool {self.url}")
        self._timer.start()

    def _on_timer(self) -> bool:
        if self._closed:
            return False
        with contextlib.suppress(DurableError):
            self._maintain()
        return True

    # -- close -------------------------------------------------------------------
    def close(self, *, discard: bool = False) -> None:
        """Close every cached object: flush it and release its lease (with
        `discard=True`, drop unflushed statements instead of flushing). An
        object still in use is closed when its `with` block ends. Later
        `pool.object()` calls raise `Closed`.

        Every object is attempted; the first error is raised after all were
        tried, and an object whose flush failed stays in the pool, open with
        its statements buffered: call close() again, or close(discard=True).
        """
        victims = self._close_all(discard)
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.stop()
        first: DurableError | None = None
        for oid, entry in victims:
            try:
                self._close_entry(oid, entry, discard, requeue=False)
            except DurableError as exc:
                first = first or exc
        if first is not None:
            raise first
