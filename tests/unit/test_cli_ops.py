"""The public `ops` helpers the CLI stands on instead of private modules."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from durable_obj.core import ops
from durable_obj.errors import Corrupt, InvalidArgument, NotFound
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
    with pytest.raises(Corrupt, match=r"o/head\.json is not valid UTF-8 JSON"):
        ops.head_document(store, "o")


def test_export_formats() -> None:
    assert ops.export_formats() == ["csv", "jsonl", "parquet"]


#: hostile and ordinary table names (statements choose them)
HOSTILE = ["../../escaped/pwn", "a/b", "tab\there", "bell\x07", "%41", "A", "..", ".", ".x"]
PLAIN = ["m", "events_2024", "a.b-c", "A"]


def test_export_path_keeps_plain_names_and_encodes_the_rest() -> None:
    from urllib.parse import unquote

    for table in PLAIN:
        assert ops.export_path("dest", table, "csv") == f"dest/{table}.csv"
    names = set()
    for table in [*HOSTILE, *PLAIN, "\u00fc", "back\\slash", "%", "a%2Fb"]:
        path = ops.export_path("/tmp/x/dest/", table, "parquet")
        folder, _, name = path.rpartition("/")
        assert folder == "/tmp/x/dest" and name.endswith(".parquet")
        stem = name.removesuffix(".parquet")
        assert not stem.startswith(".") and "/" not in stem and "\\" not in stem
        assert stem.isascii() and stem.isprintable()
        assert unquote(stem) == table  # decodes back to its table
        names.add(name)
    assert len(names) == len(set([*HOSTILE, *PLAIN, "\u00fc", "back\\slash", "%", "a%2Fb"]))
    assert ops.export_path("d", "../../escaped/pwn", "csv") == "d/%2E.%2F..%2Fescaped%2Fpwn.csv"
    assert ops.export_path("d", "%41", "csv") == "d/%2541.csv"
    assert ops.export_path("/", "a/b", "csv") == "/a%2Fb.csv"
    assert ops.export_path("bucket", "m", "jsonl") == "bucket/m.jsonl"
    with pytest.raises(InvalidArgument):
        ops.export_path("d", "", "csv")
    with pytest.raises(InvalidArgument):
        ops.export_path("d", "m", "xlsx")


def test_export_target_refuses_a_name_that_leaves_the_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defence in depth: were a stem ever not one safe segment, the
    normalized target is checked to be a direct child of the root."""
    from durable_obj.replica import export

    monkeypatch.setattr(export, "export_stem", lambda table: table)
    for table in ["../../escaped/pwn", "a/b", "x/../../y", "../"]:
        with pytest.raises(InvalidArgument, match="outside"):
            export.export_target("/tmp/x/dest", table, "csv")
    assert export.export_target("/tmp/x/dest", "m", "csv") == "/tmp/x/dest/m.csv"


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


def test_gc_waiting_is_what_only_the_grace_keeps() -> None:
    import time

    import durable_obj

    url = f"memory://cli-ops-gc-{uuid.uuid4().hex}"
    with durable_obj.open(f"{url}/o", retention=0) as obj:  # grace alone, no window
        obj.execute("CREATE TABLE t (k UInt8) ENGINE = MergeTree ORDER BY k")
        obj.checkpoint()
        obj.execute("INSERT INTO t VALUES (1)")
        obj.flush()
        obj.checkpoint(full=True)  # supersedes the first base (an increment would not)
    store = open_store(url)
    base = ops.read_head(store, "o").manifest.base
    assert base is not None
    (entry,) = [e for e in store.list_keys("o") if e.key == f"o/{base.key}"]
    assert entry.modified is not None
    before = time.time()
    waiting = ops.gc_waiting(store, "o", grace=3600)
    ungraced = ops.gc(store, "o", grace=0, dry_run=True)
    assert waiting.keys == ungraced.deleted and len(waiting.keys) == 2
    assert waiting.bytes == ungraced.deleted_bytes
    assert waiting.collectable_at == entry.modified + 3600
    assert ops.gc(store, "o", grace=3600, dry_run=True).deleted == []
    # settled: nothing waits (gc deletes it), and the time is still told
    settled = ops.gc_waiting(store, "o", grace=0)
    assert settled.keys == [] and settled.bytes == 0
    assert settled.collectable_at is not None and settled.collectable_at <= before
    with pytest.raises(InvalidArgument):
        ops.gc_waiting(store, "o", grace=-1)
    with pytest.raises(NotFound):
        ops.gc_waiting(store, "nope")


def test_missing_namespace(tmp_path: Path) -> None:
    assert ops.missing_namespace(open_store(str(tmp_path))) is None
    gone = tmp_path / "gone"
    assert ops.missing_namespace(open_store(str(gone))) == f"folder {gone} does not exist"
    assert not gone.exists()
    (tmp_path / "f").write_text("x")
    assert ops.missing_namespace(open_store(str(tmp_path / "f"))) == (
        f"{open_store(str(tmp_path / 'f')).url} is not a folder"
    )
    assert ops.missing_namespace(open_store(f"memory://unused-{uuid.uuid4().hex}")) is None
