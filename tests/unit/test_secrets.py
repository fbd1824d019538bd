"""stores/secrets.py: the credentials a store was given never reach what a
traceback of its errors prints, whatever the client put in its own error."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from durable_obj.errors import BackendError
from durable_obj.stores.secrets import ClientError, scrub, secret_values

KEY = "c3R1Yi1hY2NvdW50LWtleS1uZXZlci1hLXJlYWwtb25lLTAxMjM0NTY3ODk="
SIG = "c3R1Yi1zYXMtc2lnbmF0dXJl+/="


def test_secret_values_finds_credentials_at_any_depth_and_in_their_travelling_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-from-the-environment")
    found = secret_values(
        {
            "endpoint_url": "http://127.0.0.1:9000",
            "key": "AKIAEXAMPLEKEYID",
            "secret": "s3-secret-access-key",
            "client_kwargs": {"aws_secret_access_key": "nested-secret-value"},
            "connection_string": (
                f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey={KEY};"
                f"BlobEndpoint=http://127.0.0.1:1/acct"
            ),
            "sas_token": f"sv=2021-08-06&sp=rw&sig={SIG}",
            "token": {"private_key": "-----BEGIN PRIVATE KEY-----abc", "type": "service_account"},
            "anon": False,
            "region_name": "us-east-1",
        }
    )
    for secret in (
        "s3-secret-access-key",
        "nested-secret-value",
        KEY,
        SIG,
        quote(SIG, safe=""),
        "-----BEGIN PRIVATE KEY-----abc",
        "session-token-from-the-environment",
    ):
        assert secret in found, secret
    assert "http://127.0.0.1:9000" not in found and "us-east-1" not in found
    assert [len(s) for s in found] == sorted((len(s) for s in found), reverse=True)


def _chain(error: BaseException) -> list[BaseException]:
    out, node = [], error
    while node is not None:
        out.append(node)
        node = node.__cause__ or node.__context__  # type: ignore[assignment]
    return out


def test_scrub_cuts_the_secret_out_of_every_link_that_holds_it_and_keeps_the_rest() -> None:
    secrets = secret_values({"account_key": KEY, "sas_token": f"sp=r&sig={SIG}"})
    root = ConnectionError("connection reset")  # holds nothing: kept as it is
    middle = RuntimeError(f"Content: <Detail>{KEY} and sig={quote(SIG, safe='')}</Detail>")
    middle.__cause__ = root
    try:
        try:
            raise middle
        except RuntimeError as exc:
            raise BackendError(f"writing 'h' failed (the server said {SIG})") from exc
    except BackendError as caught:
        error = caught
    scrub(error, secrets)
    links = _chain(error)
    assert [type(e) for e in links] == [BackendError, ClientError, ConnectionError]
    assert links[2] is root
    assert str(links[1]).startswith("RuntimeError: Content: <Detail>[redacted] and sig=[redacted]")
    assert "[redacted]" in str(error) and isinstance(error, BackendError)
    for link in links:
        for text in (str(link), repr(link)):
            assert KEY not in text and SIG not in text and quote(SIG, safe="") not in text


def test_scrub_leaves_a_chain_without_secrets_untouched_and_survives_a_cycle() -> None:
    a = ValueError("a")
    b = BackendError("b")
    b.__cause__ = a
    a.__context__ = b  # a cycle
    scrub(b, secret_values({"secret": "never-mentioned-secret"}))
    assert b.__cause__ is a and a.__context__ is b
    scrub(b, ())
    assert b.__cause__ is a
