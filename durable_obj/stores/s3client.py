"""An S3 store's client and how it is judged: the s3fs filesystem and its
aiobotocore client built from `storage_options` (botocore's own retries off:
a conditional write is sent once, see `durable_obj.stores.s3`), how a failed
call reads as a `BackendError` or `StoreAmbiguous`, and whether the batched
reads (`s3reads`) and obstore writes (`s3writes`) may stand in for the client.
`S3Store` adds the operations.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING, Any

from durable_obj.errors import BackendError, InvalidArgument, StoreAmbiguous
from durable_obj.stores import ioloop, s3reads, s3static, s3writes
from durable_obj.stores.cloud import CloudStore
from durable_obj.stores.s3errors import Failure, classify, safe_endpoint

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("durable_obj.stores.s3")


def _make_fs(opts: dict[str, Any], url: str) -> Any:
    s3fs = importlib.import_module("s3fs")
    try:
        # on the loop the store's first calls ran on (`_first_loop`), unless
        # the options name one
        return s3fs.S3FileSystem(**{"loop": ioloop.loop(), **opts})
    except (TypeError, ValueError, KeyError) as exc:
        raise InvalidArgument(
            f"{url}: storage_options were refused by s3fs "
            f"({type(exc).__name__}); check their names and types. "
            f"Nothing was touched."
        ) from exc


class S3Base(CloudStore):
    """The client side of `S3Store`: setup, errors, and the faster transports."""

    plain_options = s3static.OPTIONS

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        opts = self._take_root(root, storage_options)
        config = dict(opts.pop("config_kwargs", None) or {})
        # One attempt per botocore call: see the s3 module's docstring.
        config["retries"] = {"total_max_attempts": 1, "mode": "standard"}
        opts["config_kwargs"] = config
        client_kwargs = opts.get("client_kwargs") or {}
        self._endpoint = safe_endpoint(
            opts.get("endpoint_url") or client_kwargs.get("endpoint_url")
        )
        #: Reads that need no client, where the options leave it nothing to
        #: look up (`s3static`); the client is then made on first need.
        self._static = s3static.static_reads(opts, self._bucket)
        self._static_creds = s3static.static_credentials(opts) if self._static else None
        self._share(opts, _make_fs, lazy=self._static is not None)
        self._fast: s3reads.FastReads | None = None
        self._fast_checked = False
        self._writes: s3writes.FastWrites | None = None
        self._client_writes = os.environ.get("DURABLE_OBJ_S3_WRITES", "").lower() == "client"
        self._writes_checked = self._client_writes
        #: (client, its credentials object, transport, frozen credentials):
        #: what a PUT may be sent with from the calling thread (`writes_here`).
        self._here: tuple[Any, Any, s3writes.FastWrites, s3reads.Credentials] | None = None

    def _fs_classes(self) -> tuple[type, ...]:
        s3fs = importlib.import_module("s3fs")
        session = importlib.import_module("aiobotocore.session")
        # s3fs hands the options it does not name to botocore's session.
        return (s3fs.S3FileSystem, session.AioSession)

    def _first_loop(self) -> asyncio.AbstractEventLoop:
        """Before the client is made: the process's S3 IO loop (`ioloop`),
        without importing fsspec; the client is made on that loop too."""
        return ioloop.loop()

    # -- plumbing -------------------------------------------------------
    async def _s3(self) -> Any:
        self._check_open()
        try:
            return await self._fs.set_session()
        except Exception as exc:
            raise BackendError(
                f"{self.url}: cannot set up an S3 client ({type(exc).__name__}); check "
                f"storage_options (profile, endpoint_url, client_kwargs, config_kwargs)."
            ) from exc

    def _explain(
        self, action: str, key: str, exc: BaseException | None, failure: Failure
    ) -> BackendError:
        where = f"{action} {key!r} in {self.url}"
        if isinstance(exc, BackendError):
            return BackendError(str(exc))  # already ours (a closed store, a bad key)
        if failure.kind == "auth":
            return BackendError(
                f"{where} was refused ({failure.describe()}): check the S3 credentials in "
                f"storage_options (key/secret, token or profile) and that they may read and "
                f"write bucket {self._bucket!r} at {self._endpoint}."
            )
        if failure.kind == "no_credentials":
            return BackendError(
                f"{where} failed: no S3 credentials were found. Pass key and secret (or a "
                f"profile) in storage_options, or anon=True for a public bucket "
                f"{self._bucket!r}."
            )
        if failure.kind == "missing_bucket":
            return BackendError(
                f"{where} failed: bucket {self._bucket!r} does not exist at {self._endpoint}. "
                f"Create the bucket, or fix the bucket name in the URL."
            )
        if failure.kind == "unreachable":
            return BackendError(
                f"{where} failed: cannot connect to {self._endpoint}. Check endpoint_url and "
                f"that the server for bucket {self._bucket!r} is reachable."
            )
        return BackendError(f"{where} failed ({failure.describe()}); nothing was changed by it.")

    def _error(self, action: str, key: str, exc: BaseException) -> BackendError:
        return self._explain(action, key, exc, classify(exc))

    def _transient(self, exc: BaseException) -> bool:
        return classify(exc).transient

    async def _missing(self, exc: BaseException) -> bool:
        return classify(exc).kind == "missing_key"

    def _conditional_fail(
        self, action: str, key: str, exc: BaseException | None, failure: Failure | None = None
    ) -> BackendError:
        """The error for a conditional write that did not report success."""
        if failure is None:
            assert exc is not None
            failure = classify(exc)
        if failure.kind in ("conflict", "server", "network"):
            return StoreAmbiguous(
                f"{action} {key!r} in {self.url}: the outcome is unknown "
                f"({failure.describe()}); read the key back to learn whether it applied."
            )
        return self._explain(action, key, exc, failure)

    # -- faster transports ---------------------------------------------
    def prepare(self) -> None:
        """The client, and the transports below, built now (`Store.prepare`):
        botocore's service model takes ~0.1 s of Python, and obstore's
        client ~45 ms in which it holds the GIL. Sends no request."""
        self._run(self._prepare)

    async def _prepare(self) -> None:
        s3 = await self._s3()
        await self._fast_reads()
        writes = await self._fast_writes()
        creds = await s3reads.frozen_credentials(s3) if writes is not None else None
        if writes is not None and creds is not None:
            writes.client(creds)

    def _plain_client(self) -> bool:
        """Whether a SigV4 request of our own (batched reads, obstore writes)
        is exactly what the client would send: no anonymous access,
        requester-pays, extra request arguments, other signer or proxy."""
        fs = self._fs
        config = dict(fs.config_kwargs or {})
        return not (
            fs.anon
            or fs.requester_pays
            or fs.s3_additional_kwargs
            or config.get("signature_version") not in (None, "s3v4", "v4")
            or s3reads.proxies_configured(config)
        )

    async def _presigned_target(self, operation: str) -> s3reads.Target | None:
        """Where and how the client sends `operation`, read off a URL it presigns."""
        s3 = await self._s3()
        probe = self._key("durable-obj-probe")
        url = await s3.generate_presigned_url(
            operation, Params={"Bucket": self._bucket, "Key": probe}, ExpiresIn=60
        )
        region = s3.meta.region_name or "us-east-1"
        return s3reads.Target.from_presigned(str(url), probe, region)

    async def _read_credentials(self) -> s3reads.Credentials | None:
        """What the batched reader signs with: the given keys (`s3static`),
        else the client's, frozen now."""
        if self._static_creds is not None:
            return self._static_creds
        return await s3reads.frozen_credentials(await self._s3())

    async def _fast_reads(self) -> s3reads.FastReads | None:
        """The batched reader for this store, or None where it would not be exact."""
        if self._static is not None:
            return self._static
        if self._fast_checked:
            return self._fast
        self._fast_checked = True
        fs = self._fs
        config = dict(fs.config_kwargs or {})
        if not self._plain_client():
            return None
        try:
            target = await self._presigned_target("get_object")
            if target is None:
                return None
            context = None
            if target.scheme == "https":
                context = s3reads.ssl_context((fs.client_kwargs or {}).get("verify"))
            timeout = float(config.get("read_timeout") or 60)
            self._fast = s3reads.FastReads(target, context, timeout)
        except Exception as exc:  # only an accelerator: the client path still works
            log.debug("%s: batched reads unavailable (%s)", self.url, type(exc).__name__)
        return self._fast

    async def _fast_writes(self) -> s3writes.FastWrites | None:
        """The obstore transport for this store, or None where it would not be exact."""
        if self._writes_checked:
            return self._writes
        self._writes_checked = True
        fs = self._fs
        config = dict(fs.config_kwargs or {})
        verify = (fs.client_kwargs or {}).get("verify")
        if not self._plain_client():
            return None
        try:
            target = await self._presigned_target("put_object")
            if target is None or s3writes.environment_differs(target.scheme):
                return None
            if target.scheme == "https" and verify not in (None, True):
                return None  # a CA bundle or verify=False: botocore's TLS, not obstore's
            self._writes = s3writes.FastWrites.shared(
                target,
                self._bucket,
                float(config.get("connect_timeout") or 60),
                float(config.get("read_timeout") or 60),
            )
        except Exception as exc:  # the client path still works
            log.debug("%s: obstore writes unavailable (%s)", self.url, type(exc).__name__)
        return self._writes

    def note_static(
        self, s3: Any, writes: s3writes.FastWrites, creds: s3reads.Credentials | None
    ) -> None:
        """After a PUT on the IO loop froze `creds` from the client `s3`:
        if the client's credentials never refresh (given keys, the
        environment, a profile's static keys), later PUTs may send them
        from the calling thread (`writes_here`)."""
        raw = _signer_credentials(s3)
        if creds is not None and raw is not None and type(raw) in _static_credentials():
            self._here = (s3, raw, writes, creds)

    def static_writes(self) -> tuple[s3writes.FastWrites, s3reads.Credentials] | None:
        """The obstore transport and the given keys, for a store whose
        options leave the client nothing to look up (`s3static`): its PUTs
        go where its GETs do, signed with those keys, from the calling
        thread; None otherwise (or with `DURABLE_OBJ_S3_WRITES=client`)."""
        static, creds = self._static, self._static_creds
        if static is None or creds is None or self._client_writes:
            return None
        config = dict(self._making[0].get("config_kwargs") or {})
        writes = s3writes.FastWrites.shared(
            static.target,
            self._bucket,
            float(config.get("connect_timeout") or 60),
            float(config.get("read_timeout") or 60),
        )
        return writes, creds

    def writes_here(self) -> tuple[s3writes.FastWrites, s3reads.Credentials] | None:
        """The obstore transport and the credentials to send a PUT with from
        the calling thread, skipping the hop to fsspec's IO loop and back:
        only while the file system still holds the client they were frozen
        from, signing with the same static credentials object (a refreshed
        session or refreshable credentials go through the loop, which
        freezes them again before every PUT)."""
        here = self._here
        if here is None:
            return None
        s3, raw, writes, creds = here
        if getattr(self._fs, "_s3", None) is not s3 or _signer_credentials(s3) is not raw:
            self._here = None
            return None
        return writes, creds


def _signer_credentials(s3: Any) -> Any:
    return getattr(getattr(s3, "_request_signer", None), "_credentials", None)


def _static_credentials() -> tuple[type, ...]:
    """The credential classes that hold fixed keys (never refreshed)."""
    ours = importlib.import_module("aiobotocore.credentials")
    theirs = importlib.import_module("botocore.credentials")
    return (ours.AioCredentials, theirs.Credentials)
