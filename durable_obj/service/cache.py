"""The bookkeeping of a pool of open objects, whoever waits on it.

`Pool` (threads) and `durable_obj.aio.AsyncPool` (one event loop) keep the
same rules (`pool.py`'s docstring says them). `Cache` makes every decision
under one short lock and never waits, opens or closes anything itself: it
hands back what to wait for, what to open and what to close, and the pool
that uses it opens, closes and waits its own way (a thread blocks on a
`threading.Event`; a task awaits an `asyncio.Event`). So the rules are
written once and the two pools cannot drift apart.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from durable_obj.core.object import DurableObject
from durable_obj.errors import Closed, DurableError, InvalidArgument, LeaseFenced

log = logging.getLogger("durable_obj")

T = TypeVar("T")


class Signal(Protocol):
    """What a waiter waits on: a `threading.Event` or an `asyncio.Event`."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


S = TypeVar("S", bound=Signal)


class Entry(Generic[T, S]):
    """One cached id: its object once opened, and how many uses hold it."""

    __slots__ = ("error", "last_used", "obj", "ready", "users")

    def __init__(self, now: float, ready: S) -> None:
        self.obj: T | None = None
        self.users = 0
        self.last_used = now
        #: Set when the open has ended, opened or not.
        self.ready = ready
        self.error = False


#: `Cache.claim`'s answers: the entry is the caller's to use, or to open
#: (its open is the caller's), or the caller waits for the signal and asks
#: again; "close" first closes a dropped object (fenced or closed) with
#: `discard=True`, then asks again.
USE, OPEN, WAIT, CLOSE = "use", "open", "wait", "close"


def check_limits(max_open: object, idle_close: object) -> float | None:
    """`max_open` and `idle_close` checked; `idle_close` as float seconds (or None)."""
    if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
        raise InvalidArgument(f"max_open must be an int >= 1, not {max_open!r}")
    if idle_close is None:
        return None
    if isinstance(idle_close, bool) or not isinstance(idle_close, int | float):
        raise InvalidArgument(f"idle_close must be seconds > 0 or None, not {idle_close!r}")
    if not idle_close > 0:
        raise InvalidArgument(f"idle_close must be seconds > 0 or None, not {idle_close!r}")
    return float(idle_close)


class Cache(abc.ABC, Generic[T, S]):
    """The cached objects of one pool and the rules they are kept by.

    A subclass gives `url`, `_sync` (the `DurableObject` of a cached object)
    and `_signal` (a new, unset event of its kind)."""

    def __init__(self, max_open: int, idle_close: float | None, clock: Callable[[], float]) -> None:
        self.idle_close = check_limits(max_open, idle_close)
        self.max_open = max_open
        self._clock = clock
        self._lock = threading.Lock()
        #: Cached ids, least recently used first.
        self._entries: OrderedDict[str, Entry[T, S]] = OrderedDict()
        #: Objects dropped from the cache while in use: closed at their last release.
        self._retired: dict[int, Entry[T, S]] = {}
        #: Ids whose close is under way, and the signal set when it ends.
        self._closing: dict[str, S] = {}
        self._closed = False
        self._discard = False

    @property
    @abc.abstractmethod
    def url(self) -> str: ...

    @abc.abstractmethod
    def _sync(self, obj: T) -> DurableObject:
        """The object underneath a cached object."""

    @abc.abstractmethod
    def _signal(self) -> S: ...

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
            return entry is not None and self._usable(entry)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, open={len(self)}, max_open={self.max_open})"

    def _usable(self, entry: Entry[T, S]) -> bool:
        if entry.obj is None:
            return False
        obj = self._sync(entry.obj)
        return not obj.closed and not obj.fenced

    # -- use -------------------------------------------------------------------
    def _claim(self, oid: str) -> tuple[str, Entry[T, S] | None, S | None]:
        """Take a use of `oid`, or say what comes first (`USE`, `OPEN`,
        `WAIT`, `CLOSE`). USE and OPEN count the caller as a user of the
        entry (an open that fails calls `_open_failed`); CLOSE marks the id
        closing, and the caller closes the entry, then calls `_close_ended`."""
        with self._lock:
            if self._closed:
                raise Closed(f"the pool of {self.url} is closed")
            closing = self._closing.get(oid)
            if closing is not None:
                return WAIT, None, closing
            entry = self._entries.get(oid)
            if entry is not None and not entry.ready.is_set():
                return WAIT, None, entry.ready  # another caller opens it; then look again
            if entry is not None and self._usable(entry):
                entry.users += 1
                entry.last_used = self._clock()
                self._entries.move_to_end(oid)
                return USE, entry, None
            if entry is not None:  # fenced or closed: dropped, reopened
                del self._entries[oid]
                if entry.users:  # closed at its last release
                    self._retired[id(entry)] = entry
                elif entry.obj is not None and not self._sync(entry.obj).closed:
                    self._closing[oid] = self._signal()  # a fenced object holds no lease
                    return CLOSE, entry, None
            entry = Entry(self._clock(), self._signal())
            entry.users = 1
            self._entries[oid] = entry
            return OPEN, entry, None

    def _opened(self, entry: Entry[T, S], obj: T) -> None:
        entry.obj = obj
        entry.ready.set()

    def _open_failed(self, oid: str, entry: Entry[T, S]) -> None:
        with self._lock:
            entry.error = True
            if self._entries.get(oid) is entry:
                del self._entries[oid]
        entry.ready.set()

    def _unuse(self, oid: str, entry: Entry[T, S]) -> Entry[T, S] | None:
        """End one use of `entry`; the entry to close now (its id marked
        closing) if that was the last use of an object that must go."""
        with self._lock:
            entry.users -= 1
            entry.last_used = self._clock()
            if entry.users or entry.obj is None:
                return None
            if id(entry) in self._retired:
                return self._retired.pop(id(entry))
            if self._entries.get(oid) is entry and (self._closed or not self._usable(entry)):
                del self._entries[oid]
                self._closing[oid] = self._signal()
                return entry
            return None

    # -- eviction ----------------------------------------------------------------
    def _victims(self) -> list[tuple[str, Entry[T, S]]]:
        """The unused objects to close now (idle for `idle_close`, beyond
        `max_open`, least recently used first, or no longer usable), taken
        out of the cache with their ids marked closing."""
        victims: list[tuple[str, Entry[T, S]]] = []
        with self._lock:
            now = self._clock()
            live = sum(1 for e in self._entries.values() if e.obj is not None)
            for oid, entry in list(self._entries.items()):
                if entry.users or entry.obj is None or oid in self._closing:
                    continue
                idle = self.idle_close is not None and now - entry.last_used >= self.idle_close
                if not (idle or live > self.max_open or not self._usable(entry)):
                    continue
                del self._entries[oid]
                self._closing[oid] = self._signal()
                victims.append((oid, entry))
                live -= 1
        return victims

    def _close_ended(
        self, oid: str, entry: Entry[T, S], exc: BaseException | None, *, requeue: bool | None
    ) -> int:
        """After a close of `entry` (taken out, its id marked closing), which
        raised `exc` or None: 1 if it is closed. A close that failed leaves
        the object open with its statements buffered: it goes back in the
        cache (least recently used, to be retried first), and the error is
        logged when `requeue`, else raised. `requeue=None`: an object dropped
        as fenced or closed (`CLOSE`), closed if it can be, never kept.
        Either way the id's closing ends."""
        try:
            if exc is None or (requeue is None and isinstance(exc, DurableError)):
                return 1
            assert entry.obj is not None
            obj = self._sync(entry.obj)
            if isinstance(exc, LeaseFenced):  # closed: a fenced writer always closes
                log.warning("pool: %s was fenced and is closed: %s", obj.url, exc)
                return 1
            if not isinstance(exc, DurableError) or obj.closed:
                raise exc
            with self._lock:
                if oid not in self._entries:
                    self._entries[oid] = entry
                    self._entries.move_to_end(oid, last=False)
            if not requeue:
                raise exc
            log.warning("pool: could not close %s, kept open to retry: %s", obj.url, exc)
            return 0
        finally:
            with self._lock:
                self._closing.pop(oid).set()

    def _timer_every(self) -> float | None:
        """How often the idle timer runs (None: no idle closing)."""
        if self.idle_close is None:
            return None
        return min(max(self.idle_close / 4, 1.0), 60.0)

    # -- close -------------------------------------------------------------------
    def _close_all(self, discard: bool) -> list[tuple[str, Entry[T, S]]]:
        """The pool closes: every unused object, taken out to be closed now;
        those in use are closed at their last release."""
        with self._lock:
            self._closed = True
            self._discard = discard
            victims = [
                (oid, e) for oid, e in self._entries.items() if not e.users and e.obj is not None
            ]
            for oid, _ in victims:
                del self._entries[oid]
                self._closing[oid] = self._signal()
        return victims
