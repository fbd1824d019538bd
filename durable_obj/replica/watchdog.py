"""The watchdog: stops a bounded call of an object once its time is up.

`max_execution_time` stops one engine call, and only from its own start:
a bounded read runs several (the gate's `EXPLAIN QUERY TREE`, which
evaluates scalar subqueries while it plans, then the read itself), so each
could use the whole bound again (1 s bound, six scalar subqueries over
`numbers(1e10)`: 2.0 s). The watchdog keeps one deadline for the whole
bounded block: when it passes, it runs `KILL QUERY ... ASYNC` from a
connection of its own, and again every `REPEAT` seconds until the block
ends, so a call that started just after a kill is stopped too.

A kill names the block's token, a uuid4 set as the connection's
`log_comment` for the block (`Engine.bounded`): `KILL QUERY` is
engine-global, and this is how it reaches this object's own call and no
other. No statement chooses it (the gate refuses `log_comment` in a
`SETTINGS` clause, and `SET` is never run from a caller's text), and no
caller's text reaches `KILL`. chDB drops a killed query at the engine's
next check (between blocks, between folded functions): a single function
call computing over one huge value runs to its end first, which is why
`Bounds` also caps what `range()` may build.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import itertools
import logging
import threading
import time
from typing import Any

from durable_obj.gate.quoting import quote_string
from durable_obj.replica import server

#: Seconds between kills of a block still running past its deadline.
REPEAT = 0.05

log = logging.getLogger("durable_obj")


class Guard:
    """One armed deadline: `fired` once the watchdog killed for it."""

    __slots__ = ("active", "deadline", "fired", "token")

    def __init__(self, token: str, deadline: float) -> None:
        self.token, self.deadline = token, deadline
        self.active = True
        self.fired = False


class Watchdog:
    """One thread for the process, started on first use; a heap of deadlines."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: Held while a KILL runs: `disarm` waits for it, so no kill of a
        #: block lands once the block has ended.
        self._killing = threading.Lock()
        self._heap: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._conn: Any = None

    def arm(self, token: str, seconds: float) -> Guard:
        """Kill the calls tagged `token` once `seconds` have passed."""
        guard = Guard(token, time.monotonic() + seconds)
        with self._cond:
            heapq.heappush(self._heap, (guard.deadline, next(self._seq), guard))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="durable_obj-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return guard

    def disarm(self, guard: Guard) -> None:
        """The block ended: no kill for it from now on."""
        with self._killing:
            guard.active = False

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    if self._heap:
                        self._cond.wait(self._heap[0][0] - time.monotonic())
                    else:
                        self._cond.wait()
                _, _, guard = heapq.heappop(self._heap)
            if not guard.active:
                continue
            self._kill(guard)
            with self._cond:
                heapq.heappush(self._heap, (time.monotonic() + REPEAT, next(self._seq), guard))

    def _kill(self, guard: Guard) -> None:
        with self._killing:
            if not guard.active:
                return
            guard.fired = True
            try:
                if self._conn is None:
                    self._conn = server.connect()
                self._conn.query(
                    f"KILL QUERY WHERE Settings['log_comment'] = {quote_string(guard.token)} ASYNC",
                    "CSV",
                )
            except Exception as exc:  # the block's own bound still stops it
                log.warning("the query watchdog could not stop a query past its bound: %s", exc)
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None

    def close(self) -> None:
        """At exit: close the watchdog's connection before the engine stops."""
        with self._killing:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


#: The process's watchdog.
WATCHDOG = Watchdog()
atexit.register(WATCHDOG.close)  # runs before the engine's own exit handler (LIFO)
