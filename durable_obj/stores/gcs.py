"""Google Cloud Storage stores (gs://, gcs://) with generation preconditions.

Credentials, project and endpoint come from `storage_options`, exactly as
gcsfs takes them (token, project, endpoint_url, requester_pays, ...). The
store speaks the GCS JSON API through the aiohttp session and credentials
that its `gcsfs.core.GCSFileSystem` holds, on fsspec's IO loop:

* create: an upload with `ifGenerationMatch=0`; a file is streamed from disk
  as one multipart upload, so the precondition is evaluated once, when the
  object would appear, exactly as for small bodies.
* replace: an upload with `ifGenerationMatch=<generation>`.
* read: `alt=media` returns the bytes and, in `x-goog-generation`, the
  generation they belong to, from one request.
* conditional read: the same GET with `ifGenerationNotMatch=<generation>`;
  a 304 (no body) means unchanged.
* version token: the object generation.

The core `GCSFileSystem` class is used on purpose: gcsfs's default
"extended" class probes for zonal buckets and drops `ifGenerationMatch`.
A conditional write is sent once, never retried (a retry after a lost
answer would meet its own success as a failed precondition); idempotent
calls are retried here.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

from durable_obj.errors import BackendError, InvalidArgument, StoreAmbiguous
from durable_obj.stores.base import UNCHANGED, Blob, Entry, Unchanged, Version
from durable_obj.stores.cloud import CloudStore

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

T = TypeVar("T")

#: Streaming read and upload chunk.
CHUNK = 1024 * 1024
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_FRACTION = re.compile(r"\.(\d{6})\d+")


def _safe_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    text = _FRACTION.sub(r".\1", value.replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _error_message(body: bytes) -> str:
    try:
        error = json.loads(body).get("error", {})
        return str(error.get("message", "")) if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace")


class _Answer(Exception):
    """An HTTP answer that is not a success, carried to the code that decides."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body

    @property
    def transient(self) -> bool:
        return self.status in _TRANSIENT_STATUS


def _kind(exc: BaseException) -> str:
    """precondition | missing | auth | unreachable | server | network | other"""
    import aiohttp

    if isinstance(exc, _Answer):
        if exc.status == 412:
            return "precondition"
        if exc.status == 404:
            return "missing"
        if exc.status in (401, 403):
            return "auth"
        if exc.transient:
            return "server"
        return "other"
    if isinstance(exc, aiohttp.ClientConnectorError):
        # The connection could not be made: the request was never sent.
        return "unreachable"
    if isinstance(exc, aiohttp.ClientError | OSError | asyncio.TimeoutError):
        return "network"
    try:
        import google.auth.exceptions

        HttpError = importlib.import_module("gcsfs.retry").HttpError

        if isinstance(exc, google.auth.exceptions.GoogleAuthError):
            return "auth"
        if isinstance(exc, HttpError) and exc.code in (401, 403):
            return "auth"
    except ImportError:  # pragma: no cover - gcsfs brings both
        pass
    return "other"


def _transient(exc: BaseException) -> bool:
    return _kind(exc) in ("server", "network", "unreachable")


def _make_fs(opts: dict[str, Any], url: str) -> Any:
    # gcsfs ships no type information; imported by name, used as Any. The core
    # class on purpose: see the module docstring.
    GCSFileSystem = importlib.import_module("gcsfs.core").GCSFileSystem
    try:
        return GCSFileSystem(**opts)
    except (TypeError, ValueError, KeyError, OSError) as exc:
        raise InvalidArgument(
            f"{url}: storage_options were refused by gcsfs "
            f"({type(exc).__name__}); check the token and other options. "
            f"Nothing was touched."
        ) from exc


class GCSStore(CloudStore):
    """A namespace `bucket/prefix` in Google Cloud Storage."""

    protocol = "gs"

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self._share(self._take_root(root, storage_options), _make_fs)
        self._endpoint = _safe_endpoint(str(self._fs._location))
        self._bucket_exists = False

    def _fs_classes(self) -> tuple[type, ...]:
        return (importlib.import_module("gcsfs.core").GCSFileSystem,)

    # -- plumbing -------------------------------------------------------
    def _object_url(self, full: str) -> str:
        return (
            f"{self._fs._location}/storage/v1/b/{quote(self._bucket, safe='')}"
            f"/o/{quote(full, safe='')}"
        )

    def _upload_url(self) -> str:
        return f"{self._fs._location}/upload/storage/v1/b/{quote(self._bucket, safe='')}/o"

    async def _session(self) -> Any:
        self._check_open()
        return await self._fs._set_session()

    def _timeout(self) -> dict[str, Any]:
        """gcsfs's requests_timeout if set; else the session's own default."""
        import aiohttp

        seconds = self._fs.requests_timeout
        if seconds is None:
            return {}
        if isinstance(seconds, aiohttp.ClientTimeout):
            return {"timeout": seconds}
        return {"timeout": aiohttp.ClientTimeout(total=float(seconds))}

    def _prepare(
        self, params: dict[str, Any], headers: dict[str, str] | None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        return self._fs._get_params(params), self._fs._get_headers(headers)

    async def _call(
        self,
        method: str,
        url: str,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        data: Any = None,
    ) -> tuple[Mapping[str, str], bytes]:
        """One request; a non-2xx answer is raised as `_Answer`."""
        session = await self._session()
        query, heads = self._prepare(params or {}, headers)
        async with session.request(
            method, url, params=query, headers=heads, data=data, **self._timeout()
        ) as resp:
            body = await resp.read()
            if resp.status >= 300:
                raise _Answer(resp.status, body)
            self._bucket_exists = True
            return resp.headers, body

    def _transient(self, exc: BaseException) -> bool:
        return _transient(exc)

    async def _missing(self, exc: BaseException) -> bool:
        return _kind(exc) == "missing" and not await self._bucket_missing()

    async def _bucket_missing(self) -> bool:
        """After a 404: is it the bucket (not just the object) that is missing?"""
        if self._bucket_exists:
            return False
        url = f"{self._fs._location}/storage/v1/b/{quote(self._bucket, safe='')}"
        try:
            await self._retry(lambda: self._call("GET", url, {"fields": "name"}))
        except _Answer as answer:
            return answer.status == 404
        except Exception:
            return False  # cannot tell; the object is missing either way
        return False

    def _error(self, action: str, key: str, exc: BaseException) -> BackendError:
        kind = _kind(exc)
        where = f"{action} {key!r} in {self.url}"
        if isinstance(exc, BackendError):
            return BackendError(str(exc))  # already ours (a closed store, a bad key)
        detail = f"HTTP {exc.status}" if isinstance(exc, _Answer) else type(exc).__name__
        if kind == "auth":
            return BackendError(
                f"{where} was refused ({detail}): check the GCS credentials in "
                f"storage_options (token: a service-account file, 'google_default' or "
                f"OAuth credentials) and that they may read and write bucket "
                f"{self._bucket!r}."
            )
        if kind == "missing":
            return BackendError(
                f"{where} failed: bucket {self._bucket!r} does not exist at "
                f"{self._endpoint}. Create the bucket, or fix the bucket name in the URL."
            )
        if kind == "unreachable":
            return BackendError(
                f"{where} failed: cannot connect to {self._endpoint}. Check endpoint_url and "
                f"that the server for bucket {self._bucket!r} is reachable."
            )
        if isinstance(exc, _Answer):
            message = _error_message(exc.body)
            detail = f"{detail}: {message}" if message else detail
        return BackendError(f"{where} failed ({detail}); nothing was changed by it.")

    def _conditional_error(self, action: str, key: str, exc: BaseException) -> BackendError:
        if _kind(exc) in ("server", "network"):
            detail = f"HTTP {exc.status}" if isinstance(exc, _Answer) else type(exc).__name__
            return StoreAmbiguous(
                f"{action} {key!r} in {self.url}: the outcome is unknown ({detail}); "
                f"read the key back to learn whether it applied."
            )
        return self._error(action, key, exc)

    # -- reads ----------------------------------------------------------
    def _blob(self, key: str, headers: Mapping[str, str], body: bytes) -> Blob:
        generation = headers.get("x-goog-generation")
        if not generation:
            raise BackendError(
                f"reading {key!r} in {self.url}: the server sent no x-goog-generation header, "
                f"so the bytes cannot be tied to a version"
            )
        return Blob(bytes(body), Version(generation))

    async def _get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        url = self._object_url(self._key(key))
        params = {"alt": "media"}
        # A token that is no generation (no object ever has it): a plain GET.
        if version is not None and version.token.isdigit():
            params["ifGenerationNotMatch"] = version.token

        async def once() -> Blob | Unchanged:
            try:
                headers, body = await self._call("GET", url, params)
            except _Answer as answer:
                if answer.status == 304:
                    self._bucket_exists = True
                    return UNCHANGED  # no body was sent
                raise
            blob = self._blob(key, headers, body)
            # A server that ignores the condition sends the body all the same.
            return UNCHANGED if blob.version == version else blob

        return await self._read(key, once)

    async def _download(self, key: str, path: str, callback: Callback | None) -> bool:
        url = self._object_url(self._key(key))

        async def write(dst: BinaryIO) -> None:
            session = await self._session()
            query, heads = self._prepare({"alt": "media"}, None)
            async with session.get(url, params=query, headers=heads, **self._timeout()) as resp:
                if resp.status >= 300:
                    raise _Answer(resp.status, await resp.read())
                if callback is not None:
                    callback.set_size(int(resp.headers.get("Content-Length") or 0))
                async for chunk in resp.content.iter_chunked(CHUNK):
                    dst.write(chunk)
                    if callback is not None:
                        callback.relative_update(len(chunk))
            self._bucket_exists = True

        return await self._download_to(key, path, write)

    async def _list(self, prefix: str) -> list[Entry]:
        start, cut = self._list_scope(prefix)
        url = f"{self._fs._location}/storage/v1/b/{quote(self._bucket, safe='')}/o"

        async def once() -> list[Entry]:
            found: list[Entry] = []
            page: str | None = None
            while True:
                params: dict[str, Any] = {
                    "prefix": start,
                    "fields": "items(name,size,updated),nextPageToken",
                    "maxResults": 1000,
                }
                if page:
                    params["pageToken"] = page
                _, body = await self._call("GET", url, params)
                listing = json.loads(body) if body else {}
                for item in listing.get("items", []):
                    name = str(item["name"])
                    if name.endswith("/"):
                        continue  # a "directory" placeholder, not a key
                    size = int(item.get("size", 0))
                    found.append(Entry(name[cut:], size, _parse_time(item.get("updated"))))
                page = listing.get("nextPageToken")
                if not page:
                    return found

        return await self._listed(prefix, once)

    async def _folders(self, prefix: str) -> list[str]:
        url = f"{self._fs._location}/storage/v1/b/{quote(self._bucket, safe='')}/o"

        async def once(start: str) -> list[str]:
            found: list[str] = []
            page: str | None = None
            while True:
                params: dict[str, Any] = {
                    "prefix": start,
                    "delimiter": "/",
                    "fields": "prefixes,nextPageToken",
                    "maxResults": 1000,
                }
                if page:
                    params["pageToken"] = page
                _, body = await self._call("GET", url, params)
                listing = json.loads(body) if body else {}
                found.extend(str(name) for name in listing.get("prefixes", []))
                page = listing.get("nextPageToken")
                if not page:
                    return found

        return await self._folders_listed(prefix, once)

    # -- conditional writes ---------------------------------------------
    def _multipart_head(self, full: str) -> tuple[str, bytes, bytes]:
        boundary = f"durable_obj_{uuid.uuid4().hex}"
        meta = json.dumps({"name": full}).encode()
        head = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
            + meta
            + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
        )
        tail = f"\r\n--{boundary}--\r\n".encode()
        return boundary, head, tail

    async def _upload(
        self, key: str, generation: str, body: Any, boundary: str, length: int
    ) -> Version | None:
        """One multipart upload with `ifGenerationMatch`; sent once, never retried."""
        action = "creating" if generation == "0" else "replacing"
        headers = {
            "Content-Type": f"multipart/related; boundary={boundary}",
            "Content-Length": str(length),
        }
        params = {"uploadType": "multipart", "ifGenerationMatch": generation}
        try:
            _, answer = await self._call("POST", self._upload_url(), params, headers, body)
        except Exception as exc:
            if _kind(exc) == "precondition":
                return None
            raise self._conditional_error(action, key, exc) from exc
        try:
            return Version(str(json.loads(answer)["generation"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreAmbiguous(
                f"{action} {key!r} in {self.url}: the server's answer carried no generation; "
                f"read the key back to learn whether it applied."
            ) from exc

    async def _put(self, key: str, data: bytes, generation: str) -> Version | None:
        boundary, head, tail = self._multipart_head(self._key(key))
        body = head + data + tail
        # aiohttp warns about (and blocks its loop on) large raw-bytes bodies.
        payload = io.BytesIO(body) if len(body) > 512 * 1024 else body
        return await self._upload(key, generation, payload, boundary, len(body))

    def create(self, key: str, data: bytes) -> Version | None:
        return self._run(self._put, key, bytes(data), "0")

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        token = version.token
        if not token.isdigit() or token == "0":
            return None  # no object ever has this generation
        return self._run(self._put, key, bytes(data), token)

    async def _create_file(self, key: str, path: str, callback: Callback | None) -> Version | None:
        size, src = self._open_local(key, path)  # closed in the finally below
        boundary, head, tail = self._multipart_head(self._key(key))
        if callback is not None:
            callback.set_size(size)

        async def stream() -> AsyncIterator[bytes]:
            yield head
            sent = 0
            while sent < size:
                chunk = src.read(min(CHUNK, size - sent))
                if not chunk:
                    raise BackendError(f"uploading {key!r} to {self.url}: {path} shrank")
                sent += len(chunk)
                yield chunk
                if callback is not None:
                    callback.relative_update(len(chunk))
            yield tail

        try:
            return await self._upload(key, "0", stream(), boundary, len(head) + size + len(tail))
        finally:
            src.close()

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        return self._run(self._create_file, key, path, callback)

    # -- delete and close -----------------------------------------------
    async def _delete(self, key: str) -> None:
        url = self._object_url(self._key(key))
        try:
            await self._retry(lambda: self._call("DELETE", url))
        except Exception as exc:
            if _kind(exc) == "missing" and not await self._bucket_missing():
                return
            raise self._error("deleting", key, exc) from exc

    async def _close(self) -> None:
        session = getattr(self._fs, "_session", None)
        self._fs._session = None
        if session is not None and not session.closed:
            await session.close()
