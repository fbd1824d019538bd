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
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from durable_obj.core.heartbeat import Heartbeat
from durable_obj.core.object import DurableObject
from durable_obj.errors import Closed, DurableError, InvalidArgument, LeaseFenced
from durable_obj.service.namespace import Namespace, check_oid
from durable_obj.stores.base import Store

log = logging.getLogger("durable_obj")

#: Objects kept open at most (exceeded only while every one is in use).
DEFAULT_MAX_OPEN = 64
#: An unused object is closed after this many seconds.
DEFAULT_IDLE_CLOSE = 300.0


class _Entry:
    """One cached id: its object once opened, and how many uses hold it."""

    __slots__ = ("error", "last_used", "obj", "ready", "users")

    def __init__(self, now: float) -> None:
        self.obj: DurableObject | None = None
        self.users = 0
        self.last_used = now
        #: Set when the open has ended, opened or not.
        self.ready = threading.Event()
        self.error = False

    def usable(self) -> bool:
        obj = self.obj
        return obj is not None and not obj.closed and not obj.fenced


class Pool:
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
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise InvalidArgument(f"max_open must be an int >= 1, not {max_open!r}")
        if idle_close is not None and (
            isinstance(idle_close, bool)
            or not isinstance(idle_close, int | float)
            or not idle_close > 0
        ):
            raise InvalidArgument(f"idle_close must be seconds > 0 or None, not {idle_close!r}")
        self.namespace = Namespace(
            namespace_url,
            owner=owner,
            reclaim=reclaim or False,
            storage_options=storage_options,
            **options,
        )
        self.read_only = read_only
        self.reclaim = reclaim
        self.max_open = max_open
        self.idle_close = None if idle_close is None else float(idle_close)
        self._clock = clock
        self._lock = threading.Lock()
        #: Cached ids, least recently used first.
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: Objects dropped from the cache while in use: closed at their last release.
        self._retired: dict[int, _Entry] = {}
        #: Ids whose close is under way, and the event set when it ends.
        self._closing: dict[str, threading.Event] = {}
        self._closed = False
        self._discard = False
        self._timer: Heartbeat | None = None

    @property
    def url(self) -> str:
        return self.namespace.url

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Objects open in the pool now (in use or not)."""
        with self._lock:
            return sum(1 for e in self._entries.values() if e.obj is not None) + len(self._retired)

    def __contains__(self, oid: object) -> bool:
        with self._lock:
            entry = self._entries.get(oid) if isinstance(oid, str) else None
            return entry is not None and entry.usable()

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Pool({self.url!r}, open={len(self)}, max_open={self.max_open})"

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
            with self._lock:
                if self._closed:
                    raise Closed(f"the pool of {self.url} is closed")
                closing = self._closing.get(oid)
                entry = self._entries.get(oid)
                if closing is None and entry is not None and entry.ready.is_set():
                    if entry.usable():
                        entry.users += 1
                        entry.last_used = self._clock()
                        self._entries.move_to_end(oid)
                        break
                    self._drop_locked(oid, entry)  # fenced or closed: reopen
                    entry = None
                if closing is None and entry is None:
                    entry = _Entry(self._clock())
                    entry.users = 1
                    self._entries[oid] = entry
                    opener = True
                else:
                    opener = False
            if closing is not None:
                closing.wait()
                continue
            assert entry is not None
            if not opener:
                entry.ready.wait()  # another thread opens it; then look again
                continue
            try:
                entry.obj = self.namespace.open(oid, read_only=self.read_only)
            except BaseException:
                with self._lock:
                    entry.error = True
                    if self._entries.get(oid) is entry:
                        del self._entries[oid]
                entry.ready.set()
                raise
            entry.ready.set()
            self._start_timer()
            break
        self._maintain()
        return entry

    def _release(self, oid: str, entry: _Entry) -> None:
        to_close: _Entry | None = None
        with self._lock:
            entry.users -= 1
            entry.last_used = self._clock()
            if entry.users == 0:
                if id(entry) in self._retired:
                    to_close = self._retired.pop(id(entry))
                elif self._entries.get(oid) is entry and (self._closed or not entry.usable()):
                    del self._entries[oid]
                    self._closing[oid] = threading.Event()
                    to_close = entry
        if to_close is not None:
            self._close_entry(oid, to_close, self._discard, requeue=False)
        self._maintain()

    def _drop_locked(self, oid: str, entry: _Entry) -> None:
        """Take an unusable entry out of the cache (under the lock); it is
        closed now if unused, else at its last release."""
        del self._entries[oid]
        if entry.users:
            self._retired[id(entry)] = entry
        elif entry.obj is not None and not entry.obj.closed:
            # A fenced object holds no lease: closing it is local only.
            with contextlib.suppress(DurableError):
                entry.obj.close(discard=True)

    # -- eviction ----------------------------------------------------------------
    def sweep(self) -> int:
        """Close the unused objects idle for `idle_close` seconds and those
        beyond `max_open`, least recently used first; the number closed.
        Runs on every use of the pool and on a light timer."""
        return self._maintain()

    def _maintain(self) -> int:
        victims: list[tuple[str, _Entry]] = []
        with self._lock:
            now = self._clock()
            live = sum(1 for e in self._entries.values() if e.obj is not None)
            for oid, entry in list(self._entries.items()):
                if entry.users or entry.obj is None or oid in self._closing:
                    continue
                idle = self.idle_close is not None and now - entry.last_used >= self.idle_close
                if not (idle or live > self.max_open or not entry.usable()):
                    continue
                del self._entries[oid]
                self._closing[oid] = threading.Event()
                victims.append((oid, entry))
                live -= 1
        closed = 0
        for oid, entry in victims:
            closed += self._close_entry(oid, entry, discard=False, requeue=True)
        return closed

    def _close_entry(self, oid: str, entry: _Entry, discard: bool, *, requeue: bool) -> int:
        """Close one entry taken out of the cache (its id marked closing); 1
        if closed. A close that fails leaves the object open with its
        statements buffered: it goes back in the cache (least recently used,
        to be retried first), and the error is logged when `requeue`, else
        raised."""
        obj = entry.obj
        assert obj is not None
        try:
            obj.close(discard=discard)
        except LeaseFenced as exc:  # closed: a fenced writer always closes
            log.warning("pool: %s was fenced and is closed: %s", obj.url, exc)
        except DurableError as exc:
            if obj.closed:
                raise
            with self._lock:
                if oid not in self._entries:
                    self._entries[oid] = entry
                    self._entries.move_to_end(oid, last=False)
            if not requeue:
                raise
            log.warning("pool: could not close %s, kept open to retry: %s", obj.url, exc)
            return 0
        finally:
            with self._lock:
                self._closing.pop(oid).set()
        return 1

    def _start_timer(self) -> None:
        if self.idle_close is None:
            return
        with self._lock:
            if self._timer is not None or self._closed:
                return
            every = min(max(self.idle_close / 4, 1.0), 60.0)
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
        with self._lock:
            self._closed = True
            self._discard = discard
            timer, self._timer = self._timer, None
            victims = [
                (oid, e) for oid, e in self._entries.items() if not e.users and e.obj is not None
            ]
            for oid, _ in victims:
                del self._entries[oid]
                self._closing[oid] = threading.Event()
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
