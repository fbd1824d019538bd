"""The batched S3 reader's pieces, against botocore as the reference.

The end-to-end checks (used, exact, falls back) run on moto and SeaweedFS in
tests/stores/test_cloud_stores.py; SeaweedFS verifies every signature.
"""

from __future__ import annotations

import datetime

import pytest

from durable_obj.stores import s3reads


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEJr//////////token+/="])
@pytest.mark.parametrize(
    "key", ["ns/obj/wal/00000000000000000001.jsonl", "ns/a b+c=d&e~f%g/\u00e9t\u00e9 x"]
)
def test_signature_matches_botocore(
    monkeypatch: pytest.MonkeyPatch, token: str | None, key: str
) -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    fixed = datetime.datetime(2026, 11, 30, 3, 4, 5, tzinfo=datetime.UTC)

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Frozen:  # type: ignore[override]
            return cls.fromtimestamp(fixed.timestamp(), tz)

    monkeypatch.setattr(s3reads.datetime, "datetime", Frozen)
    monkeypatch.setattr("botocore.auth.datetime.datetime", Frozen)

    creds = s3reads.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    host = "127.0.0.1:9000"
    path = "/bucket/" + s3reads.quote_key(key)
    ours = s3reads._Signer(creds, "eu-west-3", host).request(path).decode()

    request = AWSRequest(method="GET", url=f"http://{host}{path}", headers={})
    S3SigV4Auth(Credentials("AKIDEXAMPLE", creds.secret_key, token), "s3", "eu-west-3").add_auth(
        request
    )
    lines = ours.split("\r\n")
    assert lines[0] == f"GET {path} HTTP/1.1"
    sent = dict(line.split(": ", 1) for line in lines[1:] if line)
    assert sent["Authorization"] == request.headers["Authorization"]
    assert sent["x-amz-date"] == request.headers["X-Amz-Date"]
    assert sent.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


@pytest.mark.parametrize("key", ["plain/key.jsonl", "a b+c=d&e~f%g/\u00e9t\u00e9 x", "q?x#y;z"])
def test_keys_are_quoted_as_botocore_quotes_them(key: str) -> None:
    from urllib.parse import urlsplit

    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="not-a-secret",
    )
    url = client.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": key})
    assert urlsplit(url).path == "/bkt/" + s3reads.quote_key(key)


@pytest.mark.parametrize(
    ("url", "want"),
    [
        (
            "http://127.0.0.1:9000/bkt/ns/probe?X-Amz-Signature=x",
            ("http", "127.0.0.1:9000", "/bkt/"),
        ),
        ("https://bkt.s3.eu-west-3.amazonaws.com/ns/probe?x=1", ("https", None, "/")),
        ("https://s3.amazonaws.com/bkt/ns/probe", ("https", "s3.amazonaws.com", "/bkt/")),
    ],
)
def test_target_from_presigned(url: str, want: tuple[str, str | None, str]) -> None:
    target = s3reads.Target.from_presigned(url, "ns/probe", "eu-west-3")
    assert target is not None
    scheme, host, prefix = want
    assert (target.scheme, target.path_prefix, target.region) == (scheme, prefix, "eu-west-3")
    assert target.host == (host or "bkt.s3.eu-west-3.amazonaws.com")
    assert target.port == (9000 if host and ":" in host else 443)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/bkt/other/key",  # not the probe: an unknown shape
        "ftp://127.0.0.1/bkt/ns/probe",
        "http://user:pw@127.0.0.1:9000/bkt/ns/probe",
    ],
)
def test_unusual_presigned_urls_are_not_sped_up(url: str) -> None:
    assert s3reads.Target.from_presigned(url, "ns/probe", "us-east-1") is None


def test_proxies_turn_batched_reads_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert not s3reads.proxies_configured({})
    assert s3reads.proxies_configured({"proxies": {"https": "http://127.0.0.1:3128"}})
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert s3reads.proxies_configured({})
