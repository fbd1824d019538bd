"""A local folder as a store, atomic across processes on one host.

* create: the bytes are written and fsynced to a staging file beside the
  target, then `os.link`ed into place. link(2) fails if the name exists, so
  exactly one creator wins, and a reader never sees a half-written key.
* replace: under an exclusive `flock` on `<key>.lock` (the same lock file
  chdb.durable's local backend takes, so the two exclude each other), the
  current bytes are hashed and compared with the caller's version, then a
  fsynced temp file is renamed over the key.
* version token: a random nonce stored in an extended attribute of the
  file's inode (set before the file is linked or renamed into place, so it
  is atomic with the content) plus the SHA-256 of the content. It never
  repeats, even when the same bytes are written again; mtime+size would
  (two writes in one clock tick, or a clock step back). On a filesystem
  without user xattrs, or for a file chdb.durable wrote, the token is the
  content hash alone, which changes on every head write because each head
  carries a fresh nonce.

Not for a network filesystem: flock and link semantics over NFS/SMB vary.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

from durable_obj.errors import BackendError
from durable_obj.stores.base import Blob, Entry, Store, Version, check_relative

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

_CHUNK = 4 * 1024 * 1024
#: Files this store (or chdb.durable's local backend) keeps beside keys.
_PRIVATE_SUFFIXES = (".lock", ".staging", ".tmp", ".part")


_XATTR = "user.durable_obj.version"


def _version_of(data: bytes, nonce: str = "") -> Version:
    return Version(f"{nonce}:{hashlib.sha256(data).hexdigest()}")


def _stamp(fd: int) -> str:
    """Give the inode behind `fd` a fresh nonce; "" where xattrs are unsupported."""
    nonce = uuid.uuid4().hex
    try:
        os.setxattr(fd, _XATTR, nonce.encode())
    except OSError:
        return ""
    return nonce


def _nonce(fd: int) -> str:
    try:
        return os.getxattr(fd, _XATTR).decode("ascii", "replace")
    except OSError:
        return ""


def _chunks(handle: BinaryIO, callback: Callback | None) -> Iterator[bytes]:
    while chunk := handle.read(_CHUNK):
        if callback is not None:
            callback.relative_update(len(chunk))
        yield chunk


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileStore(Store):
    protocol = "file"

    def __init__(self, root: str, storage_options: dict[str, object] | None = None) -> None:
        self._root = os.path.abspath(root)
        opts = storage_options or {}
        #: fsync every published file and its directory (power-loss safety).
        self._fsync = bool(opts.get("fsync", True))

    @property
    def url(self) -> str:
        return f"file://{self._root}"

    def _path(self, key: str) -> str:
        check_relative(key, self)
        return os.path.join(self._root, *key.split("/"))

    def _fail(self, action: str, key: str, exc: OSError) -> BackendError:
        reason = exc.strerror or type(exc).__name__
        return BackendError(f"{action} {key!r} in {self.url} failed: {reason}")

    @contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _publish_staged(self, staged: str, target: str) -> bool:
        try:
            os.link(staged, target)
        except FileExistsError:
            return False
        finally:
            os.unlink(staged)
        if self._fsync:
            _fsync_dir(os.path.dirname(target))
        return True

    def get(self, key: str) -> Blob | None:
        path = self._path(key)
        try:
            with open(path, "rb") as handle:
                # One inode: the nonce and the bytes describe the same write.
                nonce = _nonce(handle.fileno())
                data = handle.read()
        except (FileNotFoundError, IsADirectoryError):
            return None
        except OSError as exc:
            raise self._fail("reading", key, exc) from exc
        return Blob(data, _version_of(data, nonce))

    def _write(self, path: str, chunks: Iterable[bytes]) -> Version:
        """Write a new file, stamped and fsynced; its version."""
        digest = hashlib.sha256()
        with open(path, "wb") as handle:
            nonce = _stamp(handle.fileno())
            for chunk in chunks:
                handle.write(chunk)
                digest.update(chunk)
            handle.flush()
            if self._fsync:
                os.fsync(handle.fileno())
        return Version(f"{nonce}:{digest.hexdigest()}")

    def _create(self, key: str, chunks: Iterable[bytes]) -> Version | None:
        target = self._path(key)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            staged = f"{target}.{uuid.uuid4().hex}.staging"
            version = self._write(staged, chunks)
            return version if self._publish_staged(staged, target) else None
        except OSError as exc:
            raise self._fail("creating", key, exc) from exc

    def create(self, key: str, data: bytes) -> Version | None:
        return self._create(key, [data])

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        try:
            src = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise self._fail("reading the local file for", key, exc) from exc
        with src:
            if callback is not None:
                callback.set_size(os.fstat(src.fileno()).st_size)
            return self._create(key, _chunks(src, callback))

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with self._locked(path):
                try:
                    with open(path, "rb") as handle:
                        current = _version_of(handle.read(), _nonce(handle.fileno()))
                except FileNotFoundError:
                    return None
                if current != version:
                    return None
                tmp = f"{path}.{uuid.uuid4().hex}.tmp"
                new = self._write(tmp, [data])
                os.replace(tmp, path)
                if self._fsync:
                    _fsync_dir(os.path.dirname(path))
        except OSError as exc:
            raise self._fail("replacing", key, exc) from exc
        return new

    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        source = self._path(key)
        tmp = f"{path}.{uuid.uuid4().hex}.part"
        try:
            try:
                src = open(source, "rb")  # noqa: SIM115 - closed below, before the rename
            except (FileNotFoundError, IsADirectoryError):
                return False
            with src, open(tmp, "wb") as dst:
                if callback is not None:
                    callback.set_size(os.fstat(src.fileno()).st_size)
                for chunk in _chunks(src, callback):
                    dst.write(chunk)
            os.replace(tmp, path)
        except OSError as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise self._fail("downloading", key, exc) from exc
        return True

    def list_keys(self, prefix: str = "") -> list[Entry]:
        top = self._path(prefix) if prefix else self._root
        found: list[Entry] = []
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if name.endswith(_PRIVATE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                rel = os.path.relpath(full, self._root).replace(os.sep, "/")
                found.append(Entry(rel, st.st_size, st.st_mtime))
        found.sort(key=lambda e: e.key)
        return found

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._fail("deleting", key, exc) from exc
