"""The public `ops` helpers the CLI stands on instead of private modules."""

from __future__ import annotations

import json
import uuid

import pytest

from durable_obj import ops
from durable_obj.errors import Corrupt, NotFound
from durable_obj.stores import open_store


def test_head_document_is_the_stored_json_unvalidated() -> None:
    store = open_store(f"memory://cli-ops-{uuid.uuid4().hex}")
    with pytest.raises(NotFound, match="'o'"):
        ops.head_document(store, "o")
    doc = {"manifest": {"seq": "three"}, "anything": ["kept", 1]}  # no valid head
    assert store.create("o/head.json", json.dumps(doc).encode()) is not None
    assert ops.head_document(store, "o") == doc
    store.delete("o/head.json")
    assert store.create("o/head.json", b"\xff not json") is not None
    with pytest.raises(Corrupt, match=r"o/head\.json is not UTF-8 JSON"):
        ops.head_document(store, "o")


def test_export_formats() -> None:
    assert ops.export_formats() == ["csv", "jsonl", "parquet"]


@pytest.mark.parametrize(
    ("url", "protocol"),
    [
        ("/tmp/x", "file"),
        ("relative/x", "file"),
        ("file:///x", "file"),
        ("FILE://localhost/x", "file"),
        ("file://elsewhere/x", "file"),  # no store, but still the file protocol
        ("file:///a#b", "file"),
        ("local:/x", "file"),
        ("LOCAL://x", "file"),
        ("s3://bucket/p", "s3"),
        ("S3://bucket", "s3"),
        ("gs://bucket", "gs"),
        ("memory://x", "memory"),
        ("ftp://host/x", "ftp"),
    ],
)
def test_url_protocol(url: str, protocol: str) -> None:
    assert ops.url_protocol(url) == protocol
