"""Completing a record off the caller's thread.

A hook starts its span on the caller's thread, so that what runs inside the
operation is its child, and hands the rest to one daemon thread
(`durable_obj-telemetry`): the span's attributes, status and end (at the
time the operation ended, not when the thread gets to it), the duration
point and the counts. With the SDK configured, those calls are about two
thirds of what a hook costs (some 25 us of a flush's 40); the thread makes
them while callers wait on their stores, not in their time.

* `drain()` waits until everything handed over is recorded: before reading
  an exporter, before `configure` changes providers, and at exit (before the
  SDK's own exit handlers, registered earlier, flush its exporters);
* past `MAX` records waiting, a record is completed on the caller's thread:
  a caller that records faster than the SDK takes it waits for the SDK, as
  it would without the thread;
* a forked child starts with no thread and no records of its parent's.

A record never raises into the caller, here or on the thread; a failure to
record is logged (`durable_obj`, debug).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("durable_obj")

#: Records waiting beyond which the caller completes its own.
MAX = 10_000
#: How late a record may be completed, in seconds: until then the thread
#: waits for a moment when no hooked operation runs (`busy`).
LATEST = 0.2
#: How often the thread looks again while an operation runs, in seconds.
POLL = 0.001
#: How long the exit handler waits for the records still waiting.
EXIT_WAIT = 5.0

Job = tuple[float, Callable[..., None], tuple[Any, ...]]

_queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
#: The hooked operations running now, in any thread (one token each; a
#: set's add and discard are atomic).
_busy: set[object] = set()
#: drain() calls waiting: the thread completes records at once meanwhile.
_hurry: list[object] = []


def busy(token: object) -> None:
    """An operation starts: records wait for it to end (`idle`)."""
    _busy.add(token)


def idle(token: object) -> None:
    _busy.discard(token)


_thread: threading.Thread | None = None
_lock = threading.Lock()


def submit(fn: Callable[..., None], *args: Any) -> None:
    """Run `fn(*args)` on the telemetry thread (or here, past `MAX`)."""
    if _thread is None:
        _start()
    if _queue.qsize() >= MAX:
        _run((0.0, fn, args))
        return
    _queue.put((time.monotonic(), fn, args))


def drain(timeout: float | None = 5.0) -> bool:
    """Wait until every record handed over so far is recorded; False if
    `timeout` seconds passed first (or the thread is gone)."""
    thread = _thread
    if thread is None:
        return True
    if thread is threading.current_thread():
        return False
    done = threading.Event()
    token = object()
    _hurry.append(token)
    try:
        _queue.put((0.0, _set, (done,)))
        return done.wait(timeout) if thread.is_alive() else False
    finally:
        _hurry.remove(token)


def _set(event: threading.Event) -> None:
    event.set()


def _run(job: Job) -> None:
    _, fn, args = job
    try:
        fn(*args)
    except Exception:
        log.debug("durable_obj: could not complete a telemetry record", exc_info=True)


def _work() -> None:
    while True:
        job = _queue.get()
        if not _hurry:
            # the call that handed it over goes on after its hooked part (a
            # flush after its commit): leave it the interpreter a moment
            time.sleep(POLL)
        while True:
            # out of the operations' way: their GIL is not taken from them
            due = job[0] + LATEST
            while _busy and not _hurry and time.monotonic() < due:
                time.sleep(POLL)
            _run(job)
            try:
                job = _queue.get_nowait()
            except queue.Empty:
                break


def _start() -> None:
    global _thread
    with _lock:
        if _thread is not None:
            return
        thread = threading.Thread(target=_work, name="durable_obj-telemetry", daemon=True)
        thread.start()
        _thread = thread
        atexit.register(drain, EXIT_WAIT)


def _forked() -> None:
    """In a fork's child: the parent's thread is not there, nor its records."""
    global _queue, _thread, _lock
    _queue, _thread, _lock = queue.SimpleQueue(), None, threading.Lock()
    _busy.clear()
    _hurry.clear()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forked)
