"""The objects open in this process, for the observable gauges: objects
open by mode, leases by state, bytes stored, and followers' lag."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from durable_obj.telemetry.names import DB_SYSTEM, LEASE_STATE, MODE, SYSTEM

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation


class Tracked(Protocol):
    @property
    def state(self) -> str: ...
    @property
    def read_only(self) -> bool: ...
    def _gauges(self) -> tuple[int, float | None]: ...


_LIVE: weakref.WeakSet[Tracked] = weakref.WeakSet()


def track(obj: Tracked) -> None:
    """Count `obj` in the gauges while it is open (weakly: a collected object
    leaves by itself; a closed one is skipped by its state)."""
    _LIVE.add(obj)


def objects_open(options: CallbackOptions) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    modes = {"writer": 0, "reader": 0}
    for obj in list(_LIVE):
        if obj.state in ("open", "fenced", "closing"):
            modes["reader" if obj.read_only else "writer"] += 1
    return [Observation(n, {DB_SYSTEM: SYSTEM, MODE: mode}) for mode, n in modes.items()]


def leases(options: CallbackOptions) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    states = {"held": 0, "fenced": 0}
    for obj in list(_LIVE):
        state = obj.state
        if not obj.read_only and state in ("open", "closing", "fenced"):
            states["fenced" if state == "fenced" else "held"] += 1
    return [Observation(n, {DB_SYSTEM: SYSTEM, LEASE_STATE: s}) for s, n in states.items()]


def bytes_stored(options: CallbackOptions) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    total = sum(
        obj._gauges()[0]
        for obj in list(_LIVE)
        if not obj.read_only and obj.state in ("open", "closing")
    )
    return [Observation(total, {DB_SYSTEM: SYSTEM, MODE: "writer"})]


def follower_lag(options: CallbackOptions) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    lags = [
        lag for obj in list(_LIVE) if obj.state == "open" and (lag := obj._gauges()[1]) is not None
    ]
    return [Observation(max(lags), {DB_SYSTEM: SYSTEM})] if lags else []
