"""Issue 36, items 1, 2 and 7: INSERT data the engine evaluates, and replay,
pass the gate the engine decides.

Objects A and B are open in one process on a folder store; B holds a
secret. Each hostile statement is tried through every write path of A
(execute, write, batch, aexecute, awrite, the CLI), and as a WAL line of a
segment with a valid digest. Afterwards the host file was never stored, B
is unchanged, and no statement of the engine's global state ran.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from inspect import signature
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj import cli, errors
from durable_obj.core.object import DurableObject
from tests.tenants import two_tenants

SECRET = "SECRET-36a"
#: The engine reads `/* /* */ ' */` as one nested comment; a second parser
#: that does not nest comments sees a string opened inside it.
HIDE = "/* /* */ ' */ "
REFUSALS = (errors.ClassificationRefused, errors.Nondeterministic, errors.SecretRefused)


class World:
    def __init__(self, root: Path, a: DurableObject, b: DurableObject) -> None:
        self.root, self.a, self.b = root, a, b
        engine = b._local.engine
        assert engine is not None
        self.b_internal = engine.database
        self.host_file = root / "host-file.txt"
        self.host_file.write_text("HOST-36a\n")

    def a_rows(self) -> str:
        return self.a.query("SELECT s FROM t ORDER BY s")

    def b_state(self) -> tuple[str, bytes]:
        return self.b.query("SELECT s FROM secret"), (self.root / "b" / "head.json").read_bytes()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("round3")
    with two_tenants(root, SECRET) as (a, b):
        yield World(root, a, b)


@pytest.fixture
def untouched(world: World) -> Iterator[World]:
    before = (world.a_rows(), world.b_state())
    yield world
    assert (world.a_rows(), world.b_state()) == before
    assert "HOST-36a" not in world.a_rows()


def _hostile_values(w: World) -> list[str]:
    """INSERT data the engine evaluates as SQL, in every spelling of the
    format's name, behind a prefix only the engine reads as a comment."""
    path = str(w.host_file)
    out = []
    for fmt in ("values", "VALUES", "VaLuEs", '"values"', "`Values`", '"VALUES"'):
        out.append(f"INSERT INTO t FORMAT {fmt} ({HIDE}file('{path}') /* ' */)")
        out.append(f"INSERT INTO t FORMAT {fmt} ({HIDE}getServerSetting('path') /* ' */)")
        out.append(
            f"INSERT INTO t FORMAT {fmt} ({HIDE}(SELECT s FROM {w.b_internal}.secret) /* ' */)"
        )
        out.append(f"INSERT INTO t FORMAT {fmt} (file('{path}'))")
    out.append(
        f"INSERT INTO t VALUES ({HIDE}(SELECT arrayStringConcat(groupArray(name)) "
        "FROM system.databases) /* ' */)"
    )
    out.append("INSERT INTO t FORMAT values ((SELECT query FROM system.processes LIMIT 1))")
    return out


@pytest.mark.filterwarnings("ignore:.*unchecked for determinism:RuntimeWarning")
def test_insert_data_in_every_spelling_of_values_is_checked(untouched: World) -> None:
    w = untouched
    for sql in _hostile_values(w):
        with pytest.raises(REFUSALS):
            w.a.execute(sql)
        with pytest.raises(REFUSALS):
            w.a.execute(sql, allow_nondeterministic=True)


@pytest.mark.parametrize("path", ["write", "batch", "aexecute", "awrite"])
def test_every_write_path_refuses_hostile_insert_data(untouched: World, path: str) -> None:
    w = untouched
    sql = _hostile_values(w)[0]
    calls: dict[str, Callable[[], object]] = {
        "write": lambda: w.a.write(sql),
        "batch": lambda: _batch(w.a, sql),
        "aexecute": lambda: asyncio.run(_async(w, sql, unit=False)),
        "awrite": lambda: asyncio.run(_async(w, sql, unit=True)),
    }
    with pytest.raises(REFUSALS):
        calls[path]()


def _batch(obj: DurableObject, sql: str) -> None:
    with obj.batch() as b:
        b.execute(sql)


async def _async(w: World, sql: str, *, unit: bool) -> None:
    async with await durable_obj.aopen(str(w.root / "c"), owner="c") as c:
        await c.aexecute("CREATE TABLE IF NOT EXISTS t (s String) ENGINE = Memory")
        try:
            if unit:
                await c.awrite(sql)
            else:
                await c.aexecute(sql)
        finally:
            assert "HOST-36a" not in await c.aquery("SELECT * FROM t")


def test_the_cli_refuses_hostile_insert_data(tmp_path: Path) -> None:
    host = tmp_path / "host.txt"
    host.write_text("HOST-36a\n")
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = Memory")
    sql = f"INSERT INTO t FORMAT values ({HIDE}file('{host}') /* ' */)"
    runner = (
        CliRunner(mix_stderr=False)
        if "mix_stderr" in signature(CliRunner).parameters
        else CliRunner()
    )
    result = runner.invoke(cli.cli, ["exec", url, sql], catch_exceptions=False)
    assert result.exit_code == 1
    assert "classification_refused" in result.stderr or "nondeterministic" in result.stderr
    with durable_obj.open(url, read_only=True) as obj:
        assert "HOST" not in obj.query("SELECT * FROM t")


def test_expression_rows_of_the_object_own_still_run_and_replay(tmp_path: Path) -> None:
    """What the engine resolves inside the object is allowed: expressions,
    CAST, lambdas, a subquery of the object's own table, INSERT ... SELECT,
    views and materialized views of its own tables."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(
            "CREATE TABLE u (s String, d Date, a Array(Int32)) ENGINE = MergeTree ORDER BY s"
        )
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        obj.execute("CREATE MATERIALIZED VIEW mv TO t AS SELECT upper(s) AS s FROM u")
        obj.execute(
            "INSERT INTO u VALUES ('a', toDate('2024-01-01'), [1, 2]), ('b', '2024-01-02', [3])"
        )
        obj.execute(
            "INSERT INTO u FORMAT values "
            "('c', CAST('2024-01-03' AS Date), arrayMap(x -> x * 2, [1]))"
        )
        obj.execute("INSERT INTO t VALUES ((SELECT max(s) FROM u))")
        obj.execute("INSERT INTO t SELECT concat(s, '!') FROM u WHERE s IN (SELECT s FROM u)")
        obj.execute("CREATE VIEW v AS SELECT s, d FROM u")
        obj.execute("ALTER TABLE t DELETE WHERE s IN (SELECT s FROM u WHERE s = 'zz')")
        want = obj.query("SELECT * FROM t ORDER BY s"), obj.query("SELECT * FROM v ORDER BY s")
    with durable_obj.open(url, read_only=True) as obj:
        got = obj.query("SELECT * FROM t ORDER BY s"), obj.query("SELECT * FROM v ORDER BY s")
    assert got == want
    assert "A" in want[0] and "c!" in want[0]


# -- replay is the execute gate, classification included ---------------------------------


def _tamper(url: Path, lines: list[str]) -> str:
    """Replace the object's last WAL segment with `lines`, under a head
    that carries their size and SHA-256 (anyone with store access can)."""
    head_path = url / "head.json"
    head = json.loads(head_path.read_text())
    ref = head["manifest"]["wal"][-1]
    body = "".join(json.dumps({"sql": line}) + "\n" for line in lines).encode()
    (url / ref["key"]).write_bytes(body)
    ref["size"], ref["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    head_path.write_text(json.dumps(head))
    return str(ref["key"])


def _object_with_segment(root: Path, name: str) -> Path:
    url = root / name
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        obj.execute("INSERT INTO t VALUES ('before')")
        obj.flush()
    return url


def test_a_replayed_create_function_never_runs(world: World, tmp_path: Path) -> None:
    url = _object_with_segment(tmp_path, "f")
    key = _tamper(
        url,
        [
            "CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s",
            "CREATE FUNCTION evil36 AS (x) -> concat('evil-', toString(x))",
        ],
    )
    with pytest.raises(errors.Corrupt) as info:
        durable_obj.open(str(url), read_only=True)
    assert key in str(info.value) and "statement 2" in str(info.value)
    with pytest.raises(errors.DurableError):
        world.b.query("SELECT evil36(1)")


def test_a_replayed_kill_query_cancels_nothing(world: World, tmp_path: Path) -> None:
    url = _object_with_segment(tmp_path, "k")
    _tamper(url, ["KILL QUERY WHERE 1 ASYNC"])
    answer: list[str] = []

    def slow() -> None:
        answer.append(world.b.query("SELECT sleepEachRow(0.5) FROM numbers(3)"))

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.3)
    with pytest.raises(errors.Corrupt, match="refuses"):
        durable_obj.open(str(url), read_only=True)
    thread.join()
    assert answer == ["0\n0\n0\n"], "another object's query was cancelled"


@pytest.mark.parametrize(
    "line",
    [
        "SET max_execution_time = 1000",
        "SYSTEM DROP MARK CACHE",
        "CREATE NAMED COLLECTION nc36 AS a = 1",
        "CREATE SETTINGS PROFILE p36 SETTINGS max_threads = 1",
        "GRANT SELECT ON *.* TO default",
        "DROP DATABASE IF EXISTS default",
        "SELECT 1",
        "INSERT INTO t VALUES ('a'); INSERT INTO t VALUES ('b')",
        "INSERT INTO t SELECT query FROM system.processes",
        "INSERT INTO t FORMAT values (/* /* */ ' */ file('/etc/hostname') /* ' */)",
        "INSERT INTO t FORMAT VALUES ((SELECT query FROM system.processes LIMIT 1))",
        "CREATE VIEW v AS SELECT * FROM merge(REGEXP('^__durable_obj_'), '^secret$')",
        "INSERT INTO t VALUES (toString(arrayReduce(concat('stochasticLinear', 'Regression'), "
        "[2.], [1.])))",
        "CREATE VIEW v AS SELECT stochasticLinearRegressionIf(1., 1., 1) AS w FROM t",
    ],
)
def test_a_replayed_line_execute_refuses_is_corrupt(tmp_path: Path, line: str) -> None:
    url = _object_with_segment(tmp_path, "o")
    _tamper(url, ["CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s", line])
    with pytest.raises(errors.Corrupt, match="statement 2"):
        durable_obj.open(str(url), read_only=True)


_REFUSED_LINES = st.sampled_from(
    [
        "CREATE FUNCTION f36 AS (x) -> x",
        "KILL QUERY WHERE 1 ASYNC",
        "SET allow_ddl = 1",
        "SYSTEM FLUSH LOGS",
        "INSERT INTO t SELECT * FROM file('/etc/hostname', RawBLOB)",
        "INSERT INTO t VALUES (getServerSetting('path'))",
        "CREATE TABLE x (s String) ENGINE = File(RawBLOB, '/etc/hostname')",
        "INSERT INTO t SELECT query FROM system.processes",
        "INSERT INTO t FORMAT values ((SELECT name FROM system.disks LIMIT 1))",
        "SELECT 1",
    ]
)


def _variant(line: str, data: st.DataObject) -> str:
    """The line in another spelling: case, spacing, a leading comment."""
    words = line.split(" ")
    cased = [w.swapcase() if data.draw(st.booleans()) and "'" not in w else w for w in words]
    space = data.draw(st.sampled_from([" ", "  ", "\n", "\t"]))
    prefix = data.draw(st.sampled_from(["", "/* c */ ", "-- c\n", HIDE]))
    return prefix + space.join(cased)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(line=_REFUSED_LINES, data=st.data())
def test_any_line_execute_refuses_is_refused_on_open(
    tmp_path_factory: pytest.TempPathFactory, line: str, data: st.DataObject
) -> None:
    """Property: a line execute() refuses, in any spelling, placed in a
    segment with a valid digest, is refused on open and changes nothing."""
    text = _variant(line, data)
    root = tmp_path_factory.mktemp("prop")
    url = _object_with_segment(root, "o")
    with durable_obj.open(str(url / ".." / "probe"), owner="p") as probe:
        probe.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        with pytest.raises((*REFUSALS, errors.EngineError)):
            probe.execute(text)
    head = (url / "head.json").read_bytes()
    _tamper(url, ["CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s", text])
    tampered = (url / "head.json").read_bytes()
    with pytest.raises(errors.Corrupt):
        durable_obj.open(str(url), read_only=True)
    assert (url / "head.json").read_bytes() == tampered != head
    with (
        durable_obj.open(str(url / ".." / "probe"), owner="p") as probe,
        pytest.raises(errors.DurableError),
    ):
        probe.query("SELECT f36(1)")


def test_heredocs_and_comments_in_values_are_literals_that_replay(tmp_path: Path) -> None:
    """What the engine reads as a literal is accepted in VALUES: a heredoc
    (logged as the quoted literal it is), a comment between values; both
    replay to the same rows."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (k UInt8, s String) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1, $$it's; \"quoted\"$$), (2, /* note */ 'b')")
        obj.execute("INSERT INTO t FORMAT values (3, $tag$multi\nline$tag$) -- done")
        want = obj.rows("SELECT * FROM t ORDER BY k")
    assert want == [(1, 'it\'s; "quoted"'), (2, "b"), (3, "multi\nline")]
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.rows("SELECT * FROM t ORDER BY k") == want


# -- found by the attack on this round ----------------------------------------------


def test_the_format_table_function_never_evaluates_hidden_sql(untouched: World) -> None:
    """`format(Values, 's String', '<data>')` evaluates its data as SQL the
    gate never read (a string literal): the host file, another object's
    table, the engine's databases. As a table function it is refused on
    every path; `format()` the string function still works."""
    w = untouched
    path = str(w.host_file)
    data = [
        f"(file(''{path}''))",
        f"((SELECT s FROM {w.b_internal}.secret))",
        "((SELECT arrayStringConcat(groupArray(name), ',') FROM system.databases))",
    ]
    for row in data:
        for fmt in ("Values", "values", "'Values'", "concat('Val', 'ues')"):
            sql = f"SELECT * FROM format({fmt}, 's String', '{row}')"
            with pytest.raises(REFUSALS):
                w.a.query(sql)
            with pytest.raises(REFUSALS):
                w.a.execute(f"INSERT INTO t {sql}")
            with pytest.raises(REFUSALS):
                w.a.execute(f"CREATE VIEW fv AS {sql}")
    with pytest.raises(REFUSALS):
        w.a.execute(f"CREATE TABLE ft AS format(Values, 's String', '{data[0]}')")
    with pytest.raises(REFUSALS):
        w.a.query("SELECT * FROM format(CSV, 's String', 'a')")
    assert w.a.query("SELECT format('{} + {}', 'a', 'b')") == '"a + b"\n'


def test_a_replayed_format_table_function_is_corrupt(tmp_path: Path) -> None:
    url = _object_with_segment(tmp_path, "o")
    line = "INSERT INTO t SELECT * FROM format(Values, 's String', '(file(''/etc/hostname''))')"
    _tamper(url, ["CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s", line])
    with pytest.raises(errors.Corrupt, match="statement 2"):
        durable_obj.open(str(url), read_only=True)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE r1 ENGINE = Memory AS SELECT 1 AS x "
        "SETTINGS function_range_max_elements_in_block = 100000000",
        "CREATE VIEW r2 AS SELECT 1 AS x SETTINGS function_range_max_elements_in_block = 10000000",
        "ALTER TABLE t UPDATE s = 'x' WHERE 1 SETTINGS function_range_max_elements_in_block = 1e9",
        "CREATE TABLE r3 (x Int8) ENGINE = MergeTree ORDER BY x SETTINGS log_comment = 'zz'",
        "CREATE TABLE r4 ENGINE = Memory AS SELECT 1 AS x SETTINGS max_ast_elements = 1000000000",
        "CREATE TABLE r5 ENGINE = Memory AS SELECT 1 AS x SETTINGS some_query_setting = 1",
        "CREATE TABLE r6 (x Int8) ENGINE = MergeTree ORDER BY x "
        "SETTINGS index_granularity = 1 + 1, log_comment = 'zz'",
    ],
)
def test_ddl_settings_cannot_lift_a_bound_or_retag_a_call(untouched: World, sql: str) -> None:
    """A DDL statement's SETTINGS are an allow-list (MergeTree settings, the
    settings that change which definitions the engine accepts, a read's
    output settings): a query's settings inside it (the range cap the bound
    sets, the watchdog's tag) are refused, and so is a list the gate cannot
    read to its end."""
    with pytest.raises(errors.ClassificationRefused):
        untouched.a.execute(sql)


def test_table_settings_of_the_engine_still_run(tmp_path: Path) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="w") as obj:
        obj.execute(
            "CREATE TABLE s (x Int8, lc LowCardinality(UInt8)) ENGINE = MergeTree ORDER BY x "
            "SETTINGS index_granularity = 1024, min_bytes_for_wide_part = 0, "
            "allow_suspicious_low_cardinality_types = 1"
        )
        obj.execute("ALTER TABLE s MODIFY SETTING parts_to_throw_insert = 500")
        obj.execute("INSERT INTO s VALUES (1, 2)")
        assert obj.query("SELECT * FROM s") == "1,2\n"


@pytest.mark.parametrize(
    "source",
    [
        "TABLE 't' INVALIDATE_QUERY 'SELECT 1 FROM url(''http://127.0.0.1:9/'', LineAsString)'",
        "TABLE 't' NAME 'x'",
        "TABLE 't' WHERE 's != 1'",
        "QUERY 'SELECT s, s AS v FROM t'",
    ],
)
def test_a_dictionary_source_takes_only_a_table_of_the_object(
    untouched: World, source: str
) -> None:
    """A CLICKHOUSE source's keys are an allow-list (TABLE, DB, UPDATE_FIELD,
    UPDATE_LAG): an INVALIDATE_QUERY is SQL the gate never reads, run by the
    engine whenever it reloads the dictionary."""
    sql = (
        "CREATE DICTIONARY d36 (s String, v String) PRIMARY KEY s "
        f"SOURCE(CLICKHOUSE({source})) LIFETIME(0) LAYOUT(COMPLEX_KEY_HASHED())"
    )
    with pytest.raises(errors.ClassificationRefused, match="TABLE 'name'"):
        untouched.a.execute(sql)


def test_a_call_no_bound_can_stop_is_refused_under_a_bound(tmp_path: Path) -> None:
    """editDistance of two 64 KiB strings spends ~4.7 s in one call, which
    the engine cannot stop midway (a 1 s bound ran 25 s): under a bound a
    statement may not call it, in a read, a write or a definition; without
    one it runs."""
    bound = durable_obj.Bounds(seconds=1)
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w", query_bounds=bound, write_bounds=bound) as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        for sql in (
            "SELECT editDistance(repeat('a', 65536), repeat('b', 65536))",
            "SELECT length(arrayWithConstant(20000000, 1))",
        ):
            with pytest.raises(errors.ClassificationRefused, match="past any time bound"):
                obj.rows(sql)
        with pytest.raises(errors.ClassificationRefused, match="past any time bound"):
            obj.execute("INSERT INTO t SELECT toString(levenshteinDistance('a', s)) FROM t")
        with pytest.raises(errors.ClassificationRefused, match="past any time bound"):
            obj.execute(
                "CREATE TABLE d (s String, n UInt64 DEFAULT editDistance(s, 'x')) "
                "ENGINE = MergeTree ORDER BY s"
            )
        assert obj.query("SELECT count() FROM t") == "0\n"
    with durable_obj.open(url, owner="w") as obj:
        assert obj.query("SELECT editDistance('kitten', 'sitting')") == "3\n"


def test_a_recursive_cte_reads_and_replays(tmp_path: Path) -> None:
    """A recursive CTE's working table is one the engine makes for the query
    (`_temporary_and_external_tables._tmp_<uuid>`): allowed in its tree,
    while a statement naming that database is refused."""
    walk = (
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT b FROM e JOIN r ON e.a = r.n) "
        "SELECT n FROM r"
    )
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE e (a UInt32, b UInt32) ENGINE = MergeTree ORDER BY a")
        obj.execute("INSERT INTO e VALUES (1, 2), (2, 3), (3, 4)")
        assert obj.rows(f"SELECT count() FROM ({walk})") == [(4,)]
        obj.execute("CREATE TABLE c (n UInt32) ENGINE = MergeTree ORDER BY n")
        obj.execute(f"INSERT INTO c {walk}")
        with pytest.raises(errors.ClassificationRefused, match="temporary tables"):
            obj.query("SELECT * FROM _temporary_and_external_tables.x")
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.rows("SELECT n FROM c ORDER BY n") == [(1,), (2,), (3,), (4,)]


def test_an_object_under_a_bound_defines_no_call_a_bound_cannot_stop(tmp_path: Path) -> None:
    """With only `query_bounds` set, writes run unbounded, but a view or a
    DEFAULT defined now would run its editDistance under the read's bound
    later: the definition is refused. Without any bound it is accepted."""
    bound = durable_obj.Bounds(seconds=1)
    definitions = (
        "CREATE VIEW v AS SELECT editDistance(s, 'x') AS d FROM t",
        "CREATE TABLE d (s String, n UInt64 DEFAULT levenshteinDistance(s, 'x')) "
        "ENGINE = MergeTree ORDER BY s",
        "CREATE MATERIALIZED VIEW mv ENGINE = Memory AS SELECT arrayWithConstant(3, s) AS a FROM t",
        "ALTER TABLE t ADD COLUMN n UInt64 DEFAULT editDistance(s, 'y')",
    )
    with durable_obj.open(str(tmp_path / "b"), owner="w", query_bounds=bound) as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        for sql in definitions:
            with pytest.raises(errors.ClassificationRefused, match="cannot stop it midway"):
                obj.execute(sql)
        obj.execute("INSERT INTO t SELECT toString(editDistance('a', 'b'))")  # a write: unbounded
    with durable_obj.open(str(tmp_path / "u"), owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        for sql in definitions:
            obj.execute(sql)
