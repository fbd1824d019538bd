"""Azure Blob Storage stores (az://, abfs://) with ETag preconditions.

Credentials come from `storage_options`, exactly as adlfs takes them
(connection_string, account_name + account_key / sas_token / credential,
anon, ...). The store drives the async `BlobServiceClient` that its
`AzureBlobFileSystem` holds, on fsspec's IO loop:

* create: `upload_blob(overwrite=False)`, i.e. `If-None-Match: *`; a large
  file is staged as blocks under IDs unique to this upload, and the block
  list is committed with `If-None-Match: *`, so the blob appears whole or not
  at all, and only for one creator.
* replace: `upload_blob(etag=..., match_condition=IfNotModified)`.
* read: one download whose follow-up ranges (for a large blob) are pinned
  to the first response's ETag, so bytes and version always agree.
* version token: the ETag.

Bodies up to `SINGLE_PUT_LIMIT` (every segment, every head) are sent through
obstore (`azwrites`): the same Put Blob and preconditions at a tenth of the
client CPU, judged by the same table (`azerrors`). Where that would not be
exact (a credential object, anonymous access, a custom transport or proxy,
a server-side `timeout`, an AZURE_* or proxy variable obstore would read, a
key whose URL needs percent-encoding) or when `DURABLE_OBJ_AZURE_WRITES=client`
is set, they go through the SDK as before; so do block-list uploads.

adlfs's own `open(...)` ignores these conditions, so it is never used for a
write. The SDK's retries are switched off per call: a conditional write is
sent once (a retry after a lost answer would meet its own success as a
failed precondition), and idempotent calls are retried here.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import io
import logging
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import urlsplit, urlunsplit

from durable_obj.errors import BackendError, InvalidArgument, StoreAmbiguous
from durable_obj.stores import azerrors, azwrites
from durable_obj.stores.azerrors import answered
from durable_obj.stores.base import Blob, Entry, Version
from durable_obj.stores.cloud import CloudStore

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Bodies up to this size go in one Put Blob; larger ones are staged as blocks
#: (aiohttp also warns about raw bodies over 1 MiB).
SINGLE_PUT_LIMIT = 1024 * 1024
BLOCK_SIZE = 4 * 1024 * 1024
MAX_BLOCKS = 50_000
#: Blocks in flight at once: memory use is about BLOCK_CONCURRENCY * BLOCK_SIZE.
BLOCK_CONCURRENCY = 4
#: Download request size: the first GET and every later range.
GET_SIZE = 4 * 1024 * 1024


def _code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    if code is None:
        return ""
    return str(getattr(code, "value", code))


def _kind(exc: BaseException) -> str:
    """precondition | exists | missing_key | missing_bucket | auth | unreachable |
    server | network | invalid_blocks | other"""
    from azure.core import exceptions as az

    if isinstance(exc, az.ClientAuthenticationError):
        return "auth"
    if isinstance(exc, az.HttpResponseError):
        return answered(exc.status_code or 0, _code(exc))
    if isinstance(exc, az.ServiceRequestError):
        # azure-core files every aiohttp client error here, including a server
        # that hung up after reading the request; only a failed connect (or a
        # connect timeout) proves that nothing was sent.
        if isinstance(exc, az.ServiceRequestTimeoutError):
            return "unreachable"
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        try:
            import aiohttp

            if isinstance(inner, aiohttp.ClientConnectorError):
                return "unreachable"
        except ImportError:  # pragma: no cover - the async SDK needs aiohttp
            pass
        return "network"
    if isinstance(exc, az.ServiceResponseError | az.IncompleteReadError):
        return "network"
    if isinstance(exc, OSError | asyncio.TimeoutError):
        return "network"
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientError):
            return "network"
    except ImportError:  # pragma: no cover - the async SDK needs aiohttp
        pass
    return "other"


def _safe_endpoint(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def _make_fs(opts: dict[str, Any], url: str) -> Any:
    # adlfs ships no type information; imported by name, used as Any.
    AzureBlobFileSystem = importlib.import_module("adlfs").AzureBlobFileSystem
    try:
        return AzureBlobFileSystem(**opts)
    except (TypeError, ValueError, KeyError) as exc:
        raise InvalidArgument(
            f"{url}: storage_options were refused by adlfs "
            f"({type(exc).__name__}); pass a connection_string, or an "
            f"account_name with account_key, sas_token or credential. "
            f"Nothing was touched."
        ) from exc


class AzureStore(CloudStore):
    """A namespace `container/prefix` in Azure Blob Storage."""

    protocol = "az"
    root_word = "container"

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self._share(self._take_root(root, storage_options), _make_fs)
        self._timeouts: dict[str, Any] = dict(getattr(self._fs, "_timeout_kwargs", {}) or {})
        service = self._fs.service_client
        self._endpoint = _safe_endpoint(str(getattr(service, "url", "")))
        self._account = str(getattr(service, "account_name", "") or "")
        self._client: Any = service.get_container_client(self._bucket)
        self._writes: azwrites.FastWrites | None = None
        self._writes_checked = os.environ.get("DURABLE_OBJ_AZURE_WRITES", "").lower() == "client"
        config = getattr(self._client, "_config", None)
        if config is not None:
            # Bounded memory for large blobs (the SDK's first GET is 32 MiB otherwise).
            config.max_single_get_size = GET_SIZE
            config.max_chunk_get_size = GET_SIZE

    def _fs_classes(self) -> tuple[type, ...]:
        return (importlib.import_module("adlfs").AzureBlobFileSystem,)

    def _bucket_name(self, first: str) -> str:
        # abfs://container@account.dfs.core.windows.net/path
        return first.split("@", 1)[0]

    # -- plumbing -------------------------------------------------------
    def _blob(self, key: str) -> Any:
        self._check_open()
        return self._client.get_blob_client(self._key(key))

    def _opts(self, **extra: Any) -> dict[str, Any]:
        """Per-call keywords: no SDK retries, the user's timeouts."""
        return {"retry_total": 0, **self._timeouts, **extra}

    def _transient(self, exc: BaseException) -> bool:
        # "precondition" too: a blob that changed between the ranges of one
        # download is read again.
        return _kind(exc) in ("server", "network", "unreachable", "precondition")

    async def _missing(self, exc: BaseException) -> bool:
        return _kind(exc) == "missing_key"

    def _error(self, action: str, key: str, exc: BaseException) -> BackendError:
        if isinstance(exc, BackendError):
            return BackendError(str(exc))  # already ours (a closed store, a bad key)
        code = _code(exc)
        status = getattr(exc, "status_code", None)
        detail = ", ".join(p for p in (code, f"HTTP {status}" if status else "") if p)
        return self._failed(action, key, _kind(exc), detail or type(exc).__name__)

    def _failed(self, action: str, key: str, kind: str, detail: str) -> BackendError:
        """The error for a call that failed so (`kind` as `_kind` says)."""
        where = f"{action} {key!r} in {self.url}"
        account = f" of account {self._account!r}" if self._account else ""
        if kind == "auth":
            return BackendError(
                f"{where} was refused ({detail}): check the Azure credentials in "
                f"storage_options (connection_string, account_key, sas_token or credential) "
                f"and that they may read and write container {self._bucket!r}{account}."
            )
        if kind == "missing_bucket":
            return BackendError(
                f"{where} failed: container {self._bucket!r}{account} does not exist at "
                f"{self._endpoint}. Create the container, or fix its name in the URL."
            )
        if kind == "unreachable":
            return BackendError(
                f"{where} failed: cannot connect to {self._endpoint}. Check the account "
                f"endpoint and that the service for container {self._bucket!r} is "
                f"reachable."
            )
        return BackendError(f"{where} failed ({detail}); nothing was changed by it.")

    def _conditional_error(self, action: str, key: str, exc: BaseException) -> BackendError:
        kind = _kind(exc)
        if azerrors.ambiguous(kind):
            return self._unknown(action, key, _code(exc) or type(exc).__name__)
        return self._error(action, key, exc)

    def _unknown(self, action: str, key: str, detail: str) -> StoreAmbiguous:
        return StoreAmbiguous(
            f"{action} {key!r} in {self.url}: the outcome is unknown ({detail}); read the "
            f"key back to learn whether it applied."
        )

    # -- reads ----------------------------------------------------------
    async def _get(self, key: str) -> Blob | None:
        blob = self._blob(key)

        async def once() -> Blob:
            stream = await blob.download_blob(**self._opts())
            data = await stream.readall()
            return Blob(bytes(data), Version(str(stream.properties.etag)))

        return await self._read(key, once)

    async def _download(self, key: str, path: str, callback: Callback | None) -> bool:
        blob = self._blob(key)

        async def write(dst: BinaryIO) -> None:
            stream = await blob.download_blob(**self._opts(max_concurrency=1))
            if callback is not None:
                callback.set_size(int(stream.size or 0))
            async for chunk in stream.chunks():
                dst.write(chunk)
                if callback is not None:
                    callback.relative_update(len(chunk))

        return await self._download_to(key, path, write)

    async def _list(self, prefix: str) -> list[Entry]:
        self._check_open()
        start, cut = self._list_scope(prefix)

        async def once() -> list[Entry]:
            found: list[Entry] = []
            async for item in self._client.list_blobs(
                name_starts_with=start or None, **self._opts()
            ):
                name = str(item.name)
                if name.endswith("/"):
                    continue  # a "directory" placeholder, not a key
                modified = item.last_modified
                found.append(
                    Entry(
                        name[cut:],
                        int(item.size or 0),
                        modified.timestamp() if modified is not None else None,
                    )
                )
            return found

        return await self._listed(prefix, once)

    async def _folders(self, prefix: str) -> list[str]:
        self._check_open()

        async def once(start: str) -> list[str]:
            found: list[str] = []
            # walk_blobs yields the blobs at this level and a BlobPrefix
            # (a name ending in the delimiter) per folder below it.
            async for item in self._client.walk_blobs(
                name_starts_with=start or None, delimiter="/", **self._opts()
            ):
                name = str(item.name)
                if name.endswith("/"):
                    found.append(name)
            return found

        return await self._folders_listed(prefix, once)

    # -- conditional writes ---------------------------------------------
    def _condition(self, version: Version | None) -> dict[str, Any]:
        from azure.core import MatchConditions

        if version is None:
            return {"match_condition": MatchConditions.IfMissing}
        return {"etag": version.token, "match_condition": MatchConditions.IfNotModified}

    def _lost(self, kind: str, version: Version | None) -> bool:
        """Whether a refused conditional write means "precondition failed"."""
        return azerrors.lost(kind, replace=version is not None)

    def _fast_writes(self) -> azwrites.FastWrites | None:
        """The obstore transport for this store, or None where it would not be
        exactly the SDK's request (decided once, at the first write)."""
        if self._writes_checked:
            return self._writes
        self._writes_checked = True
        try:
            account = self._obstore_account()
            if account is None:
                return None
            scheme = account.endpoint.partition(":")[0]
            if azwrites.environment_differs(scheme):
                return None
            timeouts = self._timeouts
            self._writes = azwrites.FastWrites.shared(
                account,
                self._bucket,
                float(timeouts.get("connection_timeout") or 20),
                float(timeouts.get("read_timeout") or 60),
            )
        except Exception as exc:  # the SDK path still works
            log.debug("%s: obstore writes unavailable (%s)", self.url, type(exc).__name__)
        return self._writes

    def _obstore_account(self) -> azwrites.Account | None:
        """The account, endpoint and credential of the SDK client, if obstore can
        send exactly its Put Blob with them; else None."""
        if "timeout" in self._timeouts:
            return None  # a server-side timeout (a query parameter obstore cannot add)
        service = self._fs.service_client
        config = getattr(service, "_config", None)
        transport = getattr(config, "transport", None)
        if type(transport).__name__ != "AioHttpTransport":
            return None  # a custom transport
        if getattr(getattr(config, "proxy_policy", None), "proxies", None):
            return None
        if getattr(service, "_location_mode", "primary") != "primary":
            return None
        name = str(getattr(service, "account_name", "") or "")
        parts = urlsplit(str(service.primary_endpoint))
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
            return None
        if parts.password is not None or parts.fragment:
            return None
        endpoint = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        # The blob URL the SDK builds must be the one obstore builds.
        probe = self._client.get_blob_client("a/b").url.partition("?")[0]
        if probe != f"{endpoint}/{self._bucket}/a/b":
            return None
        credential = service.credential
        query = str(getattr(service, "_query_str", "") or "").lstrip("?")
        if credential is None:
            if not query or "sig=" not in query:
                return None  # anonymous access
            return azwrites.Account(endpoint, name, sas=query)
        if type(credential).__name__ != "SharedKeyCredentialPolicy" or query:
            return None  # a token credential, or both a key and a SAS
        key = getattr(credential, "account_key", None)
        if not name or not key or getattr(credential, "account_name", None) != name:
            return None
        return azwrites.Account(endpoint, name, key=str(key))

    async def _put_small(self, key: str, data: bytes, version: Version | None) -> Version | None:
        """One Put Blob carrying the precondition (bodies up to SINGLE_PUT_LIMIT):
        through obstore where it is exact, else through the SDK."""
        writes = self._fast_writes()
        if writes is not None:
            self._check_open()
            full = self._key(key)
            answer = await writes.put(full, data, None if version is None else version.token)
            if answer is not None:
                if answer.etag is not None:
                    return Version(answer.etag)
                if self._lost(answer.kind, version):
                    return None
                action = "creating" if version is None else "replacing"
                if azerrors.ambiguous(answer.kind):
                    raise self._unknown(action, key, answer.describe())
                raise self._failed(action, key, answer.kind, answer.describe())
        return await self._put_small_sdk(key, data, version)

    async def _put_small_sdk(
        self, key: str, data: bytes, version: Version | None
    ) -> Version | None:
        """One Put Blob carrying the precondition, through the SDK."""
        blob = self._blob(key)
        action = "creating" if version is None else "replacing"
        # overwrite=False is the SDK's own spelling of If-None-Match: *.
        condition = {"overwrite": False} if version is None else self._condition(version)
        if version is not None:
            condition["overwrite"] = True
        try:
            out = await blob.upload_blob(data, length=len(data), **condition, **self._opts())
        except Exception as exc:
            if self._lost(_kind(exc), version):
                return None
            raise self._conditional_error(action, key, exc) from exc
        return Version(str(out["etag"]))

    async def _put_blocks(
        self,
        key: str,
        chunks: Iterator[bytes],
        version: Version | None,
        callback: Callback | None,
    ) -> Version | None:
        """Stage `chunks` as blocks only this call knows, then commit the block list
        with the precondition: the blob changes whole, or not at all."""
        from azure.storage.blob import BlobBlock

        blob = self._blob(key)
        action = "creating" if version is None else "replacing"
        # IDs unique to this upload: a racing writer stages its own blocks on the
        # same blob name, and only the committed list decides the content.
        nonce = uuid.uuid4().hex

        async def send(block_id: str, chunk: bytes) -> None:
            await self._retry(
                lambda: blob.stage_block(
                    block_id, io.BytesIO(chunk), length=len(chunk), **self._opts()
                )
            )
            if callback is not None:
                callback.relative_update(len(chunk))

        ids: list[str] = []
        pending: set[asyncio.Task[None]] = set()
        try:
            for chunk in chunks:
                block_id = base64.b64encode(f"{nonce}{len(ids):08d}".encode()).decode()
                ids.append(block_id)
                pending.add(asyncio.ensure_future(send(block_id, chunk)))
                if len(pending) >= BLOCK_CONCURRENCY:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
            if pending:
                done, pending = await asyncio.wait(pending)
                for task in done:
                    task.result()
        except Exception as exc:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            if isinstance(exc, BackendError):
                raise
            raise self._error("uploading", key, exc) from exc
        try:
            out = await blob.commit_block_list(
                [BlobBlock(block_id=i) for i in ids], **self._condition(version), **self._opts()
            )
        except Exception as exc:
            kind = _kind(exc)
            if self._lost(kind, version):
                return None
            if kind == "invalid_blocks" and await self._changed(blob, version):
                # Another writer committed first, which discards every uncommitted
                # block of the blob, ours included: the precondition no longer holds.
                return None
            raise self._conditional_error(action, key, exc) from exc
        return Version(str(out["etag"]))

    async def _changed(self, blob: Any, version: Version | None) -> bool:
        """Whether the blob now fails the precondition (exists, or has another ETag)."""
        try:
            props = await self._retry(lambda: blob.get_blob_properties(**self._opts()))
        except Exception as exc:
            return version is not None and _kind(exc) == "missing_key"
        return version is None or str(props.etag) != version.token

    async def _put(self, key: str, data: bytes, version: Version | None) -> Version | None:
        if len(data) <= SINGLE_PUT_LIMIT:
            return await self._put_small(key, data, version)
        view = memoryview(data)
        chunks = (bytes(view[i : i + BLOCK_SIZE]) for i in range(0, len(data), BLOCK_SIZE))
        return await self._put_blocks(key, chunks, version, None)

    def create(self, key: str, data: bytes) -> Version | None:
        return self._run(self._put, key, bytes(data), None)

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        return self._run(self._put, key, bytes(data), version)

    async def _create_file(self, key: str, path: str, callback: Callback | None) -> Version | None:
        self._blob(key)  # refuse a bad key before reading anything
        size, src = self._open_local(key, path)  # closed in the finally below
        try:
            if callback is not None:
                callback.set_size(size)
            if size <= SINGLE_PUT_LIMIT:
                created = await self._put_small(key, src.read(), None)
                if callback is not None:
                    callback.relative_update(size)
                return created
            block_size = max(BLOCK_SIZE, -(-size // MAX_BLOCKS))
            chunks = iter(lambda: src.read(block_size), b"")
            return await self._put_blocks(key, chunks, None, callback)
        finally:
            src.close()

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        return self._run(self._create_file, key, path, callback)

    # -- delete and close -----------------------------------------------
    async def _delete(self, key: str) -> None:
        blob = self._blob(key)
        try:
            await self._retry(lambda: blob.delete_blob(**self._opts()))
        except Exception as exc:
            if _kind(exc) == "missing_key":
                return
            raise self._error("deleting", key, exc) from exc

    async def _close(self) -> None:
        await self._fs.service_client.close()
        credential = getattr(self._fs, "credential", None)
        close = getattr(credential, "close", None)
        if close is not None:
            await close()
