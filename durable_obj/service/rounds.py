"""Rounds: the group commits an async face's units of work wait for.

An `awrite`/`abatch` unit, once its lane call buffered it at some position,
waits here until every line before that position is committed: by the
commit in flight if it covers the position, else by the next one, which
the first waiter to find none in flight starts on a storage worker
(`DurableObject._durable_through`, the same group commit as the sync
API's). One commit of the object in flight at a time; waiting tasks hold
no thread, and cancelling one cancels nothing: the commit goes on for the
others, and the cancelled unit's admission slot is given back when that
commit ends (`core/admission.py`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from concurrent.futures import Executor

from durable_obj.core.admission import Slot
from durable_obj.core.object import DurableObject
from durable_obj.service.lanes import wait_for

#: What a round returns: the commit's key and the buffer position it covered.
_Covered = tuple[str | None, int]


class Rounds:
    """The group commits of one object's async face."""

    def __init__(self, sync: DurableObject, pool: Callable[[], Executor]) -> None:
        self._sync = sync
        self._pool = pool
        self._round: asyncio.Future[_Covered] | None = None

    async def unit(self, call: concurrent.futures.Future[int | None], *slots: Slot) -> str | None:
        """A unit's lane `call` (it returns the buffer position after the
        unit, or None: nothing to commit), then its commit; the key. Cancelled
        once the call started, the write's `slots` are given back when the
        call ends (it runs to completion: lanes.py)."""
        try:
            target = await wait_for(call)
        except asyncio.CancelledError:
            if not call.cancelled():
                for slot in slots:
                    slot.release_when(call)
            raise
        return None if target is None else await self.through(target, *slots)

    async def through(self, target: int, *slots: Slot) -> str | None:
        """Every line before buffer position `target` committed; the key of
        the commit that did. Cancelled, the write's `slots` are given back
        when the commit in flight ends."""
        while True:
            current = self._round
            if current is None or current.done():  # (its done callback may not have run)
                current = self._round = asyncio.wrap_future(self._pool().submit(self._commit))
                current.add_done_callback(self._done)
            try:
                key, upto = await asyncio.shield(current)
            except asyncio.CancelledError:
                for slot in slots:  # the unit is buffered: in flight until it ends
                    slot.release_when(current)
                raise
            if upto >= target:
                return key if key is not None else self._sync._buf.last_key

    def _commit(self) -> _Covered:
        """One group commit (a worker thread): everything buffered now."""
        sync = self._sync
        with sync._lock:
            sync._require_writable(engine=False)
            upto = sync._buf.end
            return sync._durable_through(upto), upto

    def _done(self, fut: asyncio.Future[_Covered]) -> None:
        if self._round is fut:
            self._round = None
        if not fut.cancelled():
            fut.exception()  # retrieved: each waiter was handed it
