"""Hostile isolation: one object's statements never reach another's data.

Two objects are open in this process: a victim holding a secret (a table, a
dictionary, a Join table, a view) and an attacker that knows the victim's
internal database name (the worst case: as if it had leaked). Every route
below, and hypothesis-built combinations of them, is refused by query() or
execute(); afterwards the victim's data is unchanged, and nothing of it ever
reached the attacker (not in an answer, not in its tables, not through a
materialized view fed by the victim's later inserts).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import durable_obj
from durable_obj import errors
from durable_obj.core.object import DurableObject

SECRET = "SECRET-7f3a"
REFUSED = (errors.ClassificationRefused, errors.Nondeterministic)


class Pair:
    def __init__(self, victim: DurableObject, attacker: DurableObject) -> None:
        self.victim, self.attacker = victim, attacker
        engine = victim._local.engine
        assert engine is not None
        self.internal = engine.database
        self.before = self.snapshot()

    def snapshot(self) -> tuple[str, str, list[str]]:
        v = self.victim
        return (
            v.query("SELECT s FROM secret ORDER BY s"),
            v.query("SELECT k, v FROM j"),
            v.tables(),
        )

    def fill(self, template: str) -> str:
        return template.format(I=self.internal, S=SECRET)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root: Path = tmp_path_factory.mktemp("isolation")
    with (
        durable_obj.open(str(root / "victim")) as victim,
        durable_obj.open(str(root / "attacker"), db="other") as attacker,
    ):
        victim.execute("CREATE TABLE secret (s String) ENGINE = MergeTree ORDER BY s")
        victim.execute(f"INSERT INTO secret VALUES ('{SECRET}')")
        victim.execute("CREATE TABLE j (k UInt64, v String) ENGINE = Join(ANY, LEFT, k)")
        victim.execute(f"INSERT INTO j VALUES (1, '{SECRET}')")
        victim.execute(
            "CREATE DICTIONARY d (k UInt64, v String) PRIMARY KEY k "
            "SOURCE(CLICKHOUSE(TABLE 'j')) LAYOUT(FLAT()) LIFETIME(0)"
        )
        victim.execute("CREATE VIEW sv AS SELECT s FROM secret")
        attacker.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        attacker.execute("INSERT INTO t VALUES ('mine')")
        yield Pair(victim, attacker)
        # The victim's later writes feed nothing of the attacker's.
        victim.execute(f"INSERT INTO secret VALUES ('{SECRET}-later')")
        for table in attacker.tables():
            assert SECRET not in attacker.query(f"SELECT * FROM `{table}`")
        victim.flush()
        attacker.flush()


#: Ways to name the victim's secret table (or its data) as a table.
TABLES = [
    "{I}.secret",
    "`{I}`.secret",
    '"{I}".`secret`',
    "{I} . secret",
    "{I}.sv",
    "merge('{I}', 'secret')",
    "merge(REGEXP('.*'), '^secret$')",
    "merge(currentDatabase(), 'secret')",
    "remote('127.0.0.1', '{I}', 'secret')",
    "remote('127.0.0.1', {I}.secret)",
    "remoteSecure('127.0.0.1', '{I}', 'secret')",
    "cluster('default', {I}.secret)",
    "clusterAllReplicas('default', '{I}', 'secret')",
    "loop({I}, secret)",
    "loop('{I}', 'secret')",
    "dictionary('{I}.d')",
    "mergeTreeIndex('{I}', 'secret')",
    "file('**/*.bin', 'LineAsString')",
    "file('/etc/hostname', 'LineAsString')",
    "view(SELECT s FROM {I}.secret)",
    "system.query_log",
    "system.processes",
    "system.query_cache",
    "information_schema.tables",
    "INFORMATION_SCHEMA.COLUMNS",
    "default.secret",
    "`\\x5f_durable_obj_x`.secret",
]
#: Read shapes a table reference can stand in.
READS = [
    "SELECT * FROM {T}",
    "SELECT * FROM t WHERE s IN (SELECT * FROM {T})",
    "SELECT * FROM t AS a JOIN {T} AS b ON 1",
    "SELECT (SELECT any(*) FROM {T})",
    "WITH q AS (SELECT * FROM {T}) SELECT * FROM q",
    "SELECT s FROM t UNION ALL SELECT * FROM {T}",
    "SELECT * FROM t ARRAY JOIN (SELECT groupArray(*) FROM {T}) AS x",
    "EXPLAIN SELECT * FROM {T}",
    "DESCRIBE TABLE {T}",
]
#: Write shapes.
WRITES = [
    "INSERT INTO t SELECT * FROM {T}",
    "INSERT INTO t VALUES ((SELECT any(*) FROM {T}))",
    "CREATE VIEW w AS SELECT * FROM {T}",
    "CREATE TABLE c ENGINE = MergeTree ORDER BY tuple() AS SELECT * FROM {T}",
    "ALTER TABLE t DELETE WHERE s IN (SELECT * FROM {T})",
    "ALTER TABLE t UPDATE s = (SELECT any(*) FROM {T}) WHERE 1",
]
#: Expressions that read the victim by a name they are given.
EXPRESSIONS = [
    "dictGet('{I}.d', 'v', toUInt64(1))",
    "dictGetOrDefault('{I}.d', 'v', toUInt64(1), '')",
    "dictHas('{I}.d', toUInt64(1))",
    "joinGet('{I}.j', 'v', toUInt64(1))",
    "joinGet(concat('{I}', '.j'), 'v', toUInt64(1))",
    "hasColumnInTable('{I}', 'secret', 's')",
    "file('/etc/hostname')",
    "dictGet('default.d', 'v', toUInt64(1))",
]
#: Statements that are hostile as a whole.
WHOLE = [
    ("query", "SHOW DATABASES"),
    ("query", "SHOW TABLES FROM {I}"),
    ("query", "SHOW TABLES FROM default"),
    ("query", "SHOW CREATE TABLE {I}.secret"),
    ("query", "SHOW PROCESSLIST"),
    ("query", "EXISTS TABLE {I}.secret"),
    ("query", "SELECT * FROM system.tables WHERE database = '{I}'"),
    ("execute", "INSERT INTO {I}.secret VALUES ('x')"),
    ("execute", "ALTER TABLE {I}.secret DELETE WHERE 1"),
    ("execute", "ALTER TABLE {I}.secret UPDATE s = 'x' WHERE 1"),
    ("execute", "TRUNCATE TABLE {I}.secret"),
    ("execute", "DROP TABLE {I}.secret"),
    ("execute", "DROP TABLE IF EXISTS {I}.secret"),
    ("execute", "DETACH TABLE {I}.secret"),
    ("execute", "OPTIMIZE TABLE {I}.secret FINAL"),
    ("execute", "RENAME TABLE {I}.secret TO stolen"),
    ("execute", "EXCHANGE TABLES t AND {I}.secret"),
    ("execute", "CREATE TABLE c AS {I}.secret"),
    ("execute", "CREATE TABLE c CLONE AS {I}.secret"),
    ("execute", "ALTER TABLE t ATTACH PARTITION tuple() FROM {I}.secret"),
    ("execute", "ALTER TABLE t REPLACE PARTITION tuple() FROM {I}.secret"),
    ("execute", "ALTER TABLE {I}.secret MOVE PARTITION tuple() TO TABLE t"),
    ("execute", "CREATE MATERIALIZED VIEW mv TO t AS SELECT s FROM {I}.secret"),
    ("execute", "CREATE MATERIALIZED VIEW mv2 TO {I}.secret AS SELECT s FROM t"),
    ("execute", "CREATE TABLE m (s String) ENGINE = Merge('{I}', '.*')"),
    ("execute", "CREATE TABLE m (s String) ENGINE = Merge(REGEXP('.*'), 'secret')"),
    ("execute", "CREATE TABLE bf (s String) ENGINE = Buffer('{I}', 'secret', 1, 1, 1, 1, 1, 1, 1)"),
    ("execute", "CREATE TABLE dt (k UInt64, v String) ENGINE = Dictionary('{I}.d')"),
    ("execute", "CREATE TABLE dt (k UInt64, v String) ENGINE = Dictionary(`{I}`.d)"),
    ("execute", "CREATE TABLE al ENGINE = Alias('{I}', 'secret')"),
    ("execute", "CREATE TABLE ds (s String) ENGINE = Distributed('default', '{I}', 'secret')"),
    ("execute", "CREATE TABLE fl (s String) ENGINE = File(LineAsString, '/etc/hostname')"),
    (
        "execute",
        "CREATE DICTIONARY d2 (s String) PRIMARY KEY s SOURCE(CLICKHOUSE(TABLE 'secret' "
        "DB '{I}')) LAYOUT(COMPLEX_KEY_HASHED()) LIFETIME(0)",
    ),
    (
        "execute",
        "CREATE DICTIONARY d3 (s String) PRIMARY KEY s SOURCE(CLICKHOUSE(QUERY "
        "'SELECT s FROM {I}.secret')) LAYOUT(COMPLEX_KEY_HASHED()) LIFETIME(0)",
    ),
    (
        "execute",
        "CREATE DICTIONARY d4 (s String) PRIMARY KEY s SOURCE(CLICKHOUSE(TABLE 'secret' "
        "DB 'default')) LAYOUT(COMPLEX_KEY_HASHED()) LIFETIME(0)",
    ),
    (
        "execute",
        "CREATE DICTIONARY d5 (s String) PRIMARY KEY s SOURCE(CLICKHOUSE(TABLE 'secret' "
        "WHERE 's IN (SELECT s FROM {I}.secret)')) LAYOUT(COMPLEX_KEY_HASHED()) LIFETIME(0)",
    ),
    ("execute", "CREATE DATABASE stolen"),
    ("execute", "DROP DATABASE {I}"),
    ("execute", "USE {I}"),
    ("execute", "BACKUP DATABASE {I} TO File('x.tar')"),
]


def attempt(pair: Pair, how: str, template: str) -> None:
    sql = pair.fill(template)
    obj = pair.attacker
    if how == "query":
        with pytest.raises(REFUSED) as caught:
            answer = obj.query(sql)
            assert SECRET not in answer  # reached only if not refused
    else:
        with pytest.raises((*REFUSED, errors.SecretRefused)) as caught:
            obj.execute(sql)
    assert pair.internal not in str(caught.value) or "reserved" in str(caught.value)
    assert pair.snapshot() == pair.before


@pytest.mark.parametrize(("how", "template"), WHOLE)
def test_whole_statements_are_refused(pair: Pair, how: str, template: str) -> None:
    attempt(pair, how, template)


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("shape", READS)
def test_reads_through_every_table_route_are_refused(pair: Pair, shape: str, table: str) -> None:
    attempt(pair, "query", shape.replace("{T}", table))


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("shape", WRITES)
def test_writes_through_every_table_route_are_refused(pair: Pair, shape: str, table: str) -> None:
    attempt(pair, "execute", shape.replace("{T}", table))


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("shape", WRITES)
def test_allow_nondeterministic_never_lifts_isolation(pair: Pair, shape: str, table: str) -> None:
    """With the replay check off, what it refused as Nondeterministic (a read
    through a table function or engine) is still refused, as isolation."""
    sql = pair.fill(shape.replace("{T}", table))
    with pytest.raises(errors.ClassificationRefused):
        pair.attacker.execute(sql, allow_nondeterministic=True)
    assert pair.snapshot() == pair.before


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_functions_naming_another_object_are_refused(pair: Pair, expr: str) -> None:
    attempt(pair, "query", f"SELECT {expr}")
    attempt(pair, "execute", f"INSERT INTO t SELECT toString({expr})")
    attempt(pair, "execute", f"INSERT INTO t VALUES (toString({expr}))")


def test_scoped_system_tables_show_only_the_object(pair: Pair) -> None:
    """system.tables, columns, parts, databases answer for the attacker's own
    database, under its logical name: no other name, no internal name."""
    obj = pair.attacker
    for sql in (
        "SELECT * FROM system.tables",
        "SELECT * FROM system.columns",
        "SELECT * FROM system.parts",
        "SELECT * FROM system.databases",
        "SELECT * FROM system.mutations",
        "SELECT * FROM system.dictionaries",
        "SHOW TABLES",
    ):
        out = obj.query(sql, "TSV")
        assert "secret" not in out and "__durable_obj_" not in out, sql
    assert obj.query("SELECT DISTINCT database FROM system.tables") == '"other"\n'
    assert obj.query("SELECT currentDatabase()") == '"other"\n'


def test_own_names_still_work(pair: Pair) -> None:
    """The gate does not stop an object naming its own database, logically."""
    obj = pair.victim
    assert obj.query("SELECT count() FROM default.secret") == "1\n"
    assert obj.query("SELECT dictGet('default.d', 'v', toUInt64(1))") == f'"{SECRET}"\n'
    assert obj.query("SELECT joinGet('j', 'v', toUInt64(1))") == f'"{SECRET}"\n'
    assert obj.query("SELECT count() FROM sv") == "1\n"


_PARTS = st.sampled_from(["{I}", "`{I}`", '"{I}"'])
_SPACE = st.sampled_from(["", " ", "\n", " /* c */ "])


@given(
    db=_PARTS,
    table=st.sampled_from(["secret", "`secret`", "sv", "j"]),
    sp1=_SPACE,
    sp2=_SPACE,
    shape=st.sampled_from(READS + WRITES),
)
def test_generated_references_are_refused(
    pair: Pair, db: str, table: str, sp1: str, sp2: str, shape: str
) -> None:
    reference = f"{db}{sp1}.{sp2}{table}"
    how = "execute" if shape in WRITES else "query"
    attempt(pair, how, shape.replace("{T}", reference))
