"""What a writer executed and has not yet made durable, and who is owed an
answer about it.

Every statement logged gets a position: `start` is the position of the
oldest line still buffered, `end` the position the next one will get. A
commit publishes a prefix of the buffer (the lines up to the `end` it saw
when it started: `group.py` lets statements join the buffer while a commit
is in flight) and drops exactly that prefix. A unit of work (`write()`, a
batch) joins the buffer in one `add`, so no commit ever takes part of it.

A writer whose object compresses its WAL compresses the buffer as it grows
(`Frame`): a commit that takes exactly the lines of the frame finishes it
instead of compressing the segment on the flush's path; any other commit
(a retry after a failed one) compresses its lines itself.

`flush()` answers "which commit made my statements durable?". With one lock
and many threads, a thread's statements may be committed by another thread's
flush(), by a checkpoint or by the auto-flush before its own flush() runs;
that flush() then finds nothing buffered. It must not answer as if nothing
had been executed: so each thread that executed something is remembered
until a flush() or checkpoint() *it* called has told it a key.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from durable_obj.wire.compression import Frame
from durable_obj.wire.wal import WalBuffer


@dataclass(frozen=True)
class Outgoing:
    """What one commit publishes: the lines, and their zstd frame when the
    buffer compressed exactly these lines as they came (else None)."""

    lines: list[bytes]
    frame: bytes | None = None


class Pending:
    """The WAL buffer and its positions, the age of its oldest statement,
    the key of the last commit, and the threads still owed that key."""

    def __init__(self, compresses: Callable[[], bool] = lambda: False) -> None:
        self.buf = WalBuffer()
        #: Whether the object's WAL is compressed now (its head says).
        self._compresses = compresses
        self._frame: Frame | None = None
        #: Position of the oldest buffered line (lines ever committed or dropped).
        self.start = 0
        #: Monotonic time of the oldest buffered statement.
        self.since = 0.0
        #: The segment or base key of the last commit.
        self.last_key: str | None = None
        self._owed: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def __len__(self) -> int:
        return len(self.buf)

    def __bool__(self) -> bool:
        return bool(self.buf)

    @property
    def end(self) -> int:
        """The position after the newest buffered line."""
        return self.start + len(self.buf)

    def add(self, *lines: bytes) -> int:
        """Buffer admitted statements (one, or a whole unit) for the calling
        thread; the position after them."""
        if lines:
            if not self.buf:
                self.since = time.monotonic()
            frame = self._framing()
            for line in lines:
                self.buf.append(line)
                if frame is not None:
                    frame.feed(line)
            self._owed.add(threading.current_thread())
        return self.end

    def _framing(self) -> Frame | None:
        """The frame the lines about to be added join: the current one if it
        holds every line from its start to the end, a new one if the object
        compresses, else None."""
        frame = self._frame
        if frame is None or frame.start + frame.lines != self.end:
            frame = self._frame = Frame(self.end) if self._compresses() else None
        return frame

    def take(self) -> tuple[Outgoing, int]:
        """What a commit starting now publishes: every buffered line (with
        their frame if one holds exactly them), and the position after the
        last of them. Lines added from now on start a new frame."""
        frame, self._frame = self._frame, None
        lines = self.buf.lines()
        if frame is None or frame.start != self.start or frame.lines != len(lines):
            return Outgoing(lines), self.end
        return Outgoing(lines, frame.finish()), self.end

    def age(self) -> float:
        """Seconds since the oldest buffered statement was executed (0: none)."""
        return time.monotonic() - self.since if self.buf else 0.0

    def committed(self, key: str, *, caller_told: bool, upto: int | None = None) -> None:
        """The lines before `upto` (all, when None) were committed as `key` (a
        segment or a base). The calling thread learns the key from its own call
        when `caller_told`."""
        upto = self.end if upto is None else upto
        if self._frame is not None and self._frame.start < upto:
            self._frame = None  # (a checkpoint took lines it holds)
        if upto > self.start:  # (a drop() during the commit forgot them already)
            self.buf.drop_first(upto - self.start)
            self.start = upto
        if self.buf:
            self.since = time.monotonic()  # what is left was executed during the commit
        self.last_key = key
        if caller_told:
            self._owed.discard(threading.current_thread())

    def answer(self) -> str | None:
        """What flush() with nothing buffered returns: the key of the last
        commit if the calling thread executed statements since it was last
        told one (a commit it did not call made them durable), once; else None."""
        me = threading.current_thread()
        if me not in self._owed:
            return None
        self._owed.discard(me)
        return self.last_key

    def told(self) -> None:
        """The calling thread was told a key by a call of its own."""
        self._owed.discard(threading.current_thread())

    def drop(self) -> int:
        """Forget the buffer (close(discard=True), a fenced writer); how many
        statements were dropped."""
        count = len(self.buf)
        self.start = self.end
        self.buf.clear()
        self._frame = None
        self._owed = weakref.WeakSet()
        return count
