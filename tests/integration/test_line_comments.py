"""`//` starts a line comment to ClickHouse (its Lexer.cpp), as `--` does.
Our lexer read two slashes and a string that began at the `'` after them,
so what the engine ran between two `// '` lines was never seen by a check
that reads our tokens: a write stored a host file, a read's EXPLAIN
printed one, a tampered WAL line did it on every open. Text holding `//`
outside quotes is now not plain: the engine's canonical text (the comment
gone) is what is checked, run and logged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import durable_obj

HIDDEN = (
    "'' // '\n || (SELECT groupConcat(line, '|') FROM file('/etc/hostname', 'LineAsString'))\n// '"
)


@pytest.mark.parametrize(
    "sql",
    [
        f"UPDATE t SET s = {HIDDEN}\nWHERE k = 1",
        f"ALTER TABLE t UPDATE s = {HIDDEN}\nWHERE k = 1",
        f"INSERT INTO t SELECT 2, {HIDDEN}",
        f"INSERT INTO t VALUES (3, {HIDDEN})",
    ],
)
def test_a_write_hiding_code_behind_a_line_comment_is_refused(tmp_path: Path, sql: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute(
            "CREATE TABLE t (k UInt8, s String) ENGINE = MergeTree ORDER BY k "
            "SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1"
        )
        obj.execute("INSERT INTO t VALUES (1, '')")
        with pytest.raises(durable_obj.ClassificationRefused, match=r"file|VALUES rows"):
            obj.execute(sql)
        assert obj.rows("SELECT s FROM t ORDER BY k") == [("",)]
        read = "(SELECT groupConcat(line) FROM file('/etc/hostname', 'LineAsString'))"
        for head in ("SELECT", "EXPLAIN QUERY TREE SELECT"):
            with pytest.raises(durable_obj.ClassificationRefused, match="file"):
                obj.query(f"{head} 1 // '\n, {read}\n// '")
        obj.execute("INSERT INTO t VALUES (4, 'a' // a comment\n)")  # a comment stays one
        assert obj.rows("SELECT s FROM t WHERE k = 4") == [("a",)]


def test_a_logged_line_hiding_code_does_not_replay(tmp_path: Path) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt8, s String) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1, '')")
        obj.flush()
    head = json.loads((url / "head.json").read_text())
    ref = head["manifest"]["wal"][-1]
    lines = [
        "CREATE TABLE t (k UInt8, s String) ENGINE = MergeTree ORDER BY k",
        f"ALTER TABLE t UPDATE s = {HIDDEN}\nWHERE k = 1",
    ]
    body = "".join(json.dumps({"sql": line}) + "\n" for line in lines).encode()
    (url / ref["key"]).write_bytes(body)
    ref["size"], ref["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    (url / "head.json").write_text(json.dumps(head))
    with pytest.raises(durable_obj.Corrupt):
        durable_obj.open(str(url), read_only=True)
