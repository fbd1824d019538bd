"""Many small S3 GETs without botocore's per-request cost.

Opening an object with a long WAL means a thousand small GETs. Through
aiobotocore each costs about 1 ms of CPU (event hooks, endpoint rules,
response parsing), so on two cores a 1001-segment WAL spends a second in the
client. `FastReads` sends the same GETs on keep-alive HTTP/1.1
connections, signed with Signature V4 here (one signing key per batch):
about 60 us of CPU each. Listing a thousand object folders (one
ListObjectsV2 page each, about 3 ms of CPU through the client) goes the same
way (`FastReads.list_pages`); a listing that needs a second page is left
to the client.

It is an accelerator and never the authority. Where the request goes (scheme,
host, path style or virtual host, region) is copied from a URL that the
client itself presigned, and the credentials are the client's own, so both
paths read the same thing. Any answer other than a plain `200` with a
`Content-Length` (a missing key, a refusal, a redirect, a chunked body, a
dropped connection, a timeout) is not interpreted: that key is read again
through the client, which retries, maps errors and names them as always.
Configurations it does not reproduce exactly (anonymous access, proxies,
requester-pays, customer-provided encryption keys, other signers) are not
sped up at all, and a batch whose first answers are refusals or redirects
(a bucket in another region) hands the rest to the client at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import inspect
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit
from xml.etree import ElementTree

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: Connections opened at most, whatever the requested concurrency (the
#: object's fetch_concurrency, 32 by default): at a 20 ms round trip, 32
#: connections read 1,001 segments in about 0.7 s.
MAX_CONNECTIONS = 64
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy")
_MAX_HEADER = 64 * 1024


def quote_key(key: str) -> str:
    """A key as S3 (and botocore) put it in a path: '/' and '~' kept."""
    return quote(key, safe="/~")


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None


@dataclass(frozen=True)
class Target:
    """Where GETs go, as the client's own presigned URL showed it."""

    scheme: str
    host: str  # the Host header: hostname[:port]
    hostname: str
    port: int
    path_prefix: str  # "/bucket/" (path style) or "/" (virtual host)
    region: str

    @classmethod
    def from_presigned(cls, url: str, probe_key: str, region: str) -> Target | None:
        """Where a GET of a key goes, from the client's presigned GET of
        `probe_key`; None if that URL is not the plain shape expected."""
        parts = urlsplit(url)
        suffix = quote_key(probe_key)
        if parts.scheme not in ("http", "https") or not parts.path.endswith(suffix):
            return None
        if parts.username or parts.password or not parts.hostname or not region:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(
            scheme=parts.scheme,
            host=parts.netloc,
            hostname=parts.hostname,
            port=port,
            path_prefix=parts.path[: len(parts.path) - len(suffix)],
            region=region,
        )


def proxies_configured(config_kwargs: dict[str, Any]) -> bool:
    if config_kwargs.get("proxies"):
        return True
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARS)


class _Signer:
    """Signature V4 headers for unsigned-payload-free GETs, one day's key."""

    def __init__(self, creds: Credentials, region: str, host: str) -> None:
        now = datetime.datetime.now(datetime.UTC)
        day = now.strftime("%Y%m%d")
        self._amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        key = hmac.new(f"AWS4{creds.secret_key}".encode(), day.encode(), hashlib.sha256).digest()
        for part in (region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._key = key
        self._scope = f"{day}/{region}/s3/aws4_request"
        self._host = host
        headers = [
            ("host", host),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", self._amz_date),
        ]
        if creds.token:
            headers.append(("x-amz-security-token", creds.token))
        self._canonical_headers = "".join(f"{k}:{v}\n" for k, v in headers)
        self._signed = ";".join(k for k, _ in headers)
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in headers[1:])
        self._credential = f"{creds.access_key}/{self._scope}"

    def request(self, path: str, query: str = "") -> bytes:
        """A signed GET of `path`; `query` is already canonical (names sorted,
        names and values encoded as `canonical_query` does)."""
        canonical = (
            f"GET\n{path}\n{query}\n{self._canonical_headers}\n{self._signed}\n{EMPTY_SHA256}"
        )
        to_sign = (
            f"AWS4-HMAC-SHA256\n{self._amz_date}\n{self._scope}\n"
            f"{hashlib.sha256(canonical.encode()).hexdigest()}"
        )
        signature = hmac.new(self._key, to_sign.encode(), hashlib.sha256).hexdigest()
        target = f"{path}?{query}" if query else path
        return (
            f"GET {target} HTTP/1.1\r\nHost: {self._host}\r\n{self._fixed}"
            f"Authorization: AWS4-HMAC-SHA256 Credential={self._credential}, "
            f"SignedHeaders={self._signed}, Signature={signature}\r\n\r\n"
        ).encode()


class _Unusable(Exception):
    """This connection cannot carry another request."""


class FastReads:
    """Batched GETs to one target; see the module docstring."""

    def __init__(self, target: Target, ssl_context: ssl.SSLContext | None, timeout: float) -> None:
        self.target = target
        self._ssl = ssl_context
        self._timeout = timeout

    async def fetch(
        self, keys: list[str], creds: Credentials, concurrency: int
    ) -> list[tuple[bytes, str] | None]:
        """(body, ETag) per full key, or None where the client must read it."""
        paths = [(self.target.path_prefix + quote_key(key), "") for key in keys]
        return await self._send(paths, creds, concurrency)

    async def list_pages(
        self, prefixes: list[str], creds: Credentials, concurrency: int, page: int = 1000
    ) -> list[list[Listed] | None]:
        """Every key below each full prefix (one ListObjectsV2 page of up to
        `page` keys), or None where the client must list it (an answer it did
        not take as is, or more than one page)."""
        bucket = self.target.path_prefix.rstrip("/") or "/"
        requests = []
        for prefix in prefixes:
            params = {"encoding-type": "url", "list-type": "2", "max-keys": str(page)}
            requests.append((bucket, canonical_query({**params, "prefix": prefix})))
        pages = await self._send(requests, creds, concurrency)
        return [None if page is None else parse_listing(page[0]) for page in pages]

    async def stream(
        self, key: str, creds: Credentials, write: Callable[[bytes], object], chunk: int
    ) -> int | None:
        """One GET of the full `key`, its body handed to `write` as it
        arrives, `chunk` bytes at a time; the body's length, or None where
        the client must read it (any answer but a plain 200 with a length,
        or a connection that failed). After None, `write` may have had part
        of the body: the caller starts again."""
        signer = _Signer(creds, self.target.region, self.target.host)
        request = signer.request(self.target.path_prefix + quote_key(key))
        try:
            conn = await asyncio.wait_for(self._connect(), self._timeout)
        except (TimeoutError, OSError, ssl.SSLError):
            return None
        reader, writer = conn
        try:
            writer.write(request)
            status, headers = await asyncio.wait_for(_head(reader), self._timeout)
            length = headers.get("content-length")
            if status != 200 or length is None or "transfer-encoding" in headers:
                return None
            left = int(length)
            while left:
                data = await asyncio.wait_for(reader.read(min(chunk, left)), self._timeout)
                if not data:
                    return None  # the connection ended short
                write(data)
                left -= len(data)
            return int(length)
        except (TimeoutError, OSError, EOFError, ValueError, _Unusable):
            return None
        finally:
            _close(conn)

    async def _send(
        self, requests: list[tuple[str, str]], creds: Credentials, concurrency: int
    ) -> list[tuple[bytes, str] | None]:
        """(body, ETag or "") per (path, canonical query) GET, or None where
        the client must make it; a GET of a path with no query must carry an
        ETag."""
        out: list[tuple[bytes, str] | None] = [None] * len(requests)
        if not requests:
            return out
        signer = _Signer(creds, self.target.region, self.target.host)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(len(requests)):
            queue.put_nowait(index)
        refused = False  # a refusal or redirect: the client reads the rest

        async def worker() -> None:
            nonlocal refused
            conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
            try:
                while not queue.empty() and not refused:
                    index = queue.get_nowait()
                    if conn is None:
                        try:
                            conn = await asyncio.wait_for(self._connect(), self._timeout)
                        except (TimeoutError, OSError, ssl.SSLError):
                            return  # this key and the rest go through the client
                    path, query = requests[index]
                    try:
                        status, out[index], keep = await asyncio.wait_for(
                            self._one(conn, signer.request(path, query), etag=not query),
                            self._timeout,
                        )
                        refused = refused or status not in (200, 404)
                    except (TimeoutError, OSError, EOFError, ValueError, _Unusable):
                        keep = False
                    if not keep and conn is not None:
                        _close(conn)
                        conn = None
            finally:
                if conn is not None:
                    _close(conn)

        count = max(1, min(concurrency, MAX_CONNECTIONS, len(requests)))
        await asyncio.gather(*(worker() for _ in range(count)))
        return out

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        target = self.target
        return await asyncio.open_connection(
            target.hostname,
            target.port,
            ssl=self._ssl if target.scheme == "https" else None,
            limit=_MAX_HEADER,
        )

    async def _one(
        self,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        request: bytes,
        *,
        etag: bool = True,
    ) -> tuple[int, tuple[bytes, str] | None, bool]:
        """(status, (body, ETag) or None for the client to handle, keep the connection)."""
        reader, writer = conn
        writer.write(request)
        status, headers = await _head(reader)
        length = headers.get("content-length")
        if length is None or "transfer-encoding" in headers:
            raise _Unusable("no content-length")
        body = await reader.readexactly(int(length))
        keep = headers[_VERSION] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if status != 200 or (etag and "etag" not in headers):
            return status, None, keep
        return status, (body, headers.get("etag", "")), keep


#: Where `_head` puts the status line's HTTP version among the headers.
_VERSION = ":version"


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """An answer's status and headers (names lower-cased; the HTTP version
    under `_VERSION`)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or status_line[0] not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Unusable(lines[0][:40])
    headers: dict[str, str] = {_VERSION: status_line[0]}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(status_line[1]), headers


def canonical_query(params: dict[str, str]) -> str:
    """A SigV4 canonical query string: names sorted, names and values
    percent-encoded except the unreserved characters (so '/' is %2F)."""
    return "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
        for name, value in sorted(params.items())
    )


@dataclass(frozen=True)
class Listed:
    """One key of a listing page: its full name, size and modification time."""

    key: str
    size: int
    modified: float | None


def parse_listing(body: bytes) -> list[Listed] | None:
    """The keys of one ListObjectsV2 page, decoded as botocore decodes them
    (only when the answer says EncodingType url); None for a page that is
    truncated or not the expected document, so the client lists it."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    if _local(root.tag) != "ListBucketResult":
        return None
    fields = {_local(child.tag): child for child in root}
    truncated = fields.get("IsTruncated")
    if truncated is None or (truncated.text or "").strip().lower() != "false":
        return None
    encoded = (fields.get("EncodingType") is not None) and (
        (fields["EncodingType"].text or "").strip() == "url"
    )
    out: list[Listed] = []
    for item in root:
        if _local(item.tag) != "Contents":
            continue
        parts = {_local(child.tag): (child.text or "") for child in item}
        if "Key" not in parts:
            return None
        key = unquote_plus(parts["Key"]) if encoded else parts["Key"]
        try:
            size = int(parts.get("Size") or 0)
            modified = _timestamp(parts.get("LastModified", ""))
        except ValueError:
            return None  # not as botocore would read it: the client lists it
        out.append(Listed(key, size, modified))
    return out


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _timestamp(text: str) -> float | None:
    """Epoch seconds of an ISO 8601 time; ValueError if it is not one."""
    text = text.strip()
    if not text:
        return None
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError("a time without a zone")
    return when.timestamp()


def _close(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    with contextlib.suppress(Exception):
        conn[1].close()


async def frozen_credentials(client: Any) -> Credentials | None:
    """The client's current credentials, or None (anonymous, or not found)."""
    signer = getattr(client, "_request_signer", None)
    creds = getattr(signer, "_credentials", None)
    if creds is None:
        return None
    frozen = creds.get_frozen_credentials()
    if inspect.isawaitable(frozen):
        frozen = await frozen
    if not frozen.access_key or not frozen.secret_key:
        return None
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


def ssl_context(verify: Any) -> ssl.SSLContext:
    """What botocore's `verify` means: True/None (system CAs), False, or a CA bundle path."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    cafile = verify if isinstance(verify, str) else os.environ.get("AWS_CA_BUNDLE") or None
    return ssl.create_default_context(cafile=cafile)
