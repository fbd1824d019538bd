"""`-o KEY=VALUE` parsing of the CLI (pure: no click, no store)."""

from __future__ import annotations

import pytest

from durable_obj.cli.options import parse_storage_options, parse_value
from durable_obj.errors import InvalidArgument

SECRET = "hunter2-correct-horse-battery"


def test_parse_storage_options() -> None:
    parsed = parse_storage_options(
        [
            "anon=true",
            "use_ssl=False",
            "max_concurrency=8",
            "timeout=2.5",
            "endpoint_url=http://127.0.0.1:9000",
            "secret=12345",
            "client_kwargs.region_name=eu-west-1",
            "client_kwargs.retries=3",
            "empty=",
            "eq=a=b",
        ]
    )
    assert parsed == {
        "anon": True,
        "use_ssl": False,
        "max_concurrency": 8,
        "timeout": 2.5,
        "endpoint_url": "http://127.0.0.1:9000",
        "secret": "12345",  # a credential stays a string
        "client_kwargs": {"region_name": "eu-west-1", "retries": 3},
        "empty": "",
        "eq": "a=b",
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("TRUE", True),
        ("false", False),
        ("-7", -7),
        ("+3", 3),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("1.2.3", "1.2.3"),
        ("0x10", "0x10"),
        ("yes", "yes"),
        ("", ""),
    ],
)
def test_values_are_typed(text: str, value: object) -> None:
    parsed = parse_value("option", text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("key", ["password", "client_kwargs.aws_secret_access_key", "TOKEN"])
def test_a_credential_stays_a_string(key: str) -> None:
    assert parse_value(key, "12345") == "12345"
    assert parse_value(key, "true") == "true"


def test_no_items_is_no_options() -> None:
    assert parse_storage_options([]) == {}


def test_a_later_value_wins() -> None:
    assert parse_storage_options(["a=1", "a=2", " b =x"]) == {"a": 2, "b": "x"}


@pytest.mark.parametrize(
    ("items", "fragment"),
    [
        (["fsync"], "#1 is not KEY=VALUE"),
        (["a=1", "=x"], "#2 is not KEY=VALUE"),
        (["a=1", "a.b=2"], "'a' is given both as a value and as a group"),
        (["a.b=2", "a=1"], "'a' is given both as a value and as a group"),
        (["a.b.c=2", "a.b=1"], "'a.b' is given both"),
        (["a..b=2"], "'a..b' has an empty part"),
        ([".a=2"], "has an empty part"),
    ],
)
def test_bad_items(items: list[str], fragment: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_storage_options(items)
    assert fragment in str(info.value)
    assert info.value.category == "invalid_argument"


def test_a_value_without_a_key_is_never_echoed() -> None:
    for item in (SECRET, f"={SECRET}"):
        with pytest.raises(InvalidArgument) as info:
            parse_storage_options([item])
        assert SECRET not in str(info.value)
