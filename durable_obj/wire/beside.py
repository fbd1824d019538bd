"""Work on a thread of its own, beside the caller's: a checkpoint's hash of
its archive (`digest.BackgroundDigest`), the archive of the manifest it
supersedes and the listing of its base (`core.publishing`,
`core.durability`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Beside(Generic[T]):
    """`run()` on a daemon thread, started at once; `result()` waits and
    returns what it returned or raises what it raised in the caller's thread;
    `join()` only waits (its error is then `result()`'s to raise).

    Both wait on an event `run()`'s end sets, not on `Thread.join`: on
    CPython 3.11 and 3.12, once a `join()` was interrupted (Ctrl-C), every
    later `join()` of that thread returns at once while it still runs, so a
    caller's cleanup after an interrupt would not have waited for it (found
    by attack: an upload went on reading a base its checkpoint had closed)."""

    def __init__(self, run: Callable[[], T], name: str = "durable_obj-beside") -> None:
        self._run = run
        self._value: T | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._call, name=name, daemon=True)
        self._thread.start()

    def _call(self) -> None:
        try:
            self._value = self._run()
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc
        finally:
            self._done.set()

    def join(self) -> None:
        self._done.wait()

    def result(self) -> T:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)
