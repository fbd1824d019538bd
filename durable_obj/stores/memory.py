"""An in-process store, for tests and throwaway objects.

All memory stores of a process share one keyspace (like fsspec's `memory://`),
so two opens of `memory://ns/a` see the same object. A lock makes create and
compare-and-swap atomic between threads; a process-wide counter makes every
version token unique. Nothing survives the process.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import TYPE_CHECKING

from durable_obj.errors import BackendError
from durable_obj.stores.base import Blob, Entry, Store, Version, check_relative, join_key
from durable_obj.stores.shared import check_options

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

_LOCK = threading.Lock()
_DATA: dict[str, tuple[bytes, Version, float]] = {}
_COUNTER = itertools.count(1)
_CHUNK = 4 * 1024 * 1024


def _by_key(entry: Entry) -> str:
    return entry.key


def _next_version() -> Version:
    return Version(f"m{next(_COUNTER)}")


class MemoryStore(Store):
    protocol = "memory"

    def __init__(self, root: str, storage_options: dict[str, object] | None = None) -> None:
        self._root = root.strip("/")
        check_options(self.url, storage_options or {}, (), by="the memory store")

    @property
    def url(self) -> str:
        return f"memory://{self._root}"

    def _path(self, key: str) -> str:
        return join_key(self._root, check_relative(key, self))

    def get(self, key: str) -> Blob | None:
        with _LOCK:
            found = _DATA.get(self._path(key))
        return None if found is None else Blob(found[0], found[1])

    def create(self, key: str, data: bytes) -> Version | None:
        path = self._path(key)
        with _LOCK:
            if path in _DATA:
                return None
            version = _next_version()
            _DATA[path] = (bytes(data), version, time.time())
            return version

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        chunks = []
        try:
            size = os.path.getsize(path)
            if callback is not None:
                callback.set_size(size)
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    chunks.append(chunk)
                    if callback is not None:
                        callback.relative_update(len(chunk))
        except OSError as exc:
            raise BackendError(
                f"uploading {key!r} to {self.url}: cannot read the local file "
                f"({exc.strerror or type(exc).__name__})"
            ) from exc
        return self.create(key, b"".join(chunks))

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        path = self._path(key)
        with _LOCK:
            found = _DATA.get(path)
            if found is None or found[1] != version:
                return None
            new = _next_version()
            _DATA[path] = (bytes(data), new, time.time())
            return new

    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        blob = self.get(key)
        if blob is None:
            return False
        if callback is not None:
            callback.set_size(len(blob.data))
        tmp = f"{path}.part"
        with open(tmp, "wb") as handle:
            handle.write(blob.data)
        os.replace(tmp, path)
        if callback is not None:
            callback.relative_update(len(blob.data))
        return True

    def list_keys(self, prefix: str = "") -> list[Entry]:
        base = join_key(self._root, prefix)
        start = base + "/" if base else ""
        with _LOCK:
            items = [
                (path, len(data), mtime)
                for path, (data, _, mtime) in _DATA.items()
                if path.startswith(start)
            ]
        cut = len(self._root) + 1 if self._root else 0
        return sorted((Entry(path[cut:], size, mtime) for path, size, mtime in items), key=_by_key)

    def list_folders(self, prefix: str = "") -> list[str]:
        base = join_key(self._root, prefix)
        start = base + "/" if base else ""
        with _LOCK:
            names = {
                rest.split("/", 1)[0]
                for path in _DATA
                if path.startswith(start) and "/" in (rest := path[len(start) :])
            }
        return sorted(names)

    def delete(self, key: str) -> None:
        with _LOCK:
            _DATA.pop(self._path(key), None)
