"""What the gate's checks know of an object's tables (`durable_obj.gate.known`).

An open reads system.tables and system.columns once, for every check; what
was read is forgotten after every statement but an INSERT, so no check
judges a statement by a table or view as it was before a change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.core.object import DurableObject
from durable_obj.replica import turn


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement sent to the engine while the test runs."""
    out: list[str] = []
    query = turn.Turned.query

    def spy(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        out.append(sql)
        return query(self, sql, *args, **kwargs)

    monkeypatch.setattr(turn.Turned, "query", spy)
    yield out


def _catalog_reads(sent: list[str]) -> list[str]:
    return [sql for sql in sent if "system.tables" in sql or "system.columns" in sql]


def test_an_open_reads_the_catalog_once(tmp_path: Path, sent: list[str]) -> None:
    """Restoring a base with a view, replaying a WAL onto it and writing:
    the restored base's check, replay's batching, the pinner's views and
    an INSERT's defaults all come from one read (four before)."""
    ns = durable_obj.Namespace(str(tmp_path), owner="w")
    with ns.open("o") as obj:
        obj.execute(
            "CREATE TABLE t (k UInt64, at DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY k"
        )
        obj.execute("CREATE VIEW v AS SELECT k FROM t")
        obj.execute("INSERT INTO t (k) VALUES (1)")
        obj.checkpoint()
        obj.execute("INSERT INTO t (k) VALUES (2)")
        obj.execute("INSERT INTO t (k) VALUES (3)")
    sent.clear()
    with ns.open("o") as obj:
        obj.execute("INSERT INTO t (k) VALUES (4)")
        obj.execute("INSERT INTO t SELECT k + 10, toDateTime(0) FROM v")
        assert obj.rows("SELECT count() FROM t") == [(8,)]
    reads = _catalog_reads(sent)
    assert len(reads) == 1, reads
    assert "system.columns" in reads[0] and "system.tables" in reads[0]


def _writer(tmp_path: Path) -> tuple[durable_obj.Namespace, DurableObject]:
    ns = durable_obj.Namespace(str(tmp_path), owner="w")
    obj = ns.open("o")
    obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
    obj.execute("INSERT INTO t VALUES (1)")  # the pinner reads the views and columns
    return ns, obj


def test_a_view_made_after_a_read_is_judged_as_it_is(tmp_path: Path) -> None:
    """What was known had no views; a view of the clock made since must
    refuse a write that reads it, and one redefined as plain must not."""
    _, obj = _writer(tmp_path)
    with obj:
        obj.execute("CREATE VIEW v AS SELECT toUInt64(now()) AS k")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="the view v "):
            obj.execute("INSERT INTO t SELECT k FROM v")
        obj.execute("CREATE OR REPLACE VIEW v AS SELECT toUInt64(7) AS k")
        obj.execute("INSERT INTO t SELECT k FROM v")
        assert obj.rows("SELECT k FROM t ORDER BY k") == [(1,), (7,)]


def test_a_default_added_after_a_read_is_pinned(tmp_path: Path) -> None:
    """What was known gave `r` a constant default; its default of chance
    since is pinned in the logged INSERT, so a replica reads the writer's
    value."""
    ns, obj = _writer(tmp_path)
    with obj:
        obj.execute("ALTER TABLE t ADD COLUMN r UInt64 DEFAULT 0")
        obj.execute("ALTER TABLE t UPDATE r = 0 WHERE 1")
        obj.execute("INSERT INTO t (k) VALUES (2)")  # known: r DEFAULT 0
        obj.execute("ALTER TABLE t MODIFY COLUMN r UInt64 DEFAULT rand64()")
        obj.execute("INSERT INTO t (k) VALUES (3)")
        written = obj.rows("SELECT r FROM t WHERE k = 3")
        assert written != [(0,)]
        obj.flush()
        with ns.open("o", read_only=True) as replica:
            assert replica.rows("SELECT r FROM t WHERE k = 3") == written


def test_a_statement_that_fails_still_forgets(tmp_path: Path) -> None:
    """A statement that is not an INSERT may change the catalog even when
    it fails: what was known is dropped either way."""
    _, obj = _writer(tmp_path)
    with obj:
        engine = obj._local.engine
        assert engine is not None
        assert engine.known.of(engine, "default") is not None
        with pytest.raises(durable_obj.errors.DurableError):
            obj.execute("ALTER TABLE t ADD COLUMN k UInt8")  # k exists
        assert engine.known._kept is None


def test_replay_does_not_merge_into_a_table_that_gained_a_view(tmp_path: Path) -> None:
    """INSERTs replayed into a table with no dependent view are merged.
    After a materialized view on it is made, in the same segment, each
    INSERT must reach the view as its own block, as it did in the writer:
    the view here counts the rows of each block it is given."""
    ns = durable_obj.Namespace(str(tmp_path), owner="w")
    with ns.open("o") as obj:
        obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE TABLE blocks (n UInt64) ENGINE = MergeTree ORDER BY n")
        obj.execute("INSERT INTO t VALUES (1)")
        obj.execute("INSERT INTO t VALUES (2)")
        obj.execute("CREATE MATERIALIZED VIEW mv TO blocks AS SELECT count() AS n FROM t")
        obj.execute("INSERT INTO t VALUES (3)")
        obj.execute("INSERT INTO t VALUES (4)")
        written = obj.rows("SELECT n FROM blocks ORDER BY n")
        assert written == [(1,), (1,)]
    with ns.open("o", read_only=True) as replica:
        assert replica.rows("SELECT n FROM blocks ORDER BY n") == written
        assert replica.rows("SELECT count() FROM t") == [(4,)]


def test_a_checkpoint_judges_the_tables_as_they_are_now(tmp_path: Path) -> None:
    """What was known had no detached table and no Set table; a checkpoint
    after one appears is refused, and one after it is gone is taken."""
    _, obj = _writer(tmp_path)
    with obj:
        obj.checkpoint()  # what is known is kept: nothing changed since
        obj.execute("DETACH TABLE t")
        with pytest.raises(durable_obj.errors.InvalidArgument, match=r"table\(s\) t are detached"):
            obj.checkpoint()
        obj.execute("ATTACH TABLE t")
        obj.checkpoint()
        obj.execute("INSERT INTO t VALUES (2)")
        obj.execute("CREATE TABLE s (k UInt64) ENGINE = Set")
        with pytest.raises(durable_obj.errors.InvalidArgument, match=r"s \(Set\)"):
            obj.checkpoint()
        obj.execute("DROP TABLE s")
        obj.checkpoint()
        assert obj.rows("SELECT k FROM t ORDER BY k") == [(1,), (2,)]
