# ruff: noqa: E501 - the refused forms read best one statement per line
"""Issue 36, "accept what is safe": statements that replay the same are
accepted, and each that does not is refused saying why and what to write.

Every accepted form is checked the same way: written through execute(),
flushed, then the object is opened afresh (a new database in the engine,
built from the WAL alone) and every table's rows and `SHOW CREATE TABLE`
must equal the writer's; then after a checkpoint and another open (built
from the base). A chdb.durable reader, which replays WAL lines one by one
without a gate, must see the same too.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from tests.integration import _proc

T = "CREATE TABLE t (a UInt32, s String) ENGINE = MergeTree ORDER BY a"
ROWS = "INSERT INTO t VALUES (1, 'x'), (2, 'y')"


def state(obj: durable_obj.DurableObject) -> dict[str, tuple[str, str]]:
    """Every table of the object: its definition and all its rows, the
    MATERIALIZED columns (which SELECT * leaves out) included."""
    out = {}
    for name in obj.query("SHOW TABLES", fmt="TSVRaw").data().split():
        create = obj.query(f"SHOW CREATE TABLE `{name}`", fmt="TSVRaw").data()
        columns = obj.query(
            f"SELECT name FROM system.columns WHERE table = '{name}' "
            "AND default_kind != 'ALIAS' ORDER BY position",
            fmt="TSVRaw",
        ).data()
        cols = ", ".join(f"`{c}`" for c in columns.split())
        rows = obj.query(f"SELECT {cols} FROM `{name}` ORDER BY {cols}", fmt="TSVRaw").data()
        out[name] = (create, rows)
    return out


def replays_the_same(url: str, statements: list[str]) -> dict[str, tuple[str, str]]:
    """Run `statements`, then compare the writer's state with a fresh open
    from the WAL, and with one from a checkpoint. Returns the state."""
    with durable_obj.open(url) as obj:
        for sql in statements:
            obj.execute(sql)
        obj.flush()
        written = state(obj)
    with durable_obj.open(url) as again:
        assert state(again) == written
        again.checkpoint()
    with durable_obj.open(url) as based:
        assert state(based) == written
    return written


@pytest.fixture
def url() -> str:
    return f"memory://accept-{uuid.uuid4().hex}/o"


# -- 1. DETACH / ATTACH --------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "detach", "attach", "name"),
    [
        ([], "DETACH TABLE t", "ATTACH TABLE t", "t"),
        ([], "DETACH TABLE IF EXISTS default.t SYNC", "ATTACH TABLE IF NOT EXISTS default.t", "t"),
        (["CREATE VIEW v AS SELECT a FROM t"], "DETACH VIEW v", "ATTACH TABLE v", "v"),
        (
            [
                "CREATE DICTIONARY d (a UInt32, s String) PRIMARY KEY a "
                "SOURCE(CLICKHOUSE(TABLE 't')) LAYOUT(FLAT()) LIFETIME(0)"
            ],
            "DETACH DICTIONARY d",
            "ATTACH DICTIONARY d",
            "d",
        ),
    ],
    ids=["table", "qualified", "view", "dictionary"],
)
def test_detach_then_attach_replays_the_same(
    url: str, setup: list[str], detach: str, attach: str, name: str
) -> None:
    with durable_obj.open(url) as obj:
        for sql in [T, ROWS, *setup, detach]:
            obj.execute(sql)
        obj.flush()
        assert name not in state(obj)
        detached = state(obj)
    # replayed: still detached, and the same data comes back on ATTACH
    with durable_obj.open(url) as again:
        assert state(again) == detached
        again.execute(attach)
        assert name in state(again)
    written = replays_the_same(url, [])
    assert written["t"][1] == "1\tx\n2\ty\n"


def test_checkpoint_refused_while_a_table_is_detached(url: str) -> None:
    """BACKUP DATABASE skips a detached table: a base made then would lose
    it, and the ATTACH after it would not replay. So a checkpoint waits."""
    with durable_obj.open(url) as obj:
        for sql in (T, ROWS, "DETACH TABLE t"):
            obj.execute(sql)
        with pytest.raises(errors.InvalidArgument, match=r"(?s)detached.*ATTACH TABLE") as info:
            obj.checkpoint()
        assert info.value.category == "invalid_argument"
        assert obj.pending == 3  # still buffered: nothing was written
        obj.flush()
        obj.execute("ATTACH TABLE t")
        obj.checkpoint()
        written = state(obj)
    with durable_obj.open(url) as again:
        assert state(again) == written
        assert written["t"][1] == "1\tx\n2\ty\n"


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("ATTACH TABLE t FROM '/tmp/x'", "files outside the object"),
        ("ATTACH TABLE q FROM '/tmp/x' (a UInt8) ENGINE = MergeTree ORDER BY a", "files outside"),
        ("ATTACH TABLE q (a UInt8) ENGINE = MergeTree ORDER BY a", "its own definition"),
        ("ATTACH TABLE q UUID '123e4567-e89b-12d3-a456-426614174000' (a UInt8) ENGINE = Log", "UUID"),
        ("ATTACH TABLE t ON CLUSTER c", "short ATTACH"),
        ("ATTACH DATABASE x", "short ATTACH"),
        ("DETACH TABLE t ON CLUSTER c", "no ON CLUSTER"),
        ("DETACH TABLE t PERMANENTLY", "no PERMANENTLY"),
        ("DETACH DATABASE default", "no ON CLUSTER, no DATABASE"),
        ("DETACH TABLE other.t", "another database"),
        ("DETACH TABLE system.one", "another database"),
    ],
)  # fmt: skip
def test_detach_attach_forms_refused(url: str, sql: str, why: str) -> None:
    with durable_obj.open(url) as obj:
        obj.execute(T)
        with pytest.raises(errors.ClassificationRefused, match=why) as info:
            obj.execute(sql)
        assert "Not run" in str(info.value) or "Nothing was run" in str(info.value)
        assert obj.pending == 1


# -- 2. SET and the settings that decide what DDL the engine accepts -------------


@pytest.mark.parametrize(
    "sql",
    ["SET allow_suspicious_low_cardinality_types = 1", "SET flatten_nested = 0"],
)
def test_set_of_a_ddl_setting_says_to_use_the_statements_settings(url: str, sql: str) -> None:
    with (
        durable_obj.open(url) as obj,
        pytest.raises(errors.ClassificationRefused, match="checkpoint does not carry") as info,
    ):
        obj.execute(sql)
    name = sql.split()[1]
    assert f"SETTINGS {name} = ..." in str(info.value)
    assert "allow_nullable_key" in str(info.value)  # the list of what is accepted there


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SET max_threads = 1", "max_threads"),
        ("SET session_timezone = 'Asia/Tokyo'", "session_timezone"),
        ("SET allow_suspicious_codecs = 1, max_memory_usage = 0", "max_memory_usage"),
    ],
)
def test_set_of_anything_else_is_refused_listing_the_allowed(
    url: str, sql: str, named: str
) -> None:
    with (
        durable_obj.open(url) as obj,
        pytest.raises(errors.ClassificationRefused, match=f"SET {named} is not") as info,
    ):
        obj.execute(sql)
    assert "allow_suspicious_low_cardinality_types" in str(info.value)


def test_ddl_settings_in_the_statement_replay_the_same(url: str) -> None:
    """What the SET refusal points to: each setting in the statement's own
    SETTINGS, logged with it, applied on every replay (no SET needed)."""
    written = replays_the_same(
        url,
        [
            "CREATE TABLE lc (a LowCardinality(UInt32)) ENGINE = MergeTree ORDER BY tuple() "
            "SETTINGS allow_suspicious_low_cardinality_types = 1",
            "ALTER TABLE lc ADD COLUMN b LowCardinality(UInt8) "
            "SETTINGS allow_suspicious_low_cardinality_types = 1",
            "INSERT INTO lc SETTINGS allow_suspicious_low_cardinality_types = 1 "
            "SELECT 7, CAST(8 AS LowCardinality(UInt8))",
            "CREATE TABLE n (a UInt8, n Nested(x UInt8, y String)) ENGINE = MergeTree "
            "ORDER BY a SETTINGS flatten_nested = 0",
            "INSERT INTO n VALUES (1, [(2, 'z')])",
            "CREATE TABLE nk (a Nullable(UInt8)) ENGINE = MergeTree ORDER BY a "
            "SETTINGS allow_nullable_key = 1",
            "INSERT INTO nk VALUES (NULL), (1)",
            "CREATE TABLE fs (a FixedString(300)) ENGINE = MergeTree ORDER BY tuple() "
            "SETTINGS allow_suspicious_fixed_string_types = 1",
            "CREATE TABLE cd (a UInt8 CODEC(Delta, Delta)) ENGINE = MergeTree ORDER BY tuple() "
            "SETTINGS allow_suspicious_codecs = 1",
        ],
    )
    assert "`n` Nested(x UInt8, y String)" in written["n"][0]  # not flattened on replay either
    assert written["lc"][1] == "7\t8\n"


# -- 3. MATERIALIZED today() and friends ----------------------------------------


def test_materialized_today_in_create_is_pinned_per_insert(url: str) -> None:
    with durable_obj.open(url) as obj:
        obj.execute(
            "CREATE TABLE md (d Date MATERIALIZED today(), a UInt8, "
            "n DateTime64(6) MATERIALIZED now64(6)) ENGINE = MergeTree ORDER BY a"
        )
        obj.execute("INSERT INTO md (a) VALUES (1)")
        obj.execute("INSERT INTO md VALUES (2)")
        obj.execute("INSERT INTO md (a) SELECT number FROM numbers(3, 2)")
        obj.flush()
    written = replays_the_same(url, ["OPTIMIZE TABLE md FINAL"])
    assert len(written["md"][1].splitlines()) == 4


def test_materialized_rand_left_to_insert_select_is_refused(url: str) -> None:
    with durable_obj.open(url) as obj:
        obj.execute("CREATE TABLE mr (r UInt32 MATERIALIZED rand(), a UInt8) ENGINE = Memory")
        obj.execute("INSERT INTO mr (a) VALUES (1), (2)")  # pinned per row
        with pytest.raises(errors.Nondeterministic, match="insert its value explicitly"):
            obj.execute("INSERT INTO mr (a) SELECT 3")


def test_add_materialized_today_to_rows_is_refused_but_not_to_an_empty_table(url: str) -> None:
    with durable_obj.open(url) as obj:
        obj.execute(T)
        obj.execute("ALTER TABLE t ADD COLUMN d Date MATERIALIZED today()")  # no rows yet
        obj.execute("INSERT INTO t (a, s) VALUES (1, 'x')")
        obj.execute("CREATE TABLE u (a UInt8) ENGINE = MergeTree ORDER BY a")
        obj.execute("INSERT INTO u VALUES (1)")
        with pytest.raises(errors.Nondeterministic, match=r"existing rows.*UPDATE col"):
            obj.execute("ALTER TABLE u ADD COLUMN d Date MATERIALIZED today()")
        obj.flush()
    replays_the_same(url, [])


# -- 4. ordinary statements that were already accepted: they replay the same -----


def test_ordinary_ddl_and_inserts_replay_the_same(url: str) -> None:
    replays_the_same(
        url,
        [
            T,
            ROWS,
            "CREATE TABLE u (a UInt32) ENGINE = MergeTree ORDER BY a",
            "INSERT INTO u SELECT a FROM (SELECT a, row_number() OVER (ORDER BY a) AS r FROM t)",
            "INSERT INTO u SELECT sum(number) OVER () FROM numbers(3)",
            "INSERT INTO u WITH 5 AS k SELECT k",
            "INSERT INTO u WITH x AS (SELECT 7 AS a) SELECT a FROM x",
            "ALTER TABLE t MODIFY COLUMN s LowCardinality(String)",
            "RENAME TABLE u TO u2",
            "EXCHANGE TABLES t AND u2",
            "EXCHANGE TABLES t AND u2",
            "CREATE TABLE c1 AS t",
            "CREATE TABLE c2 CLONE AS t",
            "CREATE TABLE c3 AS t ENGINE = Log",
            "INSERT INTO c3 SELECT * FROM t",
            "OPTIMIZE TABLE t FINAL",
            "TRUNCATE TABLE u2",
            "ALTER TABLE t DELETE WHERE a = 2",
            "CREATE OR REPLACE TABLE c1 (a UInt8) ENGINE = Memory",
            "ALTER TABLE t ADD INDEX ix s TYPE bloom_filter GRANULARITY 1",
            "ALTER TABLE t MATERIALIZE INDEX ix",
        ],
    )


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("ALTER TABLE t FREEZE", "control statements"),
        ("CREATE TEMPORARY TABLE tt (a UInt8)", "control statements"),
        (
            "CREATE TABLE old (d Date, a UInt8) ENGINE = MergeTree(d, a, 8192) "
            "SETTINGS allow_deprecated_syntax_for_merge_tree = 1",
            "RESTORE cannot read back",
        ),
        ("ALTER TABLE t UPDATE s = 'z' WHERE 1 SETTINGS mutations_sync = 0", "control"),
    ],
)
def test_still_refused(url: str, sql: str, why: str) -> None:
    with durable_obj.open(url) as obj:
        obj.execute(T)
        with pytest.raises(errors.ClassificationRefused, match=why):
            obj.execute(sql)


# -- chdb.durable reads the same ------------------------------------------------


@pytest.mark.slow
def test_chdb_durable_replays_detach_attach_and_ddl_settings(tmp_path: Path) -> None:
    oid = "accepted"
    statements = [
        T,
        ROWS,
        "DETACH TABLE t",
        "ATTACH TABLE t",
        "CREATE TABLE lc (a LowCardinality(UInt32)) ENGINE = MergeTree ORDER BY tuple() "
        "SETTINGS allow_suspicious_low_cardinality_types = 1",
        "INSERT INTO lc VALUES (4)",
        "CREATE TABLE md (d Date MATERIALIZED today(), a UInt8) ENGINE = MergeTree ORDER BY a",
        "INSERT INTO md (a) VALUES (1)",
        "CREATE TABLE gone (a UInt8) ENGINE = Memory",
        "DETACH TABLE gone",
    ]
    probe = [
        "SELECT * FROM t ORDER BY a",
        "SELECT * FROM lc",
        "SELECT d, a FROM md",
        "SELECT name, create_table_query FROM system.tables "
        "WHERE database = currentDatabase() ORDER BY name",
    ]
    with _proc.Worker("durable_obj") as w:
        w.open(str(tmp_path), oid, owner="w")
        for sql in statements:
            w.execute(sql)
        w.flush()
        written = [w.query(sql) for sql in probe]
        w.close()
        assert w.exit() == 0
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", oid, read_only=True)
        assert [w.query(sql) for sql in probe] == written
        w.close()
