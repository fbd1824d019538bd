"""What the fsspec-backed cloud stores (S3, GCS, Azure) have in common.

A root `bucket/prefix`; one client per process and options (`SharedFS`);
every call a coroutine run on fsspec's IO loop behind a synchronous method;
idempotent calls retried here with backoff, conditional writes never (each
store's own code decides that). A subclass provides the async operations,
`_transient` and `_error`; create and replace stay its own, because each
provider spells its precondition differently.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from durable_obj.errors import BackendError, InvalidArgument
from durable_obj.stores import ioloop
from durable_obj.stores.base import (
    Blob,
    Entry,
    Store,
    Unchanged,
    Version,
    check_relative,
    join_key,
)
from durable_obj.stores.secrets import scrub, secret_values
from durable_obj.stores.shared import SharedFS, accepted_options, check_options

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

T = TypeVar("T")

#: Attempts for idempotent calls (a conditional write is always sent once).
DEFAULT_ATTEMPTS = 5


class CloudStore(Store):
    """A namespace `bucket/prefix` behind an fsspec async filesystem."""

    #: What the root's first part is called, for messages ("bucket", "container").
    root_word = "bucket"

    #: storage_options every filesystem of this store takes, for sure: a
    #: store given only these is not checked against the filesystem's own
    #: signature, whose import a cold open may never need (`s3static`).
    plain_options: frozenset[str] = frozenset()

    _bucket: str
    _prefix: str
    _attempts: int
    _closed: bool
    _secrets: tuple[str, ...]
    _making: tuple[dict[str, Any], Callable[[dict[str, Any], str], Any]]
    _making_lock: threading.Lock

    def _take_root(self, root: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
        """Set the bucket, prefix and retries from the root; the fsspec options left."""
        bucket, _, prefix = root.strip("/").partition("/")
        bucket = self._bucket_name(bucket)
        if not bucket:
            raise InvalidArgument(
                f"{self.protocol}://{root} names no {self.root_word}: use "
                f"{self.protocol}://{self.root_word.upper()}/PREFIX. Nothing was touched."
            )
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        self._closed = False
        self._secrets = secret_values(storage_options)
        opts = dict(storage_options or {})
        if not set(opts) <= self.plain_options | {"retries", "skip_instance_cache"}:
            classes = self._fs_classes()
            check_options(
                f"{self.protocol}://{root.strip('/')}",
                opts,
                accepted_options(*classes) | {"retries", "skip_instance_cache"},
                by=f"{classes[0].__module__.split('.')[0]}'s {classes[0].__name__}",
            )
        self._attempts = max(1, int(opts.pop("retries", DEFAULT_ATTEMPTS)))
        opts["skip_instance_cache"] = True
        return opts

    def _share(
        self,
        opts: dict[str, Any],
        make: Callable[[dict[str, Any], str], Any],
        *,
        lazy: bool = False,
    ) -> None:
        """The process's filesystem for `opts`, made by `make(opts, url)` the
        first time; `lazy`: not until a call needs it (`_fs`)."""
        self._making = (opts, make)
        self._making_lock = threading.Lock()
        if not lazy:
            self._acquire()

    def _acquire(self) -> SharedFS:
        shared: SharedFS | None = self.__dict__.get("_shared_fs")
        if shared is None:
            with self._making_lock:
                shared = self.__dict__.get("_shared_fs")
                if shared is None:
                    opts, make = self._making
                    shared = SharedFS.acquire(self.protocol, opts, lambda: make(opts, self.url))
                    self._shared_fs = shared
        return shared

    @property
    def _shared(self) -> SharedFS:
        return self._acquire()

    @property
    def _fs(self) -> Any:
        """The shared filesystem, made now if it was not yet."""
        return self._acquire().fs

    def _fs_made(self) -> bool:
        return "_shared_fs" in self.__dict__

    @abc.abstractmethod
    def _fs_classes(self) -> tuple[type, ...]:
        """The fsspec filesystem class (and what it hands options on to), whose
        keyword arguments are the storage_options this store accepts."""

    def _bucket_name(self, first: str) -> str:
        return first

    # -- plumbing -------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{self.protocol}://{join_key(self._bucket, self._prefix)}"

    def _key(self, key: str) -> str:
        return join_key(self._prefix, check_relative(key, self))

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"{self.url}: this store was closed")

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            # the filesystem's own loop, once made (it is made on `_first_loop`)
            loop = self._fs.loop if self._fs_made() else self._first_loop()
            result: T = ioloop.run_on(loop, fn, *args)
        except BaseException as exc:
            scrub(exc, self._secrets)  # no credential in what a traceback prints
            raise
        return result

    def _first_loop(self) -> asyncio.AbstractEventLoop:
        """Where a call made before the filesystem runs (a lazy store's,
        `_share`), and the filesystem is made: fsspec's IO loop."""
        from fsspec.asyn import get_loop

        loop: asyncio.AbstractEventLoop = get_loop()
        return loop

    def _open_local(self, key: str, path: str) -> tuple[int, BinaryIO]:
        """The local file an upload of `key` reads, opened, and its size."""
        try:
            size = os.path.getsize(path)
            return size, open(path, "rb")
        except OSError as exc:
            raise BackendError(
                f"uploading {key!r} to {self.url}: cannot read the local file "
                f"({exc.strerror or type(exc).__name__})"
            ) from exc

    @abc.abstractmethod
    def _transient(self, exc: BaseException) -> bool:
        """Whether an idempotent call that raised `exc` is worth another attempt."""

    @abc.abstractmethod
    def _error(self, action: str, key: str, exc: BaseException) -> BackendError:
        """The error for a failed call: what, where, and what to check."""

    @abc.abstractmethod
    async def _missing(self, exc: BaseException) -> bool:
        """Whether a failed read says the key does not exist (and not the bucket)."""

    async def _retry(self, fn: Callable[[], Awaitable[T]]) -> T:
        """`fn()` for an idempotent call, retried on transient failures."""
        for attempt in range(self._attempts):
            try:
                return await fn()
            except Exception as exc:
                if attempt + 1 >= self._attempts or not self._transient(exc):
                    raise
                await asyncio.sleep(min(0.1 * 2**attempt, 5.0))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, key: str, once: Callable[[], Awaitable[T]]) -> T | None:
        """`once()` for a read of `key`, retried; None if the key does not exist."""
        try:
            return await self._retry(once)
        except Exception as exc:
            if await self._missing(exc):
                return None
            raise self._error("reading", key, exc) from exc

    async def _download_to(
        self, key: str, path: str, write: Callable[[BinaryIO], Awaitable[None]]
    ) -> bool:
        """Stream `key` to `path` by `await write(file)`, retried, through a
        temp file renamed into place; False if the key does not exist."""
        tmp = f"{path}.{uuid.uuid4().hex}.part"

        async def once() -> None:
            with open(tmp, "wb") as dst:
                await write(dst)

        try:
            await self._retry(once)
            os.replace(tmp, path)
        except Exception as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if await self._missing(exc):
                return False
            raise self._error("downloading", key, exc) from exc
        except BaseException:  # cancelled (the caller was interrupted): no part file stays
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return True

    # -- listing --------------------------------------------------------
    def _list_scope(self, prefix: str) -> tuple[str, int]:
        """(the full-name prefix to list, how much of a full name to cut)."""
        prefix = prefix.strip("/")
        base = join_key(self._prefix, check_relative(prefix, self) if prefix else "")
        return (base + "/" if base else ""), (len(self._prefix) + 1 if self._prefix else 0)

    async def _listed(self, prefix: str, once: Callable[[], Awaitable[list[Entry]]]) -> list[Entry]:
        """The entries `once()` lists, retried, sorted by key."""
        try:
            entries = await self._retry(once)
        except Exception as exc:
            raise self._error("listing", prefix.strip("/") or "/", exc) from exc
        entries.sort(key=lambda e: e.key)
        return entries

    async def _folders_listed(
        self, prefix: str, once: Callable[[str], Awaitable[list[str]]]
    ) -> list[str]:
        """The folder names directly below `prefix`: `once(start)` lists the
        full names of the common prefixes below `start` (one delimiter
        listing, every page), retried; the names are cut to one segment."""
        start, _ = self._list_scope(prefix)
        try:
            full = await self._retry(lambda: once(start))
        except Exception as exc:
            raise self._error("listing", prefix.strip("/") or "/", exc) from exc
        names = {name[len(start) :].strip("/") for name in full if name.startswith(start)}
        return sorted(name for name in names if name and "/" not in name)

    # -- the synchronous face ---------------------------------------------
    @abc.abstractmethod
    async def _get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        """One GET of `key`, retried by `_read`; with a `version`, conditional:
        a server answers 304 and no body while the key is at it (UNCHANGED)."""

    async def _get(self, key: str) -> Blob | None:
        got = await self._get_if_changed(key, None)
        assert not isinstance(got, Unchanged)  # no version asked about
        return got

    @abc.abstractmethod
    async def _download(self, key: str, path: str, callback: Callback | None) -> bool: ...

    @abc.abstractmethod
    async def _list(self, prefix: str) -> list[Entry]: ...

    @abc.abstractmethod
    async def _folders(self, prefix: str) -> list[str]: ...

    @abc.abstractmethod
    async def _delete(self, key: str) -> None: ...

    @abc.abstractmethod
    async def _close(self) -> None:
        """Close the shared client (the last store using it is closing)."""

    def get(self, key: str) -> Blob | None:
        return self._run(self._get, key)

    def get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        return self._run(self._get_if_changed, key, version)

    def get_many(self, keys: Sequence[str], concurrency: int = 32) -> list[Blob | None]:
        return self._run(self._get_many, list(keys), max(1, concurrency))

    async def _get_many(self, keys: list[str], concurrency: int) -> list[Blob | None]:
        got: list[Blob | None] = [None] * len(keys)
        await self._get_each(keys, range(len(keys)), got, concurrency)
        return got

    async def _get_each(
        self, keys: list[str], indices: Sequence[int], got: list[Blob | None], concurrency: int
    ) -> None:
        """`got[i] = await self._get(keys[i])` for each index, `concurrency` at once,
        all on the IO loop (no thread per read)."""
        limit = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with limit:
                got[index] = await self._get(keys[index])

        await gather_or_cancel([one(index) for index in indices])

    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        return self._run(self._download, key, path, callback)

    def list_keys(self, prefix: str = "") -> list[Entry]:
        return self._run(self._list, prefix)

    def list_keys_many(self, prefixes: Sequence[str], concurrency: int = 32) -> list[list[Entry]]:
        return self._run(self._list_many, list(prefixes), max(1, concurrency))

    async def _list_many(self, prefixes: list[str], concurrency: int) -> list[list[Entry]]:
        """`_list` of every prefix, `concurrency` at once, on the IO loop."""
        got: list[list[Entry]] = [[] for _ in prefixes]
        limit = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with limit:
                got[index] = await self._list(prefixes[index])

        await gather_or_cancel([one(index) for index in range(len(prefixes))])
        return got

    def list_folders(self, prefix: str = "") -> list[str]:
        return self._run(self._folders, prefix)

    def delete(self, key: str) -> None:
        self._run(self._delete, key)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fs_made() and self._shared.release():
            with contextlib.suppress(Exception):  # closing is best effort
                self._run(self._close)


def entity_tag(token: str) -> str:
    """An ETag version token as an `If-None-Match` value: quoted, as HTTP
    spells an entity tag (a client may have handed the token on without its
    quotes)."""
    if token.startswith(('"', 'W/"')):
        return token
    return f'"{token}"'


def same_etag(a: str, b: str) -> bool:
    """Whether two ETags name the same version, quoted or not (a weak
    marker never makes a body the same)."""
    return entity_tag(a).removeprefix("W/") == entity_tag(b).removeprefix("W/")


async def gather_or_cancel(coros: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `coros` concurrently; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    if not tasks:
        return
    try:
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    # Retrieve every failure (asyncio logs unretrieved ones), raise the first.
    failures = [t.exception() for t in tasks if t.done() and not t.cancelled()]
    for failure in failures:
        if failure is not None:
            raise failure
