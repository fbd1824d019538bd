"""Group commit: concurrent flushes of one object share one commit in flight.

A flush asks for every line before a position (`Pending.end` when it was
called) to be committed. If a commit is in flight, the flush waits for it:
when that commit covers its position it returns that commit's key (or
raises its error); otherwise it leads the next commit, which takes every
line buffered by then. The leader publishes the segment and replaces the
head with the object's lock released, so statements keep running and
joining the buffer during the network round trips; they go in the next
commit. At most one commit of an object is ever in flight, and it takes a
prefix of the buffer that ends on a unit's boundary (`Pending.add`), so
no interleaving of callers commits part of a unit.

Everything else that writes the head (a checkpoint, a renewal, close's
release) first waits until no commit is in flight, holding the lock, so
it never runs beside one (`idle`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from durable_obj.core import interrupts
from durable_obj.core.pending import Outgoing, Pending
from durable_obj.replica import turn


class _Round:
    """One commit in flight: what it covers, and how it ended."""

    __slots__ = ("error", "finished", "key", "upto")

    def __init__(self, upto: int) -> None:
        self.upto = upto
        self.finished = False
        self.key: str | None = None
        self.error: BaseException | None = None


@contextlib.contextmanager
def _released(lock: Any) -> Iterator[None]:
    """`lock` (a reentrant lock held by this thread, maybe several levels
    deep) released for the block and taken back as deep after it: what
    `threading.Condition.wait` does around its wait."""
    state = lock._release_save()
    try:
        with turn.released():  # (an async worker's turn too: this waits, runs no Python)
            yield
    finally:
        lock._acquire_restore(state)


class GroupCommit:
    """The commits of one object's buffer; every method is called with
    `lock` held."""

    def __init__(
        self,
        lock: threading.RLock,
        pending: Pending,
        url: str = "",
        proof: Callable[[], tuple[object, str | None]] = lambda: (None, None),
    ) -> None:
        self._url = url
        #: The writer's last proof (a token that changes with each commit
        #: proven) and the key it committed: a commit interrupted after its
        #: proof still counts (`_lead`).
        self._proof = proof
        self._lock = lock
        self._cond = threading.Condition(lock)
        self._pending = pending
        self._round: _Round | None = None

    @property
    def in_flight(self) -> bool:
        return self._round is not None

    def idle(self) -> None:
        """Wait until no commit is in flight (the lock is held on return)."""
        while self._round is not None:
            with turn.released():
                self._cond.wait()

    def through(self, target: int, commit: Callable[[Outgoing], str]) -> str | None:
        """Make every line before position `target` durable, with `commit`
        (publish the lines as a segment, replace the head; returns the key) for a round
        this call leads. Returns the key of the commit that covered `target`,
        or None if nothing needed committing (an earlier commit, or a
        checkpoint, covered it: `Pending.last_key` names it)."""
        pending = self._pending
        while True:
            current = self._round
            if current is not None:
                while not current.finished:
                    with turn.released():
                        self._cond.wait()
                if current.upto >= target:
                    if current.error is not None:
                        raise current.error
                    return current.key
                continue
            if pending.start >= target:
                return None
            with interrupts.settling(self._url):  # (an auto-flush, a transaction's commit)
                return self._lead(pending, commit)

    def _lead(self, pending: Pending, commit: Callable[[Outgoing], str]) -> str:
        """Run the next commit: every line buffered now."""
        outgoing, upto = pending.take()
        current = self._round = _Round(upto)
        before, _ = self._proof()
        try:
            with _released(self._lock):
                key = commit(outgoing)
        except BaseException as exc:
            proven, landed = self._proof()
            if proven is not before and landed is not None:
                # Proven, then interrupted (a second Ctrl-C, interrupts.py):
                # its lines are committed, never buffered for the next one.
                current.key = landed
                pending.committed(landed, caller_told=False, upto=upto)
            else:
                current.error = exc
            raise
        else:
            current.key = key
            pending.committed(key, caller_told=False, upto=upto)  # callers say
            return key
        finally:
            current.finished = True
            self._round = None
            self._cond.notify_all()
