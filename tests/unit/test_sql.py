"""The pure SQL layer on its own: the parsers, the depth iterator, quoting."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from durable_obj.gate.defaults import ttl_clause
from durable_obj.gate.quoting import (
    quote_ident,
    quote_string,
    splice,
    type_in_zone,
    typed_literal,
    without_format,
)
from durable_obj.gate.shapes import evaluated_from, insert_shape
from durable_obj.gate.sql import (
    depth_zero,
    find_calls,
    is_insert,
    outermost,
    split_rows,
    tokenize,
    tokenize_head,
)
from durable_obj.replica import engine as engine_mod
from durable_obj.replica.engine import Engine


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    eng = engine_mod.acquire()
    try:
        yield eng
    finally:
        eng.release()


# -- insert_shape ---------------------------------------------------------------


def test_insert_shape_of_a_values_insert() -> None:
    sql = 'INSERT INTO db.`my t` (a, `b c`, "d") SETTINGS x = 1 VALUES (1, (2), [3]), (4, 5, 6);'
    tokens = tokenize(sql)
    shape = insert_shape(tokens)
    assert shape is not None
    assert (shape.database, shape.table) == ("db", "my t")
    assert shape.columns == ["a", "b c", "d"]
    assert shape.settings_at is not None and tokens[shape.settings_at].text == "SETTINGS"
    assert tokens[shape.head_end].text == "SETTINGS"
    assert shape.values_at is not None and tokens[shape.values_at].text == "VALUES"
    rows = [sql[tokens[a].start : tokens[b].end] for a, b in shape.rows]
    assert rows == ["(1, (2), [3])", "(4, 5, 6)"]
    assert shape.select_at is None


def test_insert_shape_of_an_insert_select() -> None:
    sql = "insert into table t SELECT (values) FROM (SELECT 1 AS values)"
    tokens = tokenize(sql)
    shape = insert_shape(tokens)
    assert shape is not None
    assert (shape.database, shape.table, shape.columns) == (None, "t", None)
    assert shape.values_at is None and shape.rows == []
    assert shape.select_at == 4
    with_tokens = tokenize("INSERT INTO t (a) WITH 1 AS x SELECT x")
    with_shape = insert_shape(with_tokens)
    assert with_shape is not None and with_shape.select_at is not None
    assert with_tokens[with_shape.select_at].text == "WITH"


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO FUNCTION file('x.csv') VALUES (1)",
        "SELECT 1",
        "INSERT t VALUES (1)",
        "INSERT INTO t (a VALUES (1)",
        "INSERT INTO t VALUES (1) FORMAT x",
        "INSERT INTO t VALUES 1, 2",
        "INSERT INTO",
    ],
)
def test_insert_shape_knows_what_it_cannot_read(sql: str) -> None:
    assert insert_shape(tokenize(sql)) is None


def test_insert_shape_format_has_no_values() -> None:
    shape = insert_shape(tokenize("INSERT INTO t FORMAT CSV"))
    assert shape is not None and shape.values_at is None and shape.select_at is None


def test_tokenize_head_stops_at_the_body_at_depth_zero() -> None:
    sql = "INSERT INTO t (values, `select`) VALUES (1, 'a'), (2, 'b')"
    head = tokenize_head(sql)
    assert head[-1].text == "VALUES" and head == tokenize(sql)[: len(head)]
    assert tokenize_head("INSERT INTO t") == tokenize("INSERT INTO t")


# -- calls ----------------------------------------------------------------------


def test_find_calls_sees_code_only_and_nesting() -> None:
    sql = "SELECT f(g(1), 'h()') -- k()\n, db.tf(2), `q`(3), [x](4), (5)"
    calls = find_calls(tokenize(sql))
    assert [(c.name, sql[c.start : c.end]) for c in calls] == [
        ("f", "f(g(1), 'h()')"),
        ("g", "g(1)"),
        ("tf", "tf(2)"),
        ("q", "`q`(3)"),
    ]
    assert [c.name for c in outermost(calls)] == ["f", "tf", "q"]
    assert calls[3].shown == "q"


def test_find_calls_skips_an_unclosed_call() -> None:
    assert [c.name for c in find_calls(tokenize("SELECT a(b(1)"))] == ["b"]


# -- evaluated_from -------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "first_word", "pinnable"),
    [
        ("INSERT INTO t VALUES (now())", "INSERT", True),
        ("ALTER TABLE t UPDATE x = now() WHERE 1", "ALTER", True),
        ("ALTER TABLE t DELETE WHERE ts < now()", "ALTER", True),
        ("ALTER TABLE t ADD COLUMN c DateTime DEFAULT now()", None, True),
        ("ALTER TABLE t MODIFY COLUMN c DEFAULT (SELECT 1 WHERE update)", None, True),
        ("CREATE TABLE t ENGINE = Memory AS SELECT now()", "SELECT", True),
        ("CREATE TABLE t ENGINE = Memory AS WITH 1 AS x SELECT x", "WITH", True),
        ("CREATE TABLE t ENGINE = Memory AS (SELECT 1)", "(", True),
        ("CREATE TABLE t (d DateTime DEFAULT now()) ENGINE = Memory", None, True),
        ("CREATE TABLE t (a UInt8 ALIAS (1 AS select)) ENGINE = Memory", None, True),
        ("CREATE VIEW v AS SELECT now()", None, True),
        ("CREATE FUNCTION f AS () -> now()", None, True),
        ("CREATE MATERIALIZED VIEW m ENGINE = Memory AS SELECT now()", "CREATE", False),
        ("DELETE FROM t WHERE ts < now()", "DELETE", True),
    ],
)
def test_evaluated_from(sql: str, first_word: str | None, pinnable: bool) -> None:
    tokens = tokenize(sql)
    at, can_pin = evaluated_from(tokens)
    assert can_pin is pinnable
    if first_word is None:
        assert at == len(tokens)
    else:
        assert tokens[at].text == first_word
    assert evaluated_from([]) == (0, True)


# -- the depth-0 iterator ---------------------------------------------------------


def _trees(depth: int = 3) -> st.SearchStrategy[list[object]]:
    """A token list: words, and bracketed groups as (opener, inner list)."""
    word = st.sampled_from(["a", "b1", "'s(t'", "`q)`", "7"])
    if depth == 0:
        return st.lists(word, max_size=4)
    group = st.tuples(st.sampled_from(["(", "["]), st.deferred(lambda: _trees(depth - 1)))
    return st.lists(st.one_of(word, group), max_size=4)


def _render(tree: list[object]) -> str:
    out = []
    for item in tree:
        if isinstance(item, tuple):
            opener, inner = item
            out.append(opener + " " + _render(inner) + " " + {"(": ")", "[": "]"}[opener])
        else:
            out.append(str(item))
    return " ".join(out)


@given(_trees())
def test_depth_zero_yields_exactly_the_top_level_tokens(tree: list[object]) -> None:
    tokens = tokenize(_render(tree))
    top = [item for item in tree if not isinstance(item, tuple)]
    got = [tok.text for _, tok in depth_zero(tokens)]
    assert got == top
    assert all(tokens[i] is tok for i, tok in depth_zero(tokens))


def test_depth_zero_from_a_start_and_after_an_unmatched_closer() -> None:
    tokens = tokenize("a ( b ) c ) d")
    assert [t.text for _, t in depth_zero(tokens)] == ["a", "c"]
    assert [t.text for _, t in depth_zero(tokens, 4)] == ["c"]
    assert [t.text for _, t in depth_zero(tokens, 3)] == []
    assert [t.text for _, t in depth_zero(tokens, 2)] == ["b"]


# -- rows, is_insert, splice ----------------------------------------------------


def test_split_rows_keeps_rows_exactly_as_written() -> None:
    assert split_rows(" (1, 'a)'), ( [2], {3:4} ) ;\n") == ["(1, 'a)')", "( [2], {3:4} )"]
    assert split_rows(" (1) ,") is None
    assert split_rows(" (1}") is None


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("INSERT INTO t VALUES (1)", True),
        ("  insert into t select 1", True),
        ("-- c\n/* d */ # e\nInsert INTO t VALUES (1)", True),
        ("INSERTED", False),
        ("SELECT 'insert'", False),
        ("/* insert */ DELETE FROM t", False),
        ("", False),
    ],
)
def test_is_insert(sql: str, expected: bool) -> None:
    assert is_insert(sql) is expected


def test_splice_replaces_and_inserts_in_order() -> None:
    assert splice("abcdef", [(4, 5, "E"), (1, 2, "B"), (3, 3, "+"), (3, 3, "!")]) == "aBc+!dEf"
    assert splice("abc", []) == "abc"


# -- quoting round trips ----------------------------------------------------------


@given(st.text())
def test_quote_string_is_one_string_token(text: str) -> None:
    quoted = quote_string(text)
    tokens = tokenize(quoted)
    assert [(t.kind, t.text) for t in tokens] == [("string", quoted)]
    assert is_insert(f"INSERT INTO t VALUES ({quoted})")
    assert split_rows(f" ({quoted}, {quoted})") == [f"({quoted}, {quoted})"]


@given(st.text(min_size=1))
@example('""')  # a doubled quote of the other kind is two quotes
def test_quote_ident_reads_back_by_the_lexer(name: str) -> None:
    tokens = tokenize(quote_ident(name))
    assert len(tokens) == 1 and tokens[0].kind == "quoted"
    assert tokens[0].name == name


@given(st.lists(st.text(), min_size=1, max_size=20))
def test_quote_string_reads_back_by_the_engine(engine: Engine, texts: list[str]) -> None:
    row = ", ".join(f"hex({quote_string(t)})" for t in texts)
    got = engine.text(f"SELECT {row}", "TSV").strip("\n").split("\t")
    assert got == [t.encode().hex().upper() for t in texts]


@given(st.lists(st.text(min_size=1), min_size=1, max_size=10, unique=True))
def test_quote_ident_reads_back_by_the_engine(engine: Engine, names: list[str]) -> None:
    cols = ", ".join(f"{i} AS {quote_ident(n)}" for i, n in enumerate(names))
    header = engine.text(f"SELECT {cols}", "JSONCompactEachRowWithNames").split("\n")[0]
    assert json.loads(header) == names


# -- zone-free types and literals ---------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "expected"),
    [
        ("DateTime", "DateTime('UTC')"),
        ("DateTime('Asia/Tokyo')", "DateTime('UTC')"),
        ("DateTime64(3)", "DateTime64(3, 'UTC')"),
        ("DateTime64(9, 'Europe/Berlin')", "DateTime64(9, 'UTC')"),
        (
            "Map(DateTime, Array(Nullable(DateTime64(6))))",
            "Map(DateTime('UTC'), Array(Nullable(DateTime64(6, 'UTC'))))",
        ),
        (
            "Tuple(\n    DateTime DateTime,\n    `a b` LowCardinality(DateTime))",
            "Tuple(\n    DateTime DateTime('UTC'),\n    `a b` LowCardinality(DateTime('UTC')))",
        ),
        (
            "Enum8('DateTime' = 1, 'DateTime64(3)' = 2)",
            "Enum8('DateTime' = 1, 'DateTime64(3)' = 2)",
        ),
        ("Array(String)", None),
        ("Date32", None),
    ],
)
def test_type_in_zone(type_name: str, expected: str | None) -> None:
    assert type_in_zone(type_name, "UTC") == (type_name if expected is None else expected)


def test_type_in_zone_keeping_zones() -> None:
    type_name = "Tuple(DateTime, DateTime('Asia/Tokyo'), DateTime64(5), DateTime64(5, 'UTC'))"
    assert type_in_zone(type_name, "Europe/Berlin", keep_zones=True) == (
        "Tuple(DateTime('Europe/Berlin'), DateTime('Asia/Tokyo'), "
        "DateTime64(5, 'Europe/Berlin'), DateTime64(5, 'UTC'))"
    )


def test_typed_literal_forms() -> None:
    assert typed_literal("Nullable(String)", None) == "CAST(NULL, 'Nullable(String)')"
    assert typed_literal("String", b"it's") == "CAST('it\\'s', 'String')"
    assert typed_literal("String", b"\xff\x00") == "CAST(unhex('FF00'), 'String')"
    assert typed_literal("DateTime", b"2026-01-01 00:00:00", "DateTime('UTC')") == (
        "CAST(CAST('2026-01-01 00:00:00', 'DateTime(\\'UTC\\')'), 'DateTime')"
    )


@given(st.lists(st.binary(), min_size=1, max_size=20))
def test_typed_literal_holds_any_bytes(engine: Engine, blobs: list[bytes]) -> None:
    row = ", ".join(f"hex({typed_literal('String', b)})" for b in blobs)
    got = engine.text(f"SELECT {row}", "TSV").strip("\n").split("\t")
    assert got == [b.hex().upper() for b in blobs]


@pytest.mark.parametrize(
    ("sql", "keyword"),
    [
        ("CREATE TABLE t (d DateTime) ENGINE = MergeTree ORDER BY d TTL d + INTERVAL 1 DAY", 1),
        ("CREATE TABLE t (d DateTime TTL d + INTERVAL 1 DAY, x UInt8) ENGINE = Memory", 1),
        ("CREATE TABLE t (d DateTime64(3) TTL d + INTERVAL 1 DAY) ENGINE = Memory", 1),
        ("CREATE TABLE t (d DateTime DEFAULT now() TTL d + 1) ENGINE = Memory", 1),
        ("ALTER TABLE t MODIFY TTL d + INTERVAL 1 DAY", 1),
        ("ALTER TABLE t MATERIALIZE TTL", 1),
        ("ALTER TABLE t MATERIALIZE TTL IN PARTITION 1", 1),
        ("ALTER TABLE t MODIFY COLUMN c TTL d + INTERVAL 1 DAY", 1),
        ("ALTER TABLE t REMOVE TTL", None),
        ("ALTER TABLE t MODIFY COLUMN c REMOVE TTL", None),
        (
            "CREATE TABLE t (ttl UInt8, x UInt8 DEFAULT ttl + 1) ENGINE = MergeTree ORDER BY ttl",
            None,
        ),
        ("CREATE TABLE ttl (a UInt8) ENGINE = MergeTree ORDER BY (a, ttl)", None),
        ("ALTER TABLE t UPDATE ttl = 1 WHERE ttl > 0", None),
        ("ALTER TABLE t ADD COLUMN ttl UInt8 AFTER ttl", None),
        ("CREATE TABLE t ENGINE = Memory AS SELECT 1 AS ttl", None),
        ("CREATE TABLE t (`ttl` UInt8) ENGINE = MergeTree ORDER BY `ttl` TTL toDate(0)", 1),
    ],
)
def test_ttl_clause(sql: str, keyword: int | None) -> None:
    tokens = tokenize(sql)
    at = ttl_clause(tokens)
    if keyword is None:
        assert at is None
    else:
        assert at is not None and tokens[at].text.upper() == "TTL"


def test_engine_json_rows_keep_line_separators_inside_values(engine: Engine) -> None:
    rows = engine.json_rows(
        "SELECT 'a\u2028b\x85c' AS s, 1 UNION ALL SELECT {x:String}, 2", {"x": "d\u2029"}
    )
    assert sorted(rows, key=lambda r: r[1]) == [["a\u2028b\x85c", 1], ["d\u2029", 2]]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1 FORMAT JSON", "SELECT 1  "),
        ("SELECT 1 FORMAT CSV SETTINGS max_threads = 1", "SELECT 1   SETTINGS max_threads = 1"),
        ("SELECT 'FORMAT JSON' AS f", "SELECT 'FORMAT JSON' AS f"),
        ("SELECT format('{}', 1) FROM t", "SELECT format('{}', 1) FROM t"),
        ("SELECT * FROM (SELECT 1 FORMAT JSON)", "SELECT * FROM (SELECT 1 FORMAT JSON)"),
        ("SELECT 1 -- FORMAT JSON", "SELECT 1 -- FORMAT JSON"),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_without_format(sql: str, expected: str) -> None:
    assert without_format(sql) == expected
