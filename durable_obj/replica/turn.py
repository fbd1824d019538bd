"""The turn: one async local worker at a time, unless one waits on the engine.

`durable_obj.aio` runs local calls (the statement gate, chDB) on several
threads so that a long query or a big INSERT of one object never holds up
another object's calls. But threads that run at once take turns at the GIL,
and each one more is a longer wait for the event loop's thread (50 agents
writing: tick gap p99 3.8-4.9 ms with one local thread, 11-18 ms with four,
even when they took turns around every engine call). So a local worker
holds the turn for its whole call, engine calls included, as if there were
one thread; only when an engine call of the holder has run for `SLOW`
seconds (the GIL is released then) may a waiting worker take the turn and
go on with another object's call. The slow call, when it returns, waits for
the turn again before its Python goes on.

Threads that never took the turn (the sync API, storage workers) are not
affected: `released()` does nothing on them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

#: How long the holder's engine call runs before another worker may go on.
SLOW = 0.02

_cond = threading.Condition()
_state: dict[str, Any] = {"owner": None, "engine_since": None}
_held = threading.local()


def _acquire() -> None:
    me = threading.get_ident()
    with _cond:
        while True:
            owner, since = _state["owner"], _state["engine_since"]
            if owner is None:
                break
            if since is not None:
                left = since + SLOW - time.monotonic()
                if left <= 0:
                    break  # the holder waits on the engine: go on beside it
                _cond.wait(left)
            else:
                _cond.wait()
        _state["owner"], _state["engine_since"] = me, None


def _release() -> None:
    me = threading.get_ident()
    with _cond:
        if _state["owner"] == me:
            _state["owner"] = _state["engine_since"] = None
            _cond.notify()


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
    thread holds the turn, another worker may take it once the block has
    run `SLOW` seconds; taken back (waited for) after."""
    if not getattr(_held, "on", False):
        yield
        return
    me = threading.get_ident()
    with _cond:
        if _state["owner"] == me:
            _state["engine_since"] = time.monotonic()
            _cond.notify_all()  # waiters start counting
    try:
        yield
    finally:
        with _cond:
            still = _state["owner"] == me
            if still:
                _state["engine_since"] = None
        if not still:
            _acquire()


class Turned:
    """A chDB connection whose `query` and `query_df` run in `released()`;
    everything else is the connection's."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def query(self, *args: Any, **kwargs: Any) -> Any:
        with released():
            return self._conn.query(*args, **kwargs)

    def query_df(self, *args: Any, **kwargs: Any) -> Any:
        with released():
            return self._conn.query_df(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
