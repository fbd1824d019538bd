"""A write may not detach a partition or a part: its rows would go to the
table's `detached` folder, which no checkpoint carries, so after the next
checkpoint a replica would miss them (or fail `Corrupt` at an ATTACH). The
refusal reads the engine's own text: comments, case and a parenthesized
command list do not hide it. A committed line that detaches (an object
written before, or by chdb.durable) still replays as it did."""

from __future__ import annotations

from pathlib import Path

import pytest

import durable_obj
from tests.integration.test_gate_round3 import _tamper

DDL = "CREATE TABLE t (k UInt64) ENGINE = MergeTree PARTITION BY k % 2 ORDER BY k"

DETACHING = [
    "ALTER TABLE t DETACH PARTITION 1",
    "alter table t detach partition id '0'",
    "ALTER TABLE t /* c */ DETACH PARTITION 1",
    "ALTER TABLE t -- c\n DETACH PART '1_1_1_0'",
    "ALTER TABLE t (DETACH PARTITION 1)",
    "ALTER TABLE t DETACH PARTITION ALL",
    "ALTER TABLE t UPDATE k = k WHERE 1, DETACH PARTITION 1",
    "ALTER TABLE `t` DETACH PARTITION tuple(1)",
    "ALTER TEMPORARY TABLE t DETACH PARTITION 1",  # the engine finds t by it too
    "ALTER TABLE t ON CLUSTER default DETACH PARTITION 1",
    "ALTER TABLE t (UPDATE k = k WHERE 1), (DETACH PARTITION 1)",
    # a name the engine reads as one and our lexer splits (a number glued to letters)
    "ALTER TABLE 1t DETACH PARTITION 1",
    "ALTER TABLE 0xAt DETACH PARTITION 1",
    "ALTER TABLE 1e5t DETACH PARTITION 1",
    "alter\ttemporary\ttable\n1t\tdetach\tpartition\t1",
]


@pytest.mark.parametrize("sql", DETACHING)
def test_detaching_a_partition_or_a_part_is_refused(tmp_path: Path, sql: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO t VALUES (1), (2), (3)")
        for name in ("`1t`", "`0xAt`", "`1e5t`"):
            obj.execute(f"CREATE TABLE {name} AS t")
            obj.execute(f"INSERT INTO {name} VALUES (1), (2), (3)")
        pending = obj.pending
        with pytest.raises(durable_obj.ClassificationRefused, match="DETACH PART"):
            obj.execute(sql)
        with pytest.raises(durable_obj.ClassificationRefused, match="DETACH PART"):
            obj.write(sql)
        assert obj.pending == pending  # nothing logged
        assert obj.rows("SELECT count() FROM system.detached_parts") == [(0,)]


def test_what_moves_rows_within_the_object_is_kept_and_replays(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(DDL)
        obj.execute("CREATE TABLE t2 AS t")
        obj.execute("CREATE TABLE detach (k UInt64, detach UInt8) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1), (2), (3), (4)")
        obj.execute("ALTER TABLE t MOVE PARTITION 1 TO TABLE t2")
        obj.execute("ALTER TABLE t ATTACH PARTITION 1 FROM t2")
        obj.execute("ALTER TABLE t DROP PARTITION 0")
        obj.execute("INSERT INTO detach VALUES (1, 0)")
        obj.execute("ALTER TABLE detach UPDATE detach = 1 WHERE 1")
        obj.execute("ALTER TABLE detach RENAME COLUMN detach TO part")
        obj.checkpoint()
        written = (obj.rows("SELECT k FROM t ORDER BY k"), obj.rows("SELECT * FROM detach"))
    assert written == ([(1,), (3,)], [(1, 1)])
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows("SELECT k FROM t ORDER BY k") == written[0]
        assert replica.rows("SELECT * FROM detach") == written[1]


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t ADD INDEX detach part TYPE minmax GRANULARITY 1",
        "ALTER TABLE t ADD INDEX detach partition TYPE minmax GRANULARITY 1",
        "ALTER TABLE t /* c */ ADD INDEX detach part TYPE minmax GRANULARITY 1",
        "ALTER TABLE t UPDATE v = 1 WHERE k IN (SELECT detach part FROM t)",
        "ALTER TABLE t DELETE WHERE k IN (SELECT k FROM detach part)",
        "ALTER TABLE t ADD PROJECTION pr (SELECT detach part, k ORDER BY part)",
    ],
)
def test_the_words_as_names_are_not_the_command(tmp_path: Path, sql: str) -> None:
    """An index named `detach` on a column `part`, an alias in a subquery:
    the words side by side, but not where a command begins (the attack's
    false refusals of the first form of the check)."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute(
            "CREATE TABLE t (k UInt64, part UInt64, partition UInt64, detach UInt64, v UInt64) "
            "ENGINE = MergeTree ORDER BY k"
        )
        obj.execute("CREATE TABLE detach (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1, 2, 3, 1, 5)")
        obj.execute(sql)


def _detached_by_a_committed_line(tmp_path: Path) -> Path:
    """An object whose last segment's line detaches partition 1 (rows 1, 3)."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO t VALUES (1), (2), (3)")
        obj.flush()
        obj.execute("INSERT INTO t VALUES (5)")
        obj.flush()
    _tamper(url, ["ALTER TABLE t DETACH PARTITION 1"])
    return url


def test_a_committed_line_that_detaches_still_replays(tmp_path: Path) -> None:
    url = _detached_by_a_committed_line(tmp_path)
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT k FROM t ORDER BY k") == [(2,)]


def test_no_checkpoint_while_a_statement_detached_a_part(tmp_path: Path) -> None:
    """An object whose WAL detaches (written before the refusal, or by
    chdb.durable): its writer's checkpoint is refused while the parts are
    detached (the base would leave them out, and an ATTACH then brought
    their rows back on the writer alone); once attached, it checkpoints and
    every replica agrees."""
    url = _detached_by_a_committed_line(tmp_path)
    with durable_obj.open(str(url), owner="w", close_fold_segments=0) as obj:
        with pytest.raises(durable_obj.InvalidArgument, match="detached part"):
            obj.checkpoint()
        obj.execute("ALTER TABLE t ATTACH PARTITION 1")
        obj.checkpoint()
        written = obj.rows("SELECT k FROM t ORDER BY k")
    assert written == [(1,), (2,), (3,)]
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT k FROM t ORDER BY k") == written
