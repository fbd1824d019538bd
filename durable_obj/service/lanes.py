"""Lanes: one object's async calls, in order, on a shared thread pool.

`durable_obj.aio` gives each object a lane (see its module docstring for
the contract: order, cancellation, the two sides of the pool). A call
whose function is `Together` may take with it the calls of the same kind
queued right behind it (up to `MAX_TOGETHER`), and they run as one: the
units of work of many tasks on one object run their INSERTs in a few
engine calls (`DurableObject._run_units`), each call still getting its own
outcome. Only calls already queued ride along, so nothing waits for a
group to fill. `UnitCall` is such a call (an `awrite`/`abatch` unit);
`FlushOutcome` is what `aflush()` did; `start_threads` starts a pool's
threads ahead of time (`durable_obj.aio.preload`); `close_orphan` closes
what an open cancelled while it ran opened.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from durable_obj.core import admission
from durable_obj.replica import turn

T = TypeVar("T")
log = logging.getLogger("durable_obj")
#: One queued call of a lane: its future, the function, its side (io or local).
_Call = tuple[concurrent.futures.Future[Any], Callable[[], Any], bool]

#: The most calls that run together.
MAX_TOGETHER = 64


@runtime_checkable
class Together(Protocol):
    """A call that may run together with calls queued behind it."""

    def __call__(self) -> Any: ...

    def joins(self, other: Callable[[], Any]) -> bool:
        """May `other` (the next queued call) run together with this one?"""
        ...

    def run_together(self, calls: list[Any]) -> list[Any]:
        """Run `calls` (this one first) as one; an outcome (a result or an
        exception) per call, in order."""
        ...


def settle(fut: concurrent.futures.Future[T], fn: Callable[[], T]) -> None:
    """Run `fn` for `fut`, unless `fut` was cancelled first; its result or
    its error (handed to the awaiting task as is) goes to `fut`."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        result = fn()
    except BaseException as exc:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class Lane:
    """One object's calls, one at a time and in order, on the shared pool.

    A call is a `concurrent.futures.Future` queued here; only the lane's
    head is ever handed to the pool, so a queued call can still be cancelled
    (`Future.cancel()` succeeds until `set_running_or_notify_cancel`)."""

    def __init__(self, pools: Callable[[bool], Executor]) -> None:
        self._pools = pools
        self._lock = threading.Lock()
        self._queue: collections.deque[_Call] = collections.deque()
        self._busy = False

    def submit(self, fn: Callable[[], T], *, io: bool) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((fut, fn, io))
            if self._busy:
                return fut
            self._busy = True
        self._pools(io).submit(self._run_next)
        return fut

    def _run_next(self) -> None:
        with self._lock:
            fut, fn, io = self._queue.popleft()
            riders: list[_Call] = []
            if isinstance(fn, Together):
                while (
                    self._queue and len(riders) < MAX_TOGETHER - 1 and fn.joins(self._queue[0][1])
                ):
                    riders.append(self._queue.popleft())
        # local: one at a time in Python; a write inside a lane call takes no
        # admission slot (units waiting behind this very call may hold them all)
        with contextlib.nullcontext() if io else turn.hold(), admission.exempt():
            if riders:
                self._run_together([(fut, fn, False), *riders])
            else:
                settle(fut, fn)
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            io = self._queue[0][2]
        self._pools(io).submit(self._run_next)

    @staticmethod
    def _run_together(calls: list[_Call]) -> None:
        """Calls that run as one (`Together`): those not cancelled before
        this claim, in queue order; each gets its own outcome."""
        claimed = [(fut, fn) for fut, fn, _ in calls if fut.set_running_or_notify_cancel()]
        if not claimed:
            return
        first = claimed[0][1]
        assert isinstance(first, Together)
        try:
            outcomes = first.run_together([fn for _, fn in claimed])
        except BaseException as exc:
            for fut, _ in claimed:
                fut.set_exception(exc)
            return
        for (fut, _), outcome in zip(claimed, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)


class Waiter(asyncio.Future[T]):
    """What a task awaits for one lane call: an asyncio future that mirrors
    the call's `concurrent.futures.Future`, like `asyncio.wrap_future`, but
    whose `cancel()` cancels the call itself, synchronously.

    That is what makes "cancelled in the queue never runs" exact. The call's
    future is the lane's compare-and-set: `cancel()` succeeds only while it
    is pending, and the worker claims it with `set_running_or_notify_cancel()`
    under the same lock, so exactly one of the two wins. `Task.cancel()` calls
    `cancel()` on the future the task waits on before it returns; with
    `wrap_future` the cancel reached the call only from a callback on the
    loop's next turn, by which time a worker freed by the call ahead could
    have claimed it, and it ran while its task got `CancelledError`.
    """

    def __init__(self, call: concurrent.futures.Future[T]) -> None:
        super().__init__(loop=asyncio.get_running_loop())
        self._call = call
        call.add_done_callback(self._call_done)

    def cancel(self, msg: Any | None = None) -> bool:
        # On the loop, inside Task.cancel(): the call never runs if it has
        # not been claimed yet; if it has, it runs to completion (the module
        # docstring's contract) and only this future, the task's, is cancelled.
        self._call.cancel()
        return super().cancel(msg)

    def _call_done(self, call: concurrent.futures.Future[T]) -> None:
        """The call finished or was cancelled (a worker thread, or the loop)."""
        loop = self.get_loop()
        if loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # it closed meanwhile: nobody awaits it
            loop.call_soon_threadsafe(self._copy, call)

    def _copy(self, call: concurrent.futures.Future[T]) -> None:
        if self.done():  # cancelled: the task was told already
            return
        if call.cancelled():
            super().cancel()
            return
        exc = call.exception()
        if exc is None:
            self.set_result(call.result())
        elif type(exc) is concurrent.futures.CancelledError:
            self.set_exception(asyncio.CancelledError(*exc.args))
        elif isinstance(exc, StopIteration):  # a future cannot hold one
            err = RuntimeError(f"a call raised {type(exc).__name__}")
            err.__cause__ = exc
            self.set_exception(err)
        else:
            self.set_exception(exc)


async def wait_for(fut: concurrent.futures.Future[T]) -> T:
    """Await a lane call. Cancelling the awaiting task cancels a call not
    yet claimed by a worker, at the moment of `task.cancel()`: it never
    runs. One already claimed runs to completion (see the module docstring)."""
    return await Waiter(fut)


class UnitCall:
    """One `awrite`/`abatch` unit as a lane call. Units queued one behind the
    other on a lane run together (`lanes.Together`): one lock hold, their
    INSERTs merged per table (`DurableObject._run_units`), each buffered
    whole. The outcome: the buffer position to commit through, or None when
    nothing is to be committed."""

    def __init__(self, face: Any, planned: list[Any], task: asyncio.Task[Any] | None) -> None:
        self.face, self.planned, self.task = face, planned, task

    def __call__(self) -> int | None:
        outcome = self.run_together([self])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    def joins(self, other: Callable[[], Any]) -> bool:
        return isinstance(other, UnitCall) and other.face is self.face

    def run_together(self, calls: list[Any]) -> list[Any]:
        face = self.face
        sync = face._sync
        with sync._lock:
            outcomes: list[Any] = sync._run_units([call.planned for call in calls])
            for n, (call, outcome) in enumerate(zip(calls, outcomes, strict=True)):
                if isinstance(outcome, BaseException):
                    continue
                if call.task is not None:
                    face._owed.discard(call.task)
                if not sync._buf and sync._buf.start == outcome:
                    outcomes[n] = None  # nothing of it logged, nothing else buffered
        return outcomes


@dataclass(frozen=True)
class FlushOutcome:
    """What one `aflush()` did, known once its worker finished.

    ran=False: it was cancelled before its turn and never ran; the buffer is
    intact. error set: it ran and failed; the statements stay buffered (as
    after a failed flush()). Otherwise it committed: `key` is what aflush()
    returned or would have returned."""

    ran: bool
    key: str | None = None
    error: BaseException | None = None

    @property
    def committed(self) -> bool:
        """Every statement buffered when it ran is durable."""
        return self.ran and self.error is None


def start_threads(pool: concurrent.futures.ThreadPoolExecutor, workers: int) -> None:
    """Have `pool` start all its `workers` threads now: each holds a task
    until all are running, so none is reused before the next is started."""
    barrier = threading.Barrier(workers + 1)
    for _ in range(workers):
        pool.submit(barrier.wait, 30)
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(30)


def close_orphan(executor: Executor, fut: concurrent.futures.Future[Any]) -> None:
    """An open whose awaiting task was cancelled (`durable_obj.aio.aopen`):
    close what it opened, on `executor`, never leaving its lease held."""
    if fut.cancelled() or fut.exception() is not None:
        return
    obj = fut.result()

    def close() -> None:
        try:
            obj.close()
        except Exception as exc:  # nobody awaits it: say so, never lose it silently
            log.warning("%s: closing after a cancelled aopen() failed: %s", obj.url, exc)

    executor.submit(close)
