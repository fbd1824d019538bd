"""Messages name what the caller knows (issue 36 item 8): the object's own
table names (never the engine's table UUIDs or internal database), the call
the caller made, and the word that is wrong."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_obj
from durable_obj import aopen
from durable_obj.errors import ClassificationRefused, EngineError
from durable_obj.replica.messages import describe_syntax_error, without_table_uuids

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
KEYWORDS = frozenset({"INSERT", "INTO", "SELECT", "VALUES", "CREATE", "TABLE"})


@pytest.fixture
def obj(tmp_path: Path) -> Iterator[durable_obj.DurableObject]:
    with durable_obj.open(str(tmp_path / "ns" / "o")) as o:
        o.execute("CREATE TABLE log (a Int64) ENGINE = MergeTree ORDER BY a")
        o.execute("CREATE TABLE m (a Int64) ENGINE = Memory")
        yield o


@pytest.mark.parametrize("table", ["log", "m"])
def test_unknown_column_names_the_table_not_its_uuid(
    obj: durable_obj.DurableObject, table: str
) -> None:
    for sql in (
        f"INSERT INTO {table} (nope) VALUES (1)",
        f"INSERT INTO {table} (a, nope) SELECT 1, 2",
    ):
        with pytest.raises(EngineError) as info:
            obj.execute(sql)
        text = str(info.value)
        assert f"No such column nope in table default.{table}." in text
        assert not UUID.search(text) and obj._local.engine.database not in text  # type: ignore[attr-defined]
    obj.close()


def test_table_uuids_are_named_or_dropped() -> None:
    uid = "028b1d39-ac95-474e-89dc-728d01ef8b25"
    names = {uid: "default.t"}
    assert without_table_uuids(f"in table default.t ({uid}). (X)", names.get) == (
        "in table default.t. (X)"
    )
    assert without_table_uuids(f"Table {uid} is dropped", names.get) == "Table default.t is dropped"
    assert without_table_uuids(f"Table `{uid}` is dropped", {}.get) == "Table is dropped"
    assert without_table_uuids("no uuid here", names.get) == "no uuid here"


@pytest.mark.parametrize(
    ("sql", "word", "suggestion"),
    [
        ("INSRT INTO log VALUES (1)", "INSRT", "INSERT"),
        ("SELEC 1", "SELEC", "SELECT"),
        ("CREAT TABLE x (a Int8) ENGINE = Memory", "CREAT", "CREATE"),
        ("  DROPP TABLE log", "DROPP", "DROP"),
    ],
)
def test_an_unknown_first_word_is_pointed_at(
    obj: durable_obj.DurableObject, sql: str, word: str, suggestion: str
) -> None:
    pos = sql.index(word) + 1
    for call in (obj.execute, obj.write):
        with pytest.raises(ClassificationRefused) as info:
            call(sql)
        text = str(info.value)
        assert f"position {pos} ({word}): not a statement keyword" in text
        assert f"maybe you meant: {suggestion}" in text
        assert text.startswith(f"{call.__name__}() could not classify")
    obj.close()


def test_a_typo_later_keeps_the_engines_position_and_hint(obj: durable_obj.DurableObject) -> None:
    with pytest.raises(ClassificationRefused) as info:
        obj.execute("INSERT INTO log VALUE (1)")
    assert "position 17 (VALUE); maybe you meant: VALUES" in str(info.value)
    obj.close()


def test_the_message_names_the_call_made(obj: durable_obj.DurableObject) -> None:
    bad = "INSRT INTO log VALUES ('sekrit')"
    with pytest.raises(ClassificationRefused, match=r"^write\(\) could not classify"):
        obj.write("INSERT INTO log VALUES (1)", bad)
    refused = pytest.raises(ClassificationRefused, match=r"^batch\(\) could not classify")
    with refused as info, obj.batch():
        obj.execute(bad)
    assert "sekrit" not in str(info.value)
    with pytest.raises(ClassificationRefused, match=r"^query\(\) could not classify"):
        obj.query("SELEC 1")
    assert obj.rows("SELECT count() FROM log") == [(0,)]
    obj.close()


def test_the_async_message_names_the_async_call(tmp_path: Path) -> None:
    bad = "INSRT INTO log VALUES (1)"

    async def main() -> list[str]:
        said = []
        async with await aopen(str(tmp_path / "ns" / "a")) as a:
            await a.aexecute("CREATE TABLE log (a Int64) ENGINE = Memory")
            for run in (
                lambda: a.aexecute(bad),
                lambda: a.awrite(bad),
                lambda: a.aquery("SELEC 1"),
                lambda: a.arows("SELEC 1"),
            ):
                with pytest.raises(ClassificationRefused) as info:
                    await run()
                said.append(str(info.value))
            with pytest.raises(ClassificationRefused) as info:
                async with a.abatch():
                    await a.aexecute(bad)
            said.append(str(info.value))
        return said

    said = asyncio.run(main())
    calls = ["aexecute()", "awrite()", "aquery()", "arows()", "abatch()"]
    for text, call in zip(said, calls, strict=True):
        assert text.startswith(f"{call} could not classify"), text
        assert "position 1 (" in text


def test_describe_without_keywords_keeps_the_engines_position() -> None:
    message = "Syntax error: failed at position 12 (log): log VALUES (1). Expected end of query"
    sql = "INSRT INTO log VALUES (1)"
    assert describe_syntax_error(message, sql).startswith("syntax error at position 12 (log)")
    assert describe_syntax_error(message, sql, KEYWORDS) == (
        "syntax error at position 1 (INSRT): not a statement keyword; maybe you meant: INSERT"
    )
    # An expression statement (an implicit SELECT) whose first word is a call: the engine's.
    call = "now() foo bar"
    stop = "Syntax error: failed at position 11 (bar): bar. Expected one of: token"
    assert "position 11 (bar)" in describe_syntax_error(stop, call, KEYWORDS)


def test_a_hint_naming_another_database_is_dropped(obj: durable_obj.DurableObject) -> None:
    """The engine suggests a table of any database in the process; an
    object's message keeps only suggestions of its own tables."""
    from durable_obj.replica import server

    other = server.connect()
    other.query("CREATE DATABASE IF NOT EXISTS scratch_hint_36")
    other.query("CREATE TABLE IF NOT EXISTS scratch_hint_36.zebra_logs (a Int32) ENGINE = Memory")
    try:
        with pytest.raises(EngineError) as info:
            obj.execute("INSERT INTO zebra_log VALUES (1)")
        assert "scratch_hint_36" not in str(info.value)
        obj.execute("CREATE TABLE zebra_own (a Int32) ENGINE = Memory")
        with pytest.raises(EngineError, match=r"Maybe you meant default\.zebra_own"):
            obj.execute("INSERT INTO zebra_ow VALUES (1)")
    finally:
        other.query("DROP DATABASE IF EXISTS scratch_hint_36")
        other.close()
