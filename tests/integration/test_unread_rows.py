"""A long INSERT ... VALUES runs with its rows read by the engine as literals
only (`reading.with_literal_rows`, `reading.unread`): the gate reads its
head, never its rows, and the engine refuses any row that is not a literal
(`SUPPORT_IS_DISABLED`), before a row is written. Such a statement then
runs again the usual way, rows read by the gate. Whatever the rows hold,
the outcome is the one the usual way gives."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj.errors import ClassificationRefused, Corrupt, EngineError, Nondeterministic
from durable_obj.gate.reading import UNREAD_BYTES, unread, with_literal_rows

_TABLE = "CREATE TABLE t (k UInt64, s String, d Date) ENGINE = MergeTree ORDER BY k"
_LITERAL = (
    "input_format_values_interpret_expressions = 0, "
    "input_format_values_deduce_templates_of_expressions = 0"
)


def _rows(n: int, start: int = 0, extra: str = "") -> str:
    pad = "x" * 80
    return ", ".join(f"({k}, '{pad}{extra}', '2024-01-02')" for k in range(start, start + n))


def _long(start: int = 0, tail: str = "") -> str:
    """An INSERT of 1,000 literal rows (about 100 KB), then `tail`."""
    return f"INSERT INTO t VALUES {_rows(1000, start)}{tail}"


def _logged(url: str) -> list[str]:
    return [
        json.loads(line)["sql"]
        for path in sorted(Path(url, "wal").iterdir())
        for line in path.read_text().splitlines()
    ]


def _replica(url: str, sql: str = "SELECT count(), sum(k), max(s), min(d) FROM t") -> str:
    with durable_obj.open(url, read_only=True) as replica:
        return replica.query(sql)


def test_literal_rows_are_logged_with_the_settings_and_replay(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    sql = _long()
    assert len(sql) > UNREAD_BYTES
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        obj.execute(sql)
        obj.execute("INSERT INTO t VALUES (5000, 'short', '2024-01-01')")  # read as before
        mine = obj.query("SELECT count(), sum(k), max(s), min(d) FROM t")
    lines = _logged(url)
    assert lines[1].startswith(
        f"INSERT INTO t SETTINGS {_LITERAL}, session_timezone = 'UTC' VALUES"
    )
    assert lines[1].endswith(sql[len("INSERT INTO t VALUES") :])
    assert unread(lines[1]) is not None
    assert "input_format_values" not in lines[2]
    assert _replica(url) == mine


@pytest.mark.parametrize(
    "late",
    [
        "(7777, toString(toDate('2024-01-01')), toDate('2024-01-03'))",  # allowed calls
        "(7777, 'x', '2024-01-01' + 0)",  # an expression the usual way refuses or runs
        "(7777, concat('a', 'b'), DEFAULT)",
    ],
)
def test_a_late_expression_runs_the_usual_way(tmp_path: Path, late: str) -> None:
    """The first rows hold no call, so the engine is asked to read them all
    as literals; it refuses the late row, and the statement runs again with
    its rows read by the gate, as if it had never been tried."""
    url = str(tmp_path / "o")
    sql = _long(tail=", " + late)
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        try:
            obj.execute(sql)
        except (ClassificationRefused, EngineError):
            ran = False
        else:
            ran = True
        mine = obj.query("SELECT count(), sum(k), max(s), min(d) FROM t")
    lines = _logged(url) if Path(url, "wal").exists() else []
    if ran:
        assert "input_format_values" not in lines[-1]  # logged as the usual way wrote it
        assert mine.startswith("1001,")
    else:
        assert mine.startswith("0,")
    assert _replica(url) == mine


@pytest.mark.parametrize(
    "late",
    [
        "(7777, file('/etc/passwd'), '2024-01-01')",
        "(7777, (SELECT toString(count()) FROM system.tables), '2024-01-01')",
        "(7777, 'x', '2024-01-01'); DROP TABLE t",
        "(7777, 'x', '2024-01-01') -- '; DROP TABLE t",
        "(7777, 'x', '2024-01-01') // ', file('/etc/passwd'), '",
        "(7777, $$it's$$, '2024-01-01')",
    ],
)
def test_what_the_usual_way_refuses_is_refused(tmp_path: Path, late: str) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        with contextlib.suppress(ClassificationRefused, EngineError, Nondeterministic):
            obj.execute(_long(tail=", " + late))
        assert "root:" not in obj.query("SELECT * FROM t")
        assert obj.query("EXISTS TABLE t") == "1\n"


@pytest.mark.parametrize(
    "hidden",
    [
        "INSERT INTO u SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "INSERT INTO u SELECT name FROM system.databases",
        "DROP TABLE u; SELECT throwIf(1)",
    ],
)
def test_no_statement_hides_after_the_rows(tmp_path: Path, hidden: str) -> None:
    """chdb-core's statement count skips rows by parentheses and single
    quotes; the engine's reader takes `["x("]` as a Dynamic value, so it saw
    one statement where the engine ran the next (found by attack, fixed
    before release: a text with a `;` is never `unread`). Refused whole:
    nothing runs, nothing is logged, the writer and a replica agree."""
    url = str(tmp_path / "o")
    pad = ", ".join(f"({i}, 'padding-padding-padding-padding')" for i in range(2000))
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE j (a Int64, v Dynamic) ENGINE = MergeTree ORDER BY a")
        obj.execute("CREATE TABLE u (s String) ENGINE = MergeTree ORDER BY s")
        obj.execute("INSERT INTO u VALUES ('keep')")
        sql = f'INSERT INTO j VALUES {pad}, (99999, ["x("]); {hidden}'
        assert unread(sql.replace("VALUES", f"SETTINGS {_LITERAL} VALUES", 1)) is None
        with pytest.raises(ClassificationRefused):
            obj.execute(sql)
        assert obj.rows("SELECT s FROM u") == [("keep",)]
        assert obj.rows("SELECT count() FROM j") == [(0,)]
        obj.execute(f"INSERT INTO j VALUES {pad}, (99999, ['x('])")  # a Dynamic value, kept
        mine = obj.query("SELECT count(), max(a) FROM j")
    assert mine == "2001,99999\n"
    assert _replica(url, "SELECT count(), max(a) FROM j") == mine
    assert _replica(url, "SELECT s FROM u") == '"keep"\n'


def test_a_semicolon_in_a_string_is_read_the_usual_way(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        obj.execute(_long(tail=", (5000, 'a;b', '2024-01-01')"))
        assert obj.rows("SELECT s FROM t WHERE k = 5000") == [("a;b",)]
    assert "input_format_values" not in _logged(url)[-1]


def test_the_callers_own_settings_are_read_as_the_engine_reads_them(tmp_path: Path) -> None:
    """A statement that carries the settings itself is unread only when the
    engine applies 0 to both: a later `= 1` wins in the engine, so then the
    gate reads the rows (and refuses the call among them)."""
    url = str(tmp_path / "o")
    late = ", (7777, file('/etc/passwd'), '2024-01-01')"
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        again = f"{_LITERAL}, input_format_values_interpret_expressions = 1"
        sql = f"INSERT INTO t SETTINGS {again} VALUES {_rows(1000)}{late}"
        assert unread(sql) is None
        with pytest.raises(ClassificationRefused, match="file"):
            obj.execute(sql)
        sql = f"INSERT INTO t SETTINGS {_LITERAL} VALUES {_rows(1000)}"
        assert unread(sql) is not None
        obj.execute(sql)  # the caller's own: kept as written, no time zone added
        assert obj.query("SELECT count() FROM t") == "1000\n"
    assert _logged(url)[-1] == sql


def test_unread_is_strict() -> None:
    rows = _rows(1000)
    good = f"INSERT INTO t SETTINGS {_LITERAL} VALUES {rows}"
    assert unread(good) is not None
    for bad in [
        f"INSERT INTO t SETTINGS {_LITERAL.replace('= 0', '= 1', 1)} VALUES {rows}",
        f"INSERT INTO t SETTINGS {_LITERAL.split(',')[0]} VALUES {rows}",
        f"INSERT INTO t SETTINGS {_LITERAL}, {_LITERAL.split(',')[0]} VALUES {rows}",
        f"INSERT INTO t SETTINGS {_LITERAL} /* c */ VALUES {rows}",
        f"INSERT INTO t SETTINGS {_LITERAL}, max_threads = -1 VALUES {rows}",
        f"INSERT INTO t SETTINGS {_LITERAL} SELECT 1",
        f"INSERT INTO t SETTINGS {_LITERAL} VALUES x{rows}",
        f"INSERT INTO t SETTINGS {_LITERAL} VALUES (1)",  # short: the gate reads it
        f"INSERT INTO t SETTINGS {_LITERAL} FORMAT Values {rows}",
        f"INSERT INTO t FORMAT Values SETTINGS {_LITERAL} {rows}",
    ]:
        assert unread(bad) is None, bad[:120]
    assert with_literal_rows(f"INSERT INTO t VALUES {rows}", "UTC") is not None
    assert with_literal_rows(f"INSERT INTO t SETTINGS max_threads = 1 VALUES {rows}", "UTC") is None
    assert with_literal_rows(f"INSERT INTO t VALUES (1, toString(2), '') , {rows}", "UTC") is None
    assert with_literal_rows(f"INSERT INTO values VALUES {rows}", "UTC") is None


def test_a_tampered_line_never_runs_its_rows_as_code(tmp_path: Path) -> None:
    """Anyone with store access may write a line with the settings and a
    call among its rows: the engine refuses the row (replay reports the
    line as `Corrupt`), and nothing of it is evaluated."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute(_TABLE)
        obj.execute(_long())
    head = json.loads((url / "head.json").read_text())
    ref = head["manifest"]["wal"][-1]
    lines = _logged(str(url))
    tampered = lines[1].replace("(999, '", "(999, file('/etc/passwd'), '", 1)
    assert unread(tampered) is not None and tampered != lines[1]
    body = "".join(json.dumps({"sql": line}) + "\n" for line in (lines[0], tampered)).encode()
    (url / ref["key"]).write_bytes(body)
    ref["size"], ref["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    (url / "head.json").write_text(json.dumps(head))
    with pytest.raises(Corrupt, match="Interpreting expressions is disabled"):
        durable_obj.open(str(url), read_only=True)


def test_one_block_all_or_nothing(tmp_path: Path) -> None:
    """Rows short of 3,000,000 bytes are one block: a row the engine cannot
    read (the last of 700,000) leaves none of them, with no rebuild."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE n (k UInt8) ENGINE = MergeTree ORDER BY k")
        sql = "INSERT INTO n VALUES " + "(1)," * 700_000 + "('a')"
        with pytest.raises(EngineError):
            obj.execute(sql)
        assert obj.query("SELECT count() FROM n") == "0\n"
        obj.execute("INSERT INTO n VALUES " + "(1)," * 700_000 + "(2)")
        assert obj.query("SELECT count(), sum(k) FROM n") == "700001,700002\n"
    assert _replica(url, "SELECT count(), sum(k) FROM n") == "700001,700002\n"


_ROW = st.one_of(
    st.builds(lambda s: f"'{s}'", st.sampled_from(["x", "it''s", "a\\\\b", "(", ")", "now()"])),
    st.sampled_from(
        [
            "'-- c'",
            "'/* c */'",
            "'// c'",
            "'$$'",
            "toString(1)",
            "concat('a', 'b')",
            "DEFAULT",
            "NULL",
            "'x' -- c\n",
            "'x' /* c */",
            "file('/etc/passwd')",
            "'a' || 'b'",
        ]
    ),
)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(late=st.lists(st.tuples(st.integers(0, 999), _ROW), max_size=3))
def test_any_rows_end_as_the_usual_way_ends(
    tmp_path_factory: pytest.TempPathFactory, late: list[tuple[int, str]]
) -> None:
    """Rows of literals with a few values swapped for anything: the writer
    either runs the statement or refuses it whole, never reads a host file,
    and a replica reads what the writer has."""
    url = str(tmp_path_factory.mktemp("unread") / "o")
    values = [f"({k}, 'p{k}', '2024-01-02')" for k in range(1000)]
    for at, value in late:
        values[at] = f"({at}, {value}, '2024-01-02')"
    sql = "INSERT INTO t VALUES " + ", ".join(values)
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt64, s String DEFAULT 'd', d Date) ENGINE = Memory")
        with contextlib.suppress(ClassificationRefused, EngineError, Nondeterministic):
            obj.execute(sql)
        mine = obj.query("SELECT * FROM t ORDER BY k")
    assert "root:" not in mine
    assert mine.count("\n") in (0, 1000)
    assert _replica(url, "SELECT * FROM t ORDER BY k") == mine


def test_consecutive_lines_replay_as_one_insert(tmp_path: Path) -> None:
    """Replay joins the rows of consecutive such lines whole (no row split,
    no scan): a replica reads every row the writer has, a statement ending
    in `;` included (never unread: logged and replayed the usual way)."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        obj.execute(_long(0))
        obj.execute(_long(1000))
        obj.execute(_long(2000, tail=" ;"))
        obj.execute(_long(3000))
        mine = obj.query("SELECT * FROM t ORDER BY k")
    assert sum(unread(line) is not None for line in _logged(url)) == 3
    assert mine.count("\n") == 4000
    assert _replica(url, "SELECT * FROM t ORDER BY k") == mine


# -- found by the second attack (fixed before release) ---------------------------


@pytest.mark.parametrize("rows", [3, 2000])
def test_a_view_that_fails_leaves_nothing_behind(tmp_path: Path, rows: int) -> None:
    """A materialized view that throws (here the reader's own words) after
    the table kept the block: the failed INSERT is not run again, and the
    local copy is rebuilt, short INSERT or long (`all_or_nothing` is false
    for a table a view reads; the long one keeps its rows read)."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE u (a Int64, s String) ENGINE = MergeTree ORDER BY a")
        obj.execute("CREATE TABLE dst (a Int64, s String) ENGINE = MergeTree ORDER BY a")
        obj.execute(
            "CREATE MATERIALIZED VIEW mv TO dst AS SELECT a, s FROM u "
            "WHERE throwIf(a = 1, 'Interpreting expressions is disabled') = 0"
        )
        pad = "p" * 40
        sql = "INSERT INTO u VALUES " + ", ".join(f"({i}, '{pad}')" for i in range(rows))
        with pytest.raises(EngineError, match="Interpreting expressions is disabled"):
            obj.execute(sql)
        assert obj.rows("SELECT count() FROM u") == [(0,)]
        assert obj.rows("SELECT count() FROM dst") == [(0,)]
        assert "input_format_values" not in "".join(
            _logged(url) if Path(url, "wal").exists() else []
        )
    assert _replica(url, "SELECT count() FROM u") == "0\n"


def test_queued_writes_never_join_unread_rows(tmp_path: Path) -> None:
    """Two units queued together were merged into one INSERT with their rows
    joined unread, so an open string in one swallowed the next one's first
    row: both ran where each alone fails. Each runs on its own now."""
    import asyncio

    url = str(tmp_path / "o")
    pad = "p" * 40
    first = "INSERT INTO t VALUES " + ", ".join(f"({i}, '{pad}')" for i in range(2000))
    second = "INSERT INTO t VALUES ('), " + ", ".join(f"({i}, '{pad}')" for i in range(5000, 7000))

    async def both() -> list[object]:
        obj = await durable_obj.aopen(url, owner="w")
        try:
            await obj.awrite("CREATE TABLE t (a Int64, s String) ENGINE = MergeTree ORDER BY a")
            done = await asyncio.gather(
                obj.awrite(first + ", (9001, 'abc)"), obj.awrite(second), return_exceptions=True
            )
            done.append(await obj.aquery("SELECT count() FROM t"))
            return done
        finally:
            await obj.aclose()

    one, two, count = asyncio.run(both())
    assert isinstance(one, EngineError) and isinstance(two, EngineError)
    assert count == "0\n"
    assert _replica(url, "SELECT count() FROM t") == "0\n"


def test_a_default_the_lexer_cannot_see_is_never_left_unread(tmp_path: Path) -> None:
    """`[--]` is a Dynamic value to the engine's reader and a comment to the
    gate's lexer, which then missed the DEFAULT after it: a table with a
    non-deterministic DEFAULT never has its rows left unread, and rows the
    caller's own settings leave unread are refused there."""
    url = str(tmp_path / "o")
    pad = ", ".join(f"({i}, 'x', {i}, '{'p' * 30}')" for i in range(2000))
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(
            "CREATE TABLE t (a Int64, v Dynamic, c UInt64 DEFAULT rand64(), s String) "
            "ENGINE = MergeTree ORDER BY a"
        )
        with contextlib.suppress(ClassificationRefused, EngineError, Nondeterministic):
            obj.execute(f"INSERT INTO t VALUES {pad}, (99999, [--], DEFAULT, 'q')")
        own = f"INSERT INTO t SETTINGS {_LITERAL} VALUES {pad}, (99999, [--], DEFAULT, 'q')"
        assert unread(own) is not None
        with pytest.raises(Nondeterministic, match="own SETTINGS"):
            obj.execute(own)
        obj.execute(f"INSERT INTO t VALUES {pad}")  # given: kept, rows read
        mine = obj.query("SELECT a, toString(v), c FROM t ORDER BY a")
    assert "input_format_values" not in _logged(url)[-1]
    assert _replica(url, "SELECT a, toString(v), c FROM t ORDER BY a") == mine


def test_over_one_block_the_rows_are_read(tmp_path: Path) -> None:
    """3 MB and more may be more than one block: its rows are read by the
    gate, so a late expression runs (it was refused there)."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        rows = _rows(30_000)
        sql = f"INSERT INTO t VALUES {rows}, (99999, toString(1), toDate('2024-01-01'))"
        assert len(sql) > 3_000_000
        obj.execute(sql)
        assert obj.rows("SELECT count() FROM t") == [(30_001,)]
    assert "input_format_values" not in _logged(url)[-1]


@pytest.mark.parametrize(
    "hidden", ["DROP TABLE u", "INSERT INTO u VALUES ('x')", "TRUNCATE TABLE u;", "SELECT 1"]
)
def test_a_short_insert_has_nothing_after_its_rows(tmp_path: Path, hidden: str) -> None:
    """The same split on the usual path: refused as two statements by the
    gate's own reading of the rows, whatever chdb-core counted; a `;` at
    the end stays allowed."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE j (a Int64, v Dynamic) ENGINE = MergeTree ORDER BY a")
        obj.execute("CREATE TABLE u (s String) ENGINE = MergeTree ORDER BY s")
        with pytest.raises(ClassificationRefused, match="exactly one statement"):
            obj.execute(f'INSERT INTO j VALUES (1, ["x("]); {hidden}')
        for value in ('["x(\\"]); ', '["x(""]); '):  # a JSON string may end elsewhere
            with pytest.raises(ClassificationRefused, match="exactly one statement"):
                obj.execute(f'INSERT INTO j VALUES (1, {value}{hidden}; --"])')
        obj.execute("INSERT INTO j VALUES (2, 'y') ; ;\n")
        assert obj.rows("SELECT name FROM system.tables ORDER BY name") == [("j",), ("u",)]
        assert obj.rows("SELECT a FROM j") == [(2,)]
        assert obj.rows("SELECT count() FROM u") == [(0,)]
