"""What a durable object needs from storage, and nothing more.

Two operations carry the whole protocol, and each must be the provider's own
atomic primitive, never a read followed by a write:

* `create(key, data)`: publish an immutable key nobody else can take
  (a WAL segment, a checkpoint, a brand-new head);
* `replace(key, data, version)`: replace the head only if it is still the
  version we read. This compare-and-swap is the lease fence.

The outcome of a conditional write is one of three things, and the types say
which: a `Version` (it applied), `None` (the precondition failed: a lost race,
not an error), or `StoreAmbiguous` (the answer was lost; the caller reconciles
by reading back). Every other failure is `BackendError` with a message that
names the store and never a credential.

A reader that polls one key (a follower watching `head.json`) asks
`get_if_changed(key, version)`: one conditional request that answers
`UNCHANGED` without the body when the key is still at `version`.

Keys are relative to the store's root, '/'-separated. A store refuses a key
that would leave its root.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from durable_obj.errors import BackendError

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.stores.growing import GrowingFile

A = TypeVar("A")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Version:
    """An opaque compare-and-swap token (ETag, generation, content hash)."""

    token: str


@dataclass(frozen=True, slots=True)
class Blob:
    """A key's bytes and the version they were read at, from one request."""

    data: bytes
    version: Version


class Unchanged(enum.Enum):
    """The type of `UNCHANGED` (an enum of one, so a type checker narrows
    `answer is UNCHANGED`): a conditional read found the key still at the
    version asked about, and no body was sent."""

    UNCHANGED = "unchanged"

    def __repr__(self) -> str:
        return "UNCHANGED"


#: `Store.get_if_changed`'s answer when the key is still at that version.
UNCHANGED: Final = Unchanged.UNCHANGED


@dataclass(frozen=True, slots=True)
class Entry:
    """One listed key: its path below the store root, size, and mtime (epoch s)."""

    key: str
    size: int
    modified: float | None


class Sink(Protocol):
    """What a streamed read (`Store.read_into`) hands a key's bytes to."""

    def restart(self) -> None:
        """A new attempt at the whole key begins: drop what came before."""

    def write(self, piece: bytes) -> None:
        """The next bytes, in order. Called on the store's IO thread: it
        must hand the work on and return, never do it there."""


class Store(abc.ABC):
    """A key/value store rooted at a namespace, with atomic conditional writes."""

    #: The URL protocol this store serves ("file", "memory", "s3", ...).
    protocol: str = ""
    #: `read_into` streams a key as it arrives; False: it would read the
    #: whole key first (a reader that can, reads a local file instead).
    streams_reads: bool = False
    #: Equal for two clients made by `open_store` of one URL with equal
    #: options (endpoint, credentials: a digest, never the text), which may
    #: stand in for each other (the catalog's writer); None when the
    #: options are no plain data to compare.
    client_key: str | None = None

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The root as a URL for messages; never carries a credential."""

    @abc.abstractmethod
    def get(self, key: str) -> Blob | None:
        """The bytes and version of `key`, or None if it does not exist."""

    def get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        """`get`, unless `key` is still at `version`: then `UNCHANGED`, and
        no body was transferred. None: the key does not exist. With `version`
        None it is `get`.

        Built-in stores send one conditional request (S3 and Azure
        `If-None-Match: <etag>`, GCS `ifGenerationNotMatch`, a 304 meaning
        unchanged) or compare metadata; never a listing. This fallback, for
        a store that does not override it, reads the key and compares.
        """
        blob = self.get(key)
        if blob is not None and version is not None and blob.version == version:
            return UNCHANGED
        return blob

    def get_many(self, keys: Sequence[str], concurrency: int = 32) -> list[Blob | None]:
        """`get` of every key, up to `concurrency` at once, answers in key order.

        The first failure is raised and the reads not yet started are dropped.
        Stores that can batch (S3) override this; the answers must be the
        same as `get`'s, key by key.
        """
        return each(self.get, keys, concurrency)

    @abc.abstractmethod
    def create(self, key: str, data: bytes) -> Version | None:
        """Write `key` only if absent. None: it already existed."""

    @abc.abstractmethod
    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        """Stream the file at `path` to `key` only if absent, in bounded memory.
        None: it already existed."""

    def adopt_file(
        self,
        key: str,
        path: str,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        """`create_file` of a file the caller gives away (a BACKUP archive in
        its scratch), whose SHA-256 the caller computes meanwhile: `sha256()`
        waits for it. A store on the same filesystem may move the file into
        place instead of copying it, and take `sha256()` as the content's;
        the caller must not use `path` again (it may or may not still exist).
        By default: a copy, as create_file."""
        return self.create_file(key, path, callback)

    def adopt_growing(
        self,
        key: str,
        source: GrowingFile,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        """`adopt_file` of a file its producer (BACKUP) may still be writing,
        front to back (`growing.py`). A store that uploads may send it as it
        grows; it must create nothing if the producer fails (`SourceFailed`
        from `source`'s reads). By default: wait until complete, then
        adopt_file."""
        source.wait()
        return self.adopt_file(key, source.path, sha256, callback)

    @abc.abstractmethod
    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        """Replace `key` only if its current version is `version`.
        None: it changed or vanished since."""

    def replace_after(
        self, key: str, data: bytes, version: Version, first: Callable[[], None]
    ) -> Version | None:
        """`replace`, once `first()` (the publish of what `data` names: a
        flush's segment) has returned; its error is raised and nothing is
        replaced. A store may write `data` meanwhile where no reader sees it
        (a folder: the staged file and its fsync), but the replace never
        lands before `first()` returned, and on any answer but an error of
        `first()` it has run. By default: `first()`, then `replace`."""
        first()
        return self.replace(key, data, version)

    @abc.abstractmethod
    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        """Stream `key` to the file `path` in bounded memory; the file appears
        only once complete. False if the key does not exist."""

    def fetch_file(self, key: str, path: str, callback: Callback | None = None) -> bool:
        """`download` for a caller that only reads `path` and then removes it
        (a base that RESTORE reads): a store on the same filesystem may link
        the stored file there instead of copying it, so `path` must never be
        written to. By default: a copy, as download."""
        return self.download(key, path, callback)

    def read_into(self, key: str, sink: Sink, callback: Callback | None = None) -> bool:
        """Stream `key` front to back into `sink`, in bounded memory: each
        attempt calls `sink.restart()` and then `sink.write` of every piece.
        False if the key does not exist. By default: the whole key read by
        `get`, one piece (a store that streams says so in `streams_reads`)."""
        blob = self.get(key)
        if blob is None:
            return False
        sink.restart()
        sink.write(blob.data)
        if callback is not None:
            callback.set_size(len(blob.data))
            callback.relative_update(len(blob.data))
        return True

    @abc.abstractmethod
    def list_keys(self, prefix: str = "") -> list[Entry]:
        """Every key below `prefix` (recursively), sorted by key."""

    def list_folders(self, prefix: str = "") -> list[str]:
        """The names of the folders directly below `prefix` that hold keys,
        sorted: a namespace's object ids, found without listing every key.

        Every store overrides this with one delimiter listing (S3
        `Delimiter='/'`, GCS `delimiter`, Azure `walk_blobs`, `os.scandir`).
        This fallback, for a store that does not, lists every key. A store
        may also name a folder whose keys were all deleted (a local folder,
        SeaweedFS's filer); callers read what they need below each name and
        skip what is not there.
        """
        start = join_key(prefix)
        cut = len(start) + 1 if start else 0
        names = {e.key[cut:].split("/", 1)[0] for e in self.list_keys(start) if "/" in e.key[cut:]}
        return sorted(names)

    def list_keys_many(self, prefixes: Sequence[str], concurrency: int = 32) -> list[list[Entry]]:
        """`list_keys` of every prefix, up to `concurrency` at once, answers
        in order (the first failure is raised). Cloud stores run them on
        their IO loop instead of threads."""
        return each(self.list_keys, prefixes, concurrency)

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; a missing key is not an error."""

    def prepare(self) -> None:  # noqa: B027 - optional hook, most stores set nothing up
        """Set up now, reading and writing nothing, what the first calls
        would set up (clients, transports): a service calls it before it
        serves (`AsyncPool.preload`), because that set-up holds the
        interpreter, and on a worker thread that stalls an event loop."""

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release clients and sessions."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def each(fn: Callable[[A], R], items: Sequence[A], concurrency: int) -> list[R]:
    """`fn(item)` for every item, up to `concurrency` at once in threads,
    answers in item order. The first failure is raised and the calls not yet
    started are dropped."""
    items = list(items)
    if len(items) <= 1 or concurrency <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(min(concurrency, len(items)))
    try:
        futures = [pool.submit(fn, item) for item in items]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def join_key(*parts: str) -> str:
    """Join key parts with '/', ignoring empty parts and stray slashes."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def check_relative(key: str, store: Store) -> str:
    """Refuse a key that could leave the store's root."""
    if key.startswith("/") or "\\" in key or any(seg in ("", ".", "..") for seg in key.split("/")):
        raise BackendError(f"refusing key {key!r} on {store.url}: it is not a plain relative key")
    return key
