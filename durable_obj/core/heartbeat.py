"""The heartbeat: one scheduler for every writer in the process renews each
one's lease, and checks an idle buffer's age for the auto-flush in between;
the same scheduler polls the heads that followers follow (`follow.py`).

It only keeps time. What one beat does (renew, or fence the writer whose
lease ran out unrenewed) is the state machine's `_beat`, and what one check
does (flush a buffer whose oldest statement reached `auto_flush_age`) is its
`_tick`, both called under the object's lock, so a test can drive them one
call at a time instead of waiting for the scheduler.

A thousand open objects cost one scheduler thread, not a thousand: it
sleeps until the next object is due and hands each due call to a small
shared pool of workers (started on demand, gone when idle), so one object's
slow network delays no other object's beat. A worker never waits on an
object's lock: a beat that finds its object busy (a long flush, checkpoint
or query in the caller's thread) answers `BUSY` and is tried again a moment
later, so even many busy objects leave the workers free for the others.
An object's next call is scheduled only when its current one has returned,
so one object never beats twice at once.

The scheduler holds its objects only weakly: an object its program dropped
without close() is still collected (and warns, see `unclosed.py`) instead of
being kept alive by its own heartbeat.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final, Literal

#: At most this many calls run at once (each is one object's beat or check).
#: Workers start only when due calls find every worker busy (a beat waiting
#: on a stalled store, up to the commit deadline), and exit when idle: a
#: thousand healthy writers at 20 ms per renewal keep one or two busy.
WORKERS = 32
#: A worker with nothing to do for this long exits.
WORKER_IDLE = 5.0
#: What a beat or check answers when its object's lock is held: not done,
#: call again in BUSY_RETRY seconds (or at the next check, if sooner).
BUSY: Final = "busy"
BUSY_RETRY = 0.5

#: A beat or check: True to go on, False to stop, BUSY to be called again soon.
Call = Callable[[], "bool | Literal['busy']"]


class Heartbeat:
    """Call `beat()` every `interval` seconds, and `check()` every
    `check_every` seconds in between (if given), until either returns False,
    its object is gone, or `stop()` is called."""

    def __init__(
        self,
        beat: Call,
        interval: float,
        *,
        name: str,
        check: Call | None = None,
        check_every: float | None = None,
    ) -> None:
        self.name = name
        self._beat = weakref.WeakMethod(beat)
        self._check = None if check is None else weakref.WeakMethod(check)
        self._interval = interval
        self._every = interval if check is None or not check_every else min(check_every, interval)
        self._next_beat = 0.0
        self._stopped = False
        self._idle = threading.Event()
        self._idle.set()
        self._caller: threading.Thread | None = None

    def start(self) -> None:
        self._next_beat = time.monotonic() + self._interval
        _SCHEDULER.add(self, min(self._every, self._interval))

    def stop(self, *, wait: bool = True) -> None:
        """Stop beating; wait for a call in progress, unless called from one
        (or with wait=False: from a finalizer, which may run anywhere)."""
        self._stopped = True
        if wait and self._caller is not threading.current_thread():
            self._idle.wait()

    def _call(self) -> float | None:
        """One beat or check; the delay to the next, or None to stop."""
        now = time.monotonic()
        # (a millisecond early counts: a wake may come a hair before its time)
        due = self._check is None or now >= self._next_beat - 1e-3
        ref = self._beat if due or self._check is None else self._check
        call = ref()
        answer = False if call is None else call()
        del call  # hold the object no longer than one call
        if not answer:
            return None
        now = time.monotonic()
        if answer == BUSY:
            return min(BUSY_RETRY, self._every)  # not done: a due beat stays due
        if due:
            self._next_beat = now + self._interval
        return max(0.0, min(self._every, self._next_beat - now))


class _Scheduler:
    """One thread that sleeps until the next heartbeat is due, and workers
    that run the due ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._heap: list[tuple[float, int, Heartbeat]] = []
        self._due: list[Heartbeat] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._workers = 0
        self._waiting = 0

    def add(self, hb: Heartbeat, delay: float) -> None:
        with self.lock:
            self._push(hb, delay)

    def _push(self, hb: Heartbeat, delay: float) -> None:
        heapq.heappush(self._heap, (time.monotonic() + delay, next(self._order), hb))
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="durable_obj-heartbeat", daemon=True
            )
            self._thread.start()
        self._wake.notify_all()

    def _run(self) -> None:
        with self.lock:
            while True:
                while self._heap and self._heap[0][2]._stopped:
                    heapq.heappop(self._heap)
                if not self._heap:
                    if not self._wake.wait(timeout=WORKER_IDLE) and not self._heap:
                        self._thread = None
                        return
                    continue
                at = self._heap[0][0]
                now = time.monotonic()
                if at > now:
                    self._wake.wait(timeout=at - now)
                    continue
                _, _, hb = heapq.heappop(self._heap)
                hb._idle.clear()
                self._due.append(hb)
                if self._waiting:
                    self._wake.notify_all()
                elif self._workers < WORKERS:
                    self._workers += 1
                    threading.Thread(
                        target=self._work, name="durable_obj-heartbeat-call", daemon=True
                    ).start()

    def _work(self) -> None:
        with self.lock:
            while True:
                if not self._due:
                    self._waiting += 1
                    self._wake.wait(timeout=WORKER_IDLE)
                    self._waiting -= 1
                    if not self._due:
                        self._workers -= 1
                        return
                    continue
                hb = self._due.pop(0)
                if hb._stopped:
                    hb._idle.set()
                    continue
                hb._caller = threading.current_thread()
                self.lock.release()
                try:
                    delay: float | None = hb._call()
                except BaseException:  # a beat must never kill the scheduler
                    delay = None
                hb._caller = None
                if delay is None or hb._stopped:
                    hb._idle.set()  # before taking the lock: stop() may wait on it
                    self.lock.acquire()
                    continue
                self.lock.acquire()
                self._push(hb, delay)
                hb._idle.set()


_SCHEDULER = _Scheduler()


def live_threads() -> int:
    """Threads the scheduler runs now (for tests and benchmarks)."""
    with _SCHEDULER.lock:
        thread = _SCHEDULER._thread
        return _SCHEDULER._workers + (1 if thread is not None and thread.is_alive() else 0)
