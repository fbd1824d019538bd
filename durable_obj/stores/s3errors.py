"""How an S3 call failed, in the terms the S3 store decides on: a failed
precondition, a missing key or bucket, refused credentials, or an answer whose
outcome is unknown (conflict, server, network). Kept apart from `s3.py` so the
store reads as its protocol, and this as its error table."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSecurity",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "UnrecognizedClientException",
    }
)
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed"}
)


def safe_endpoint(endpoint: str | None) -> str:
    """The endpoint for messages, without any userinfo."""
    if not endpoint:
        return "the default AWS S3 endpoint"
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Failure:
    """What went wrong with one S3 call, in the terms the store decides on."""

    __slots__ = ("code", "kind", "status")

    def __init__(self, kind: str, code: str = "", status: int | None = None) -> None:
        #: not_modified | precondition | missing_key | missing_bucket | auth | no_credentials |
        #: unreachable | conflict | server | network | other
        self.kind = kind
        self.code = code
        self.status = status

    @property
    def transient(self) -> bool:
        return self.kind in ("unreachable", "conflict", "server", "network")

    def describe(self) -> str:
        if self.code and self.status:
            return f"{self.code}, HTTP {self.status}"
        return self.code or (f"HTTP {self.status}" if self.status else self.kind)


def answered(status: int | None, code: str) -> Failure:
    """What an S3 error answer (its HTTP status and error `Code`) means."""
    if status == 304:
        return Failure("not_modified", code, status)  # a conditional GET's "unchanged"
    if code == "PreconditionFailed" or status == 412:
        return Failure("precondition", code, status)
    if code == "ConditionalRequestConflict" or status == 409:
        return Failure("conflict", code, status)
    if code == "NoSuchBucket":
        return Failure("missing_bucket", code, status)
    if code in ("NoSuchKey", "NotFound") or status == 404:
        return Failure("missing_key", code, status)
    if code in _AUTH_CODES or status in (401, 403):
        return Failure("auth", code, status)
    if code in _THROTTLE_CODES or (status is not None and status >= 500):
        return Failure("server", code, status)
    return Failure("other", code, status)


def classify(exc: BaseException) -> Failure:
    # botocore and s3fs ship no type information: imported by name, used as Any.
    bex = importlib.import_module("botocore.exceptions")

    if isinstance(exc, bex.ClientError):
        response: dict[str, Any] = dict(exc.response or {})
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        meta = response.get("ResponseMetadata") or {}
        raw_status = meta.get("HTTPStatusCode")
        return answered(int(raw_status) if raw_status is not None else None, code)
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return Failure("no_credentials", type(exc).__name__)
    if isinstance(exc, bex.EndpointConnectionError):
        # Raised when the connection could not be made: the request was never sent.
        return Failure("unreachable", type(exc).__name__)
    if isinstance(
        exc,
        bex.ConnectionError
        | bex.HTTPClientError
        | bex.ResponseStreamingError
        | bex.ChecksumError
        | bex.IncompleteReadError
        | OSError
        | asyncio.TimeoutError,
    ):
        return Failure("network", type(exc).__name__)
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientError):
            return Failure("network", type(exc).__name__)
    except ImportError:  # pragma: no cover - aiobotocore always brings aiohttp
        pass
    return Failure("other", type(exc).__name__)
