"""Sealed bases opened into the local file RESTORE reads, chunks in parallel.

A sealed base is a header and chunks of a fixed size (`sealing.py`), each
opened on its own given its index and whether it is the last. So a base is
opened by a pool of threads (AES-GCM and SHA-256 release the GIL), each
chunk's plaintext written at its own offset, in one of two ways:

* `open_file`: from a local file (a folder store links the stored file): the
  file's size tells which chunk is the last, and the workers read, open and
  write disjoint runs of chunks. The SHA-256 of the sealed file is taken
  after, on a thread of its own beside RESTORE (as a plain base's is), so
  that the chunks have every core.
* `StreamOpener`: from bytes arriving in order (an S3 body as it downloads):
  a chunk is handed to the pool as soon as a byte past it arrives (so it is
  not the last) or the stream ends (so it is), hashed as it arrives. The
  download, the decryption and the writes overlap: the open pays for the
  last few chunks only.

Either way the plaintext is released only whole: when `open_file` or
`StreamOpener.finish` returns, every chunk's tag held, under the position
its nonce names and with the last-chunk flag where the blob ends, so a
flipped byte, a reordered, missing or added chunk and a cut or extended
blob are each `Corrupt`, and the file is removed instead. The size and
SHA-256 of the sealed bytes (what the head's ref names) are a `Digest`
whose `result()` waits for them: the caller judges them as it judges a
plain base's, before anything made of the base is seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from durable_obj.wire.digest import CHUNK, BackgroundDigest, Digest, read_chunks, scratch
from durable_obj.wire.sealing import HEADER_SIZE, TAG, SealedBlob

if TYPE_CHECKING:
    from durable_obj.wire.sealing import Unsealer

#: Threads that open chunks (this machine's cores, at most 4: the cipher
#: outruns the disk well before that).
WORKERS = max(1, min(4, os.cpu_count() or 1))
#: Chunks a worker of `open_file` takes at once.
RUN = 4
#: Chunks of a stream held at once (read, or being opened): its memory.
IN_FLIGHT = 16


def _write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def _create(dst: str) -> int:
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def open_file(
    opener: Unsealer, oid: str, name: str, src: str, dst: str, *, what: str
) -> BackgroundDigest:
    """Write the plaintext of the sealed file `src` to `dst`; on return
    every chunk's tag held (else `Corrupt`, and `dst` is removed). The size
    and SHA-256 of `src` are returned pending, taken from then on (on a
    thread of its own, beside RESTORE): `src` may be removed at once."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        blob = opener.begin(oid, name, os.pread(fd, HEADER_SIZE, 0), what=what)
        rest = os.fstat(fd).st_size - HEADER_SIZE
        step = blob.step
        count = max(1, -(-rest // step))
        tail = rest - (count - 1) * step
        if tail < TAG:
            raise blob.bad("it ends inside a chunk")
        out = _create(dst)
        try:
            spare: queue.SimpleQueue[tuple[memoryview, memoryview]] = queue.SimpleQueue()

            def run(first: int, upto: int | None = None) -> None:
                # One pair of mapped buffers per worker, reused (`scratch`).
                try:
                    sealed, plain = spare.get_nowait()
                except queue.Empty:
                    sealed, plain = scratch(step), scratch(blob.size)
                try:
                    for index in range(first, min(upto or first + RUN, count)):
                        last = index == count - 1
                        want = sealed[: tail if last else step]
                        got = os.preadv(fd, [want], HEADER_SIZE + index * step)
                        opened = blob.open_into(index, last, want[:got], plain)
                        _write_at(out, opened, index * blob.size)
                finally:
                    spare.put((sealed, plain))

            # Chunk 0 first, alone: once its tag holds, the header (in every
            # chunk's associated data, chunk size included) is the writer's,
            # so the count below is not an attacker's to choose.
            run(0, 1)
            _each(run, range(1, count, RUN))
        finally:
            os.close(out)
        # Hashed once every core is free of the chunks: beside RESTORE, as
        # a plain base is. Its own handle: `src` may be removed on return.
        return BackgroundDigest(_read_all(os.fdopen(os.dup(fd), "rb")))
    except BaseException:
        remove(dst)
        raise
    finally:
        os.close(fd)


def _read_all(handle: io.BufferedReader) -> Iterator[memoryview]:
    with handle:
        yield from read_chunks(handle)


def _each(run: Callable[[int], None], starts: range) -> None:
    """`run(start)` of every start on `WORKERS` threads; the error of the
    earliest start that failed (the others are not started)."""
    if len(starts) <= 1 or WORKERS == 1:
        for start in starts:
            run(start)
        return
    failed: BaseException | None = None
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="durable_obj-unseal") as pool:
        window: deque[Future[None]] = deque()
        for start in starts:  # at most 2 * WORKERS runs submitted at once
            if len(window) >= 2 * WORKERS:
                failed = window.popleft().exception()
                if failed is not None:
                    break
            window.append(pool.submit(run, start))
        for future in window:
            if failed is not None:
                future.cancel()
                continue
            failed = future.exception()
    if failed is not None:
        raise failed


class Hashing:
    """SHA-256 and size of pieces fed in order, taken on a thread of its
    own, a batch of about `CHUNK` bytes at a time (a stream's pieces may be
    small: one hand-over each would cost more than the hashing). At most
    `HELD` batches wait for it: then `feed` waits, so memory stays bounded
    when the bytes arrive faster than they are hashed."""

    HELD = 4

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="durable_obj-digest")
        self._batch: list[bytes] = []
        self._held = 0
        self._queued: deque[Future[None]] = deque()

    def feed(self, piece: bytes) -> None:
        self.size += len(piece)
        self._batch.append(piece)
        self._held += len(piece)
        if self._held >= CHUNK:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch, self._held = self._batch, [], 0
        if batch:  # in order: one worker
            self._queued.append(self._pool.submit(self._update, batch))
        while len(self._queued) > self.HELD or (self._queued and self._queued[0].done()):
            self._queued.popleft().result()

    def _update(self, batch: list[bytes]) -> None:
        for piece in batch:
            self._sha.update(piece)

    def result(self) -> tuple[int, str]:
        self._hand_over()
        self._pool.shutdown(wait=True)
        while self._queued:
            self._queued.popleft().result()
        return self.size, self._sha.hexdigest()


class StreamOpener:
    """Opens a sealed blob arriving in order (`write`, any piece sizes) into
    the file `dst`; a store's streamed read drives it (`Store.read_into`):
    `restart()` before each attempt, then `write` of every piece. `finish()`
    says whether it all held. `write` is called on the store's IO thread:
    it copies the piece into a chunk buffer, hands full chunks to the pool
    and returns; it waits only when `IN_FLIGHT` chunks are held already."""

    def __init__(self, opener: Unsealer, oid: str, name: str, dst: str, *, what: str) -> None:
        self._opener, self._oid, self._name, self._what = opener, oid, name, what
        self._dst = dst
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="durable_obj-unseal")
        self._lock = threading.Lock()
        self._out: int | None = None
        self._start()

    def _start(self) -> None:
        self._header = bytearray()
        self._blob: SealedBlob | None = None
        self._error: BaseException | None = None
        self._failed_at: int | None = None
        self._index = 0
        self._jobs: list[Future[None]] = []
        self._free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        self._plain: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        self._buffers = 0
        self._cur: memoryview | None = None
        self._fill = 0
        self._hash = Hashing()
        self._verified = threading.Event()

    def restart(self) -> None:
        """A new attempt at the whole blob: what came before is dropped."""
        self._drain()
        self._hash.result()
        self._close_out()
        self._start()

    def write(self, piece: bytes) -> None:
        if not piece:
            return
        self._hash.feed(piece)
        if self._error is not None:
            return  # the blob is refused already: read to the end, opened no further
        view = memoryview(piece)
        if self._blob is None:
            need = HEADER_SIZE - len(self._header)
            self._header += view[:need]
            view = view[need:]
            if len(self._header) < HEADER_SIZE:
                return
            try:
                self._blob = self._opener.begin(
                    self._oid, self._name, bytes(self._header), what=self._what
                )
                self._out = _create(self._dst)
            except BaseException as exc:  # raised by finish(), not on the IO thread
                self._error = exc
                return
        blob = self._blob
        while view:
            if self._cur is not None and self._fill == blob.step:
                self._submit(last=False)  # a byte past it arrived: not the last
            if self._cur is None:
                self._cur, self._fill = self._buffer(blob.step), 0
            take = min(len(view), blob.step - self._fill)
            self._cur[self._fill : self._fill + take] = view[:take]
            self._fill += take
            view = view[take:]

    def _buffer(self, step: int) -> memoryview:
        """A free chunk buffer; a new one while fewer than `IN_FLIGHT` exist,
        else the next one a worker frees (the stream waits for the pool)."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        # Until chunk 0's tag holds, the header (chunk size included) is
        # anyone's: one more buffer than the first, no more, so a forged
        # chunk size costs two chunks of memory, not IN_FLIGHT (and the
        # plaintext buffer of each worker opening one of them: mapped, so
        # only what the cipher writes into it is ever resident).
        limit = IN_FLIGHT if self._verified.is_set() else 2
        if self._buffers < limit:
            self._buffers += 1
            return scratch(step)
        return self._free.get()

    def _submit(self, *, last: bool) -> None:
        assert self._blob is not None and self._cur is not None and self._out is not None
        buf, fill, index = self._cur, self._fill, self._index
        self._cur, self._fill = None, 0
        self._index += 1
        blob, out = self._blob, self._out

        def run() -> None:
            try:
                try:  # a plaintext buffer per worker, reused (`scratch`)
                    spare = self._plain.get_nowait()
                except queue.Empty:
                    spare = scratch(blob.size)
                try:
                    plain = blob.open_into(index, last, buf[:fill], spare)
                    if index == 0:
                        self._verified.set()
                    _write_at(out, plain, index * blob.size)
                finally:
                    self._plain.put(spare)
            except BaseException as exc:
                with self._lock:
                    if self._failed_at is None or index < self._failed_at:
                        self._failed_at, self._error = index, exc
            finally:
                self._free.put(buf)

        self._jobs = [job for job in self._jobs if not job.done()]
        self._jobs.append(self._pool.submit(run))

    def _drain(self) -> None:
        for job in self._jobs:
            job.result()
        self._jobs = []

    def _close_out(self) -> None:
        if self._out is not None:
            os.close(self._out)
            self._out = None

    def finish(self) -> Digest:
        """After the last piece: the blob's last chunk opened and every
        chunk's tag held (else `Corrupt`, and the file is removed). Returns
        the size and SHA-256 of what was written, pending."""
        try:
            if self._error is None and self._blob is None:
                self._opener.begin(self._oid, self._name, bytes(self._header), what=self._what)
            if self._error is None:
                assert self._blob is not None
                if self._cur is None:  # the stream ended with the header
                    self._cur, self._fill = self._buffer(self._blob.step), 0
                self._submit(last=True)
            self._drain()
            if self._error is not None:
                raise self._error
        except BaseException:
            self.close()
            remove(self._dst)
            raise
        self._close_out()
        self._pool.shutdown(wait=True)
        return self._hash

    def close(self) -> None:
        """Stop, whatever was written (a failed download): no file is kept open."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._hash.result()
        self._close_out()
