"""A write may not store what a replay computes otherwise (`gate.volatile`):
rows a materialized view computes from a view of the clock, rows read from
a dictionary's cache, rows picked by a part's layout. Each was measured to
leave a replica with other rows than the writer; each is refused now, and
reads stay free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import durable_obj
from durable_obj.errors import Nondeterministic

_READ = (
    "import sys, durable_obj\n"
    "with durable_obj.open(sys.argv[1], read_only=True) as r:\n"
    "    print(r.rows(sys.argv[2]))"
)


def _replica_rows(url: str, sql: str) -> str:
    """What a replica in a fresh process reads (its own engine, its own clock)."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, url, sql], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _base(obj: durable_obj.DurableObject) -> None:
    obj.execute("CREATE TABLE src (k UInt64) ENGINE = MergeTree ORDER BY k")
    obj.execute("CREATE TABLE dst (k UInt64, t DateTime64(6)) ENGINE = MergeTree ORDER BY k")


def test_a_materialized_view_over_a_view_of_the_clock(tmp_path: Path) -> None:
    """Made after the view: refused when it is created. Made before the
    view turned volatile (CREATE OR REPLACE VIEW): the INSERT that would run
    it is refused, and so is one into a table down a chain of views."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        _base(obj)
        obj.execute("CREATE VIEW clock AS SELECT now64(6) AS t")
        with pytest.raises(Nondeterministic, match="the view clock computes"):
            obj.execute(
                "CREATE MATERIALIZED VIEW mv TO dst AS SELECT k, (SELECT t FROM clock) AS t "
                "FROM src"
            )
        obj.execute("CREATE OR REPLACE VIEW clock AS SELECT toDateTime64('2020-01-01', 6) AS t")
        obj.execute("CREATE TABLE mid (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE MATERIALIZED VIEW hop TO mid AS SELECT k FROM src")
        obj.execute(
            "CREATE MATERIALIZED VIEW mv TO dst AS SELECT k, (SELECT t FROM clock) AS t FROM mid"
        )
        obj.execute("INSERT INTO src VALUES (1)")  # deterministic so far: kept
        obj.execute("CREATE OR REPLACE VIEW clock AS SELECT now64(6) AS t")
        for table in ("src", "mid"):
            with pytest.raises(Nondeterministic, match=f"INSERT into {table} runs .* mv"):
                obj.execute(f"INSERT INTO {table} VALUES (2)")
        obj.execute("INSERT INTO dst VALUES (3, '2021-01-01 00:00:00')")  # runs no view
        obj.execute("DROP VIEW mv")
        obj.execute("INSERT INTO src VALUES (4)")
        obj.flush()
        written = obj.rows("SELECT k, toString(t) FROM dst ORDER BY k")
    assert written == [
        (1, "2020-01-01 00:00:00.000000"),
        (3, "2021-01-01 00:00:00.000000"),
    ]
    assert _replica_rows(url, "SELECT k, toString(t) FROM dst ORDER BY k") == str(written)


def test_a_dictionary_is_not_read_by_a_write(tmp_path: Path) -> None:
    """A dictionary answers from its last load: a write that read one
    stored the stale value on the writer and the fresh one on a replica."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE s (k UInt64, v UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE TABLE u (k UInt64, v UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute(
            "CREATE DICTIONARY d (k UInt64, v UInt64) PRIMARY KEY k "
            "SOURCE(CLICKHOUSE(TABLE 's')) LAYOUT(HASHED()) LIFETIME(MIN 300 MAX 600)"
        )
        obj.execute("CREATE VIEW vd AS SELECT k, v FROM d")
        obj.execute("INSERT INTO s VALUES (1, 1)")
        assert obj.rows("SELECT v FROM d") == [(1,)]  # a read loads it
        obj.execute("INSERT INTO s SELECT 1, 5")
        for sql, name in (
            ("INSERT INTO u SELECT k, v FROM d", "dictionary d"),
            ("INSERT INTO u SELECT s.k, d.v FROM s JOIN d ON s.k = d.k", "dictionary d"),
            ("INSERT INTO u SELECT * FROM vd", "view vd reads d"),
            ("CREATE TABLE c ENGINE = Memory AS SELECT * FROM d", "dictionary d"),
        ):
            with pytest.raises(Nondeterministic, match=name):
                obj.execute(sql)
        with pytest.raises(Nondeterministic, match="dictionary d"):
            obj.execute("CREATE MATERIALIZED VIEW m TO u AS SELECT s.k, d.v FROM s JOIN d USING k")
        assert obj.rows("SELECT count() FROM vd") == [(1,)]  # reads stay free


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO u SELECT k, _part_offset FROM t",
        "INSERT INTO u SELECT k, 0 FROM t WHERE _part = 'all_2_2_0'",
        "DELETE FROM t WHERE _part = 'all_2_2_0'",
        "ALTER TABLE t DELETE WHERE _block_number = 2",
        "ALTER TABLE t UPDATE k = k WHERE _part_index = 1",
        "INSERT INTO u SELECT * FROM by_part",
    ],
)
def test_a_write_that_reads_a_part_s_layout_is_refused(tmp_path: Path, sql: str) -> None:
    """A restore renames parts and replay merges INSERTs: before, `DELETE
    FROM t WHERE _part = 'all_2_2_0'` deleted a row on the writer and none
    on a replica."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE TABLE u (k UInt64, o UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE VIEW by_part AS SELECT k, _part_offset AS o FROM t")
        for k in (1, 2, 3):
            obj.execute(f"INSERT INTO t VALUES ({k})")
        with pytest.raises(Nondeterministic, match=r"_part|_block|by_part"):
            obj.execute(sql)
        assert len(obj.rows("SELECT _part, k FROM t")) == 3  # a read may
