"""The MCP server's limits are checked when made, and a row another writer
stored with metadata that is not a JSON object is shown, not fatal."""

from __future__ import annotations

import math

import pytest

from durable_obj.errors import InvalidArgument
from durable_obj.mcp.limits import Limits, stored_metadata


@pytest.mark.parametrize(
    "bad",
    [
        {"sql_seconds": "10"},
        {"sql_seconds": 1e308},
        {"sql_seconds": math.nan},
        {"sql_seconds": 0},
        {"content_bytes": "x"},
        {"tags": -1},
        {"page": 0},
        {"result_bytes": True},
        {"sql_memory_bytes": 10**100},
    ],
)
def test_limits_refuse_what_is_no_limit(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument, match=f"Limits.{next(iter(bad))} must be"):
        Limits(**bad)  # type: ignore[arg-type]


def test_limits_take_what_they_did() -> None:
    assert Limits(tags=0, sql_seconds=0.5, page=50).sql_seconds == 0.5


@pytest.mark.parametrize(
    "raw", ["not json", "NaN", '{"a": Infinity}', "[1, 2]", "1", "[" * 5000 + "]" * 5000, '"x']
)
def test_metadata_that_is_no_json_object_is_shown_as_text(raw: str) -> None:
    assert stored_metadata(raw) == {"unreadable": raw[:1024]}


def test_metadata_as_stored() -> None:
    assert stored_metadata('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert stored_metadata(None) == {} and stored_metadata("") == {}


def test_metadata_nested_past_the_interpreter_is_refused_typed() -> None:
    from durable_obj.mcp.limits import _check_metadata

    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(InvalidArgument, match="nested"):  # RecursionError on 3.11, not 3.13
        _check_metadata(deep, Limits(metadata_bytes=1 << 20))
    shallow: dict[str, object] = {}
    node = shallow
    for _ in range(100):  # under the interpreter's limit, over the stored documents' bound
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(InvalidArgument, match="nested 101 levels deep"):
        _check_metadata(shallow, Limits())
