"""Azure's conditional Put Blob without the SDK's per-request cost.

A flush is two conditional writes (the segment's create, the head's
compare-and-swap). Through azure-storage-blob's aio client each costs about
2.6-3.0 ms of client CPU (pipeline policies, signing, response
deserialization); `FastWrites` sends the same Put Blob through obstore (the
Rust `object_store` crate) for about a tenth of that: `mode="create"` is
`If-None-Match: *`, `mode={"e_tag": ...}` is `If-Match`.

Sent once, judged by the status. The obstore client is built with
`max_retries=0`, so no answer is ever followed by a resend that could meet
its own success. object_store's error class says little (a 412 on a create
is an `AlreadyExistsError`, a 409 on a replace too), so the status and the
Azure error `Code` are read from the error's text and judged by
`azerrors.answered`, the table the SDK path uses. An error with no readable
status is ambiguous unless it says the connection was never made. The
obstore error itself is dropped, only the status and code travel on: an
error body may echo the request.

It copies the SDK client: the account, the endpoint and the shared key or
SAS token are read from the `BlobServiceClient` that adlfs built, and only
where they map with certainty (see `AzureBase._fast_writes` in `azclient`);
anything else (a credential object, anonymous access, proxies, a server-side
timeout, an environment obstore would read) stays on the SDK path.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durable_obj.stores import obstore_errors, obstore_runtime
from durable_obj.stores.azerrors import answered

#: obstore reads every AZURE_* variable (a bearer token, a customer key, the
#: emulator switch ...) and would then send something else than the SDK; these
#: two it does not use, or they are always given explicitly here.
_HARMLESS_ENV = frozenset({"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME"})
#: Proxies, which reqwest and aiohttp may not pick up alike.
_PROXY_ENV = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"})
#: Over HTTPS, a CA bundle the SDK would trust and obstore not (or the reverse).
_TLS_ENV = frozenset({"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"})
#: Keys whose URL is the same in obstore and the SDK (no percent-encoding at all).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*")
_SHARED: dict[tuple[Any, ...], FastWrites] = {}
_SHARED_LOCK = threading.Lock()


def environment_differs(scheme: str) -> bool:
    """Whether the environment sets something obstore would apply and the SDK
    not (or not alike), for an endpoint of this scheme."""
    for name, value in os.environ.items():
        upper = name.upper()
        if not value:
            continue
        if upper.startswith("AZURE_") and upper not in _HARMLESS_ENV:
            return True
        if upper in _PROXY_ENV or (scheme == "https" and upper in _TLS_ENV):
            return True
    return False


@dataclass(frozen=True)
class Account:
    """Where and as whom to write: the endpoint (scheme://host[:port][/path],
    no query, no trailing slash) and one credential, a shared key or a SAS."""

    endpoint: str
    name: str
    key: str | None = None
    sas: str | None = None

    def __repr__(self) -> str:  # never the key or the token
        return f"Account({self.endpoint!r}, {self.name!r})"


@dataclass(frozen=True)
class Answer:
    """How one conditional Put Blob ended: the new ETag, or a judgement
    (`kind` as in `azerrors.answered`, or unreachable | network)."""

    etag: str | None
    kind: str = ""
    code: str = ""
    status: int | None = None

    def describe(self) -> str:
        parts = [p for p in (self.code, f"HTTP {self.status}" if self.status else "") if p]
        return ", ".join(parts) or self.kind


def judge(text: str) -> Answer:
    """What a failed obstore Put Blob means, from its error text."""
    got = obstore_errors.read(text)
    if got.status is not None:
        return Answer(None, answered(got.status, got.code), got.code, got.status)
    if got.unanswered == "unreachable":
        return Answer(None, "unreachable", "connection refused or failed")
    return Answer(None, "network", got.unanswered)


def plain_key(full_key: str) -> bool:
    """Whether obstore and the SDK spell this key's URL alike."""
    return _PLAIN_KEY.fullmatch(full_key) is not None


class FastWrites:
    """Conditional Put Blob to one container; see the module docstring."""

    def __init__(
        self, account: Account, container: str, connect_timeout: float, read_timeout: float
    ) -> None:
        self.account = account
        self._container = container
        self._connect = connect_timeout
        self._total = connect_timeout + read_timeout
        self._client: Any = None
        self._lock = threading.Lock()

    @classmethod
    def shared(
        cls, account: Account, container: str, connect_timeout: float, read_timeout: float
    ) -> FastWrites:
        """The process's one `FastWrites` for this account and container, so the
        stores of many objects build and pool one client."""
        key = (account, container, connect_timeout, read_timeout)
        with _SHARED_LOCK:
            found = _SHARED.get(key)
            if found is None:
                found = _SHARED[key] = cls(account, container, connect_timeout, read_timeout)
            return found

    def _store(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build()
            return self._client

    def _build(self) -> Any:
        store = importlib.import_module("obstore.store")
        account = self.account
        config: dict[str, Any] = {
            "account_name": account.name,
            "endpoint": account.endpoint,
            # Explicit, so no AZURE_* variable of the environment can change them.
            "use_emulator": False,
            "use_fabric_endpoint": False,
            "use_azure_cli": False,
            "skip_signature": False,
            "disable_tagging": True,
        }
        if account.key is not None:
            config["account_key"] = account.key
        elif account.sas is not None:
            config["sas_key"] = account.sas
        else:
            raise ValueError("no credential")
        return store.AzureStore(
            self._container,
            config=config,
            client_options={
                "allow_http": account.endpoint.startswith("http://"),
                "connect_timeout": timedelta(seconds=self._connect),
                "timeout": timedelta(seconds=self._total),
            },
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=self._total)},
        )

    async def put(self, full_key: str, data: bytes, etag: str | None) -> Answer | None:
        """One Put Blob of `full_key`, `If-None-Match: *` (etag None) or
        `If-Match: etag`; None if it was not sent (the SDK must send it)."""
        if not plain_key(full_key) or not obstore_runtime.usable():
            return None  # the SDK sends it (a forked child: `obstore_runtime`)
        obstore = importlib.import_module("obstore")
        errors = importlib.import_module("obstore.exceptions")
        mode: Any = "create" if etag is None else {"e_tag": etag}
        try:
            client = self._store()
        except Exception:
            return None  # not built: the SDK sends it
        try:
            result = await obstore.put_async(client, full_key, data, mode=mode, use_multipart=False)
        except (errors.InvalidPathError, errors.UnknownConfigurationKeyError, TypeError):
            return None  # refused before anything was sent
        except Exception as exc:
            # Only the judgement leaves this block; see the module docstring.
            return judge(f"{exc}\n{exc!r}")
        tag = result.get("e_tag")
        if not tag:
            return Answer(None, "network", "no ETag in the answer")
        return Answer(str(tag))
