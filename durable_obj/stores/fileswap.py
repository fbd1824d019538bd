"""A folder's compare-and-swap of one key (a head), and the files it writes.

A replace writes and fsyncs a temp file beside the key; then, under an
exclusive `flock` on `<key>.lock` (the same lock file chdb.durable's local
backend takes, so the two exclude each other), the current bytes are hashed
and compared with the caller's version, the temp file is renamed over the
key (or removed) and the folder is fsynced. Every file this store
writes (`_write`) is stamped with a fresh nonce in an extended attribute of
its inode before it is linked or renamed into place (`file.py` says why).

`replace_after` is the head write of a flush or a checkpoint: the temp file
and its fsync are made on a worker while the caller publishes what the new
head names (a segment, a base), so the fsyncs overlap; then, under the lock,
the compare, the rename and the folder's fsync. The rename waits for the
publish: a head never names a key that is not durable. The lock is never held
while the publish runs: a base copied in from another filesystem took it
for as long as the copy (other writers wait on it for up to `lock_wait`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from durable_obj.errors import BackendError
from durable_obj.stores.base import Version
from durable_obj.stores.filepaths import OPEN_LOCK, OPEN_NEW, OPEN_READ, ConfinedFolder

#: Bytes read at a time.
CHUNK = 4 * 1024 * 1024

XATTR = "user.durable_obj.version"


def version_of(data: bytes, nonce: str = "") -> Version:
    return Version(f"{nonce}:{hashlib.sha256(data).hexdigest()}")


def stamp(fd: int) -> str:
    """Give the inode behind `fd` a fresh nonce; "" where xattrs are unsupported."""
    nonce = uuid.uuid4().hex
    try:
        os.setxattr(fd, XATTR, nonce.encode())
    except OSError:
        return ""
    return nonce


def nonce_of(fd: int) -> str:
    try:
        return os.getxattr(fd, XATTR).decode("ascii", "replace")
    except OSError:
        return ""


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    """The file's bytes from where `fd` stands to its end, read in pieces
    of its size plus one (at most `CHUNK`): a read of `CHUNK` allocates that
    much first, and a head is a few KiB (a read of 4 MiB took 13.6 us, of
    64 KiB 0.7 us, measured; a flush reads its head once). A file that grew
    since is still read to its end, in more pieces."""
    step = max(os.fstat(fd).st_size + 1, 4096)
    parts = []
    while part := os.read(fd, min(step, CHUNK)):
        parts.append(part)
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class _Staged:
    """A replace staged: the folder and the lock (-1: not taken yet), held
    open; the key's name and the staged file's; the version it will be."""

    dfd: int
    lock: int
    name: str
    tmp: str
    version: Version


#: The workers that stage a head beside its key while a segment is published
#: (`FileStore.replace_after`), with the process that started them: a forked
#: child starts its own (a parent's workers do not exist there).
_STAGER: tuple[int, ThreadPoolExecutor] | None = None
_STAGER_LOCK = threading.Lock()


def _stager() -> ThreadPoolExecutor:
    global _STAGER
    with _STAGER_LOCK:
        if _STAGER is None or _STAGER[0] != os.getpid():
            _STAGER = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="durable_obj-stage"))
        return _STAGER[1]


class FolderSwap(ConfinedFolder):
    """The compare-and-swap of a folder store (`FileStore`)."""

    #: Seconds a replace waits for the head's lock before it gives up. The
    #: lock is held for one read, write, fsync and rename (milliseconds); a
    #: holder past this is stopped (SIGSTOP, a paused VM) or hung, and
    #: waiting on it blocks the caller for as long as it stays so.
    lock_wait = 30.0
    #: fsync every published file and its directory (power-loss safety).
    _fsync: bool = True

    def _fail(self, action: str, key: str, exc: OSError) -> BackendError:
        reason = exc.strerror or type(exc).__name__
        return BackendError(f"{action} {key!r} in {self.url} failed: {reason}")

    def _write(self, dfd: int, name: str, key: str, chunks: Iterable[bytes]) -> Version:
        """Write the new file `name` in the folder `dfd`, stamped and fsynced;
        its version. The file is removed again if anything fails."""
        digest = hashlib.sha256()
        fd = self._step(dfd, name, key, OPEN_NEW)
        try:
            try:
                nonce = stamp(fd)
                for chunk in chunks:
                    write_all(fd, chunk)
                    digest.update(chunk)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            os.unlink(name, dir_fd=dfd)
            raise
        return Version(f"{nonce}:{digest.hexdigest()}")

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        # written and fsynced beside the key first, the lock taken only for
        # the compare, the rename and the folder's fsync (as replace_after)
        return self._swap(key, self._prepare(key, data), version)

    def replace_after(
        self, key: str, data: bytes, version: Version, first: Callable[[], None]
    ) -> Version | None:
        """`first()` on this thread while a worker writes and fsyncs the new
        bytes to a temp file beside the key (unseen: nothing renames it yet,
        and no lock is taken); then, under the key's lock, the compare, the
        rename and the folder's fsync (`_swap`). Their fsyncs overlap; the
        rename still comes after `first()` (every fsync it makes) returned."""
        if not self._fsync:
            return super().replace_after(key, data, version, first)
        future = _stager().submit(self._prepare, key, data)
        try:
            first()
            prepared = future.result()
        except BaseException:
            future.add_done_callback(self._abandon)  # whenever the worker ends
            raise
        return self._swap(key, prepared, version)

    def _prepare(self, key: str, data: bytes) -> _Staged:
        """`data` written, stamped and fsynced to a temp file beside the key,
        the folder kept open for `_swap` (or `_drop`); no lock taken."""
        try:
            dfd, name = self._open_parent(key, create=True)
            assert dfd is not None
            try:
                tmp = f"{name}.{uuid.uuid4().hex}.tmp"
                new = self._write(dfd, tmp, key, [data])
            except BaseException:
                os.close(dfd)
                raise
        except OSError as exc:
            raise self._fail("replacing", key, exc) from exc
        return _Staged(dfd, -1, name, tmp, new)

    def _swap(self, key: str, prepared: _Staged, version: Version) -> Version | None:
        """Under the key's lock, if the key is still at `version`, the
        prepared file renamed over it (`_land`); else it is removed (None)."""
        try:
            lock = self._step(prepared.dfd, f"{prepared.name}.lock", key, OPEN_LOCK)
        except BaseException as exc:
            self._drop(prepared)
            if isinstance(exc, OSError):
                raise self._fail("replacing", key, exc) from exc
            raise
        staged = _Staged(prepared.dfd, lock, prepared.name, prepared.tmp, prepared.version)
        try:
            self._lock(lock, key)  # released when the file closes
            current = self._current(staged.dfd, staged.name, key)
        except BaseException as exc:
            self._drop(staged)
            if isinstance(exc, OSError):
                raise self._fail("replacing", key, exc) from exc
            raise
        if current != version:
            self._drop(staged)
            return None
        return self._land(key, staged)

    def _current(self, dfd: int, name: str, key: str) -> Version | None:
        """The version of the file `name` in the folder `dfd`; None if there
        is none (or it is a folder)."""
        try:
            fd = self._step(dfd, name, key, OPEN_READ)
        except FileNotFoundError:
            return None
        try:
            if not self._regular(fd, key):
                return None
            return version_of(read_all(fd), nonce_of(fd))
        finally:
            os.close(fd)

    def _land(self, key: str, staged: _Staged) -> Version:
        """Rename the staged file over the key, fsync the folder, unlock."""
        try:
            os.replace(staged.tmp, staged.name, src_dir_fd=staged.dfd, dst_dir_fd=staged.dfd)
        except BaseException as exc:
            self._drop(staged)
            if isinstance(exc, OSError):
                raise self._fail("replacing", key, exc) from exc
            raise
        try:
            if self._fsync:
                os.fsync(staged.dfd)
        except OSError as exc:
            raise self._fail("replacing", key, exc) from exc
        finally:
            os.close(staged.lock)
            os.close(staged.dfd)
        return staged.version

    @staticmethod
    def _drop(staged: _Staged) -> None:
        """Remove the staged file if it is still there; unlock; close."""
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged.tmp, dir_fd=staged.dfd)
        finally:
            if staged.lock >= 0:
                os.close(staged.lock)
            os.close(staged.dfd)

    def _abandon(self, future: Future[_Staged]) -> None:
        """A prepared head whose `first()` failed: removed once it is written."""
        if future.cancelled() or future.exception() is not None:
            return
        with contextlib.suppress(OSError):
            self._drop(future.result())

    def _lock(self, fd: int, key: str) -> None:
        """An exclusive flock on `fd`, waited for at most `lock_wait`
        seconds; past that a BackendError that says nothing was written."""
        deadline = time.monotonic() + self.lock_wait
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"replacing {key!r} in {self.url} failed: another process has held "
                        f"{key + '.lock'!r} for over {self.lock_wait:g} s (a writer that is "
                        "stopped or hung inside its commit); nothing was written and the "
                        "stored object is unchanged. Retry once that process runs again "
                        "or has ended"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
