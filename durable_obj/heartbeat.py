"""The heartbeat: a daemon thread that renews a writer's lease, and checks
an idle buffer's age for the auto-flush in between.

It only keeps time. What one beat does (renew, or fence the writer whose
lease ran out unrenewed) is the state machine's `_beat`, and what one check
does (flush a buffer whose oldest statement reached `auto_flush_age`) is its
`_tick`, both called under the object's lock, so a test can drive them one
call at a time instead of waiting for the thread.

The thread holds its object only weakly: an object its program dropped
without close() is still collected (and warns, see `unclosed.py`) instead of
being kept alive by its own heartbeat.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable


class Heartbeat:
    """Call `beat()` every `interval` seconds, and `check()` every
    `check_every` seconds in between (if given), until either returns False,
    its object is gone, or `stop()` is called."""

    def __init__(
        self,
        beat: Callable[[], bool],
        interval: float,
        *,
        name: str,
        check: Callable[[], bool] | None = None,
        check_every: float | None = None,
    ) -> None:
        self._beat = weakref.WeakMethod(beat)
        self._check = None if check is None else weakref.WeakMethod(check)
        self._interval = interval
        self._every = interval if check is None or not check_every else min(check_every, interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating; wait for a beat in progress, unless called from one."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        next_beat = time.monotonic() + self._interval
        while not self._stop.wait(max(0.0, min(self._every, next_beat - time.monotonic()))):
            # (a millisecond early counts: a wait may end a hair before its time)
            due = self._check is None or time.monotonic() >= next_beat - 1e-3
            ref = self._beat if due or self._check is None else self._check
            call = ref()
            if call is None or not call():
                return
            del call  # hold the object no longer than one call
            if due:
                next_beat = time.monotonic() + self._interval
