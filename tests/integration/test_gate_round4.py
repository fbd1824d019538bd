"""The tree check cannot be skipped (found by attack on the refused-aggregate
change): a query the engine does not analyse under EXPLAIN is never run
unchecked, the query inside an EXPLAIN or a DESCRIBE is checked too, and a
function called by `APPLY` is one the text check sees.

Objects A and B are open in one process on a folder store; B holds a
secret, and a host file sits beside them. Every hostile statement is tried
through A's reads, writes, async face and replay; afterwards neither the
host file's text nor B's secret was ever shown or stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core.object import DurableObject
from tests.integration.test_gate_round3 import _object_with_segment, _tamper
from tests.tenants import two_tenants

SECRET = "SECRET-round4"
HOST = "HOST-round4"
FOLDED = "arrayReduce(concat('stochasticLinear', 'Regression'), [1., 2.], [2., 4.])"
REFUSALS = (errors.ClassificationRefused, errors.EngineError)


class World:
    def __init__(self, root: Path, a: DurableObject, b: DurableObject) -> None:
        self.root, self.a, self.b = root, a, b
        self.host = root / "host.txt"
        self.host.write_text(HOST + "\n")
        self.wal = str(next((root / "b" / "wal").glob("*.jsonl")))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("round4")
    with two_tenants(root, SECRET) as (a, b):
        yield World(root, a, b)


def _reads(w: World) -> list[str]:
    host = w.host
    return [
        # an alias named `format` cut the text EXPLAIN was given: no tree
        f"SELECT * APPLY file, 1 AS format FROM (SELECT '{host}' AS x)",
        f"SELECT * APPLY file, 1 AS format FROM (SELECT '{w.wal}' AS x)",
        f"SELECT {FOLDED} AS w, 1 AS format FROM numbers(1)",
        # APPLY calls a function without its parentheses
        f"SELECT * APPLY file FROM (SELECT '{host}' AS x)",
        f"SELECT * APPLY(file) FROM (SELECT '{host}' AS x)",
        f"SELECT COLUMNS('x') APPLY file FROM (SELECT '{host}' AS x)",
        # an EXPLAIN or a DESCRIBE folds its query's constants, and prints them
        f"EXPLAIN header = 1 SELECT * APPLY file FROM (SELECT '{host}' AS x)",
        f"EXPLAIN SELECT {FOLDED}",
        f"EXPLAIN PIPELINE SELECT {FOLDED}",
        f"DESCRIBE (SELECT {FOLDED} AS w)",
        # a query that runs, but is too long to EXPLAIN
        _padded(f"SELECT {FOLDED} AS w, '' AS pad", 262_135),
    ]


def _padded(sql: str, size: int) -> str:
    """`sql` with its string literal '' grown to make it `size` characters:
    within the engine's max_query_size (262,144), but not with the 19 of
    "EXPLAIN QUERY TREE " before it."""
    return sql.replace("''", "'" + "p" * (size - len(sql)) + "'")


@pytest.mark.parametrize("index", range(11))
def test_a_read_the_tree_check_cannot_see_does_not_run(world: World, index: int) -> None:
    sql = _reads(world)[index]
    with pytest.raises(REFUSALS) as info:
        world.a.query(sql)
    assert HOST not in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(REFUSALS):
        world.a.rows(sql)

    async def main() -> None:
        async with await durable_obj.aopen(str(world.root / "a-async"), owner="x") as o:
            with pytest.raises(REFUSALS):
                await o.aquery(sql)

    if index in (0, 6):
        asyncio.run(main())


def _writes(w: World) -> list[str]:
    host = w.host
    return [
        f"INSERT INTO t SELECT `file(x)` AS format FROM (SELECT * APPLY file FROM "
        f"(SELECT '{host}' AS x))",
        f"INSERT INTO t SELECT hex({FOLDED}) AS format FROM numbers(1)",
        f"CREATE VIEW v AS SELECT * APPLY file, 1 AS format FROM (SELECT '{host}' AS x)",
        f"CREATE TABLE c ENGINE = Memory AS SELECT * APPLY file FROM (SELECT '{host}' AS x)",
        f"CREATE VIEW pv AS SELECT {FOLDED} AS w, {{p:UInt8}} AS q",
        f"CREATE VIEW pv AS SELECT * APPLY file, {{p:UInt8}} AS q FROM (SELECT '{host}' AS x)",
    ]


@pytest.mark.parametrize("index", range(6))
def test_a_write_the_tree_check_cannot_see_does_not_run(world: World, index: int) -> None:
    sql = _writes(world)[index]
    before = world.a.query("SELECT s FROM t ORDER BY s"), world.a.query("SHOW TABLES")
    with pytest.raises(REFUSALS):
        world.a.execute(sql)
    assert (world.a.query("SELECT s FROM t ORDER BY s"), world.a.query("SHOW TABLES")) == before


@pytest.mark.parametrize("index", [0, 2])
def test_a_replayed_line_the_tree_check_cannot_see_is_corrupt(
    world: World, tmp_path: Path, index: int
) -> None:
    url = _object_with_segment(tmp_path, "o")
    _tamper(url, ["CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s", _writes(world)[index]])
    with pytest.raises(errors.Corrupt, match="statement 2"):
        durable_obj.open(str(url), read_only=True)


def test_what_the_fixes_must_not_refuse(tmp_path: Path) -> None:
    """A column named `format`, an EXPLAIN and a DESCRIBE of the object's own
    tables, a parameterized view, a read that fails gives the engine's error."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as o:
        o.execute("CREATE TABLE t (format String, n UInt8) ENGINE = MergeTree ORDER BY n")
        o.execute("INSERT INTO t VALUES ('csv', 1), ('tsv', 2)")
        assert o.query("SELECT format FROM t ORDER BY n", "TSV") == "csv\ntsv\n"
        assert o.query("SELECT n AS format FROM t WHERE n = 2", "TSV") == "2\n"
        assert o.query("SELECT n FROM t ORDER BY n FORMAT TSV") == "1\n2\n"
        assert "ReadFromMergeTree" in o.query("EXPLAIN SELECT n FROM t", "TSV")
        assert "UInt8" in o.query("DESCRIBE (SELECT n FROM t)", "TSV")
        assert "String" in o.query("DESCRIBE TABLE t", "TSV")
        assert o.rows("SELECT * APPLY toString FROM (SELECT 1 AS x)") == [("1",)]
        o.execute("CREATE VIEW pv AS SELECT n, format FROM t WHERE n = {p:UInt8}")
        assert o.rows("SELECT format FROM pv(p = 2)") == [("tsv",)]
        with pytest.raises(errors.EngineError, match="Unknown expression identifier"):
            o.query("SELECT nope FROM t")
        with pytest.raises(errors.EngineError, match="Unknown expression identifier"):
            o.execute("INSERT INTO t SELECT nope, 1")
        o.flush()
    with durable_obj.open(str(tmp_path / "o"), read_only=True) as again:
        assert again.rows("SELECT format FROM pv(p = 1)") == [("csv",)]


def test_a_statement_that_is_not_unicode_text_is_refused_without_its_text(world: World) -> None:
    """chDB's binding refused a lone surrogate with a message that quoted
    the statement (which may carry a credential)."""
    sql = "SELECT 'key-round4\ud800'"
    for read in (world.a.query, world.a.rows, world.a.query_bytes):
        with pytest.raises(errors.InvalidArgument, match="lone surrogate") as info:
            read(sql)
        assert "key-round4" not in str(info.value)
    with pytest.raises(errors.DurableError) as caught:
        world.a.execute(sql)
    assert "key-round4" not in str(caught.value)


def test_no_setting_writes_a_file(world: World) -> None:
    """Found by attack: `output_format_schema` had the engine write a
    Protobuf answer's schema to any path (over another object's WAL, or a
    `.pth` file with lines chosen by aliases), through every read path."""
    target = world.root / "written.proto"
    wal = Path(world.wal)
    before = wal.read_bytes()
    for path in (target, wal):
        sql = f"SELECT 1 AS x SETTINGS output_format_schema = '{path}'"
        with pytest.raises(errors.ClassificationRefused, match="output_format_schema"):
            world.a.query(sql + " FORMAT ProtobufSingle")
        with pytest.raises(errors.ClassificationRefused, match="output_format_schema"):
            world.a.query_bytes(sql, "ProtobufSingle")
        with pytest.raises(errors.ClassificationRefused, match="output_format_schema"):
            world.a.execute(f"CREATE VIEW vs AS {sql}")

    async def over_mcp() -> Any:
        from mcp import Client

        from durable_obj.mcp import build_server

        async with Client(build_server(world.a, allow_sql=True)) as client:
            return await client.call_tool(
                "sql",
                {
                    "statement": "SELECT 1 AS x FORMAT ProtobufSingle SETTINGS "
                    f"output_format_schema = '{target}'"
                },
            )

    asyncio.run(over_mcp())
    assert not target.exists() and wal.read_bytes() == before
    with pytest.raises(errors.ClassificationRefused, match="format_display_secrets"):
        world.a.query("SELECT 1 SETTINGS format_display_secrets_in_show_and_select = 1")
    assert world.a.query("SELECT 1 SETTINGS output_format_json_quote_64bit_integers = 1") == "1\n"


def test_what_a_failed_read_wrote_never_starts_the_next_answer(tmp_path: Path) -> None:
    """chDB put the output a query wrote before it failed in front of the
    connection's next answer: here, the next statement's canonical text."""
    with durable_obj.open(str(tmp_path / "o"), owner="w") as o:
        o.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        o.execute("INSERT INTO t VALUES ('keep')")
        for fmt in ("TSVRaw", "JSONEachRow"):
            with pytest.raises(errors.EngineError, match="throwIf"):
                o.query(
                    "SELECT 'DELETE FROM t WHERE 1 -- ' AS s FROM numbers(100000) "
                    "WHERE throwIf(number > 50000) = 0 SETTINGS max_block_size = 100",
                    fmt,
                )
            o.execute(f"/* {fmt} */ INSERT INTO t VALUES ('{fmt}')")
            assert o.query("SELECT count() FROM t", "TSVRaw") == f"{2 + (fmt != 'TSVRaw')}\n"
        with pytest.raises(errors.EngineError):
            o.query_bytes(
                "SELECT number FROM numbers(100000) WHERE throwIf(number > 50000) = 0 "
                "SETTINGS max_block_size = 100",
                "Parquet",
            )
        assert o.rows("SELECT s FROM t ORDER BY s") == [("JSONEachRow",), ("TSVRaw",), ("keep",)]


def test_no_setting_reads_a_file_or_holds_an_insert(tmp_path: Path) -> None:
    """Found by attack: `output_format_orc_writer_time_zone_name` opened any
    file under the zone folder (`../`), and crashed the engine on some;
    MergeTree settings held each INSERT 30 s past a 2 s bound. Output
    settings are now an allow-list by name (`gate/outputs.py`)."""
    bound = durable_obj.Bounds(seconds=2)
    with durable_obj.open(str(tmp_path / "o"), owner="w", write_bounds=bound) as o:
        with pytest.raises(errors.ClassificationRefused, match="orc_writer_time_zone_name"):
            o.query_bytes(
                "SELECT now() SETTINGS output_format_orc_writer_time_zone_name = "
                "'../../../etc/passwd'",
                "ORC",
            )
        for setting in (
            "parts_to_delay_insert = 1, min_delay_to_insert_ms = 30000",
            "number_of_mutations_to_delay = 1, max_delay_to_mutate_ms = 30000",
            "fault_probability_before_part_commit = 1",
        ):
            with pytest.raises(errors.ClassificationRefused, match="the setting"):
                o.execute(
                    f"CREATE TABLE d (x Int32) ENGINE = MergeTree ORDER BY x SETTINGS {setting}"
                )
        o.execute(
            "CREATE TABLE d (x Int32) ENGINE = MergeTree ORDER BY x "
            "SETTINGS ratio_of_defaults_for_sparse_serialization = 0.9, index_granularity = 512"
        )
        assert o.query("SELECT 1 SETTINGS output_format_pretty_row_numbers = 0", "TSV") == "1\n"
        assert o.query_bytes("SELECT 1 AS x", "ORC")[:3] == b"ORC"
