"""The reads the gate let through, kept until the catalog may change
(`durable_obj.gate.known.Known.reads`, `durable_obj.gate.pipeline.Gate.read`).

A read's check asks the engine what the text resolves to (EXPLAIN QUERY
TREE), which costs as much as a short read itself. The same text passes
again unchecked until a statement that is not an INSERT runs (or fails),
a replayed line changes the catalog, or a base is restored; a text whose
tree the engine would not print, or that was refused, is never kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.gate.pipeline import READ_KEPT_CHARS, READS_KEPT
from durable_obj.replica import turn

READ = "SELECT count() FROM t"
TREE = "EXPLAIN QUERY TREE " + READ


@pytest.fixture
def trees(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every EXPLAIN QUERY TREE sent to the engine while the test runs."""
    out: list[str] = []
    query = turn.Turned.query

    def spy(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        if sql.startswith("EXPLAIN QUERY TREE"):
            out.append(sql)
        return query(self, sql, *args, **kwargs)

    monkeypatch.setattr(turn.Turned, "query", spy)
    yield out


def _obj(tmp_path: Path) -> Any:
    obj = durable_obj.Namespace(str(tmp_path), owner="w").open("o")
    obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
    obj.execute("INSERT INTO t VALUES (1)")
    return obj


def test_a_read_is_checked_once_until_a_statement_but_an_insert(
    tmp_path: Path, trees: list[str]
) -> None:
    with _obj(tmp_path) as obj:
        trees.clear()
        for _ in range(3):
            assert obj.rows(READ) == [(1,)]
        assert trees.count(TREE) == 1
        obj.execute("INSERT INTO t VALUES (2)")  # the catalog is as it was
        assert obj.rows(READ) == [(2,)]
        assert trees.count(TREE) == 1
        obj.execute("CREATE VIEW v AS SELECT k FROM t")
        assert obj.rows(READ) == [(2,)]
        assert trees.count(TREE) == 2  # checked again
        with pytest.raises(durable_obj.errors.DurableError):
            obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")  # it exists
        assert obj.rows(READ) == [(2,)]
        assert trees.count(TREE) == 3  # a statement that failed may have changed it too


def test_a_table_replaced_by_a_view_is_resolved_again(tmp_path: Path) -> None:
    """The kept text named a table; the same name is now a view of another
    table: what it reads is what the view reads, judged as it is now."""
    with _obj(tmp_path) as obj:
        assert obj.rows(READ) == [(1,)]
        obj.execute("CREATE TABLE u (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO u VALUES (7), (8)")
        obj.execute("DROP TABLE t")
        obj.execute("CREATE VIEW t AS SELECT k FROM u")
        assert obj.rows(READ) == [(2,)]
        assert obj._require_open().known.reads  # kept again once checked


def test_a_read_whose_tree_did_not_print_is_never_kept(tmp_path: Path, trees: list[str]) -> None:
    """EXPLAIN fails on a table that does not exist (the read then fails
    as it runs): nothing was proved of the text, so it is checked again."""
    with _obj(tmp_path) as obj:
        trees.clear()
        for _ in range(2):
            with pytest.raises(durable_obj.errors.DurableError, match="nope"):
                obj.rows("SELECT count() FROM nope")
        assert len(trees) == 2
        assert not obj._require_open().known.reads


def test_a_refused_read_is_never_kept(tmp_path: Path) -> None:
    with _obj(tmp_path) as obj:
        for _ in range(2):
            with pytest.raises(durable_obj.errors.ClassificationRefused):
                obj.rows("SELECT * FROM file('/etc/passwd')")
        assert not obj._require_open().known.reads


def test_what_is_kept_is_bounded(tmp_path: Path, trees: list[str]) -> None:
    with _obj(tmp_path) as obj:
        for n in range(READS_KEPT + 8):
            assert obj.rows(f"SELECT count() + {n} FROM t") == [(1 + n,)]
        reads = obj._require_open().known.reads
        assert len(reads) == READS_KEPT
        assert f"SELECT count() + {READS_KEPT + 7} FROM t" in {key[0] for key in reads}
        assert "SELECT count() + 0 FROM t" not in {key[0] for key in reads}  # the oldest went
        values = ", ".join(str(n) for n in range(2, READ_KEPT_CHARS // 4))
        long = f"SELECT count() FROM t WHERE k NOT IN ({values})"
        trees.clear()
        obj.rows(long)
        obj.rows(long)
        assert len(trees) == 2  # a long text is checked each time


def test_a_follower_forgets_on_a_replayed_definition(tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path), owner="w")
    with ns.open("o") as writer:
        writer.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        writer.execute("INSERT INTO t VALUES (1)")
        writer.flush()
        with ns.open("o", read_only=True) as reader:
            assert reader.rows(READ) == [(1,)]
            reads = reader._require_open().known.reads
            assert reads
            writer.execute("INSERT INTO t VALUES (2)")
            writer.flush()
            assert reader.refresh() is True
            assert reads  # an INSERT changes no definition
            assert reader.rows(READ) == [(2,)]
            writer.execute("CREATE VIEW v AS SELECT k FROM t")
            writer.flush()
            assert reader.refresh() is True
            assert not reader._require_open().known.reads
            assert reader.rows("SELECT count() FROM v") == [(2,)]


def test_with_outside_reads_opted_in_nothing_is_kept(tmp_path: Path) -> None:
    """Whether file() stays in its folder depends on the files, not on the
    catalog: a file made a link out of the folder since the last read is
    refused (found by the attack round: the kept read returned the file
    outside)."""
    inside = tmp_path / "inside"
    inside.mkdir()
    outside = tmp_path / "outside.csv"
    outside.write_text("SECRET\n")
    target = inside / "a.csv"
    target.write_text("inside\n")
    sql = f"SELECT * FROM file('{target}', CSV, 'x String')"
    ns = durable_obj.Namespace(str(tmp_path / "store"), owner="w", external_reads=(str(inside),))
    with ns.open("o") as obj:
        assert obj.rows(sql) == [("inside",)]
        assert obj.rows("SELECT 1") == [(1,)]
        assert not obj._require_open().known.reads
        target.unlink()
        target.symlink_to(outside)
        with pytest.raises(durable_obj.errors.ClassificationRefused):
            obj.rows(sql)


def test_a_text_that_runs_long_is_not_kept(tmp_path: Path) -> None:
    """The limit holds for the text as it runs too: localizing a
    `system.` name writes it out at length."""
    with _obj(tmp_path) as obj:
        term = "(SELECT count() > 0 FROM system.tables)"
        short = f"SELECT {term}"
        names = " + ".join([term] * 10)
        long = f"SELECT {names}"
        assert len(long) <= READ_KEPT_CHARS
        assert obj.rows(short) == [(1,)]
        assert obj.rows(long) == [(10,)]
        reads = obj._require_open().known.reads
        assert [key[0] for key in reads] == [short]  # the long one runs at 5.5k


def test_a_read_carrying_a_credential_is_never_kept(tmp_path: Path) -> None:
    with _obj(tmp_path) as obj:
        key = "k" * 32
        sql = f"SELECT length(encrypt('aes-256-ofb', toString(k), '{key}')) FROM t"
        assert obj.rows(sql) == [(1,)]
        assert obj.rows(sql) == [(1,)]
        assert not obj._require_open().known.reads
