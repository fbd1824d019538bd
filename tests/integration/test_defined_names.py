"""A table may be named as a table function is (`cluster`, `remote`, `file`):
the name a CREATE defines or an INSERT writes, before its column list, is a
name and not a call (`sql.defined_name`). Before, `CREATE TABLE cluster (k
UInt64) ...` was refused as a call of cluster(). A call of the same
function anywhere else stays refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import durable_obj

NAMES = ["cluster", "remote", "file", "url", "s3", "`merge`", "mysql"]


@pytest.mark.parametrize("name", NAMES)
def test_a_table_named_as_a_table_function(tmp_path: Path, name: str) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(f"CREATE TABLE {name} (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute(f"INSERT INTO {name} (k) VALUES (1)")
        obj.execute(f"INSERT INTO TABLE default.{name} (k) SELECT 2")
        obj.execute(f"CREATE TABLE IF NOT EXISTS {name} (k UInt64) ENGINE = Memory")
        assert obj.rows(f"SELECT k FROM {name} ORDER BY k") == [(1,), (2,)]
        obj.checkpoint()
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows(f"SELECT k FROM {name} ORDER BY k") == [(1,), (2,)]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t2 AS remote('127.0.0.1:9', system, one)",
        "CREATE TABLE file (a String) ENGINE = Memory AS SELECT * FROM file('/etc/hostname')",
        "INSERT INTO file (a) SELECT * FROM file('/etc/hostname')",
        "INSERT INTO FUNCTION url('http://127.0.0.1:9/x', CSV, 'a String') VALUES ('a')",
        "INSERT INTO TABLE FUNCTION file('/tmp/x.csv', CSV, 'a String') VALUES ('a')",
        "CREATE TABLE url('http://127.0.0.1:9/x', CSV, 'a String')",
        "CREATE TABLE t3 (a String) ENGINE = Memory AS SELECT * FROM cluster('d', system.one)",
    ],
)
def test_the_table_functions_stay_refused(tmp_path: Path, sql: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute("CREATE TABLE file (a String) ENGINE = Memory")
        with pytest.raises(durable_obj.ClassificationRefused):
            obj.execute(sql)
