"""A local folder as a store, atomic across processes on one host.

* create: the bytes are written and fsynced to a staging file beside the
  target, then `os.link`ed into place. link(2) fails if the name exists, so
  exactly one creator wins, and a reader never sees a half-written key.
* replace: under an exclusive `flock` on `<key>.lock` (the same lock file
  chdb.durable's local backend takes, so the two exclude each other), the
  current bytes are hashed and compared with the caller's version, then a
  fsynced temp file is renamed over the key (`fileswap.py`).
* version token: a random nonce stored in an extended attribute of the
  file's inode (set before the file is linked or renamed into place, so it
  is atomic with the content) plus the SHA-256 of the content. It never
  repeats, even when the same bytes are written again; mtime+size would
  (two writes in one clock tick, or a clock step back). On a filesystem
  without user xattrs, or for a file chdb.durable wrote, the token is the
  content hash alone, which changes on every head write because each head
  carries a fresh nonce.
* conditional read: the nonce, read from the inode's metadata, settles
  "unchanged" without reading the body (`get_if_changed`).

Containment: a key resolves strictly inside the namespace root and its
object folder, and is reached without following a link (`filepaths`).

Not for a network filesystem: flock and link semantics over NFS/SMB vary.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote

from durable_obj.stores.base import UNCHANGED, Blob, Entry, Unchanged, Version, join_key
from durable_obj.stores.filepaths import OPEN_READ
from durable_obj.stores.fileswap import CHUNK, FolderSwap, nonce_of, stamp, version_of
from durable_obj.stores.shared import check_options

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.stores.growing import GrowingFile

#: Files this store (or chdb.durable's local backend) keeps beside keys.
_PRIVATE_SUFFIXES = (".lock", ".staging", ".tmp", ".part")
#: Characters left as they are in the store's URL (RFC 3986 pchar, and '/').
_URL_SAFE = "/:@!$&'()*+,;=~"


def _chunks(handle: BinaryIO, callback: Callback | None) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        if callback is not None:
            callback.relative_update(len(chunk))
        yield chunk


class FileStore(FolderSwap):
    protocol = "file"

    def __init__(self, root: str, storage_options: dict[str, object] | None = None) -> None:
        #: The root as named (for the URL and messages) ...
        self._root = os.path.abspath(root)
        #: ... and as resolved: every key lives below this folder.
        self._real = os.path.realpath(self._root)
        opts = storage_options or {}
        check_options(self.url, opts, ("fsync",), by="a local folder")
        #: fsync every published file and its directory (power-loss safety).
        self._fsync = bool(opts.get("fsync", True))

    @property
    def url(self) -> str:
        # Percent-encoded (RFC 8089), so that open_store(url) names this folder.
        return f"file://{quote(self._root, safe=_URL_SAFE)}"

    # -- IO --------------------------------------------------------------------
    def get(self, key: str) -> Blob | None:
        got = self.get_if_changed(key, None)
        return None if got is UNCHANGED else got

    def get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        """UNCHANGED when the file's nonce (its extended attribute, read
        without the body) is the one `version` names: a nonce names one
        write, since every file is stamped before it is linked or renamed
        into place and nothing writes into a published file. A file without
        a nonce (no user xattrs, or written by chdb.durable) is compared by
        its content: read and hashed once, as `get` does."""
        try:
            with self._reading(key) as found:
                if found is None:
                    return None
                fd = found[2]
                # One inode: the nonce and the bytes describe the same write.
                nonce = nonce_of(fd)
                if nonce and version is not None and version.token.startswith(f"{nonce}:"):
                    return UNCHANGED
                with os.fdopen(fd, "rb", closefd=False) as handle:
                    data = handle.read()
        except OSError as exc:
            raise self._fail("reading", key, exc) from exc
        blob = Blob(data, version_of(data, nonce))
        return UNCHANGED if version is not None and blob.version == version else blob

    def _create(self, key: str, chunks: Iterable[bytes]) -> Version | None:
        try:
            with self._folder(key, create=True) as (dfd, name):
                assert dfd is not None
                staged = f"{name}.{uuid.uuid4().hex}.staging"
                version = self._write(dfd, staged, key, chunks)
                try:
                    os.link(staged, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    return None
                finally:
                    os.unlink(staged, dir_fd=dfd)
                if self._fsync:
                    os.fsync(dfd)
                return version
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

    def adopt_growing(
        self,
        key: str,
        source: GrowingFile,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        if self._fsync:
            try:
                source.sync_while_growing()
            except OSError as exc:
                raise self._fail("syncing the archive for", key, exc) from exc
        return super().adopt_growing(key, source, sha256, callback)

    def adopt_file(
        self,
        key: str,
        path: str,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        """On the same filesystem, the file itself becomes the key: fsynced,
        renamed beside the key and linked into place (no copy, no second
        hash). Anywhere else, a copy as create_file."""
        try:
            src = os.open(path, OPEN_READ)
        except OSError as exc:
            raise self._fail("reading the local file for", key, exc) from exc
        try:
            size = os.fstat(src).st_size
            moved, version = self._move_in(key, path, src, sha256)
        finally:
            os.close(src)
        if not moved:
            return self.create_file(key, path, callback)
        if callback is not None:
            callback.set_size(size)
            callback.relative_update(size)
        return version

    def _move_in(
        self, key: str, path: str, src: int, sha256: Callable[[], str]
    ) -> tuple[bool, Version | None]:
        """Move the file open as `src` (at `path`) to `key` if absent:
        (True, its version), (True, None) if the key existed (the file is
        gone all the same), or (False, None) on another filesystem, where
        nothing was done."""
        try:
            with self._folder(key, create=True) as (dfd, name):
                assert dfd is not None
                info = os.fstat(src)
                if not stat.S_ISREG(info.st_mode) or info.st_dev != os.fstat(dfd).st_dev:
                    return False, None
                nonce = stamp(src)
                if self._fsync:
                    os.fsync(src)
                staged = f"{name}.{uuid.uuid4().hex}.staging"
                try:
                    os.rename(path, staged, dst_dir_fd=dfd)
                except OSError as exc:
                    if exc.errno == errno.EXDEV:  # one device, two mounts
                        return False, None
                    raise
                try:
                    os.link(staged, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    return True, None
                finally:
                    os.unlink(staged, dir_fd=dfd)
                if self._fsync:
                    os.fsync(dfd)
                return True, Version(f"{nonce}:{sha256()}")
        except OSError as exc:
            raise self._fail("creating", key, exc) from exc

    def fetch_file(self, key: str, path: str, callback: Callback | None = None) -> bool:
        """On the same filesystem, a hard link of the stored file at `path`
        (the caller only reads it); anywhere else, a copy as download."""
        try:
            with self._reading(key) as found:
                if found is None:
                    return False
                dfd, name, fd = found
                info = os.fstat(fd)
                if info.st_dev == os.stat(os.path.dirname(path) or ".").st_dev and (
                    self._link_out(dfd, name, fd, path)
                ):
                    if callback is not None:
                        callback.set_size(info.st_size)
                        callback.relative_update(info.st_size)
                    return True
        except OSError as exc:
            raise self._fail("reading", key, exc) from exc
        return self.download(key, path, callback)

    @staticmethod
    def _link_out(dfd: int, name: str, fd: int, path: str) -> bool:
        """Link `name` (open as `fd`) at `path`; False (nothing left at
        `path`) where links are refused or the name no longer is that file."""
        try:
            os.link(name, path, src_dir_fd=dfd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                return False
            raise
        mine, theirs = os.stat(path, follow_symlinks=False), os.fstat(fd)
        if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
            os.unlink(path)
            return False
        return True

    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        tmp = f"{path}.{uuid.uuid4().hex}.part"
        try:
            with self._reading(key) as found:
                if found is None:
                    return False
                fd = found[2]
                with os.fdopen(fd, "rb", closefd=False) as src, open(tmp, "wb") as dst:
                    if callback is not None:
                        callback.set_size(os.fstat(fd).st_size)
                    for chunk in _chunks(src, callback):
                        dst.write(chunk)
            os.replace(tmp, path)
        except BaseException as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise self._fail("downloading", key, exc) from exc
            raise
        return True

    def list_keys(self, prefix: str = "") -> list[Entry]:
        try:
            top = self._open_listed(prefix)
            if top is None:
                return []
            try:
                return self._walk(top, prefix)
            finally:
                os.close(top)
        except OSError as exc:
            raise self._fail("listing", prefix, exc) from exc

    def list_folders(self, prefix: str = "") -> list[str]:
        """The real folders in the folder `prefix` (one `scandir`); a linked
        folder is not named (an aliased object is listed under its real name)."""
        try:
            top = self._open_listed(prefix)
            if top is None:
                return []
            try:
                with os.scandir(top) as found:
                    return sorted(e.name for e in found if e.is_dir(follow_symlinks=False))
            finally:
                os.close(top)
        except OSError as exc:
            raise self._fail("listing", prefix, exc) from exc

    def _walk(self, top: int, prefix: str) -> list[Entry]:
        """Every regular file below the folder `top`; linked folders are not
        entered (fwalk checks that each folder it opens is the one it listed)."""
        found: list[Entry] = []
        for dirpath, _dirs, files, dirfd in os.fwalk(".", dir_fd=top):
            for name in files:
                if name.endswith(_PRIVATE_SUFFIXES):
                    continue
                try:
                    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = os.path.normpath(os.path.join(dirpath, name)).replace(os.sep, "/")
                found.append(Entry(join_key(prefix, rel), st.st_size, st.st_mtime))
        found.sort(key=lambda e: e.key)
        return found

    def delete(self, key: str) -> None:
        try:
            with self._folder(key, create=False) as (dfd, name):
                if dfd is None:
                    return
                try:
                    os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    return
        except OSError as exc:
            raise self._fail("deleting", key, exc) from exc
