"""What a write does, a checkpoint carries, or the write is refused.

* A lightweight UPDATE keeps its new values in a patch part, which BACKUP leaves out
  (measured, chDB 26.9): a replica restored from the next base read the
  values from before the UPDATE. A checkpoint now applies the patches
  first (`archives._apply_patches`).
* UNDROP TABLE brings a table back from the engine's dropped tables, which
  no base carries: a checkpoint between the DROP and the UNDROP left an
  object that never opened again (`Corrupt` at replay). A live UNDROP is
  refused; a committed one (an object written before, or by chdb.durable)
  still replays as it did.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from tests.integration.test_gate_round3 import _tamper

PATCHED = (
    "CREATE TABLE t (k UInt64, v UInt64) ENGINE = MergeTree PARTITION BY k % 2 ORDER BY k "
    "SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1"
)
ROWS = "SELECT k, v FROM t ORDER BY k"

_OPS = st.one_of(
    st.tuples(st.just("insert"), st.lists(st.integers(0, 40), min_size=1, max_size=4), st.just(0)),
    st.tuples(st.just("update"), st.integers(0, 2), st.integers(0, 99)),
    st.tuples(st.just("alter_heavy"), st.integers(0, 2), st.integers(0, 99)),
    st.tuples(st.just("delete"), st.integers(0, 4), st.just(0)),
    st.tuples(st.just("optimize"), st.just(0), st.just(0)),
    st.tuples(st.just("checkpoint"), st.just(0), st.just(0)),
)


def _run(obj: durable_obj.DurableObject, op: tuple[str, object, object]) -> None:
    kind, a, b = op
    if kind == "insert":
        assert isinstance(a, list)
        obj.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, {k})" for k in a))
    elif kind == "update":
        obj.execute(f"UPDATE t SET v = v + {b} WHERE k % 3 = {a}")
    elif kind == "alter_heavy":
        obj.execute(f"ALTER TABLE t UPDATE v = v * 2 + {b} WHERE k % 3 = {a}")
    elif kind == "delete":
        obj.execute(f"DELETE FROM t WHERE k % 5 = {a}")
    elif kind == "optimize":
        obj.execute("OPTIMIZE TABLE t FINAL")
    else:
        obj.checkpoint()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_OPS, min_size=1, max_size=10))
def test_a_replica_of_every_checkpoint_holds_the_updated_rows(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object, object]]
) -> None:
    """Any run of lightweight and heavy updates, deletes, merges and
    checkpoints, ending in a checkpoint: a replica restored from the base
    (and from the base with the WAL after it, mid-way) reads what the
    writer reads."""
    url = str(tmp_path_factory.mktemp("lw") / "o")
    with durable_obj.open(url, owner="w", close_fold_segments=0) as obj:
        obj.execute(PATCHED)
        obj.execute("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3), (4, 4)")
        for op in ops:
            _run(obj, op)
        obj.flush()
        mid_way = obj.rows(ROWS)
        with durable_obj.open(url, read_only=True) as replica:
            assert replica.rows(ROWS) == mid_way
        obj.checkpoint()
        assert obj.rows(ROWS) == mid_way
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows(ROWS) == mid_way


def test_an_update_before_a_checkpoint_reaches_the_replica(tmp_path: Path) -> None:
    """The attack's repro: one UPDATE, one checkpoint. A second checkpoint
    with nothing new applies nothing again (the patch is judged applied
    once every part's data version is past it)."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(PATCHED)
        obj.execute("INSERT INTO t VALUES (1, 1), (2, 2)")
        obj.execute("UPDATE t SET v = 10 WHERE k = 1")
        obj.checkpoint()
        applied = obj.rows("SELECT count() FROM system.mutations WHERE table = 't'")
        obj.checkpoint()
        assert obj.rows("SELECT count() FROM system.mutations WHERE table = 't'") == applied
        assert applied != [(0,)]
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows(ROWS) == [(1, 10), (2, 2)]


UNDROPS = [
    "UNDROP TABLE t",
    "undrop table t",
    "/* c */ UNDROP TABLE t",
    "UNDROP -- c\n TABLE `t`",
    "UNDROP TABLE default.t",
    "UNDROP TABLE t ON CLUSTER default",
    "  UNDROP TABLE t;",
]


@pytest.mark.parametrize("sql", UNDROPS)
def test_undrop_is_refused(tmp_path: Path, sql: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1)")
        obj.execute("DROP TABLE t")
        obj.checkpoint()
        pending = obj.pending
        for run in (obj.execute, obj.write):
            with pytest.raises(durable_obj.ClassificationRefused, match="UNDROP"):
                run(sql)
        assert obj.pending == pending  # nothing logged
        assert obj.rows("SELECT count() FROM system.tables WHERE name = 't'") == [(0,)]
    with durable_obj.open(str(tmp_path / "o"), read_only=True) as replica:
        assert replica.rows("SELECT count() FROM system.tables WHERE name = 't'") == [(0,)]


def test_undrop_is_refused_async(tmp_path: Path) -> None:
    async def main() -> None:
        obj = await durable_obj.aopen(str(tmp_path / "o"), owner="w")
        try:
            await obj.aexecute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
            await obj.aexecute("DROP TABLE t")
            with pytest.raises(durable_obj.ClassificationRefused, match="UNDROP"):
                await obj.aexecute("UNDROP TABLE t")
        finally:
            await obj.aclose()

    asyncio.run(main())


def test_a_committed_undrop_still_replays(tmp_path: Path) -> None:
    """An object whose WAL drops and undrops a table with no checkpoint
    between (written before the refusal, or by chdb.durable) opens as it
    did, with the table's rows."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1), (2)")
        obj.flush()
        obj.execute("INSERT INTO t VALUES (3)")
        obj.flush()
    _tamper(url, ["DROP TABLE t", "UNDROP TABLE t"])
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT k FROM t ORDER BY k") == [(1,), (2,)]


def test_a_patch_the_parts_cannot_take_fails_the_checkpoint_clearly(tmp_path: Path) -> None:
    """An UPDATE a projection's expression cannot compute (intDiv by the
    new 0) is accepted, but its patch cannot be applied: the checkpoint
    says so and what to do, leaves no failed mutation behind (it failed the
    table's next ALTER before), and takes the base once the rows are fixed."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(
            "CREATE TABLE t (k UInt64, v UInt64, "
            "PROJECTION p (SELECT k, intDiv(100, v) AS q ORDER BY q)) ENGINE = MergeTree "
            "ORDER BY k SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1"
        )
        obj.execute("INSERT INTO t VALUES (1, 1), (2, 2)")
        obj.execute("UPDATE t SET v = 0 WHERE k = 1")
        with pytest.raises(durable_obj.EngineError, match=r"cannot be applied.*UPDATE those rows"):
            obj.checkpoint()
        assert obj.rows("SELECT count() FROM system.mutations WHERE NOT is_done") == [(0,)]
        obj.execute("UPDATE t SET v = 4 WHERE k = 1")
        obj.checkpoint()
        written = obj.rows(ROWS)
    assert written == [(1, 4), (2, 2)]
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows(ROWS) == written


@pytest.mark.parametrize("tail", ["TRUNCATE TABLE t", "ALTER TABLE t DROP PARTITION 1"])
def test_a_patch_with_no_part_left_is_not_applied_again(tmp_path: Path, tail: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute(PATCHED)
        obj.execute("INSERT INTO t VALUES (1, 1), (3, 3)")
        obj.execute("UPDATE t SET v = 9 WHERE k = 1")
        obj.execute(tail)
        for _ in range(3):
            obj.checkpoint()
        applied = "SELECT count() FROM system.mutations WHERE command = '(APPLY PATCHES)'"
        assert obj.rows(applied) == [(0,)]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE `a``b` (k UInt8) ENGINE = Memory",
        'CREATE TABLE "a`b" (k UInt8) ENGINE = Memory',
        "CREATE TABLE `a\tb` (k UInt8) ENGINE = Memory",
        "CREATE TABLE `a\nb` (k UInt8) ENGINE = Memory",
        "CREATE TABLE c (`x``y` UInt8) ENGINE = Memory",
        "CREATE VIEW v AS SELECT 1 AS `a``b`",
        "ALTER TABLE t RENAME COLUMN v TO `v``2`",
        "RENAME TABLE t TO `t``2`",
    ],
)
def test_a_name_the_engine_writes_escaped_is_refused(tmp_path: Path, sql: str) -> None:
    """The engine writes such a name escaped in the definition a base
    carries, and a restored base with an escaped name is refused: before,
    the object never opened again after its next checkpoint."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(PATCHED)
        with pytest.raises(durable_obj.ClassificationRefused, match="backtick"):
            obj.execute(sql)
        obj.execute('CREATE TABLE "a""b" (k UInt8) ENGINE = Memory')  # printed unescaped
        obj.checkpoint()
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows('SELECT count() FROM `a"b`') == [(0,)]


def test_a_materialized_view_s_inner_table_is_not_named_by_a_write(tmp_path: Path) -> None:
    """Its name holds a UUID a replay picks anew: a logged statement naming
    it failed there, and the object never opened again."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE src (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute(
            "CREATE MATERIALIZED VIEW mv ENGINE = MergeTree ORDER BY k AS SELECT k FROM src"
        )
        (inner,) = obj.rows("SELECT name FROM system.tables WHERE name LIKE '.inner%'")[0]
        for sql in (
            f"INSERT INTO `{inner}` VALUES (1)",
            f"INSERT INTO src SELECT k FROM `{inner}`",
            f"INSERT INTO src VALUES ((SELECT count() FROM `{inner}`))",
            f"ALTER TABLE `{inner}` DELETE WHERE 1",
            f"CREATE VIEW v AS SELECT * FROM `{inner}`",
        ):
            with pytest.raises(durable_obj.ClassificationRefused, match="inner table"):
                obj.execute(sql)
        obj.execute("INSERT INTO mv VALUES (5)")
        assert obj.rows(f"SELECT k FROM `{inner}`") == [(5,)]  # a read may
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows("SELECT k FROM mv") == [(5,)]


def test_a_definition_s_own_uuid_is_refused(tmp_path: Path) -> None:
    """The process's engine shares UUIDs: a replica in the same process
    could not make the table again (`Corrupt`, a folder already exists)."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        with pytest.raises(durable_obj.ClassificationRefused, match="UUID"):
            obj.execute(
                "CREATE TABLE u UUID '11111111-1111-1111-1111-111111111111' (k UInt8) "
                "ENGINE = Memory"
            )
        obj.execute(
            "CREATE TABLE w (uuid UUID DEFAULT '11111111-1111-1111-1111-111111111111') "
            "ENGINE = Memory"
        )


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE VIEW v AS SELECT concat(s, '\\n') FROM t",
        "CREATE TABLE c ENGINE = Memory AS SELECT 'a`b'",
        "CREATE TABLE c ENGINE = Memory AS SELECT 'a\\\\b'",
        "CREATE MATERIALIZED VIEW m ENGINE = Memory AS SELECT concat(s, '\\t') FROM t",
    ],
)
def test_a_column_named_by_an_escaped_expression_is_refused(tmp_path: Path, sql: str) -> None:
    """No token shows such a name: the engine names the column by the
    expression's text. Found after the statement ran, it is refused and the
    local copy is rebuilt without it; before, the object did not open after
    its next checkpoint. Named with AS, the same statement is kept."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        pending = obj.pending
        with pytest.raises(durable_obj.ClassificationRefused, match="Name it with AS"):
            obj.execute(sql)
        assert obj.pending == pending
        assert obj.rows("SELECT name FROM system.tables ORDER BY name") == [("t",)]
        obj.execute("CREATE VIEW v AS SELECT concat(s, '\\n') AS line FROM t")
        obj.checkpoint()
    with durable_obj.open(url, read_only=True) as replica:
        assert replica.rows("SELECT name FROM system.tables ORDER BY name") == [("t",), ("v",)]


def test_a_statement_that_is_no_str_is_an_invalid_argument(tmp_path: Path) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        for call in (obj.execute, obj.query, obj.rows, obj.dicts):
            for value in (None, b"SELECT 1", 5):
                with pytest.raises(durable_obj.InvalidArgument, match="a str of SQL"):
                    call(value)  # type: ignore[arg-type]


def test_a_name_inside_a_type_the_engine_escapes_is_refused(tmp_path: Path) -> None:
    """A tuple's element named in a CAST's type string: no token shows it,
    and the engine prints it escaped in the definition."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        with pytest.raises(durable_obj.ClassificationRefused, match="Name it with AS"):
            obj.execute("CREATE VIEW v AS SELECT CAST(tuple(1), 'Tuple(`a\\\\nb` Int8)') AS x")
        obj.execute("CREATE VIEW w AS SELECT CAST(tuple(1), 'Tuple(`a b` Int8)') AS x")
        obj.checkpoint()


def test_a_replayed_definition_no_base_could_hold_refuses_the_checkpoint(tmp_path: Path) -> None:
    """A committed line (written before the check, or by chdb.durable) made
    a view whose base would not open: the checkpoint is refused, saying so,
    and the object keeps opening from its WAL; once the view is dropped the
    checkpoint is taken."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        obj.flush()
        obj.execute("INSERT INTO t VALUES ('a')")
        obj.flush()
    _tamper(url, ["CREATE VIEW v AS SELECT concat(s, '\\n') FROM t"])
    with durable_obj.open(str(url), owner="w", close_fold_segments=0) as obj:
        refused = pytest.raises(durable_obj.InvalidArgument, match="would not open")
        with refused:
            obj.checkpoint()
    with durable_obj.open(str(url), owner="w", close_fold_segments=0) as obj:
        obj.execute("DROP VIEW v")
        obj.checkpoint()
    with durable_obj.open(str(url), read_only=True) as replica:
        assert replica.rows("SELECT name FROM system.tables ORDER BY name") == [("t",)]
