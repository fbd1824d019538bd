"""The event loop S3 stores run their calls on: a thread of our own, not
fsspec's.

fsspec runs a filesystem's calls on its own IO thread (`fsspec.asyn`), and
importing fsspec costs an S3 cold open about 50 ms (its registry reads
every installed distribution's entry points). An S3 store that reads
before its client is made (`s3static`) needs a loop but not fsspec. So
its calls run here, and when its client is made it is made on this same
loop (`S3FileSystem(loop=...)`, fsspec's own option). Then one loop serves
a store before and after, and fsspec is imported only once the client is
needed. One loop per process: a child forked from a process that ran one
starts its own on first use, as fsspec's does.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

_LOCK = threading.Lock()
#: Seconds a cancelled call is given to clean up before the caller goes on.
CANCEL_WAIT = 5.0
#: (the loop, its thread, the process that started it)
_RUNNING: list[tuple[asyncio.AbstractEventLoop, threading.Thread, int]] = []


def loop() -> asyncio.AbstractEventLoop:
    """The process's IO loop, running on its own daemon thread (started now
    if it is not)."""
    with _LOCK:
        if _RUNNING and _RUNNING[0][2] == os.getpid():
            return _RUNNING[0][0]
        _RUNNING.clear()  # a forked child's copy: its thread is not in this process
        new = asyncio.new_event_loop()
        thread = threading.Thread(target=new.run_forever, name="durable_obj-io", daemon=True)
        thread.start()
        _RUNNING.append((new, thread, os.getpid()))
        return new


def _forked() -> None:
    """In a forked child: a lock of its own (another thread of the parent
    may have held it at the fork, and would never let go here) and no loop
    (the parent's thread is not in this process)."""
    global _LOCK
    _LOCK = threading.Lock()
    _RUNNING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`fn(*args)` on the process's IO loop (`run_on`)."""
    return run_on(loop(), fn, *args)


def run_on(running: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`fn(*args)` on `running`, a loop running on another thread; the
    caller waits for its result or error. Never from the loop's own thread
    (it would wait for itself). Every cloud store's calls go through here
    (`CloudStore._run`), whichever loop they run on."""
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # no loop runs on this thread: the usual case
        current = None
    if current is running:
        raise RuntimeError("a store call was made from the store's own IO thread")

    started, finished = threading.Event(), threading.Event()

    async def call() -> T:
        started.set()
        try:
            return await fn(*args)
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(call(), running)
    try:
        return future.result()
    except BaseException:
        # The caller gave up (an interrupt): the call stops too, and cleans up
        # (a part file) before the caller goes on, which may be to exit
        # (found by attack: the loop's daemon thread never got to it).
        future.cancel()
        if started.is_set():
            finished.wait(CANCEL_WAIT)
        raise
