"""Heads the schema accepts at V1's limits, and text it reads back escaped:
each is refused typed, or written back as read, and nothing is lost.
(Found by an attack on the hand-written head schema, older than it.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import durable_obj
from durable_obj.errors import EngineIncompatible, LimitExceeded
from durable_obj.wire.protocol import MAX_SAFE_INT

DDL = "CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k"


def _made(tmp_path: Path) -> tuple[str, Path]:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO t VALUES (1)")
    return url, tmp_path / "o" / "head.json"


def _edit(head: Path, **sections: dict[str, object]) -> None:
    doc = json.loads(head.read_bytes())
    for name, fields in sections.items():
        doc[name].update(fields)
    head.write_text(json.dumps(doc))


def test_a_seq_at_its_largest_refuses_the_next_commit_and_changes_nothing(tmp_path: Path) -> None:
    url, head = _made(tmp_path)
    _edit(head, manifest={"seq": MAX_SAFE_INT})
    written = head.read_bytes()
    obj = durable_obj.open(url, owner="w", force=True)
    try:
        obj.execute("INSERT INTO t VALUES (2)")
        for commit in (obj.flush, obj.checkpoint):
            with pytest.raises(LimitExceeded, match="seq"):
                commit()
        assert obj.query("SELECT count() FROM t").data().strip() == "2"
    finally:
        obj.close(discard=True)
    doc, now = json.loads(written), json.loads(head.read_bytes())
    assert now["manifest"] == doc["manifest"]  # nothing committed, no base named
    assert not (tmp_path / "o" / "checkpoints").exists()


def test_a_generation_at_its_largest_is_never_taken_over(tmp_path: Path) -> None:
    url, head = _made(tmp_path)
    _edit(head, lease={"generation": MAX_SAFE_INT})
    with pytest.raises(LimitExceeded, match="generation"):
        durable_obj.open(url, owner="w2")
    assert json.loads(head.read_bytes())["lease"]["generation"] == MAX_SAFE_INT
    with durable_obj.open(url, read_only=True) as reader:  # still opens, read-only
        assert reader.query("SELECT count() FROM t").data().strip() == "1"


def test_a_version_of_five_thousand_digits_is_not_ordered(tmp_path: Path) -> None:
    url, head = _made(tmp_path)
    _edit(head, engine={"min_reader": "9" * 5000})
    with pytest.raises(EngineIncompatible, match="cannot order") as info:
        durable_obj.open(url, read_only=True)
    assert len(str(info.value)) < 400


def test_a_lone_surrogate_in_an_unknown_field_survives_a_checkpoint(tmp_path: Path) -> None:
    url, head = _made(tmp_path)
    _edit(head, manifest={"zz": "\ud800"})
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("INSERT INTO t VALUES (2)")
        obj.flush()
        obj.checkpoint()  # archives the manifest it supersedes (history)
    assert json.loads(head.read_bytes())["manifest"]["zz"] == "\ud800"
    ns = durable_obj.Namespace(str(tmp_path))
    assert [i.oid for i in ns.list()] == ["o"]
    with durable_obj.open(url, read_only=True) as reader:
        assert reader.query("SELECT count() FROM t").data().strip() == "2"
