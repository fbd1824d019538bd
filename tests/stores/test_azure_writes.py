"""Azure's conditional Put Blob, answer by answer, on both transports.

A loopback stub answers every request with one status (or drops the
connection, or never answers); the Azure store, through obstore (azwrites)
and through the SDK (`DURABLE_OBJ_AZURE_WRITES=client`), must read each the
same way, by the one table in `azerrors`: 412 is a lost precondition (None);
409 BlobAlreadyExists too on a create; 404 on a replace (the blob is gone);
5xx, a timeout and a dropped connection are ambiguous (StoreAmbiguous, read
back by the caller); any other answer and a refused connection are plain
errors. Every conditional write through obstore is sent exactly once, and
no error either path raises, nor anything in its chain, carries the account
key or the SAS token, even when the server's answer echoes them (the SDK's
own errors quote the answer: `stores/secrets.py` cuts them out).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from durable_obj.errors import BackendError, StoreAmbiguous
from durable_obj.stores import Store, Version, open_store
from durable_obj.stores import azure as azure_store
from tests.stores.test_cloud_stores import _chain, _Stub, _unanswered

KEY = base64.b64encode(b"stub-account-key-never-a-real-one-0123456789").decode()
SAS_SIG = "c3R1Yi1zYXMtc2lnbmF0dXJlLXZhbHVl"
SAS = f"sv=2021-08-06&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00%3A00%3A00Z&sig={SAS_SIG}"
SECRETS = (KEY, SAS_SIG)


def _error(code: str, extra: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>stub</Message>{extra}</Error>"
    ).encode()


#: A refusal that echoes what it was sent (the key and the SAS signature).
_ECHO = f"<AuthenticationErrorDetail>{KEY} {SAS}</AuthenticationErrorDetail>"


def _options(endpoint: str, **extra: Any) -> dict[str, Any]:
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName=stubaccount;AccountKey={KEY};"
        f"BlobEndpoint={endpoint}/stubaccount;"
    )
    return {"connection_string": conn, **extra}


def _sas_options(endpoint: str) -> dict[str, Any]:
    conn = f"BlobEndpoint={endpoint}/stubaccount;SharedAccessSignature={SAS}"
    return {"connection_string": conn}


@pytest.fixture(params=["obstore", "client"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "client":
        monkeypatch.setenv("DURABLE_OBJ_AZURE_WRITES", "client")
    else:
        monkeypatch.delenv("DURABLE_OBJ_AZURE_WRITES", raising=False)
    yield str(request.param)


def _assert_clean(exc: BaseException, secrets: tuple[str, ...] = SECRETS) -> None:
    for item in _chain(exc):
        for text in (str(item), repr(item), repr(getattr(item, "args", ()))):
            for secret in secrets:
                assert secret not in text, text


def _used_obstore(store: Store) -> bool:
    return getattr(store, "_writes", None) is not None


#: (status, error code, body extra) -> (create's outcome, replace's outcome):
#: "none" (the precondition failed), "ambiguous", or "error" (plain BackendError).
#: A 409 other than BlobAlreadyExists is a plain error, as the SDK path judged
#: it before obstore (azerrors.answered: "other"); Azure's 409s on Put Blob
#: (LeaseIdMissing, BlobImmutableDueToPolicy, ...) are refusals.
CASES: dict[str, tuple[int, str, str, str, str]] = {
    "412": (412, "ConditionNotMet", "", "none", "none"),
    "409-exists": (409, "BlobAlreadyExists", "", "none", "error"),
    "409-other": (409, "LeaseIdMissing", "", "error", "error"),
    "409-bare": (409, "", "", "error", "error"),
    "404-blob": (404, "BlobNotFound", "", "error", "none"),
    "404-container": (404, "ContainerNotFound", "", "error", "error"),
    "403": (403, "AuthenticationFailed", _ECHO, "error", "error"),
    "500": (500, "InternalError", _ECHO, "ambiguous", "ambiguous"),
    "503": (503, "ServerBusy", "", "ambiguous", "ambiguous"),
}


@pytest.mark.parametrize("credential", ["key", "sas"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_answer_on_each_transport(
    loopback_only_env: None, transport: str, case: str, credential: str
) -> None:
    status, code, extra, on_create, on_replace = CASES[case]
    body = _error(code, extra) if code else b""
    stub = _Stub(status, body, "application/xml", headers={"x-ms-error-code": code} if code else {})
    make = _options if credential == "key" else _sas_options
    store = open_store("az://stub-container/ns", make(stub.endpoint))
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
                assert "stub-container" in str(caught.value)
                assert "head.json" in str(caught.value)
                # nor anything in its chain, on either path: obstore's text is
                # dropped whole, the SDK's has the store's own credential cut
                # out (the stub also echoes the one it was not given)
                _assert_clean(caught.value, (KEY,) if credential == "key" else (SAS_SIG,))
                if transport == "obstore":
                    _assert_clean(caught.value)
                if case == "404-container":
                    assert "does not exist" in str(caught.value)
                if case == "403":
                    assert "credential" in str(caught.value).lower()
            # Sent exactly once: a resend could meet its own success.
            assert len(stub.requests) == before + 1, stub.requests
            sent = stub.requests[-1]
            assert sent.startswith("PUT /stubaccount/stub-container/ns/head.json")
            if credential == "sas":
                assert f"sig={SAS_SIG}" in sent
        assert _used_obstore(store) == (transport == "obstore")
    finally:
        store.close()
        stub.close()


@pytest.mark.parametrize("how", ["dropped", "timeout", "refused"])
def test_no_answer_on_each_transport(loopback_only_env: None, transport: str, how: str) -> None:
    timeouts = {"connection_timeout": 1, "read_timeout": 1}
    with _unanswered(how) as (endpoint, stub):
        store = open_store("az://stub-container/ns", _options(endpoint, **timeouts))
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
                assert "stub-container" in str(caught.value)
                _assert_clean(caught.value)
                if stub is not None and transport == "obstore":
                    assert len(stub.requests) == before + 1
                elif stub is not None:
                    assert len(stub.requests) >= before + 1
            assert _used_obstore(store) == (transport == "obstore")
        finally:
            store.close()


def _count_sdk_puts(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    real = store._put_small_sdk  # type: ignore[attr-defined]

    async def counted(key: str, *args: Any) -> Any:
        sent.append(key)
        return await real(key, *args)

    monkeypatch.setattr(store, "_put_small_sdk", counted)
    return sent


@pytest.mark.parametrize(
    "change",
    ["anon", "server-timeout", "env-token", "env-encryption-key", "proxy-env"],
)
def test_what_obstore_cannot_copy_keeps_the_sdk(
    loopback_only_env: None, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    monkeypatch.delenv("DURABLE_OBJ_AZURE_WRITES", raising=False)
    stub = _Stub(412, _error("ConditionNotMet"), "application/xml")
    opts = _options(stub.endpoint)
    if change == "anon":
        opts = {"account_name": "stubaccount", "anon": True}
        opts["connection_string"] = f"BlobEndpoint={stub.endpoint}/stubaccount;"
    elif change == "server-timeout":
        opts["timeout"] = 30
    elif change == "env-token":
        monkeypatch.setenv("AZURE_STORAGE_TOKEN", "stub-bearer-token")
    elif change == "env-encryption-key":
        monkeypatch.setenv("AZURE_ENCRYPTION_KEY", base64.b64encode(b"k" * 32).decode())
    else:
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    store = open_store("az://stub-container/ns", opts)
    try:
        sdk = _count_sdk_puts(store, monkeypatch)
        assert store.replace("head.json", b"x", Version('"0x1"')) is None
        assert sdk == ["head.json"]
        assert len(stub.requests) == 1
        assert not _used_obstore(store)
    finally:
        store.close()
        stub.close()


def test_a_credential_object_keeps_the_sdk(loopback_only_env: None) -> None:
    """A token credential (DefaultAzureCredential and the like) is not
    translated; the decision is made without sending anything."""

    class Credential:
        async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise AssertionError("never asked: nothing is sent here")

        async def close(self) -> None:
            pass

    store = open_store(
        "az://stub-container/ns", {"account_name": "stubaccount", "credential": Credential()}
    )
    try:
        assert isinstance(store, azure_store.AzureStore)
        assert store._fast_writes() is None
    finally:
        store.close()


def test_a_key_obstore_would_spell_otherwise_keeps_the_sdk(
    loopback_only_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABLE_OBJ_AZURE_WRITES", raising=False)
    stub = _Stub(412, _error("ConditionNotMet"), "application/xml")
    store = open_store("az://stub-container/ns", _options(stub.endpoint))
    try:
        sdk = _count_sdk_puts(store, monkeypatch)
        assert store.create("odd/a b+c", b"x") is None  # percent-encoded: the SDK's
        assert store.create("wal/0-1-ab.jsonl", b"x") is None  # plain: obstore's
        assert sdk == ["odd/a b+c"]
        assert len(stub.requests) == 2
        assert _used_obstore(store)
    finally:
        store.close()
        stub.close()
