"""An Azure store's client and how it is judged: the adlfs filesystem and the
container client of its async `BlobServiceClient`, built from
`storage_options`; per-call keywords (no SDK retries, the user's timeouts);
how a failed call reads as a `BackendError` or `StoreAmbiguous`; and whether
obstore (`azwrites`) may send a Put Blob exactly as the SDK would.
`AzureStore` adds the operations.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from durable_obj.errors import BackendError, InvalidArgument, StoreAmbiguous
from durable_obj.stores import azerrors, azwrites
from durable_obj.stores.azerrors import code_of, kind_of
from durable_obj.stores.cloud import CloudStore

log = logging.getLogger("durable_obj.stores.azure")

#: Download request size: the first GET and every later range.
GET_SIZE = 4 * 1024 * 1024


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


class AzureBase(CloudStore):
    """The client side of `AzureStore`: setup, errors, and the obstore transport."""

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
        return kind_of(exc) in ("server", "network", "unreachable", "precondition")

    async def _missing(self, exc: BaseException) -> bool:
        return kind_of(exc) == "missing_key"

    def _error(self, action: str, key: str, exc: BaseException) -> BackendError:
        if isinstance(exc, BackendError):
            return BackendError(str(exc))  # already ours (a closed store, a bad key)
        code = code_of(exc)
        status = getattr(exc, "status_code", None)
        detail = ", ".join(p for p in (code, f"HTTP {status}" if status else "") if p)
        return self._failed(action, key, kind_of(exc), detail or type(exc).__name__)

    def _failed(self, action: str, key: str, kind: str, detail: str) -> BackendError:
        """The error for a call that failed so (`kind` as `kind_of` says)."""
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
        kind = kind_of(exc)
        if azerrors.ambiguous(kind):
            return self._unknown(action, key, code_of(exc) or type(exc).__name__)
        return self._error(action, key, exc)

    def _unknown(self, action: str, key: str, detail: str) -> StoreAmbiguous:
        return StoreAmbiguous(
            f"{action} {key!r} in {self.url}: the outcome is unknown ({detail}); read the "
            f"key back to learn whether it applied."
        )

    # -- obstore transport ----------------------------------------------
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
