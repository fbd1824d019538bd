"""S3's conditional PUTs, answer by answer, on both transports.

A loopback stub answers every request with one status (or drops the
connection, or never answers); the S3 store, through obstore (s3writes) and
through aiobotocore (`DURABLE_OBJ_S3_WRITES=client`), must read each the
same way: 412 (and 404 on a replace) is a lost precondition (None); 409,
5xx, a timeout and a dropped connection are ambiguous (StoreAmbiguous, read
back by the caller); a refused connection, a missing bucket and a refused
credential are plain errors. Every conditional PUT is sent exactly once, and
no error, nor anything in its chain, carries the secret key or the session
token, even when the server's answer echoes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from durable_obj.errors import BackendError, StoreAmbiguous
from durable_obj.stores import Store, Version, open_store
from tests.stores.test_cloud_stores import _chain, _Stub, _unanswered

SECRET = "stub-secret-value-0123456789"
TOKEN = "stub-session-token-value-abcdef"


def _error(code: str, extra: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>stub</Message>{extra}</Error>"
    ).encode()


#: A refusal that echoes the request, as AWS's SignatureDoesNotMatch does
#: (its CanonicalRequest lists the signed headers, the session token too).
_ECHO = (
    "<CanonicalRequest>PUT /stub-bucket/ns/head.json\n\nhost:127.0.0.1\n"
    f"x-amz-security-token:{TOKEN}\n</CanonicalRequest><SecretEcho>{SECRET}</SecretEcho>"
)


def _options(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "key": "stub-key",
        "secret": SECRET,
        "token": TOKEN,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
        "retries": 2,
        **extra,
    }


@pytest.fixture(params=["obstore", "client"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "client":
        monkeypatch.setenv("DURABLE_OBJ_S3_WRITES", "client")
    else:
        monkeypatch.delenv("DURABLE_OBJ_S3_WRITES", raising=False)
    yield str(request.param)


def _assert_clean(exc: BaseException) -> None:
    for item in _chain(exc):
        for text in (str(item), repr(item), repr(getattr(item, "args", ()))):
            assert SECRET not in text, text
            assert TOKEN not in text, text


def _used_obstore(store: Store) -> bool:
    static = getattr(store, "static_writes", None)
    return getattr(store, "_writes", None) is not None or (static is not None and bool(static()))


#: (status, S3 error code) -> (create's outcome, replace's outcome):
#: None (the precondition failed), "ambiguous", or "error" (plain BackendError).
CASES: dict[str, tuple[int, bytes, str, str]] = {
    "412": (412, _error("PreconditionFailed"), "none", "none"),
    "404-key": (404, _error("NoSuchKey"), "error", "none"),
    "404-bucket": (404, _error("NoSuchBucket"), "error", "error"),
    "409-conflict": (409, _error("ConditionalRequestConflict"), "ambiguous", "ambiguous"),
    "409-bare": (409, b"", "ambiguous", "ambiguous"),
    "500": (500, _error("InternalError"), "ambiguous", "ambiguous"),
    "503": (503, _error("SlowDown"), "ambiguous", "ambiguous"),
    "403": (403, _error("SignatureDoesNotMatch", _ECHO), "error", "error"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_answer_on_each_transport(loopback_only_env: None, transport: str, case: str) -> None:
    status, body, on_create, on_replace = CASES[case]
    stub = _Stub(status, body, "application/xml")
    store = open_store("s3://stub-bucket/ns", _options(stub.endpoint))
    try:
        for write, expected in (
            (lambda: store.create("head.json", b"x"), on_create),
            (lambda: store.replace("head.json", b"y", Version('"0x1"')), on_replace),
        ):
            before = len(stub.requests)
            if expected == "none":
                assert write() is None
            else:
                with pytest.raises(BackendError) as caught:
                    write()
                assert isinstance(caught.value, StoreAmbiguous) == (expected == "ambiguous")
                assert "stub-bucket" in str(caught.value) or "head.json" in str(caught.value)
                _assert_clean(caught.value)
                if case == "404-bucket":
                    assert "does not exist" in str(caught.value)
                if case == "403":
                    assert "credential" in str(caught.value).lower()
            # Sent exactly once: a resend could meet its own success.
            assert len(stub.requests) == before + 1, stub.requests
            assert stub.requests[-1].startswith("PUT /stub-bucket/ns/head.json")
        assert _used_obstore(store) == (transport == "obstore")
    finally:
        store.close()
        stub.close()


#: The client path is left out of "timeout": aiobotocore did not give up
#: within a minute on a silent server despite read_timeout=1 (a finding of
#: its own, not this transport's).
@pytest.mark.parametrize(
    ("transport", "how"),
    [
        ("obstore", "dropped"),
        ("obstore", "timeout"),
        ("obstore", "refused"),
        ("client", "dropped"),
        ("client", "refused"),
    ],
    indirect=["transport"],
)
def test_no_answer_on_each_transport(loopback_only_env: None, transport: str, how: str) -> None:
    timeouts = {"config_kwargs": {"connect_timeout": 1, "read_timeout": 1}}
    with _unanswered(how) as (endpoint, stub):
        store = open_store("s3://stub-bucket/ns", _options(endpoint, **timeouts))
        try:
            for write in (
                lambda: store.create("head.json", b"x"),
                lambda: store.replace("head.json", b"y", Version('"0x1"')),
            ):
                before = len(stub.requests) if stub else 0
                with pytest.raises(BackendError) as caught:
                    write()
                # Refused: nothing was sent, so nothing can have applied.
                assert isinstance(caught.value, StoreAmbiguous) == (how != "refused")
                assert "stub-bucket" in str(caught.value)
                _assert_clean(caught.value)
                if stub is not None and transport == "obstore":
                    assert len(stub.requests) == before + 1
                elif stub is not None:
                    # aiohttp resends a PUT whose connection dropped (a known
                    # hazard of the client path, which the read-back settles).
                    assert len(stub.requests) >= before + 1
            assert _used_obstore(store) == (transport == "obstore")
        finally:
            store.close()


@pytest.mark.parametrize(
    "options",
    [
        {"anon": True},
        {"requester_pays": True},
        {"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
        {"config_kwargs": {"proxies": {"http": "http://127.0.0.1:9"}}},
    ],
    ids=["anon", "requester-pays", "additional-kwargs", "proxies"],
)
def test_options_obstore_cannot_copy_keep_the_client(
    loopback_only_env: None, options: dict[str, Any]
) -> None:
    stub = _Stub(412, _error("PreconditionFailed"), "application/xml")
    opts = _options(stub.endpoint, **options)
    if opts.get("anon"):
        for name in ("key", "secret", "token"):
            opts.pop(name)
    if "proxies" in opts.get("config_kwargs", {}):
        opts["config_kwargs"] = {"proxies": {"http": stub.endpoint}}  # the stub as the proxy
    store = open_store("s3://stub-bucket/ns", opts)
    try:
        assert store.create("head.json", b"x") is None
        assert len(stub.requests) == 1
        assert not _used_obstore(store)
    finally:
        store.close()
        stub.close()


def test_an_environment_obstore_would_read_keeps_the_client(
    loopback_only_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SERVER_SIDE_ENCRYPTION", "aws:kms")
    stub = _Stub(412, _error("PreconditionFailed"), "application/xml")
    store = open_store("s3://stub-bucket/ns", _options(stub.endpoint))
    try:
        assert store.create("head.json", b"x") is None
        assert not _used_obstore(store)
    finally:
        store.close()
        stub.close()
