"""Objects left open: Python's convention for a resource nobody closed.

An object collected, or still open when the interpreter exits, while it
holds a lease or unflushed statements loses those statements and leaves its
lease held until it expires. Nothing here flushes or releases on the
caller's behalf (those are network calls with outcomes a caller must see,
and at exit nobody can): it says so, as a `ResourceWarning` (shown with
`python -W default` or `-X dev`, an error under pytest's
`filterwarnings = error`) and a WARNING log record (seen by default), then
frees local resources. The fix is `with durable_obj.open(...) as obj:` or an
explicit `close()`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import warnings
import weakref
from typing import Protocol

import durable_obj.telemetry as telemetry

log = logging.getLogger("durable_obj")


class Closable(telemetry.Tracked, Protocol):
    def _left_open(self, when: str) -> None: ...


_LIVE: weakref.WeakSet[Closable] = weakref.WeakSet()
_LOCK = threading.Lock()
_REGISTERED = False


def track(obj: Closable) -> None:
    """Remember `obj` (weakly) until it is collected, for the exit check."""
    global _REGISTERED
    telemetry.track(obj)  # the objects-open and lease gauges
    with _LOCK:
        _LIVE.add(obj)
        if not _REGISTERED:
            atexit.register(_at_exit)
            _REGISTERED = True


def _at_exit() -> None:
    for obj in list(_LIVE):
        with contextlib.suppress(Exception):  # an exit hook must not stop the others
            obj._left_open("still open when the interpreter exited")


def report(url: str, *, pending: int, leased: bool, when: str) -> None:
    """Warn (ResourceWarning and a log record) about an object left open."""
    lost = []
    if pending:
        lost.append(f"{pending} unflushed statement(s) are lost")
    if leased:
        lost.append("its lease stays held until it expires (lease_ttl + clock_skew)")
    message = (
        f"durable object {url} was {when} without being closed: {' and '.join(lost)}. "
        "Use `with durable_obj.open(...) as obj:`, or close it explicitly."
    )
    log.warning("%s", message)
    warnings.warn(message, ResourceWarning, stacklevel=2)
