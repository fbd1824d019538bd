"""The async face of TTL (`durable_obj.core.expiry`): `aset_ttl`, `attl`,
`aremove_ttl` and `asweep_ttl` of `AsyncDurableObject`, each the sync call
run as one call of the object's lane, in a worker thread, never on the loop.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from durable_obj.service.lanes import wait_for

if TYPE_CHECKING:
    from durable_obj.core.expiry import TtlPolicy
    from durable_obj.core.object import DurableObject

T = TypeVar("T")


class AsyncExpiry:
    """TTL of `AsyncDurableObject`."""

    _sync: DurableObject

    def _call(self, fn: Callable[[], T], *, io: bool = True) -> concurrent.futures.Future[T]:
        raise NotImplementedError  # AsyncDurableObject

    async def aset_ttl(self, table: str, column: str, seconds: float | timedelta) -> str | None:
        """`DurableObject.set_ttl` in a worker: durable on return."""
        return await wait_for(self._call(lambda: self._sync.set_ttl(table, column, seconds)))

    async def aremove_ttl(self, table: str) -> str | None:
        """`DurableObject.remove_ttl` in a worker: durable on return."""
        return await wait_for(self._call(lambda: self._sync.remove_ttl(table)))

    async def attl(self) -> list[TtlPolicy]:
        """`DurableObject.ttl` in a worker: the object's TTL policies."""
        return await wait_for(self._call(self._sync.ttl, io=False))

    async def asweep_ttl(self) -> int:
        """`DurableObject.sweep_ttl` in a worker: the rows deleted (their
        deletes committed at once when nothing else was buffered)."""
        return await wait_for(self._call(self._sync.sweep_ttl))
