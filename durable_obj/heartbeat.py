"""The heartbeat: a daemon thread that renews a writer's lease.

It only keeps time. What one beat does (renew, or an auto-flush whose commit
renews too, or fence the writer whose lease ran out unrenewed) is the state
machine's `_beat`, called under the object's lock, so a test can drive it
one call at a time instead of waiting for the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Heartbeat:
    """Call `beat()` every `interval` seconds until it returns False or
    `stop()` is called."""

    def __init__(self, beat: Callable[[], bool], interval: float, *, name: str) -> None:
        self._beat = beat
        self._interval = interval
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
        while not self._stop.wait(self._interval):
            if not self._beat():
                return
