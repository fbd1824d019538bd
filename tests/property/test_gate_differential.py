"""The gate reads a statement as the engine does, or refuses it (issue 25).

Hypothesis builds statements out of the constructs where a second lexer
drifts from ClickHouse's: nested block comments hiding quotes, line
comments, heredocs with digits in their tags, every quote style (doubled
and backslash-escaped), Unicode quotation marks, non-ASCII names, comments
and white space between a name and its dot, bound params. For each:

* the gate's text is the engine's reading of the statement: its
  `EXPLAIN AST` equals the one of the statement as written;
* every function and table function in the engine's parse of that text is
  a call the gate's lexer sees in it (so no check reads past one);
* when the engine's parse calls anything the gate refuses, the gate refuses
  the statement.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_obj.errors import ClassificationRefused, EngineError
from durable_obj.gate import reach, writes
from durable_obj.gate.reading import engine_text, is_plain
from durable_obj.gate.sql import find_calls, tokenize
from durable_obj.replica.engine import Engine, acquire

STATS = {"statements": 0, "refused": 0, "plain": 0, "canonical": 0}

#: Calls, some refused (they reach outside), some allowed.
CALLS = [
    "file('/etc/hostname')",
    "url('http://127.0.0.1:9/x', CSV, 'a String')",
    "merge('db', '.*')",
    "getServerSetting('path')",
    "hostName()",
    "upper('a')",
    "now()",
    "concat('a', 'b')",
    "toString(1 + 2)",
]
#: Pieces that hide or reshape what follows, for one lexer or the other.
NOISE = [
    "/* /* */ ' */",
    "/* a /* b */ c */",
    "/* ' */",
    "-- '\n",
    "-- x\n",
    "// '\n",  # a line comment to ClickHouse too (the second attack of stop 53)
    "// x\n",
    "// '\nhostName(),\n// '\n",  # a call the engine runs inside what looks like a string
    "$a1$ ' $a1$,",
    "$$ ' $$,",
    "$tag$ /* $tag$,",
    "\u2018 ' \u2019,",
    "\u201c ' \u201d,",
    "'it''s',",
    "'a\\'b',",
    "`q``n`,",
    '"dq""x",',
    "'/* not a comment */',",
    "'-- nor this',",
    "\t",
    "\n",
    " ",
]


@st.composite
def statements(draw: st.DrawFn) -> str:
    parts = ["SELECT"]
    for _ in range(draw(st.integers(1, 4))):
        parts.append(draw(st.sampled_from(NOISE)))
        parts.append(draw(st.sampled_from(CALLS)) + ",")
    parts.append(draw(st.sampled_from(["1", "'x'", "\u00e9t\u00e9", "t . x", "t /**/ . x"])))
    parts.append(draw(st.sampled_from(["", " FROM t", " FROM system . one", " -- tail '"])))
    sep = draw(st.sampled_from([" ", "\n", "  "]))
    return sep.join(parts)


_FUNCTION = re.compile(r"^\s*Function (\w+)", re.MULTILINE)


#: Each test's budget: 300 examples in CI; DURABLE_GATE_EXAMPLES for more.
BUDGET = settings(
    max_examples=int(os.environ.get("DURABLE_GATE_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    eng = acquire()
    eng.create_database("default")
    eng.use_database("default")
    eng.run("CREATE TABLE t (x String) ENGINE = Memory")
    try:
        yield eng
    finally:
        eng.release()


def _ast(engine: Engine, sql: str) -> str | None:
    try:
        return engine.text("EXPLAIN AST " + sql, "TSVRaw")
    except EngineError:
        return None


@BUDGET
@given(sql=statements())
def test_the_gate_reads_what_the_engine_reads(engine: Engine, sql: str) -> None:
    STATS["statements"] += 1
    try:
        text = engine_text(engine, sql)
    except ClassificationRefused:
        STATS["refused"] += 1
        return
    STATS["plain" if text == sql else "canonical"] += 1
    assert is_plain(text)
    written, read = _ast(engine, sql), _ast(engine, text)
    assert written == read, f"the gate changed the statement's meaning:\n{sql!r}\n{text!r}"
    if read is None:
        return  # the engine does not parse it: it cannot run either
    engine_calls = {name.lower() for name in _FUNCTION.findall(read)}
    lexer_calls = {call.name for call in find_calls(tokenize(text))}
    # operators print as functions (plus, tuple, ...); every named call must be seen
    named = {name for name in engine_calls if name in {c.split("(")[0].lower() for c in CALLS}}
    assert named <= lexer_calls, (sql, text, named - lexer_calls)
    refused = {name for name in engine_calls if name in reach.catalog(engine).refused}
    if refused:
        with pytest.raises(ClassificationRefused):
            reach.check(engine, text)


#: Pieces inside or after VALUES rows, where the gate must read the data the
#: way the engine does or refuse the statement.
ROW_NOISE = ["", " ", "\n", " /* c */ ", " -- c\n", " // c\n", " $$d$$ ", " 'it''s' ", " '\\'' "]
VALUES_ = [
    "'a'",
    "'b''c'",
    "'d\\'e'",
    "concat('x', 'y')",
    "upper('q')",
    "'/* not a comment */'",
    "'-- nor this'",
    "0b101",  # a number run into letters: written as the engine reads it (5)
    "1_000",
    "1e5t",  # a name to the engine: refused, or an error either way
    "$h1$heredoc$h1$",
    "\u2018curly\u2019",
    '$$it\'s; "q"$$',
    "file('/etc/hostname')",
    "(SELECT name FROM system.databases LIMIT 1)",
]


#: Every spelling of the Values format the engine reads: any case, after
#: VALUES or FORMAT, quoted or not.
VALUES_SPELLINGS = [" VALUES", " values", " VaLuEs", " FORMAT Values", " FORMAT values"]
VALUES_SPELLINGS += [' FORMAT "VALUES"', " FORMAT `values`", "  FORMAT\tVALUES"]


@st.composite
def inserts(draw: st.DrawFn) -> str:
    head = draw(st.sampled_from(["INSERT INTO rows_t VALUES", "INSERT INTO rows_t (s) VALUES"]))
    values = draw(st.sampled_from(VALUES_SPELLINGS))
    head = head.replace(" VALUES", draw(st.sampled_from(["", " /* h */", " -- h\n"])) + values)
    rows = [
        "(" + draw(st.sampled_from(ROW_NOISE)) + draw(st.sampled_from(VALUES_)) + ")"
        for _ in range(draw(st.integers(1, 3)))
    ]
    sep = draw(st.sampled_from([", ", ",", " , ", ", /* r */ "]))
    return head + " " + sep.join(rows) + draw(st.sampled_from(["", " -- end", ";"]))


def _rows_after(engine: Engine, sql: str) -> list[list[object]] | None:
    """The table's rows after running `sql` on an empty one; None if it fails."""
    engine.run("TRUNCATE TABLE rows_t")
    try:
        engine.run(sql)
    except EngineError:
        return None
    return engine.json_rows("SELECT s FROM rows_t ORDER BY s")


@BUDGET
@given(sql=inserts())
def test_the_gate_keeps_what_an_insert_writes(engine: Engine, sql: str) -> None:
    """An INSERT the gate accepts writes the same rows as the statement as
    written; one it cannot read as the engine does is refused."""
    engine.run("CREATE TABLE IF NOT EXISTS rows_t (s String) ENGINE = Memory")
    STATS["statements"] += 1
    try:
        text = engine_text(engine, sql)
    except ClassificationRefused:
        STATS["refused"] += 1
        return
    STATS["plain" if text == sql else "canonical"] += 1
    assert is_plain(text)
    assert _rows_after(engine, text) == _rows_after(engine, sql), (sql, text)


#: Formats the engine reads INSERT data in, by name in some case; only
#: Values evaluates what it reads.
FORMATS = {
    "CSV": '"{v}"\n',
    "csv": '"{v}"\n',
    "TSV": "{v}\n",
    "TabSeparated": "{v}\n",
    "JSONEachRow": '{{"s": "{v}"}}\n',
    "jsoneachrow": '{{"s": "{v}"}}\n',
    "JSONCompactEachRow": '["{v}"]\n',
    "CSVWithNames": 's\n"{v}"\n',
    "TSVRaw": "{v}\n",
}
#: A host file whose text must never reach a row.
HOST_FILE = Path("/tmp/durable_obj_gate_host_marker.txt")
HOST_FILE.write_text("HOST-MARKER-36\n")
DATA_TEXT = [
    f"file('{HOST_FILE}')",
    "x /* y */",
    "$$h$$",
    "a -- b",
    "it's",
    "getServerSetting('path')",
]


@st.composite
def formatted(draw: st.DrawFn) -> str:
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    text = draw(st.sampled_from(DATA_TEXT))
    prefix = draw(st.sampled_from(["", "/* /* */ ' */ ", "-- c\n"]))
    return f"{prefix}INSERT INTO rows_t FORMAT {fmt} " + FORMATS[fmt].format(v=text)


@BUDGET
@given(sql=formatted())
def test_insert_data_in_every_format_is_data(engine: Engine, sql: str) -> None:
    """INSERT data in the formats the engine reads, whatever text it holds:
    what the gate lets through writes the rows as written, and never the
    host's file (only Values evaluates its data, and that is checked)."""
    engine.run("CREATE TABLE IF NOT EXISTS rows_t (s String) ENGINE = Memory")
    try:
        text = engine_text(engine, sql)
        reach.check(engine, text)
        writes.check(engine, engine.localize(text))
    except ClassificationRefused:
        return
    rows = _rows_after(engine, text)
    assert rows == _rows_after(engine, sql), (sql, text)
    assert not any("HOST-MARKER-36" in str(r) for r in rows or []), (sql, rows)


@st.composite
def hostile_values(draw: st.DrawFn) -> str:
    values = draw(st.sampled_from(VALUES_SPELLINGS))
    noise = draw(st.sampled_from(["", "/* /* */ ' */ ", "/* c */ ", " "]))
    call = draw(
        st.sampled_from(
            [
                "file('/etc/hostname')",
                "getServerSetting('path')",
                "hostName()",
                "(SELECT query FROM system.processes LIMIT 1)",
                "url('http://127.0.0.1:9/')",
            ]
        )
    )
    return f"INSERT INTO rows_t{values} ({noise}{call}{' /* x */' if noise else ''})"


@BUDGET
@given(sql=hostile_values())
def test_values_that_reach_outside_are_refused_in_every_spelling(engine: Engine, sql: str) -> None:
    engine.run("CREATE TABLE IF NOT EXISTS rows_t (s String) ENGINE = Memory")
    with pytest.raises(ClassificationRefused):
        text = engine_text(engine, sql)
        local = engine.localize(text)
        reach.check(engine, text)
        writes.check(engine, local)


#: Numbers run into letters: the engine reads each as one token (a name:
#: `1t`, `0xAt`, `1e5t`; a number: `1_000`, `0b101`, `0x1.8p1`), our lexer
#: as a number, then a name. And their plain neighbours.
GLUED = ["1t", "0xAt", "1e5t", "1_000", "0b101", "0x1.8p1", "2x", "1e5_"]
UNGLUED = ["1e-5", "0x1F", "2.5", "t1x", "`1t`", "x.5", "1.", "_1t", "'1t'"]
_NAMED = re.compile(r"^\s*(?:Identifier|TableIdentifier) (\S+)", re.MULTILINE)


@st.composite
def glued(draw: st.DrawFn) -> str:
    pieces = st.sampled_from(GLUED + UNGLUED)
    items = [draw(pieces) for _ in range(draw(st.integers(1, 3)))]
    alias = draw(st.sampled_from(["", " AS y", " AS 2x", " AS 1e5t"]))
    table = draw(st.sampled_from(["t", "1t", "db.1t", "0xAt", "`1t`", "db.t"]))
    sep = draw(st.sampled_from([" ", "\n", "  "]))
    return f"SELECT {', '.join(items)}{alias}{sep}FROM {table}"


@BUDGET
@given(sql=glued())
def test_every_name_the_engine_reads_the_gate_reads(engine: Engine, sql: str) -> None:
    """Text the gate reads as it is (plain) never holds a number run into
    letters: the engine's canonical text quotes such a name, so every name
    the engine's parse holds is a name our lexer reads (before, `1t` was the
    number 1 and the name t to the gate: a check of ALTER TABLE 1t DETACH
    PARTITION 1 looked at the wrong table)."""
    try:
        text = engine_text(engine, sql)
    except ClassificationRefused:
        return
    assert is_plain(text)
    written, read = _ast(engine, sql), _ast(engine, text)
    assert written == read, f"the gate changed the statement's meaning:\n{sql!r}\n{text!r}"
    if read is None:
        return
    lexer_names = {t.name for t in tokenize(text) if t.kind in ("ident", "quoted")}
    for found in _NAMED.findall(read):
        parts = found.split(".")
        assert set(parts) <= lexer_names, (sql, text, parts, lexer_names)
