"""JSON read from a store is bounded before it is parsed (issue 36 item 6).

A head.json, WAL line or history file nested deeper than a stored document
may is `Corrupt`, named, never a `RecursionError` or any other untyped error;
a head with a modestly nested extension field still opens and round-trips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj.errors import Corrupt
from durable_obj.wire.head import Head
from durable_obj.wire.untrusted import MAX_JSON_DEPTH, json_depth, parse_json
from durable_obj.wire.wal import parse_segment

DEEP = 100_000


def valid_doc() -> dict[str, Any]:
    sha = "ab" * 32
    return {
        "protocol": {"version": 1, "reader_features": [], "writer_features": []},
        "engine": {"name": "chdb", "version": "26.9.0", "backup_format": 1, "min_reader": "26.9.0"},
        "lease": {"generation": 3, "owner": None, "instance": None, "expires_at": None},
        "manifest": {"db": "default", "base": None, "wal": [], "seq": 2},
        "x": {"k": sha},
    }


def with_extension(nested: str) -> bytes:
    """A valid head whose unknown field `x` holds `nested` (raw JSON text)."""
    text = json.dumps(valid_doc())
    return text.replace('{"k": "' + "ab" * 32 + '"}', nested).encode()


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    "data",
    [
        b"[" * DEEP,
        ("[" * DEEP + "]" * DEEP).encode(),
        nested_objects(DEEP).encode(),
        with_extension("[" * DEEP + "]" * DEEP),
        with_extension(nested_objects(DEEP)),
        with_extension("[" * 300 + "]" * 300),  # parses, but could not be written back
    ],
    ids=["open-arrays", "arrays", "objects", "ext-arrays", "ext-objects", "ext-300"],
)
def test_deep_head_is_corrupt_and_named(data: bytes) -> None:
    with pytest.raises(Corrupt) as info:
        Head.parse(data, "file:///ns/o")
    message = str(info.value)
    assert "head.json of file:///ns/o" in message
    assert "nothing was changed; the object was not opened" in message


def test_brackets_inside_strings_are_not_nesting() -> None:
    doc = valid_doc()
    doc["x"] = "[" * DEEP + "{" * 10 + '"\\"[['
    head = Head.parse(json.dumps(doc).encode())
    assert json.loads(head.to_bytes())["x"] == doc["x"]


def test_head_with_depth_20_extension_opens_and_round_trips() -> None:
    nested: Any = {"leaf": [1, "two", None]}
    for i in range(20):
        nested = [nested] if i % 2 else {"n": nested}
    doc = valid_doc()
    doc["x"] = nested
    doc["durable_obj"] = {"future_field": nested}
    head = Head.parse(json.dumps(doc).encode())
    out = json.loads(head.to_bytes())
    assert out["x"] == nested
    assert out["durable_obj"]["future_field"] == nested
    again = Head.parse(head.to_bytes())
    assert again.model_extra is not None and again.model_extra["x"] == nested


def test_depth_limit_is_exact() -> None:
    at = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    over = "[" + at + "]"
    assert json_depth(at.encode()) == MAX_JSON_DEPTH
    assert parse_json(at, "doc") is not None
    with pytest.raises(Corrupt, match=f"{MAX_JSON_DEPTH + 1} levels deep"):
        parse_json(over, "doc")


@pytest.mark.parametrize(
    "line",
    [
        b"[" * DEEP,
        nested_objects(DEEP).encode(),
        b'{"sql": "SELECT 1", "x": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    ],
    ids=["arrays", "objects", "extension"],
)
def test_deep_wal_line_is_corrupt(line: bytes) -> None:
    segment = b'{"sql": "SELECT 1"}\n' + line + b"\n"
    with pytest.raises(Corrupt, match=r"WAL segment wal/1-2-ab.jsonl line 2 .*not replayed"):
        parse_segment(segment, "wal/1-2-ab.jsonl")


def test_not_json_is_corrupt_not_untyped() -> None:
    for data in (b"\xff", b"{", b"", b"[1,]", "\ud800".encode("utf-8", "surrogatepass")):
        with pytest.raises(Corrupt):
            parse_json(data, "doc")


@pytest.mark.parametrize("nested", ["[" * DEEP, nested_objects(DEEP)], ids=["arrays", "objects"])
def test_open_of_a_deep_head_in_a_folder_store_is_corrupt(tmp_path: Path, nested: str) -> None:
    url = str(tmp_path / "ns" / "o")
    with durable_obj.open(url) as obj:
        obj.execute("CREATE TABLE t (a Int64) ENGINE = MergeTree ORDER BY a")
        obj.flush()
    path = tmp_path / "ns" / "o" / "head.json"
    doc = json.loads(path.read_bytes())
    path.write_text(json.dumps(doc)[:-1] + ', "x": ' + nested + "}")
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(Corrupt, match=r"head\.json of file://.*/ns/o nests .*was not opened"):
            durable_obj.open(url, read_only=read_only)
    assert path.read_bytes() == before


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_TEXT = st.text(alphabet='[]{}"\\ab:,\n\u00e9', max_size=8)
_JSON = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(value=_JSON, ascii_only=st.booleans(), compact=st.booleans())
def test_depth_is_the_nesting_whatever_the_strings_hold(
    value: Any, ascii_only: bool, compact: bool
) -> None:
    """Strings full of brackets, quotes and backslashes (escaped as JSON
    escapes them) never count as nesting, and every real level does."""
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    assert json_depth(text.encode()) == _depth(value)
