"""What the gate's checks know of an object's tables (`durable_obj.gate.known`).

An open reads system.tables and system.columns once, for every check; what
was read is forgotten after every statement but an INSERT, so no check
judges a statement by a table or view as it was before a change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.core.object import DurableObject
from durable_obj.replica import turn
from tests.integration.test_gate_round3 import _tamper


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
        obj.checkpoint()  # what a checkpoint judges is kept
        engine = obj._local.engine
        assert engine is not None and engine.known._checkpointing is not None
        with pytest.raises(durable_obj.errors.DurableError):
            obj.execute("ALTER TABLE t ADD COLUMN k UInt8")  # k exists
        assert engine.known._checkpointing is None


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


#: A CREATE that our lexer, which does not nest comments, takes for an
#: INSERT; the engine, which does, runs the CREATE.
_DISGUISED = "/* /* */ INSERT */ "


def _committed(tmp_path: Path, lines: list[str]) -> Path:
    """An object whose last WAL segment is `lines` (as a V1 writer, or
    anyone with store access, may commit them), after t and blocks."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64, x UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE TABLE blocks (n UInt64) ENGINE = MergeTree ORDER BY n")
        obj.flush()
        obj.execute("INSERT INTO t VALUES (0, 0)")
        obj.flush()
    _tamper(url, lines)
    return url


def test_a_replayed_create_that_looks_like_an_insert_is_forgotten_after(tmp_path: Path) -> None:
    """Replay judges what changes the tables on the text the engine reads:
    the writer that opens after must see the view the line made."""
    url = _committed(
        tmp_path,
        [
            "INSERT INTO t VALUES (1, 1)",  # replay's batching reads the tables here
            _DISGUISED + "CREATE VIEW v AS SELECT toUInt64(rand64()) AS x",
        ],
    )
    with (
        durable_obj.open(str(url), owner="w") as obj,
        pytest.raises(durable_obj.errors.Nondeterministic, match="the view v "),
    ):
        obj.execute("INSERT INTO t SELECT 2, x FROM v")


def test_replay_does_not_merge_past_a_view_made_by_a_disguised_line(tmp_path: Path) -> None:
    """The materialized view made in between gets each later INSERT as its
    own block, as the writer that committed them ran them."""
    url = _committed(
        tmp_path,
        [
            "INSERT INTO t VALUES (1, 1)",
            _DISGUISED + "CREATE MATERIALIZED VIEW mv TO blocks AS SELECT count() AS n FROM t",
            "INSERT INTO t VALUES (2, 2)",
            "INSERT INTO t VALUES (3, 3)",
        ],
    )
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT n FROM blocks ORDER BY n") == [(1,), (1,)]


def test_what_a_statement_reads_of_the_tables_does_not_grow_with_their_definitions(
    tmp_path: Path, sent: list[str]
) -> None:
    """After a change, a statement's check reads one short row per table,
    inside the statement's own bounds: 90 tables whose definitions hold
    200 KB each (18 MB in all) leave an INSERT under a 16 MB bound free."""
    bounds = durable_obj.Bounds(seconds=30, memory_bytes=16_000_000)
    ns = durable_obj.Namespace(str(tmp_path), owner="w", write_bounds=bounds)
    with ns.open("o") as obj:
        engine = obj._local.engine
        assert engine is not None
        comment = "c" * 200_000
        for i in range(90):  # made in the engine directly: the gate's reading is not under test
            engine.run(
                f"CREATE TABLE {engine.database}.big{i} (k UInt64) ENGINE = MergeTree "
                f"ORDER BY k COMMENT '{comment}'"
            )
        obj.execute("CREATE TABLE s (k UInt64, at DateTime DEFAULT now()) ENGINE = Log")
        sent.clear()
        obj.execute("INSERT INTO s (k) VALUES (1)")
        obj.execute("INSERT INTO s (k) SELECT k FROM big0")
        assert obj.rows("SELECT k FROM s") == [(1,)]
    reads = _catalog_reads(sent)
    assert reads and not [sql for sql in reads if "create_table_query" in sql]


def test_a_base_after_a_memory_table_is_full_and_opens(tmp_path: Path) -> None:
    """A Memory table keeps no files of its own (has_own_data is 0), but
    its rows change in place: an increment over a base that holds one did
    not restore, and the object no longer opened."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t SELECT number FROM numbers(1000)")
        obj.execute("CREATE TABLE m (k UInt64) ENGINE = Memory")
        obj.execute("INSERT INTO m VALUES (1), (2)")
        obj.checkpoint()
        obj.execute("INSERT INTO t VALUES (5000)")
        obj.checkpoint()
    head = json.loads((tmp_path / "o" / "head.json").read_text())
    assert not head["manifest"].get("durable_obj", {}).get("chain")  # a full base
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows("SELECT count() FROM t") == [(1001,)]
        assert replica.rows("SELECT k FROM m ORDER BY k") == [(1,), (2,)]


@pytest.mark.parametrize(
    ("ddl", "inserts", "check"),
    [
        # one INSERT of them all would reach 101 partitions, over the engine's 100
        ("ENGINE = MergeTree PARTITION BY k ORDER BY k", 101, "SELECT count() FROM t"),
        # a Memory table that keeps its last 2 rows keeps the last 2 of each INSERT
        ("ENGINE = Memory SETTINGS max_rows_to_keep = 2", 5, "SELECT k FROM t ORDER BY k"),
        # a CHECK that reads the block holds for each INSERT, not for them all
        # (the gate refuses such a CHECK; an expert's allow_nondeterministic,
        # a base or a segment from elsewhere still brings one)
        (
            ", CONSTRAINT c CHECK blockSize() < 2) ENGINE = Log",
            3,
            "SELECT k FROM t ORDER BY k",
        ),
        # the block number and offset of each row are stored
        (
            "ENGINE = MergeTree ORDER BY tuple() SETTINGS enable_block_number_column = 1, "
            "enable_block_offset_column = 1",
            3,
            "SELECT _block_number, _block_offset, k FROM t ORDER BY k",
        ),
    ],
)
def test_replay_does_not_merge_where_one_insert_differs(
    tmp_path: Path, ddl: str, inserts: int, check: str
) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        columns = "(k UInt64" + ("" if ddl.startswith(",") else ") ")
        create = f"CREATE TABLE t {columns}{ddl}"
        if "CHECK" in ddl:
            with pytest.warns(RuntimeWarning, match="unchecked"):
                obj.execute(create, allow_nondeterministic=True)
        else:
            obj.execute(create)
        for k in range(inserts):
            obj.execute(f"INSERT INTO t VALUES ({k})")
        written = obj.rows(check)
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows(check) == written


def test_replay_merges_only_what_the_engine_reads_as_we_do(tmp_path: Path) -> None:
    """Lines whose head our lexer reads as an INSERT into one table (the
    quoted name) and the engine, which nests comments, as an INSERT into
    `b`, which a materialized view counts the blocks of: never merged."""
    url = tmp_path / "o"
    name = '"x*/ b /* */ VALUES /*"'
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE b (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE TABLE agg (c UInt64) ENGINE = MergeTree ORDER BY c")
        obj.execute("CREATE MATERIALIZED VIEW mv TO agg AS SELECT count() AS c FROM b")
        obj.execute(f"CREATE TABLE {name} (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.flush()
        obj.execute("INSERT INTO b VALUES (0)")
        obj.flush()
    _tamper(url, [f"INSERT INTO /* /* */ {name} VALUES ({n})" for n in (1, 2, 3)])
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT count() FROM b") == [(3,)]
        assert replica.rows("SELECT c FROM agg") == [(1,), (1,), (1,)]
