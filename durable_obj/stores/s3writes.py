"""S3's conditional PUTs without botocore's per-request cost.

A flush is two conditional PUTs (the segment's create, the head's
compare-and-swap). Through aiobotocore each costs about 1 ms of client CPU
(event hooks, endpoint rules, signing, response parsing), which made a flush
on S3 slower than chdb.durable's. `FastWrites` sends the same PUTs through
obstore (the Rust `object_store` crate): `mode="create"` is
`If-None-Match: *`, `mode={"e_tag": ...}` is `If-Match`.

Sent once, judged by the status. The obstore client is built with
`max_retries=0`, so no answer is ever followed by a resend that could meet
its own success. object_store raises one `AlreadyExistsError` for HTTP 409
and 412 alike (and a `PreconditionError` for a 404 on a bucket that does
not exist), so the class of its error decides nothing here: the status and
the S3 error `Code` are read from the error's text and judged by
`s3errors.answered`, the same table the client path uses. An error with no
readable status is ambiguous unless it says the connection was never made.
The obstore error itself is dropped: an S3 error body may echo the request
(a `SignatureDoesNotMatch` carries the canonical request, session token
included), so only the status and code travel on.

Like `s3reads`, it copies the client: the address from a URL the client
itself presigned, the region from the client, the credentials frozen from
the client before every PUT (a refresh builds a new obstore client; the
stores of one process share them per address and bucket), or once for
static keys, whose PUTs then go out from the calling thread (`put_now`). The store falls
back to the client where this would not be exact; see `S3Base._fast_writes`
(`s3client`).
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durable_obj.stores import obstore_errors, obstore_runtime
from durable_obj.stores.s3errors import Failure, answered

if TYPE_CHECKING:
    from durable_obj.stores.s3reads import Credentials, Target

#: Environment variables that would make obstore's PUT differ from botocore's
#: (obstore reads AWS_* from the environment; botocore ignores these).
_DIFFERENT_ENV = (
    "AWS_SERVER_SIDE_ENCRYPTION",
    "AWS_SSE_KMS_KEY_ID",
    "AWS_SSE_BUCKET_KEY_ENABLED",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
    "AWS_PROXY_URL",
    "AWS_PROXY_CA_CERTIFICATE",
    "AWS_PROXY_EXCLUDES",
)
#: ... and over HTTPS: botocore trusts this bundle alone, obstore adds to the system's.
_TLS_ENV = ("AWS_CA_BUNDLE",)
#: obstore clients kept per address, for as many sets of credentials.
MAX_CLIENTS = 4
_SHARED: dict[tuple[Any, ...], FastWrites] = {}
_SHARED_LOCK = threading.Lock()


def environment_differs(scheme: str) -> bool:
    """Whether the environment sets something obstore would apply and botocore
    not, for an endpoint of this scheme."""
    names = _DIFFERENT_ENV + (_TLS_ENV if scheme == "https" else ())
    return any(os.environ.get(name) for name in names)


@dataclass(frozen=True)
class Sent:
    """The answer to one conditional PUT: the new ETag, or what failed."""

    etag: str | None
    failure: Failure | None


def judge(text: str) -> Failure:
    """What a failed obstore PUT means, from its error text (see the module docstring)."""
    got = obstore_errors.read(text)
    if got.status is not None:
        return answered(got.status, got.code)
    if got.unanswered == "unreachable":
        return Failure("unreachable", "connection refused or failed")
    return Failure("network", got.unanswered)


class FastWrites:
    """Conditional PUTs to one bucket; see the module docstring."""

    def __init__(
        self, target: Target, bucket: str, connect_timeout: float, read_timeout: float
    ) -> None:
        if target.path_prefix == "/":
            virtual = True
        elif target.path_prefix == f"/{bucket}/":
            virtual = False
        else:
            raise ValueError("an endpoint with a path")
        self.target = target
        self._bucket = bucket
        self._virtual = virtual
        self._connect = connect_timeout
        self._total = connect_timeout + read_timeout
        #: obstore clients by the credentials they sign with, newest last.
        self._clients: dict[Credentials, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def shared(
        cls, target: Target, bucket: str, connect_timeout: float, read_timeout: float
    ) -> FastWrites:
        """The process's one `FastWrites` for this address and bucket, so the
        stores of many objects build (about 10-20 ms) and pool one client."""
        key = (target, bucket, connect_timeout, read_timeout)
        with _SHARED_LOCK:
            found = _SHARED.get(key)
            if found is None:
                found = _SHARED[key] = cls(target, bucket, connect_timeout, read_timeout)
            return found

    def client(self, creds: Credentials) -> Any:
        """The obstore client for these credentials (built again when they change)."""
        with self._lock:
            client = self._clients.get(creds)
            if client is None:
                client = self._build(creds)
                self._clients[creds] = client
                while len(self._clients) > MAX_CLIENTS:
                    del self._clients[next(iter(self._clients))]  # the oldest
            return client

    def _build(self, creds: Credentials) -> Any:
        store = importlib.import_module("obstore.store")
        target = self.target
        config: dict[str, Any] = {
            "endpoint": f"{target.scheme}://{target.host}",
            "region": target.region,
            "virtual_hosted_style_request": self._virtual,
            "access_key_id": creds.access_key,
            "secret_access_key": creds.secret_key,
            # Explicit, so no AWS_* variable of the environment can change them.
            "conditional_put": "etag",
            "skip_signature": False,
            "request_payer": False,
        }
        if creds.token:
            config["session_token"] = creds.token
        return store.S3Store(
            self._bucket,
            config=config,
            client_options={
                "allow_http": target.scheme == "http",
                "connect_timeout": timedelta(seconds=self._connect),
                "timeout": timedelta(seconds=self._total),
            },
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=self._total)},
        )

    async def put(
        self, full_key: str, data: bytes, condition: dict[str, str], creds: Credentials
    ) -> Sent | None:
        """One conditional PUT of `full_key`; None if it was not sent (the
        client must send it)."""
        obstore = importlib.import_module("obstore")
        errors = importlib.import_module("obstore.exceptions")
        started = self._start(condition, creds)
        if started is None:
            return None  # not built: the client sends it
        client, mode = started
        try:
            result = await obstore.put_async(client, full_key, data, mode=mode, use_multipart=False)
        except (errors.InvalidPathError, errors.UnknownConfigurationKeyError, TypeError):
            return None  # refused before anything was sent
        except Exception as exc:
            # Only the judgement leaves this block; see the module docstring.
            return Sent(None, judge(f"{exc}\n{exc!r}"))
        return _answer(result)

    def put_now(
        self, full_key: str, data: bytes, condition: dict[str, str], creds: Credentials
    ) -> Sent | None:
        """`put` sent from the calling thread, waiting on obstore's own
        runtime: no hop to an event loop and back (`S3Store._sync_writes`)."""
        obstore = importlib.import_module("obstore")
        errors = importlib.import_module("obstore.exceptions")
        started = self._start(condition, creds)
        if started is None:
            return None
        client, mode = started
        try:
            result = obstore.put(client, full_key, data, mode=mode, use_multipart=False)
        except (errors.InvalidPathError, errors.UnknownConfigurationKeyError, TypeError):
            return None
        except Exception as exc:
            return Sent(None, judge(f"{exc}\n{exc!r}"))
        return _answer(result)

    def _start(self, condition: dict[str, str], creds: Credentials) -> tuple[Any, Any] | None:
        """(client, obstore put mode) for this condition; None if the client
        cannot be built."""
        mode: Any = "create" if "IfNoneMatch" in condition else {"e_tag": condition["IfMatch"]}
        if not obstore_runtime.usable():
            return None  # a forked child: the client sends it (`obstore_runtime`)
        try:
            return self.client(creds), mode
        except Exception:
            return None


def _answer(result: Any) -> Sent:
    etag = result.get("e_tag")
    if not etag:
        return Sent(None, Failure("network", "no ETag in the answer"))
    return Sent(str(etag), None)
