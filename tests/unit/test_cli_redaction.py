"""Credential redaction of the CLI's output (pure)."""

from __future__ import annotations

import io

from durable_obj.cli.redaction import (
    MIN_REDACTED_LENGTH,
    REDACTED,
    RedactingStream,
    Secrets,
    is_sensitive,
)

SECRET = "hunter2-correct-horse-battery"


def test_sensitive_keys() -> None:
    for key in ("secret", "key", "token", "password", "credential", "connection_string"):
        assert is_sensitive(key) and is_sensitive(f"client_kwargs.aws_{key}_x".upper())
    for key in ("endpoint_url", "region_name", "anon", "fsync"):
        assert not is_sensitive(key)


def test_raw_items_register_credentials_only() -> None:
    secrets = Secrets()
    secrets.add_items(
        [f"password={SECRET}", "region=eu-west-1", "token=abc", SECRET, f"Client.KEY={SECRET}x"]
    )
    # too short ("abc"), not a credential (region), no key (a bare value) are left out
    assert secrets.values == {SECRET, f"{SECRET}x"}


def test_parsed_options_register_nested_credentials() -> None:
    secrets = Secrets()
    secrets.add_options(
        {
            "endpoint_url": "http://127.0.0.1:9000",
            "client_kwargs": {"aws_session_token": "tok-en-value", "region_name": "eu"},
            "secret": 12345,  # not a string: nothing to search for
            "key": "k" * MIN_REDACTED_LENGTH,
        }
    )
    assert secrets.values == {"tok-en-value", "k" * MIN_REDACTED_LENGTH}


def test_redact_replaces_every_occurrence_longest_first() -> None:
    secrets = Secrets()
    secrets.add(SECRET)
    secrets.add(f"{SECRET}-longer")
    secrets.add("abc")  # under MIN_REDACTED_LENGTH: ignored
    text = f"a {SECRET}-longer b {SECRET} c abc"
    assert secrets.redact(text) == f"a {REDACTED} b {REDACTED} c abc"
    assert Secrets().redact(text) == text


def test_redacting_stream() -> None:
    secrets = Secrets()
    secrets.add(SECRET)
    buffer = io.StringIO()
    stream = RedactingStream(buffer, secrets.redact)
    assert stream.write(f"x{SECRET}y\n") == len(SECRET) + 3  # what the caller wrote
    stream.flush()
    assert buffer.getvalue() == f"x{REDACTED}y\n"
    assert stream.encoding == "utf-8"
    assert not stream.isatty()
