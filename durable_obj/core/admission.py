"""Admission: a bounded number of one object's writes in flight, admitted in order.

A write waits here for a slot before it joins anything of the object's
(its lane's queue, the engine, the WAL buffer, a commit), and gives the
slot back when it is over. So however many tasks and threads write to one
object, at most `Options.max_units_in_flight` of their writes are inside
the object at once; the others wait here, in the order they arrived
(first come, first admitted: a caller that finds free slots while others
wait goes behind them), holding no thread of the async pool and no memory
of the object's. That is the backpressure: a writer faster than the store
waits at admission instead of growing a queue without bound.

What holds a slot, from admission until:

* a unit (`write()`, `batch()`, `awrite()`, `abatch()`): it is durable (its
  call returned) or failed (refused, failed to run, or its commit failed:
  the statements then stay buffered for the next flush, but the slot is
  free). An `awrite()` cancelled once its call started gives its slot back
  when that call ends, or the commit on the wire, if it waited for one;
* an `aexecute()`: its statement ran (it is not a unit: buffered, it waits
  for a flush the caller decides on, and holding a slot until then would
  let a task that executes more statements than there are slots before
  its own flush wait for itself).

The async face may also bound its units (`awrite`, `abatch`) across every
object of the process (`durable_obj.aio.MAX_UNITS_IN_FLIGHT`, off by
default; `process`): a unit is admitted by its object first, then by the
process, and holds both slots as long (an `aexecute` only its object's:
held back, statements executed by hand would batch less, not finish
sooner). With many objects busy at once that keeps the time from admission
to durability short where a bound per object cannot: each
object in flight costs a turn of the local worker per round (its engine
calls), so fifty objects with a few units each make a long round; a bound
across them admits fewer objects at a time, each with many units.

Waiting is cancellable: a task cancelled while it waits for admission
leaves the queue, and nothing of its write ran or was buffered. A slot
granted at the moment of the cancel is passed on to the next waiter.

A write made inside a call of the object's async lane (`arun(fn)` whose
`fn` calls `sync.write()`) takes no slot: the lane call is its queue, and
waiting for a slot there could wait for units queued behind that very call
(`exempt`, set by the lanes). Nor does a sync write on a thread that runs
an event loop (a misuse: it blocks the loop), whose tasks could not give a
slot back while it waits.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

_exempt = threading.local()
_process: list[Admission] = []
_process_lock = threading.Lock()


@contextlib.contextmanager
def exempt() -> Iterator[None]:
    """Writes made by this thread inside the block take no slot (a lane call)."""
    before = getattr(_exempt, "on", False)
    _exempt.on = True
    try:
        yield
    finally:
        _exempt.on = before


def _on_a_loop() -> bool:
    # asyncio is imported where a loop runs: a process that never imported
    # it runs none, and a synchronous open does not import it.
    aio = sys.modules.get("asyncio")
    if aio is None:
        return False
    try:
        aio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Ticket:
    """One caller waiting for a slot; `wake` tells it (from any thread)
    and returns False when it cannot be told (its loop closed)."""

    __slots__ = ("granted", "wake")

    def __init__(self, wake: Callable[[], bool]) -> None:
        self.granted = False
        self.wake = wake


def _waker(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> Callable[[], bool]:
    def done() -> None:
        if not fut.done():
            fut.set_result(None)

    import asyncio

    def wake() -> bool:
        try:
            if asyncio.get_running_loop() is loop:
                done()
                return True
        except RuntimeError:  # no loop runs in this thread
            pass
        try:
            loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop closed: nobody waits any more
            return False
        return True

    return wake


class Slot:
    """One admitted write's slot: given back once, by `release()`."""

    __slots__ = ("_admission", "_held", "kept")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._held = True
        #: The block's exit leaves the slot held (`release_when` took it over).
        self.kept = False

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission.release()

    def release_when(self, fut: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
        """Hold the slot past the block, until `fut` (the write's call, or a
        commit covering it) is done: the write is still in flight when its
        task leaves."""
        self.kept = True
        fut.add_done_callback(lambda _: self.release())


class Admission:
    """The slots of one object and the writers waiting for one, in order."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("an object admits at least one write at a time")
        self.limit = limit
        self._lock = threading.Lock()
        self._in = 0
        self._queue: collections.deque[_Ticket] = collections.deque()

    @property
    def in_flight(self) -> int:
        """Writes admitted and not over."""
        return self._in

    @property
    def waiting(self) -> int:
        """Writers waiting for admission."""
        return len(self._queue)

    def _take(self) -> bool:
        """A slot now, if one is free and nobody waits (lock held)."""
        if self._queue or self._in >= self.limit:
            return False
        self._in += 1
        return True

    def acquire(self) -> bool:
        """Wait (blocking this thread) for a slot; False when this thread
        takes none: inside a lane call (`exempt`), or on a thread running an
        event loop, whose own tasks may hold every slot and could never give
        one back while it waits (the sync API on a loop blocks it, as it did
        before admission, but never for ever)."""
        if getattr(_exempt, "on", False) or _on_a_loop():
            return False
        with self._lock:
            if self._take():
                return True
            event = threading.Event()

            def wake() -> bool:
                event.set()
                return True

            ticket = _Ticket(wake)
            self._queue.append(ticket)
        try:
            event.wait()
        except BaseException:  # (KeyboardInterrupt on the main thread)
            self._leave(ticket)
            raise
        return True

    async def aacquire(self) -> None:
        """Wait for a slot without holding a thread; FIFO with the threads'."""
        import asyncio

        with self._lock:
            if self._take():
                return
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            ticket = _Ticket(_waker(loop, fut))
            self._queue.append(ticket)
        try:
            await fut
        except BaseException:  # cancelled: leave the queue, or pass on a slot just given
            self._leave(ticket)
            raise

    def _leave(self, ticket: _Ticket) -> None:
        with self._lock:
            if not ticket.granted:
                self._queue.remove(ticket)
                return
        self.release()

    def release(self) -> None:
        """Give a slot back: the longest waiter gets it."""
        with self._lock:
            self._in -= 1
            while self._queue and self._in < self.limit:
                ticket = self._queue.popleft()
                ticket.granted = True
                self._in += 1
                if not ticket.wake():  # nobody left to take it
                    ticket.granted = False
                    self._in -= 1

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """The block runs admitted (a thread waits for its slot first)."""
        taken = self.acquire()
        try:
            yield
        finally:
            if taken:
                self.release()

    @contextlib.asynccontextmanager
    async def aslot(self) -> AsyncIterator[Slot]:
        """The block runs admitted (the task waits for its slot first)."""
        await self.aacquire()
        slot = Slot(self)
        try:
            yield slot
        finally:
            if not slot.kept:
                slot.release()


def process(limit: int | None) -> Admission:
    """The process's one admission for async units across every object
    (`durable_obj.aio.MAX_UNITS_IN_FLIGHT`), made at the first call with
    `limit` (None: no bound)."""
    with _process_lock:
        if not _process:
            _process.append(Admission(sys.maxsize if limit is None else limit))
        return _process[0]
