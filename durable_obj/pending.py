"""What a writer executed and has not yet made durable, and who is owed an
answer about it.

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

from durable_obj.wal import WalBuffer


class Pending:
    """The WAL buffer, the age of its oldest statement, the key of the
    last commit, and the threads still owed that key."""

    def __init__(self) -> None:
        self.buf = WalBuffer()
        #: Monotonic time of the oldest buffered statement.
        self.since = 0.0
        #: The segment or base key of the last commit that emptied the buffer.
        self.last_key: str | None = None
        self._owed: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def __len__(self) -> int:
        return len(self.buf)

    def __bool__(self) -> bool:
        return bool(self.buf)

    def add(self, line: bytes) -> None:
        """Buffer one admitted statement for the calling thread."""
        if not self.buf:
            self.since = time.monotonic()
        self.buf.append(line)
        self._owed.add(threading.current_thread())

    def age(self) -> float:
        """Seconds since the oldest buffered statement was executed (0: none)."""
        return time.monotonic() - self.since if self.buf else 0.0

    def committed(self, key: str, *, caller_told: bool) -> None:
        """The buffer was committed as `key` (a segment or a base). The calling
        thread learns the key from its own call when `caller_told`."""
        self.buf.clear()
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

    def drop(self) -> int:
        """Forget the buffer (close(discard=True), a fenced writer); how many
        statements were dropped."""
        count = len(self.buf)
        self.buf.clear()
        self._owed = weakref.WeakSet()
        return count
