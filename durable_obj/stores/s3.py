"""S3 and S3-compatible stores (AWS, MinIO, R2, SeaweedFS) with real preconditions.

Credentials, endpoint and client settings come from `storage_options`, exactly
as s3fs takes them (key, secret, token, profile, endpoint_url, client_kwargs,
config_kwargs, anon, ...). The store drives the aiobotocore client that its
`S3FileSystem` holds, on fsspec's IO loop:

* create: `PutObject` with `If-None-Match: *`; a large file goes through a
  multipart upload whose `CompleteMultipartUpload` carries `If-None-Match: *`,
  so the key appears whole or not at all, and only for one creator.
* replace: `PutObject` with `If-Match: <etag>`.
* conditional read: `GetObject` with `If-None-Match: <etag>`; a 304 (no
  body) means unchanged.
* version token: the ETag, exactly as the server spells it.

Bodies up to `SINGLE_PUT_LIMIT` (every segment, every head) are sent through
obstore (`s3writes`): the same PUT and preconditions at a fraction of the
client CPU. Where that would not be exact (anonymous access, requester-pays,
`s3_additional_kwargs`, other signers, proxies, a CA bundle or
`verify=False`, an endpoint with a path) or when `DURABLE_OBJ_S3_WRITES=client`
is set, they go through aiobotocore as before; so do multipart uploads.
Where the client's credentials are static keys, a PUT through obstore is
sent from the calling thread after the first (`S3Base.writes_here`): a
flush's two PUTs no longer hop to the IO loop and back.

A conditional write is sent once, never retried: a retry after a lost answer
would meet its own success as a failed precondition. Botocore's own retries
are therefore switched off (whatever `config_kwargs` says); idempotent calls
(reads, listings, parts, deletes) are retried here instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from durable_obj.errors import BackendError
from durable_obj.stores import s3reads
from durable_obj.stores.base import UNCHANGED, Blob, Entry, Sink, Unchanged, Version
from durable_obj.stores.cloud import entity_tag, same_etag
from durable_obj.stores.growing import GrowingFile, SourceFailed
from durable_obj.stores.s3client import S3Base
from durable_obj.stores.s3errors import Failure, classify
from durable_obj.stores.s3reads import Credentials
from durable_obj.stores.secrets import scrub

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

T = TypeVar("T")
log = logging.getLogger("durable_obj.stores.s3")

#: Bodies up to this size go in one PutObject; larger files are uploaded in parts.
SINGLE_PUT_LIMIT = 16 * 1024 * 1024
#: Part size for multipart uploads (S3's minimum is 5 MiB, at most 10,000 parts).
PART_SIZE = 8 * 1024 * 1024
MAX_PARTS = 10_000
#: Parts in flight at once: memory use is about PART_CONCURRENCY * PART_SIZE.
PART_CONCURRENCY = 4
#: Download and streaming read size.
READ_CHUNK = 1024 * 1024
#: Keys of one listing page of a batched `list_keys_many` (S3's maximum);
#: a folder with more is listed again through the client, every page.
LIST_PAGE = 1000


class S3Store(S3Base):
    """A namespace `bucket/prefix` in an S3-compatible object store."""

    protocol = "s3"
    #: A base is opened as it downloads (`read_into`).
    streams_reads = True

    # -- reads ----------------------------------------------------------
    async def _get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        full = self._key(key)
        if version is None and self._static is not None and self._static_creds is not None:
            self._check_open()
            got = (await self._static.fetch([full], self._static_creds, 1))[0]
            if got is not None:
                return Blob(got[0], Version(got[1]))
        s3 = await self._s3()
        condition = {} if version is None else {"IfNoneMatch": entity_tag(version.token)}

        async def once() -> Blob | Unchanged:
            try:
                resp = await s3.get_object(Bucket=self._bucket, Key=full, **condition)
            except Exception as exc:
                if version is not None and classify(exc).kind == "not_modified":
                    return UNCHANGED  # 304: no body was sent
                raise
            body = resp["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            etag = str(resp["ETag"])
            # A server that ignores If-None-Match sends the body all the same.
            if version is not None and same_etag(etag, version.token):
                return UNCHANGED
            return Blob(bytes(data), Version(etag))

        return await self._read(key, once)

    async def _get_many(self, keys: list[str], concurrency: int) -> list[Blob | None]:
        fulls = [self._key(key) for key in keys]
        got: list[Blob | None] = [None] * len(keys)
        todo: list[int] = list(range(len(keys)))
        fast = await self._fast_reads() if len(keys) > 1 else None
        creds = await self._read_credentials() if fast else None
        if fast is not None and creds is not None:
            answers = await fast.fetch(fulls, creds, concurrency)
            for index, answer in enumerate(answers):
                if answer is not None:
                    got[index] = Blob(answer[0], Version(answer[1]))
            todo = [index for index, answer in enumerate(answers) if answer is None]
            if todo:
                log.debug("%s: %d of %d read(s) left to the client", self.url, len(todo), len(keys))
        await self._get_each(keys, todo, got, concurrency)
        return got

    async def _list_many(self, prefixes: list[str], concurrency: int) -> list[list[Entry]]:
        """Each prefix's one-page listing through the batched reader; what it
        leaves (a second page, an answer not taken as is) through the client."""
        got: list[list[Entry] | None] = [None] * len(prefixes)
        fast = await self._fast_reads() if len(prefixes) > 1 else None
        creds = await self._read_credentials() if fast else None
        if fast is not None and creds is not None:
            scopes = [self._list_scope(prefix) for prefix in prefixes]
            starts = [start for start, _ in scopes]
            pages = await fast.list_pages(starts, creds, concurrency, LIST_PAGE)
            for index, page in enumerate(pages):
                if page is not None:
                    cut = scopes[index][1]
                    entries = [
                        Entry(item.key[cut:], item.size, item.modified)
                        for item in page
                        if not item.key.endswith("/")  # a "directory" marker, not a key
                    ]
                    got[index] = sorted(entries, key=lambda e: e.key)
        todo = [index for index, entries in enumerate(got) if entries is None]
        if todo:
            rest = await super()._list_many([prefixes[i] for i in todo], concurrency)
            for index, entries in zip(todo, rest, strict=True):
                got[index] = entries
        return [entries or [] for entries in got]

    async def _body(
        self, key: str, write: Callable[[bytes], object], callback: Callback | None
    ) -> None:
        """One GET of `key`, every piece of its body handed to `write`."""
        s3 = await self._s3()
        resp = await s3.get_object(Bucket=self._bucket, Key=self._key(key))
        body = resp["Body"]
        try:
            if callback is not None:
                callback.set_size(int(resp.get("ContentLength") or 0))
            while chunk := await body.read(READ_CHUNK):
                write(chunk)
                if callback is not None:
                    callback.relative_update(len(chunk))
        finally:
            body.close()

    async def _download(self, key: str, path: str, callback: Callback | None) -> bool:
        tried = self._static is None

        async def write(dst: BinaryIO) -> None:
            nonlocal tried
            if not tried:  # once, before the client: see `s3static`
                tried = True
                if await self._stream_static(key, dst.write, callback):
                    return
                dst.seek(0)
                dst.truncate()
            await self._body(key, dst.write, callback)

        return await self._download_to(key, path, write)

    async def _stream_static(
        self, key: str, write: Callable[[bytes], object], callback: Callback | None
    ) -> bool:
        """`_body` through the reader that needs no client; False where the
        client must read it (after part of the body, maybe)."""
        assert self._static is not None and self._static_creds is not None
        self._check_open()

        def counted(data: bytes) -> None:
            write(data)
            if callback is not None:
                callback.relative_update(len(data))

        if callback is not None:
            callback.absolute_update(0)
        size = await self._static.stream(
            self._key(key), self._static_creds, counted if callback else write, READ_CHUNK
        )
        if size is not None and callback is not None:
            callback.set_size(size)
        elif callback is not None:
            callback.absolute_update(0)
        return size is not None

    def read_into(self, key: str, sink: Sink, callback: Callback | None = None) -> bool:
        return self._run(self._read_into, key, sink, callback)

    async def _read_into(self, key: str, sink: Sink, callback: Callback | None) -> bool:
        async def once() -> bool:
            sink.restart()
            await self._body(key, sink.write, callback)
            return True

        return await self._read(key, once) is not None

    async def _list(self, prefix: str) -> list[Entry]:
        s3 = await self._s3()
        start, cut = self._list_scope(prefix)

        async def once() -> list[Entry]:
            found: list[Entry] = []
            paginator = s3.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self._bucket, Prefix=start):
                for item in page.get("Contents", []):
                    name = str(item["Key"])
                    if name.endswith("/"):
                        continue  # a "directory" marker, not a key
                    modified = item.get("LastModified")
                    found.append(
                        Entry(
                            name[cut:],
                            int(item.get("Size", 0)),
                            modified.timestamp() if modified is not None else None,
                        )
                    )
            return found

        return await self._listed(prefix, once)

    async def _folders(self, prefix: str) -> list[str]:
        s3 = await self._s3()

        async def once(start: str) -> list[str]:
            found: list[str] = []
            paginator = s3.get_paginator("list_objects_v2")
            pages = paginator.paginate(Bucket=self._bucket, Prefix=start, Delimiter="/")
            async for page in pages:
                found.extend(str(p["Prefix"]) for p in page.get("CommonPrefixes", []))
            return found

        return await self._folders_listed(prefix, once)

    # -- conditional writes ---------------------------------------------
    def _settle(self, key: str, condition: dict[str, str], failure: Failure) -> Version | None:
        """A conditional write's failure: None if its precondition failed,
        else the error (ambiguous where it may have applied)."""
        if failure.kind == "precondition":
            return None
        if failure.kind == "missing_key" and "IfMatch" in condition:
            return None  # some servers answer If-Match on a missing key with 404
        action = "creating" if "IfNoneMatch" in condition else "replacing"
        raise self._conditional_fail(action, key, None, failure)

    async def _put(self, key: str, data: bytes, condition: dict[str, str]) -> Version | None:
        s3 = await self._s3()
        full = self._key(key)
        writes = await self._fast_writes() if len(data) <= SINGLE_PUT_LIMIT else None
        creds: Credentials | None = None
        if writes is not None:
            try:
                creds = await s3reads.frozen_credentials(s3)
            except Exception as exc:
                raise self._error("writing", key, exc) from exc
            self.note_static(s3, writes, creds)
        if writes is not None and creds is not None:
            sent = await writes.put(full, data, condition, creds)
            if sent is not None:
                if sent.failure is not None:
                    return self._settle(key, condition, sent.failure)
                return Version(str(sent.etag))
        try:
            resp = await s3.put_object(Bucket=self._bucket, Key=full, Body=data, **condition)
        except Exception as exc:
            failure = classify(exc)
            if failure.kind == "precondition":
                return None
            if failure.kind == "missing_key" and "IfMatch" in condition:
                return None  # some servers answer If-Match on a missing key with 404
            action = "creating" if "IfNoneMatch" in condition else "replacing"
            raise self._conditional_fail(action, key, exc) from exc
        return Version(str(resp["ETag"]))

    def create(self, key: str, data: bytes) -> Version | None:
        return self._put_here(key, bytes(data), {"IfNoneMatch": "*"})

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        return self._put_here(key, bytes(data), {"IfMatch": version.token})

    def _put_here(self, key: str, data: bytes, condition: dict[str, str]) -> Version | None:
        """`_put`, sent from the calling thread where the credentials are
        static (`writes_here`); else on the IO loop. The same PUT, sent once,
        judged the same way."""
        here = self.writes_here() if len(data) <= SINGLE_PUT_LIMIT else None
        if here is None and len(data) <= SINGLE_PUT_LIMIT:
            here = self.static_writes()  # before the client exists: see `s3static`
        if here is not None:
            writes, creds = here
            try:
                self._check_open()
                sent = writes.put_now(self._key(key), data, condition, creds)
                if sent is not None:
                    if sent.failure is not None:
                        return self._settle(key, condition, sent.failure)
                    return Version(str(sent.etag))
            except BaseException as exc:
                scrub(exc, self._secrets)  # as `_run` does
                raise
        return self._run(self._put, key, data, condition)

    async def _create_file(self, key: str, path: str, callback: Callback | None) -> Version | None:
        size, src = self._open_local(key, path)
        with src:
            data = src.read() if size <= SINGLE_PUT_LIMIT else None
        if callback is not None:
            callback.set_size(size)
        if data is not None:
            created = await self._put(key, data, {"IfNoneMatch": "*"})
            if callback is not None:
                callback.relative_update(size)
            return created
        part_size = max(PART_SIZE, math.ceil(size / MAX_PARTS / (1 << 20)) << 20)
        with open(path, "rb") as handle:

            async def part(number: int) -> bytes:
                return handle.read(part_size)

            return await self._multipart_create(key, part, callback)

    def adopt_growing(
        self,
        key: str,
        source: GrowingFile,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        """Uploads the archive while BACKUP writes it: parts are sent as
        they fill, and the upload completes (conditionally) only once the
        archive is complete; a failed BACKUP aborts it."""
        return self._run(self._adopt_growing, key, source, callback)

    async def _adopt_growing(
        self, key: str, source: GrowingFile, callback: Callback | None
    ) -> Version | None:
        loop = asyncio.get_running_loop()

        async def read(offset: int, size: int) -> bytes:
            return await loop.run_in_executor(None, source.read, offset, size)

        first = await read(0, SINGLE_PUT_LIMIT + 1)
        if len(first) <= SINGLE_PUT_LIMIT:
            if callback is not None:
                callback.set_size(len(first))
            created = await self._put(key, first, {"IfNoneMatch": "*"})
            if callback is not None:
                callback.relative_update(len(first))
            return created
        offset = len(first)

        async def part(number: int) -> bytes:
            # the bytes already read are part 1; the size is unknown until
            # BACKUP ends: parts grow with their number, so 10,000 reach ~0.5 TB
            nonlocal first, offset
            if number == 1:
                chunk, first = first, b""
                return chunk
            chunk = await read(offset, PART_SIZE << min(4, (number - 1) // 2000))
            offset += len(chunk)
            return chunk

        created = await self._multipart_create(key, part, callback)
        if callback is not None:
            callback.set_size(offset)
        return created

    async def _multipart_create(
        self, key: str, part: Callable[[int], Awaitable[bytes]], callback: Callback | None
    ) -> Version | None:
        """Create `key` from the parts `part(1)`, `part(2)`, ... (empty: no
        more), whose completion carries If-None-Match."""
        s3 = await self._s3()
        full = self._key(key)
        try:
            upload = await self._retry(
                lambda: s3.create_multipart_upload(Bucket=self._bucket, Key=full)
            )
        except Exception as exc:
            raise self._error("uploading", key, exc) from exc
        upload_id = str(upload["UploadId"])

        async def send(number: int, chunk: bytes) -> dict[str, Any]:
            out = await self._retry(
                lambda: s3.upload_part(
                    Bucket=self._bucket,
                    Key=full,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=chunk,
                )
            )
            if callback is not None:
                callback.relative_update(len(chunk))
            return {"PartNumber": number, "ETag": out["ETag"]}

        parts: list[dict[str, Any]] = []
        pending: set[asyncio.Task[dict[str, Any]]] = set()
        completed = False
        try:
            try:
                number = 1
                while chunk := await part(number):
                    if number > MAX_PARTS:
                        raise BackendError(f"{key!r} needs more than {MAX_PARTS} parts")
                    pending.add(asyncio.ensure_future(send(number, chunk)))
                    number += 1
                    if len(pending) >= PART_CONCURRENCY:
                        done, pending = await asyncio.wait(
                            pending, return_when=asyncio.FIRST_COMPLETED
                        )
                        parts.extend(task.result() for task in done)
                if pending:
                    done, pending = await asyncio.wait(pending)
                    parts.extend(task.result() for task in done)
            except SourceFailed:
                raise  # BACKUP failed: the upload is aborted below
            except Exception as exc:
                raise self._error("uploading", key, exc) from exc
            parts.sort(key=lambda p: int(p["PartNumber"]))
            try:
                resp = await s3.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=full,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                )
            except Exception as exc:
                if classify(exc).kind == "precondition":
                    return None
                failure = classify(exc)
                if failure.kind in ("conflict", "server", "network"):
                    # The upload may have completed: leave it for the read-back to judge.
                    completed = True
                raise self._conditional_fail("creating", key, exc) from exc
            completed = True
            return Version(str(resp["ETag"]))
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            if not completed:
                await self._abort(full, upload_id)

    async def _abort(self, full: str, upload_id: str) -> None:
        s3 = await self._s3()
        # Best effort: a bucket lifecycle rule reaps whatever is left.
        with contextlib.suppress(Exception):
            await s3.abort_multipart_upload(Bucket=self._bucket, Key=full, UploadId=upload_id)

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        return self._run(self._create_file, key, path, callback)

    # -- delete and close -----------------------------------------------
    async def _delete(self, key: str) -> None:
        s3 = await self._s3()
        full = self._key(key)
        try:
            await self._retry(lambda: s3.delete_object(Bucket=self._bucket, Key=full))
        except Exception as exc:
            if classify(exc).kind == "missing_key":
                return
            raise self._error("deleting", key, exc) from exc

    async def _close(self) -> None:
        creator = getattr(self._fs, "_s3creator", None)
        if creator is not None and getattr(self._fs, "_s3", None) is not None:
            self._fs._s3 = None
            await creator.__aexit__(None, None, None)
