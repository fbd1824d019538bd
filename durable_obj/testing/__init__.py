"""Tools for testing durable_obj deployments and stores, shipped to users.

* `FaultyStore`: wraps a store and injects failures, lost responses,
  latency and crash points, chosen by a seed.
* `abandon(obj)`: leave an object as a SIGKILL would (no flush, no release).
* `durable_obj.testing.conformance`: the pytest suite every store passes.
"""

from __future__ import annotations

from durable_obj.core.object import DurableObject
from durable_obj.testing.faulty import Fault, FaultyStore, SimulatedCrash


def abandon(obj: DurableObject) -> None:
    """Drop `obj` the way a killed process would: nothing is flushed or
    released (its lease runs out on its own); only local resources are freed."""
    obj._abandon()


__all__ = ["Fault", "FaultyStore", "SimulatedCrash", "abandon"]
