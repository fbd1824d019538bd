"""A file that another thread is still writing, read while it grows.

A checkpoint's BACKUP archive is written by the engine front to back, never
rewritten: ClickHouse packs a `.tar` through libarchive, whose writer has no
seek (it writes into a stream), straight at the path it was given. So every
byte is final once it is in the file, and the archive can be hashed and
uploaded while BACKUP still writes it, instead of after it: a checkpoint
then costs about the longest of the three, not their sum.

    source = GrowingFile(path)
    thread = source.produce(lambda: engine.backup(db, path))
    ...  # readers: source.read(offset, n), source.chunks(), source.wait()
    thread.join(); source.close()

Readers share one descriptor, opened as soon as the file exists and read
with `pread`: a store that moves the finished file away (the folder store
renames it into place) does not pull it from under a reader. A producer that
fails ends every read with `SourceFailed`, whose cause is the producer's own
error: nothing read from a failed archive is ever committed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

from durable_obj.errors import DurableError
from durable_obj.wire.beside import Beside
from durable_obj.wire.v1base import DefaultBase

#: How long a reader waits for more bytes before it looks again.
_POLL = 0.002
#: Bytes written between two of `sync_while_growing`'s syncs.
SYNC_EVERY = 8 * 1024 * 1024
#: What `chunks` hands on at a time: small, so that a reader that follows
#: the producer (the digest) is never far behind it. In 4 MiB runs the
#: SHA-256 of a 10 MiB BACKUP began at its first 4 MiB and ended 5-7 ms
#: after BACKUP: a checkpoint of 10k rows took 23.6 ms against 19.7 in
#: 256 KiB runs (1k rows: 10.2 against 9.8; medians of 6, interleaved).
FOLLOW_CHUNK = 256 * 1024


class SourceFailed(DurableError):
    """The producer of a growing file failed; `__cause__` is its error."""

    category = "engine"


class GrowingFile:
    """The file at `path`, written by one producer and read by many."""

    def __init__(self, path: str, rewrite: DefaultBase | None = None) -> None:
        self.path = path
        #: Rewrites the archive in place as it grows (`v1base`); readers get
        #: only bytes it has released.
        self._rewrite = rewrite
        self._rewrite_lock = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._abandoned = False

    # -- the producer ------------------------------------------------------------------
    def produce(self, write: Callable[[], None]) -> Beside[None]:
        """Run `write` (which creates and fills the file) on a thread;
        `join()` the answer to wait for it (`Beside`: also after an
        interrupted wait)."""

        def run() -> None:
            try:
                write()
            except BaseException as exc:  # handed to every reader by finish()
                self.finish(exc)
            else:
                self.finish()

        return Beside(run, name="durable_obj-archive")

    def finish(self, error: BaseException | None = None) -> None:
        """The file is complete (or the producer failed with `error`)."""
        if error is not None:
            self._error = error
        elif (fd := self._descriptor()) is None:
            self._error = FileNotFoundError(f"{self.path} was never written")
        elif self._rewrite is not None:
            try:
                with self._rewrite_lock:
                    self._rewrite.complete(fd)
            except OSError as exc:
                self._error = exc
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def sync_while_growing(self, every: int = SYNC_EVERY, poll: float = _POLL) -> None:
        """Until the producer ends, `fdatasync` what it has written each time
        `every` more bytes are there (looked at every `poll` seconds): the
        disk writes the archive while BACKUP still produces it, and the
        fsync that publishes it waits for the tail only. By bytes, not by
        time: a sync every 50 ms never came during a checkpoint of 10k rows
        (25 ms), and one every 2 ms would ask a disk to flush its cache 500
        times a second."""
        synced = 0
        while not self._done.wait(poll) and not self._abandoned:
            fd = self._descriptor()
            if fd is not None and (size := os.fstat(fd).st_size) - synced >= every:
                os.fdatasync(fd)
                synced = size

    # -- readers -----------------------------------------------------------------------
    def _descriptor(self) -> int | None:
        with self._lock:
            if self._fd is None and not self._closed:
                try:
                    self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except FileNotFoundError:
                    return None
            return self._fd

    def _failed(self) -> None:
        if self._error is not None:
            raise SourceFailed(
                f"writing {os.path.basename(self.path)} failed ({type(self._error).__name__})"
            ) from self._error

    def wait(self) -> int:
        """Wait until the file is complete; its size. `SourceFailed` if it
        failed, or if it was abandoned (`abandon`) before it was complete.
        Once complete it is there, whatever was given up: what waited for it
        (a checkpoint's history file) goes on as it would have, whichever of
        the two came first (a seed of the fault machines replays)."""
        while not self._done.wait(_POLL):
            if self._abandoned:
                raise SourceFailed(f"{os.path.basename(self.path)} was given up before it was read")
        self._failed()
        fd = self._descriptor()
        assert fd is not None
        return os.fstat(fd).st_size

    def read(self, offset: int, size: int) -> bytes:
        """`size` bytes at `offset`, waiting for the producer to write them;
        fewer only at the end of the complete file. `SourceFailed` once the
        file is closed or abandoned: a reader left running past its caller
        never takes a closed file's missing bytes for its end."""
        parts: list[bytes] = []
        want = size
        while want > 0:
            if self._closed or self._abandoned:
                raise SourceFailed(f"{os.path.basename(self.path)} was given up before it was read")
            done = self._done.is_set()  # read before the bytes: no end is missed
            fd = self._descriptor()
            got = b"" if fd is None else os.pread(fd, self._readable(fd, offset, want), offset)
            if got:
                parts.append(got)
                offset += len(got)
                want -= len(got)
                continue
            if done:
                self._failed()
                break
            self._done.wait(_POLL)
        return b"".join(parts)

    def _readable(self, fd: int, offset: int, want: int) -> int:
        """How many of `want` bytes at `offset` are final now."""
        if self._rewrite is None or self._done.is_set():
            return want
        with self._rewrite_lock:
            released = self._rewrite.released(fd, os.fstat(fd).st_size)
        return max(0, min(want, released - offset))

    def chunks(self, size: int = FOLLOW_CHUNK) -> Iterator[bytes]:
        """The whole file, front to back, as it is written (`FOLLOW_CHUNK`
        bytes at a time)."""
        offset = 0
        while chunk := self.read(offset, size):
            offset += len(chunk)
            yield chunk
            if len(chunk) < size:
                break

    def abandon(self) -> None:
        """Readers stop (`read` raises `SourceFailed`): what they were for
        was given up (a checkpoint interrupted before its commit), so an
        upload of the file ends (S3 aborts its multipart) instead of
        running to the end. The producer is not stopped."""
        self._abandoned = True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
