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
* conditional read: the download with `If-None-Match: <etag>`
  (`match_condition=IfModified`); a 304 (no body) means unchanged.
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
import io
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from durable_obj.errors import BackendError
from durable_obj.stores import azerrors
from durable_obj.stores.azclient import AzureBase
from durable_obj.stores.azerrors import kind_of
from durable_obj.stores.base import UNCHANGED, Blob, Entry, Unchanged, Version
from durable_obj.stores.cloud import entity_tag, same_etag

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

T = TypeVar("T")

#: Bodies up to this size go in one Put Blob; larger ones are staged as blocks
#: (aiohttp also warns about raw bodies over 1 MiB).
SINGLE_PUT_LIMIT = 1024 * 1024
BLOCK_SIZE = 4 * 1024 * 1024
MAX_BLOCKS = 50_000
#: Blocks in flight at once: memory use is about BLOCK_CONCURRENCY * BLOCK_SIZE.
BLOCK_CONCURRENCY = 4


class AzureStore(AzureBase):
    """A namespace `container/prefix` in Azure Blob Storage."""

    protocol = "az"
    root_word = "container"

    # -- reads ----------------------------------------------------------
    async def _get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        from azure.core import MatchConditions

        blob = self._blob(key)
        # IfModified is the SDK's spelling of If-None-Match: <etag>.
        condition: dict[str, Any] = {}
        if version is not None:
            condition = {
                "etag": entity_tag(version.token),
                "match_condition": MatchConditions.IfModified,
            }

        async def once() -> Blob | Unchanged:
            try:
                stream = await blob.download_blob(**condition, **self._opts())
            except Exception as exc:
                if version is not None and getattr(exc, "status_code", None) == 304:
                    return UNCHANGED  # ResourceNotModifiedError: no body was sent
                raise
            data = await stream.readall()
            etag = str(stream.properties.etag)
            # A server that ignores If-None-Match sends the body all the same.
            if version is not None and same_etag(etag, version.token):
                return UNCHANGED
            return Blob(bytes(data), Version(etag))

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
            if self._lost(kind_of(exc), version):
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
            kind = kind_of(exc)
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
            return version is not None and kind_of(exc) == "missing_key"
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
            if kind_of(exc) == "missing_key":
                return
            raise self._error("deleting", key, exc) from exc

    async def _close(self) -> None:
        await self._fs.service_client.close()
        credential = getattr(self._fs, "credential", None)
        close = getattr(credential, "close", None)
        if close is not None:
            await close()
