"""The turn: one async local worker at a time, unless one waits on the engine.

`durable_obj.aio` runs local calls (the statement gate, chDB) on several
threads so that a long query or a big INSERT of one object never holds up
another object's calls. But threads that run at once take turns at the GIL,
and each one more is a longer wait for the event loop's thread (50 agents
writing: tick gap p99 3.8-4.9 ms with one local thread, 11-18 ms with four,
even when they took turns around every engine call). So a local worker
holds the turn for its whole call, engine calls included, as if there were
one thread; only when an engine call of the holder has run for `SLOW`
seconds (the GIL is released then) may the next worker take the turn and
go on with another object's call. The slow call, when it returns, waits for
the turn again before its Python goes on. Workers get the turn in the order
they asked for it.

Threads that never took the turn (the sync API, storage workers) are not
affected: `released()` does nothing on them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from durable_obj.errors import EngineError

#: How long the holder's engine call runs before another worker may go on.
SLOW = 0.02

_lock = threading.Lock()
_state: dict[str, Any] = {"owner": None, "engine_since": None}
#: Workers waiting for the turn, in the order they asked, each woken by its
#: own event: the turn goes to the first. (A free-for-all let the worker
#: that just gave the turn back take it again for its next call before the
#: woken one ran, call after call: 50 objects writing, one worker waited
#: 3.5-4.7 s for the turn while the median wait was 0, and its object's
#: units waited with it.)
_held = threading.local()


class _Ticket(threading.Event):
    """One waiting worker's wake-up, and which thread it is."""

    def __init__(self) -> None:
        super().__init__()
        self.ident = threading.get_ident()


_waiting: collections.deque[_Ticket] = collections.deque()


def _wake_first() -> None:
    """The first in line looks again (lock held)."""
    if _waiting:
        _waiting[0].set()


def _acquire() -> None:
    me = threading.get_ident()
    ticket = _Ticket()
    with _lock:
        _waiting.append(ticket)
    try:
        while True:
            timeout = None
            with _lock:
                if _waiting[0] is ticket:
                    owner, since = _state["owner"], _state["engine_since"]
                    if since is not None:  # the holder waits on the engine: beside it after SLOW
                        timeout = since + SLOW - time.monotonic()
                    if owner is None or (timeout is not None and timeout <= 0):
                        _waiting.popleft()
                        _state["owner"], _state["engine_since"] = me, None
                        _wake_first()  # the next in line watches the new holder
                        return
                ticket.clear()
            ticket.wait(timeout)
    except BaseException:
        with _lock:
            first = _waiting[0] is ticket
            _waiting.remove(ticket)
            if first:
                _wake_first()
        raise


def _release() -> None:
    me = threading.get_ident()
    with _lock:
        if _state["owner"] == me:
            _state["owner"] = _state["engine_since"] = None
            _wake_first()


@contextlib.contextmanager
def hold() -> Iterator[None]:
    """Run the block with the turn (a local worker's call)."""
    _acquire()
    _held.on = True
    try:
        yield
    finally:
        _held.on = False
        _release()


@contextlib.contextmanager
def released() -> Iterator[None]:
    """The block waits on the engine or the store (the GIL is free): if this
    thread holds the turn, the first waiting worker may take it once the
    block has run `SLOW` seconds; taken back (waited for, in line) after."""
    if not getattr(_held, "on", False):
        yield
        return
    me = threading.get_ident()
    with _lock:
        if _state["owner"] == me:
            _state["engine_since"] = time.monotonic()
            _wake_first()  # it starts counting
    try:
        yield
    finally:
        with _lock:
            still = _state["owner"] == me
            if still:
                _state["engine_since"] = None
        if not still:
            _acquire()


#: Answers read to drain a connection after a failed query, at most.
_DRAINS = 3


class Turned:
    """A chDB connection whose `query` and `query_df` run in `released()`,
    and are drained after a failure; everything else is the connection's.

    chDB 26.9 keeps the output a query wrote before it failed (a block of
    rows, then `throwIf`; an ORC writer's error) and puts it in front of
    the connection's next answer (found by attack: the rows a read wrote
    before it failed became the start of the next statement's canonical
    text, the text the gate checks, runs and logs). After every failure, a
    query of a known answer is read until it comes back alone."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._undrained = False

    def query(self, *args: Any, **kwargs: Any) -> Any:
        self._usable()
        with released():
            try:
                return self._conn.query(*args, **kwargs)
            except BaseException:
                self._drain()
                raise

    def query_df(self, *args: Any, **kwargs: Any) -> Any:
        self._usable()
        with released():
            try:
                return self._conn.query_df(*args, **kwargs)
            except BaseException:
                self._drain()
                raise

    def _usable(self) -> None:
        if self._undrained:
            raise EngineError(
                "chDB's connection kept the output of a failed query and would not drain it; "
                "nothing was run. Close the object and open it again"
            )

    def _drain(self) -> None:
        """Read what a failed query left, so no later answer starts with it
        (the connection refuses every call after, if it will not drain)."""
        for _ in range(_DRAINS):
            try:
                if bytes(self._conn.query("SELECT 1", "TSVRaw").bytes()) == b"1\n":
                    return
            except Exception:
                continue
        self._undrained = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
