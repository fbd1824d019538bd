"""Followers: read-only objects kept current by the process's one heartbeat.

    open(url, read_only=True, follow=1.0, on_change=print)

A follower is a reader whose `refresh()` is called for it, every `follow`
seconds, by the heartbeat scheduler that already renews every writer's lease
(`heartbeat.py`): no thread per object. One poll is one conditional read of
`head.json` (`Store.get_if_changed`): while nothing was committed that is
one request without a body, never a listing. When the head moved, each
follower's view moves as `refresh()` moves it (the new segments replayed, or
the new base restored) and its `on_change` is called with an `Update`.

Followers of one object in one process share one poll: the registry keys a
`_Poll` by (store URL, object id, interval), and the poll hands the head it
read to every follower: N followers cost one request per interval while
nothing changes, and when something was committed one read of the head plus
each follower's own reads of what is new.

What a follower never does: take a lease, write, or wait on its object's
lock on a shared worker (a follower busy with a long query is asked again a
moment later, `BUSY`). What a failure does:

* the network (`BackendError`, `Timeout`): logged, and tried again at the
  next interval; the view stays where it was;
* anything else (`Corrupt`, `NotFound`: the head or a segment gone or
  altered; `ProtocolUnsupported`, `EngineIncompatible`): following stops,
  and the next call on the object raises it, once, saying that the view
  stays at the last seq it reached (`refresh()` tries again; reopen to
  follow again). A failure while applying closes the object, as it does
  for `refresh()`.

`on_change` runs on a heartbeat worker, outside the object's lock (it may
query the object); what it raises is logged, never fatal to the follower.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from durable_obj.core.heartbeat import BUSY, Heartbeat
from durable_obj.core.readback import Stored
from durable_obj.errors import BackendError, DurableError, InvalidArgument, NotFound, Timeout
from durable_obj.stores.base import UNCHANGED
from durable_obj.wire.head import Head
from durable_obj.wire.protocol import head_key

if TYPE_CHECKING:
    from durable_obj.core.object import DurableObject

log = logging.getLogger("durable_obj")

#: Errors a follower outlives: tried again at the next interval.
TRANSIENT = (BackendError, Timeout)


@dataclass(frozen=True)
class Update:
    """What `on_change` is called with: the view of `url` moved from seq
    `previous` to seq `seq`; `rebased` when a new base was restored (a
    checkpoint, a fold) rather than new WAL segments replayed."""

    url: str
    seq: int
    previous: int
    rebased: bool


def check(obj: DurableObject, *, read_only: bool, at: object) -> None:
    """`InvalidArgument` for `follow=` on a writer or a past view."""
    if obj._opts.follow is None:
        return
    if not read_only:
        raise InvalidArgument(
            f"{obj.url}: follow= keeps a read-only view current; a writer's copy is always "
            "the newest state and never follows. Open with read_only=True to follow, or "
            "drop follow=. Nothing was opened."
        )
    if at is not None:
        raise InvalidArgument(
            f"{obj.url}: follow= and at= do not mix: a view opened at a past point never "
            "moves. Nothing was opened."
        )


class _Poll:
    """One conditional read of one head per interval, for its followers."""

    def __init__(self, key: tuple[str, str, float], obj: DurableObject, latest: Stored) -> None:
        self.key = key
        self.store = obj._w.store
        self.oid = obj.oid
        self.url = obj.url
        self.latest = latest
        self.followers: weakref.WeakSet[DurableObject] = weakref.WeakSet()
        self.hb = Heartbeat(self._beat, key[2], name=f"durable_obj-follow-{self.oid}")

    def _beat(self) -> bool | Literal["busy"]:
        try:
            return self._poll()
        except Exception:  # never let a bug end the poll its followers wait on
            log.exception("%s: following: a poll failed, will retry", self.url)
            return True

    def _poll(self) -> bool | Literal["busy"]:
        with _LOCK:
            followers = list(self.followers)
            if not followers:
                return self._retire()
        read_at = time.monotonic()  # a view at what this read finds was current then
        try:
            got = self.store.get_if_changed(head_key(self.oid), self.latest.version)
            if got is not None and got is not UNCHANGED:
                self.latest = Stored(Head.parse(got.data, self.url), got.version)
        except TRANSIENT as exc:
            log.info("%s: following: reading the head failed, will retry: %s", self.url, exc)
            return True
        except DurableError as exc:  # a head we cannot read: every follower stops
            return self._fail_all(exc)
        if got is None:
            gone = NotFound(f"no durable object at {self.url} any more (no head.json)")
            return self._fail_all(gone)
        busy = False
        for obj in followers:
            busy = _step(obj, self.latest, read_at) == BUSY or busy
            del obj
        return BUSY if busy else True

    def _fail_all(self, exc: DurableError) -> bool:
        with _LOCK:  # every follower, one that joined since included
            for obj in list(self.followers):
                _stop(obj, exc)
            return self._retire()

    def _retire(self) -> bool:
        """(registry lock held) Leave the registry: no follower is left."""
        if _POLLS.get(self.key) is self:
            del _POLLS[self.key]
        return False


_LOCK = threading.RLock()
#: (store URL, object id, interval) -> the poll its followers share.
_POLLS: dict[tuple[str, str, float], _Poll] = {}


def join(obj: DurableObject) -> None:
    """Start following: join the poll of `obj`'s head (or start one)."""
    interval = obj._opts.follow
    assert interval is not None and obj._w.head is not None and obj._w.version is not None
    key = (obj._w.store.url, obj.oid, float(interval))
    with _LOCK:
        poll = _POLLS.get(key)
        start = poll is None
        if poll is None:
            poll = _POLLS[key] = _Poll(key, obj, Stored(obj._w.head, obj._w.version))
        poll.followers.add(obj)
        obj._follow_poll = poll
        obj._follow_current = time.monotonic()  # open() just read the head
    if start:
        poll.hb.start()


def leave(obj: DurableObject) -> None:
    """Stop following (close): the poll stops by itself with no follower left."""
    poll = obj.__dict__.get("_follow_poll")
    if poll is None:
        return
    with _LOCK:
        poll.followers.discard(obj)
        obj._follow_poll = None


def polls() -> int:
    """Polls running now (for tests: followers of one object share one)."""
    with _LOCK:
        return len(_POLLS)


def _stop(obj: DurableObject, exc: BaseException) -> None:
    """Following ends for `obj`; its next call raises `exc`, once."""
    leave(obj)
    seq = obj.seq
    log.warning("%s: stopped following at seq %d: %s: %s", obj.url, seq, type(exc).__name__, exc)
    kind = type(exc) if isinstance(exc, DurableError) else DurableError
    note = kind(
        f"{obj.url}: following stopped at seq {seq}: {exc}. The view stays at seq {seq}; "
        "a refresh tries again; close and reopen the object to follow again."
    )
    note.__cause__ = exc
    obj._follow_error = note


def _step(obj: DurableObject, latest: Stored, read_at: float) -> bool | Literal["busy"]:
    """Move one follower's view to `latest` (the head its poll read at
    `read_at`, monotonic); a view found or moved there was current then."""
    if obj.closed or _there(obj, latest):
        _current(obj, read_at)
        return True  # (read without the lock: checked again under it)
    if not obj._lock.acquire(blocking=False):
        return BUSY  # a long query of the caller's: again in a moment, never wait
    try:
        if obj.closed or obj.__dict__.get("_follow_poll") is None or _there(obj, latest):
            _current(obj, read_at)
            return True
        previous, base = obj.seq, None if obj._w.head is None else obj._w.head.manifest.base
        try:
            moved = obj._refresh_locked(latest)
        except TRANSIENT as exc:
            log.info("%s: following: refresh failed, will retry: %s", obj.url, exc)
            return True
        except Exception as exc:  # Corrupt, NotFound, ...: stop, and say so next call
            _stop(obj, exc)
            return True
        _current(obj, read_at)
        head = obj._w.head
        rebased = head is not None and head.manifest.base != base
        update = Update(url=obj.url, seq=obj.seq, previous=previous, rebased=rebased)
    finally:
        obj._lock.release()
    callback = obj._opts.on_change
    if moved and callback is not None:
        try:
            callback(update)
        except Exception:  # a callback's bug never stops the follower
            log.exception("%s: on_change raised (the follower goes on)", obj.url)
    return True


def _current(obj: DurableObject, read_at: float) -> None:
    """The view was the store's newest head at `read_at` (its lag, `Surface._gauges`)."""
    obj._follow_current = max(read_at, obj.__dict__.get("_follow_current", read_at))


def _there(obj: DurableObject, latest: Stored) -> bool:
    """Nothing to do: the view is at `latest`, or past it (a refresh() of
    the caller's own went further than this poll: never move back)."""
    head = obj._w.head
    return obj._w.version == latest.version or (
        head is not None and latest.head.manifest.seq < head.manifest.seq
    )
