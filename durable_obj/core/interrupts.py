"""A commit settles before a Ctrl-C takes effect.

Python raises `KeyboardInterrupt` in the main thread between any two
bytecodes. Inside a commit that leaves its bookkeeping half done: a head
proven stored whose lines stay buffered (the next flush commits them
again), a lock taken and never released, a descriptor closed twice. So
while the main thread runs a commit (`flush`, a checkpoint, `close`, a key
rotation, the auto-flush), the first SIGINT is held: it is logged, and
raised once the commit has settled (landed and recorded, or failed and
rolled back), through whatever handler was installed. A second SIGINT
meanwhile raises at once, as before; the writer's next commit then checks
what landed (`HeadWriter._unproven`).

Other threads never receive signals (an async worker, the heartbeat), and a
process whose SIGINT handler was not set from Python (None) or is ignored
is left alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Concatenate, ParamSpec, TypeVar

log = logging.getLogger("durable_obj")
P = ParamSpec("P")
T = TypeVar("T")

#: How deep the main thread is in `settling` blocks (only the outer one holds).
_depth = 0


@contextlib.contextmanager
def settling(url: str) -> Iterator[None]:
    """Hold the first SIGINT of the main thread until the block ends."""
    global _depth
    if _depth or threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    before = signal.getsignal(signal.SIGINT)

    def hold(signum: int, frame: FrameType | None) -> None:
        if held:  # a second one: now, with the handler put back first (it
            held.clear()  # may come in the block's `finally`, before the restore)
            signal.signal(signal.SIGINT, before)
            raise KeyboardInterrupt
        held.append(signum)
        log.warning(
            "%s: interrupt held until this commit settles; interrupt again to stop now", url
        )

    installed = False
    _depth += 1
    try:
        if before is not None and before is not signal.SIG_IGN:
            with contextlib.suppress(ValueError):  # (not the main interpreter)
                signal.signal(signal.SIGINT, hold)
                installed = True
        yield
    finally:
        _depth -= 1
        if installed:
            signal.signal(signal.SIGINT, before)
            if held:
                held.clear()
                signal.raise_signal(signal.SIGINT)  # through the handler it was meant for


def settled(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
    """A method of an object with a `url`, run in `settling`."""

    @functools.wraps(method)
    def run(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with settling(self.url):
            return method(self, *args, **kwargs)

    return run
