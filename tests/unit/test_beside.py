"""durable_obj/wire/beside.py: work on a thread beside the caller's."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from durable_obj.wire.beside import Beside


def test_a_wait_interrupted_by_ctrl_c_leaves_later_waits_waiting() -> None:
    """On CPython 3.11 and 3.12, once `Thread.join()` was interrupted, every
    later `join()` of that thread returned at once while it still ran: a
    caller's cleanup after Ctrl-C then went on beside it (found by attack).
    A `Beside` waits on the end of its work, however often it is waited for."""
    ended = threading.Event()

    def run() -> int:
        time.sleep(0.6)
        ended.set()
        return 7

    work = Beside(run)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            work.result()
    finally:
        timer.join()
    assert not ended.is_set()  # interrupted while the work still ran
    work.join()
    assert ended.is_set()
    assert work.result() == 7
