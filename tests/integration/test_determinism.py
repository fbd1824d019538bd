# ruff: noqa: E501 - the corpus reads best one statement per line
"""Replay fidelity over a labelled corpus, across processes and time zones.

Every statement is labelled: `keep` (deterministic: logged as written, only
an INSERT gains the object's `session_timezone` setting), `pin` (accepted,
with its non-deterministic values replaced by literals) or `refuse`
(`nondeterministic`). A writer runs the corpus under one TZ; a second later
readers under TZ=UTC, Asia/Tokyo and America/Los_Angeles reopen the object in
fresh processes and must see exactly the writer's tables.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import durable_obj
import durable_obj.errors
from durable_obj.gate.reading import engine_text
from durable_obj.replica.engine import acquire
from tests.integration import replay_child

SCHEMA = [
    "CREATE TABLE e (id UInt32, s String, d DateTime, d64 DateTime64(6), f Float64) "
    "ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE dflt (id UInt32, u UUID DEFAULT generateUUIDv4(), "
    "t DateTime DEFAULT now(), m DateTime MATERIALIZED now()) ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE c (id UInt32, s String) ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE archive (id UInt32, content String, created_at DateTime64(3) DEFAULT now64(3)) "
    "ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE later (id UInt32) ENGINE = MergeTree ORDER BY id",
]

KEEP, PIN, REFUSE = "keep", "pin", "refuse"
#: Refused by the statement gate whatever flag is set (ClassificationRefused):
#: it reaches outside the object, or cannot be read as the engine reads it.
OUTSIDE = "outside"

CORPUS: list[tuple[str, str]] = [
    # -- deterministic: accepted unchanged --------------------------------
    (
        "INSERT INTO e VALUES (1, 'a', '2024-01-01 00:00:00', '2024-01-01 00:00:00.123456', 1.5)",
        KEEP,
    ),
    ("INSERT INTO e (id, s) VALUES (2, 'now()')", KEEP),
    ("INSERT INTO e (id, s) VALUES (3, 'rand() and generateUUIDv4()')", KEEP),
    ("INSERT INTO e (id, `s`) VALUES (4, 'quoted column')", KEEP),
    ("INSERT INTO e (id, \"s\") VALUES (5, 'double-quoted column')", KEEP),
    ("INSERT INTO e (id, s) VALUES (6, 'x') -- now() in a comment", KEEP),
    ("INSERT INTO e (id, s) /* rand() */ VALUES (7, 'block comment')", KEEP),
    ("INSERT INTO e (id, s) VALUES (8, 'it''s now()')", KEEP),
    ("INSERT INTO e (id, s) VALUES (9, 'back\\\\slash now()')", KEEP),
    ("INSERT INTO e (id, d) VALUES (10, toDateTime('2024-06-01 12:00:00'))", KEEP),
    ("INSERT INTO e (id, d) VALUES (11, toDateTime(1704067200))", KEEP),
    ("INSERT INTO e (id, d) VALUES (12, toDateTime('2024-06-01 12:00:00', 'Asia/Tokyo'))", KEEP),
    ("INSERT INTO e (id, d64) VALUES (13, toDateTime64('2024-06-01 12:00:00.5', 6))", KEEP),
    ("INSERT INTO e (id, s) VALUES (14, toString(toDate('2024-02-29')))", KEEP),
    ("INSERT INTO e (id, s) VALUES (15, upper('abc')), (16, lower('DEF'))", KEEP),
    ("INSERT INTO e (id, f) VALUES (17, sqrt(2)), (18, pi())", KEEP),
    ("INSERT INTO e (id, s) VALUES (19, concat('a', toString(1 + 2)))", KEEP),
    ("INSERT INTO e (id, s) VALUES (20, hex(MD5('x')))", KEEP),
    ("INSERT INTO e (id, s) VALUES (21, toString(cityHash64('x')))", KEEP),
    ("INSERT INTO e (id, s) VALUES (22, arrayStringConcat(['a', 'b'], '-'))", KEEP),
    (
        "INSERT INTO e (id, s) VALUES (23, formatDateTime(toDateTime('2024-01-01 00:00:00'), '%F'))",
        KEEP,
    ),
    (
        "INSERT INTO e (id, s) VALUES (24, toString(toStartOfDay(toDateTime('2024-01-01 13:00:00'))))",
        KEEP,
    ),
    (
        "INSERT INTO e (id, s) VALUES (25, toString(dateDiff('day', toDate('2024-01-01'), toDate('2024-03-01'))))",
        KEEP,
    ),
    ("INSERT INTO e (id, s) VALUES (26, currentDatabase())", KEEP),
    ("INSERT INTO e (id, s) VALUES (27, timezone())", KEEP),
    ("INSERT INTO e (id, s) SELECT 28, toString(arrayJoin([1]))", KEEP),
    ("insert into e (id, s) values (29, 'lower-case keywords')", KEEP),
    ("INSERT INTO e (id, s) VALUES (30, 'unicode ✓ ü 😀')", KEEP),
    ("INSERT INTO e (id, s) VALUES (31, $$heredoc now()$$)", KEEP),  # a literal
    ("INSERT INTO e (id, s) SELECT 32, 'select'", KEEP),
    ("INSERT INTO e (id, s) SELECT number + 33, toString(number) FROM numbers(3)", KEEP),
    ("INSERT INTO e (id, s) SELECT number + 36, 'x' FROM system.numbers LIMIT 2", KEEP),
    ("INSERT INTO e (id, s) SELECT 38, s FROM e WHERE id = 1", KEEP),
    ("INSERT INTO e (id, s) SELECT id + 100, concat(s, '!') FROM e WHERE id < 5", KEEP),
    ("INSERT INTO e (id, s) SELECT generate_series + 200, 'g' FROM generateSeries(1, 3)", KEEP),
    ("INSERT INTO e (id, s) SELECT 210, 'x' FROM system.one", KEEP),
    ("INSERT INTO e (id, s) WITH 'cte' AS v SELECT 211, v", KEEP),
    ("INSERT INTO e (id, s) SELECT * FROM values('id UInt32, s String', (212, 'v'))", KEEP),
    ("INSERT INTO e (id, s) SELECT 213, `now()` FROM (SELECT 'q' AS `now()`)", KEEP),
    ("ALTER TABLE e UPDATE s = 'updated' WHERE id = 2", KEEP),
    ("ALTER TABLE e UPDATE s = upper(s) WHERE id = 3", KEEP),
    ("ALTER TABLE e DELETE WHERE id = 4", KEEP),
    ("DELETE FROM e WHERE id = 5", KEEP),
    ("ALTER TABLE e ADD COLUMN extra String DEFAULT 'x'", KEEP),
    ("ALTER TABLE e DROP COLUMN extra", KEEP),
    # a non-deterministic column expression on a table without rows: stored, not evaluated
    ("ALTER TABLE later ADD COLUMN stamp DateTime DEFAULT now()", KEEP),
    # every part of e holds s: the new default only reaches future rows
    ("ALTER TABLE e MODIFY COLUMN s String DEFAULT toString(rand())", KEEP),
    ("ALTER TABLE e MODIFY COLUMN s String DEFAULT ''", KEEP),
    ("CREATE TABLE c2 (id UInt32, t DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY id", KEEP),
    ("CREATE VIEW v_now AS SELECT now() AS t", KEEP),
    ("CREATE VIEW v_e AS SELECT id, s FROM e WHERE id < 10", KEEP),
    ("CREATE TABLE c3 ENGINE = MergeTree ORDER BY id AS SELECT number AS id FROM numbers(3)", KEEP),
    ("INSERT INTO c (id, s) VALUES (1, 'c')", KEEP),
    ("TRUNCATE TABLE c", KEEP),
    ("INSERT INTO c (id, s) VALUES (2, 'after truncate')", KEEP),
    ("RENAME TABLE c2 TO c4", KEEP),
    ("DROP TABLE c4", KEEP),
    ("OPTIMIZE TABLE e FINAL", KEEP),
    (
        "INSERT INTO dflt (id, u, t, m) SETTINGS insert_allow_materialized_columns = 1 "
        "VALUES (1, '00000000-0000-0000-0000-000000000001', '2024-01-01 00:00:00', "
        "'2024-01-01 00:00:00')",
        PIN,  # the NULL settings follow the caller's own (`test_carried_defaults.py`)
    ),
    # -- pinned: accepted with values made literal ------------------------
    ("INSERT INTO e (id, d) VALUES (300, now())", PIN),
    ("INSERT INTO e (id, d) VALUES (301, NOW())", PIN),
    ("INSERT INTO e (id, d64) VALUES (302, now64(6))", PIN),
    ("INSERT INTO e (id, d64) VALUES (303, now64())", PIN),
    ("INSERT INTO e (id, d) VALUES (304, current_timestamp())", PIN),
    ("INSERT INTO e (id, s) VALUES (305, toString(today()))", PIN),
    ("INSERT INTO e (id, s) VALUES (306, toString(yesterday()))", PIN),
    ("INSERT INTO e (id, s) VALUES (307, toString(rand()))", PIN),
    ("INSERT INTO e (id, s) VALUES (308, toString(rand64()))", PIN),
    ("INSERT INTO e (id, s) VALUES (309, toString(generateUUIDv4()))", PIN),
    ("INSERT INTO e (id, s) VALUES (310, toString(generateUUIDv7()))", PIN),
    ("INSERT INTO e (id, f) VALUES (311, randCanonical())", PIN),
    ("INSERT INTO e (id, s) VALUES (312, randomPrintableASCII(8))", PIN),
    ("INSERT INTO e (id, s) VALUES (313, toString(randConstant()))", PIN),
    ("INSERT INTO e (id, s) VALUES (314, toString(rand())), (315, toString(rand()))", PIN),
    ("INSERT INTO e (id, s, d) VALUES (316, 'a', now()), (317, 'now()', now())", PIN),
    ("INSERT INTO e (id, s) VALUES (318, concat('x', toString(rand(1)), toString(rand(2))))", PIN),
    ("INSERT INTO e (id, s) VALUES (319, hostName())", OUTSIDE),
    ("INSERT INTO e (id, s) VALUES (320, toString(generateSnowflakeID()))", PIN),
    ("INSERT INTO e (id, s) SELECT 321, toString(now())", PIN),
    ("INSERT INTO e (id, d) SELECT number + 322, now() FROM numbers(2)", PIN),
    ("INSERT INTO e (id, s) SELECT 324, toString(randConstant()) FROM numbers(1)", PIN),
    ("ALTER TABLE e UPDATE d = now() WHERE id = 1", PIN),
    ("ALTER TABLE e UPDATE s = toString(today()) WHERE id = 6", PIN),
    ("DELETE FROM e WHERE d > now() + INTERVAL 100 YEAR", PIN),
    ("INSERT INTO dflt (id) VALUES (2)", PIN),
    ("INSERT INTO dflt (id) VALUES (3), (4)", PIN),
    (
        "INSERT INTO dflt VALUES (5, '00000000-0000-0000-0000-000000000005', '2024-01-01 00:00:00')",
        PIN,
    ),
    ("INSERT INTO dflt (id, u) VALUES (6, generateUUIDv4())", PIN),
    ("CREATE TABLE c5 ENGINE = MergeTree ORDER BY id AS SELECT 1 AS id, now() AS t", PIN),
    ("INSERT INTO later (id) VALUES (1)", PIN),
    ("ALTER TABLE e UPDATE d = now(), d64 = now64(6) WHERE id = 300", PIN),
    ("INSERT INTO e (id, s) VALUES (330, hex(randomString(8)))", PIN),
    ("INSERT INTO archive (id, content) SELECT id, s FROM e WHERE id < 20", PIN),
    # created_at is given, but a NULL in it would have the engine compute now64(3)
    # (insert_null_as_default): pinned by settings that make that an error
    ("INSERT INTO archive SELECT id + 100, s, toDateTime64(0, 3) FROM e WHERE id < 20", PIN),
    # -- refused ----------------------------------------------------------
    ("INSERT INTO e (id, s) SELECT number + 400, toString(rand()) FROM numbers(3)", REFUSE),
    (
        "INSERT INTO e (id, s) SELECT number + 410, 'x' FROM numbers(10) WHERE rand() % 2 = 0",
        REFUSE,
    ),
    (
        "INSERT INTO e (id, s) SELECT number + 420, toString(generateUUIDv4()) FROM numbers(2)",
        REFUSE,
    ),
    ("INSERT INTO e (id, s) SELECT 430, toString(rowNumberInAllBlocks())", REFUSE),
    ("INSERT INTO e (id, s) SELECT 431, name FROM system.tables LIMIT 1", REFUSE),
    ("INSERT INTO e (id, s) SELECT 432, name FROM `system`.`functions` LIMIT 1", REFUSE),
    ("INSERT INTO e (id, s) SELECT 433, table_name FROM information_schema.tables LIMIT 1", REFUSE),
    (
        "INSERT INTO e (id, s) SELECT 434, x FROM url('http://127.0.0.1:9/x.csv', CSV, 'x String')",
        OUTSIDE,
    ),
    ("INSERT INTO e (id, s) SELECT 435, x FROM file('x.csv', CSV, 'x String')", OUTSIDE),
    (
        "INSERT INTO e (id, s) SELECT 436, toString(number) FROM generateRandom('number UInt8') LIMIT 1",
        REFUSE,
    ),
    ("ALTER TABLE e UPDATE s = toString(rand()) WHERE id = 1", REFUSE),
    ("ALTER TABLE e DELETE WHERE rand() % 2 = 0", REFUSE),
    ("INSERT INTO dflt (id) SELECT number + 500 FROM numbers(2)", REFUSE),
    (
        "CREATE TABLE c6 ENGINE = MergeTree ORDER BY id AS SELECT number AS id, rand() AS r FROM numbers(3)",
        REFUSE,
    ),
    (
        "CREATE MATERIALIZED VIEW mv ENGINE = MergeTree ORDER BY id AS SELECT id, now() AS t FROM c",
        REFUSE,
    ),
    ("CREATE TABLE ext (x String) ENGINE = URL('http://127.0.0.1:9/x', CSV)", OUTSIDE),
    ("CREATE TABLE ext2 (x String) ENGINE = File(CSV)", OUTSIDE),
    # existing rows would read a value computed at read time (issue 12 §3b)
    ("ALTER TABLE e ADD COLUMN stamp DateTime DEFAULT now()", REFUSE),
    ("ALTER TABLE e ADD COLUMN r UInt64 MATERIALIZED rand64()", REFUSE),
    ("ALTER TABLE e ADD COLUMN a DateTime ALIAS now()", REFUSE),
    (
        "ALTER TABLE e ADD COLUMN k String DEFAULT 'k', ADD COLUMN u UUID DEFAULT generateUUIDv4()",
        REFUSE,
    ),
    ("ALTER TABLE dflt MATERIALIZE COLUMN m", REFUSE),
    ("ALTER TABLE dflt CLEAR COLUMN t", REFUSE),
    ("ALTER TABLE e MODIFY TTL d + INTERVAL 1 DAY", REFUSE),
    (
        "CREATE TABLE c7 (id UInt32, d DateTime) ENGINE = MergeTree ORDER BY id TTL d + INTERVAL 1 DAY",
        REFUSE,
    ),
    (
        "CREATE TABLE c8 (id UInt32, r UInt32 MATERIALIZED rand()) ENGINE = MergeTree ORDER BY id AS SELECT 1 AS id",
        REFUSE,
    ),
    # a constraint is evaluated on every INSERT, replay included: one of the
    # clock or of chance would refuse on replay what the writer accepted
    (
        "CREATE TABLE k1 (id UInt32, CONSTRAINT c CHECK now() < '2100-01-01 00:00:00') ENGINE = MergeTree ORDER BY id",
        REFUSE,
    ),
    ("CREATE TABLE k2 (id UInt32, CONSTRAINT `c` CHECK rand() % 2 = 0) ENGINE = Log", REFUSE),
    ("ALTER TABLE e ADD CONSTRAINT c3 CHECK today() > '2020-01-01'", REFUSE),
    ("ALTER TABLE e ADD CONSTRAINT IF NOT EXISTS c4 CHECK randConstant() > 0", REFUSE),
    ("CREATE TABLE k5 (id UInt32, CONSTRAINT c ASSUME id < rand()) ENGINE = Log", REFUSE),
    (
        "CREATE TABLE k6 (id UInt32, CONSTRAINT c CHECK id < 100) ENGINE = MergeTree ORDER BY id",
        KEEP,
    ),
    ("ALTER TABLE k6 ADD CONSTRAINT c2 CHECK id > 0", KEEP),
    ("INSERT INTO k6 VALUES (5)", KEEP),
    # a table whose every read gives other rows, with arguments or without
    ("CREATE TABLE g1 (a UInt8) ENGINE = GenerateRandom", REFUSE),
    ("CREATE TABLE g2 (a UInt8) ENGINE GenerateRandom", REFUSE),
    ("CREATE TABLE g3 (a UInt8) ENGINE = GenerateRandom(1)", REFUSE),
    ("CREATE TABLE g4 (a UInt8) ENGINE = /* x */ GenerateRandom -- y", REFUSE),
    ("CREATE TABLE g5 (a UInt8) ENGINE = generateRANDOM", OUTSIDE),  # no such engine
]


def test_corpus_is_large_and_labelled() -> None:
    assert len(CORPUS) >= 80
    assert {label for _, label in CORPUS} == {KEEP, PIN, REFUSE, OUTSIDE}
    assert len({sql for sql, _ in CORPUS}) == len(CORPUS)


_SETTINGS = re.compile(
    r"SETTINGS (?:insert_allow_materialized_columns = 1, )?session_timezone = 'UTC' "
)


def _canonical(sql: str) -> str:
    """The text the statement gate reads, runs and logs for `sql`."""
    engine = acquire()
    try:
        return engine_text(engine, sql)
    finally:
        engine.release()


def _strip_tz(sql: str) -> str:
    return _SETTINGS.sub("", sql, count=1)


@pytest.mark.slow
@pytest.mark.parametrize("writer_tz", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
def test_corpus_replays_exactly_in_every_time_zone(tmp_path: Path, writer_tz: str) -> None:
    corpus = [sql for sql, _ in CORPUS]
    params = {"url": str(tmp_path), "oid": "corpus", "schema": SCHEMA, "corpus": corpus}
    wrote = replay_child.run("corpus", writer_tz, params)
    problems = []
    for (sql, label), outcome in zip(CORPUS, wrote["outcomes"], strict=True):
        if outcome["status"] == "accepted":
            logged = outcome["logged"]
            # as written, or as the engine prints it (a comment dropped): nothing pinned
            kept = (sql, _canonical(sql))
            got = KEEP if logged is not None and _strip_tz(logged) in kept else PIN
        elif outcome["status"] == "nondeterministic":
            got = REFUSE
        elif outcome["status"] == "classification_refused":
            got = OUTSIDE
        else:
            got = f"error {outcome['status']}: {outcome['message']}"
        if got != label:
            problems.append(f"{label} -> {got}: {sql}")
    assert not problems, "\n".join(problems)
    for reader_tz in ("UTC", "Asia/Tokyo", "America/Los_Angeles"):
        seen = replay_child.run(
            "corpus-read", reader_tz, {**params, "after_second": wrote["second"]}
        )
        assert seen["tz"] == "UTC"
        assert set(seen["dump"]) == set(wrote["dump"])
        for table, rows in wrote["dump"].items():
            assert json.loads(seen["dump"][table])["data"] == json.loads(rows)["data"], (
                f"table {table} differs after replay under TZ={reader_tz} "
                f"(written under TZ={writer_tz})"
            )


# -- issue 12 §3b, in process -----------------------------------------------------


def _logged(root: Path, oid: str) -> list[str]:
    head = json.loads((root / oid / "head.json").read_text())
    return [
        json.loads(line)["sql"]
        for ref in head["manifest"]["wal"]
        for line in (root / oid / ref["key"]).read_bytes().splitlines()
    ]


def test_insert_select_into_archive_with_now64_default_is_pinned(tmp_path: Path) -> None:
    """`created_at DEFAULT now64(3)` is constant within one statement: an
    INSERT ... SELECT that omits it gets one pinned value for every row."""
    with durable_obj.Namespace(str(tmp_path), owner="w").open("o") as obj:
        obj.execute(
            "CREATE TABLE memories (id UInt32, content String) ENGINE = MergeTree ORDER BY id"
        )
        obj.execute(
            "CREATE TABLE archive (id UInt32, content String, created_at DateTime64(3) "
            "DEFAULT now64(3)) ENGINE = MergeTree ORDER BY id"
        )
        obj.execute("INSERT INTO memories VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        obj.execute("INSERT INTO archive (id, content) SELECT id, content FROM memories;")
        obj.execute(
            "INSERT INTO archive (content, id) WITH 10 AS k SELECT content, id + k FROM memories"
        )
        written = obj.query("SELECT * FROM archive ORDER BY id", "TSV").data()
        obj.flush()
    logged = _logged(tmp_path, "o")[-2:]
    assert "now64" not in logged[0] and "`created_at`" in logged[0], logged[0]
    assert len({row.split("\t")[2] for row in written.splitlines()}) == 2  # one per statement
    with durable_obj.Namespace(str(tmp_path)).open("o", read_only=True) as obj:
        assert obj.query("SELECT * FROM archive ORDER BY id", "TSV").data() == written


def test_insert_select_leaving_a_per_row_default_is_refused(tmp_path: Path) -> None:
    with durable_obj.Namespace(str(tmp_path), owner="w").open("o") as obj:
        obj.execute("CREATE TABLE t (id UInt32, u UUID DEFAULT generateUUIDv4()) ENGINE = Memory")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="generateUUIDv4"):
            obj.execute("INSERT INTO t (id) SELECT number FROM numbers(3)")


def test_add_column_with_now_default_is_refused_only_when_rows_exist(tmp_path: Path) -> None:
    """Issue 12 §3b: old parts have no data for a new column, so its default is
    computed when they are read: two reads of an old row a second apart, or
    the writer and a replica, see different times."""
    with durable_obj.Namespace(str(tmp_path), owner="w").open("o") as obj:
        obj.execute("CREATE TABLE m (id UInt32) ENGINE = MergeTree ORDER BY id")
        obj.execute("CREATE TABLE empty (id UInt32) ENGINE = MergeTree ORDER BY id")
        obj.execute("INSERT INTO m VALUES (1)")
        for sql in (
            "ALTER TABLE m ADD COLUMN updated_at DateTime DEFAULT now()",
            "ALTER TABLE m ADD COLUMN updated_at DateTime MATERIALIZED now()",
            "ALTER TABLE m ADD COLUMN IF NOT EXISTS `r` UInt32 DEFAULT rand()",
        ):
            with pytest.raises(durable_obj.errors.Nondeterministic) as info:
                obj.execute(sql)
            assert "existing rows" in str(info.value) and "UPDATE" in str(info.value)
        # An ALIAS is computed on every read, rows or none: a write that reads
        # it (a DELETE filtering on it, a TTL sweep) would replay differently.
        for table in ("m", "empty"):
            with pytest.raises(durable_obj.errors.Nondeterministic, match="ALIAS column"):
                obj.execute(f"ALTER TABLE {table} ADD COLUMN updated_at DateTime ALIAS now()")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="ALIAS column"):
            obj.execute("CREATE TABLE a (k UInt8, ts DateTime ALIAS now() - 3) ENGINE = Log")
        assert obj.pending == 3
        obj.execute("ALTER TABLE empty ADD COLUMN updated_at DateTime DEFAULT now()")
        # the way there: a constant default, filled in, then the default for new rows
        obj.execute("ALTER TABLE m ADD COLUMN updated_at DateTime DEFAULT toDateTime(0, 'UTC')")
        with pytest.raises(durable_obj.errors.Nondeterministic):
            obj.execute("ALTER TABLE m MODIFY COLUMN updated_at DEFAULT now()")  # part lacks it
        obj.execute("ALTER TABLE m UPDATE updated_at = toDateTime(1, 'UTC') WHERE 1")
        obj.execute("ALTER TABLE m MODIFY COLUMN updated_at DEFAULT now()")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="MATERIALIZE COLUMN"):
            obj.execute("ALTER TABLE m MATERIALIZE COLUMN updated_at")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="CLEAR COLUMN"):
            obj.execute("ALTER TABLE m CLEAR COLUMN updated_at")
        with pytest.raises(durable_obj.errors.Nondeterministic, match="TTL"):
            obj.execute("ALTER TABLE m MODIFY TTL updated_at + INTERVAL 1 DAY")


_names = st.sampled_from(["c", "`c`", "id", "ttl", "n", "`a b`", "s"])
_exprs = st.sampled_from(
    [
        "now()", "rand()", "1", "'x'", "hex(randomString(4))", "randomString(3)", "id", "c",
        "toDateTime(0, 'UTC')", "now64(3, 'Asia/Tokyo')", "generateUUIDv4()", "today()", "[now()]",
    ]
)  # fmt: skip
_types = st.sampled_from(["DateTime", "String", "UInt64", "DateTime64(3)", "Array(DateTime)"])
_kinds = st.sampled_from(["", " DEFAULT ", " MATERIALIZED ", " ALIAS ", " EPHEMERAL "])


@st.composite
def _column(draw: st.DrawFn, prefix: str) -> str:
    kind = draw(_kinds)
    expr = draw(_exprs) if kind else ""
    ttl = draw(st.sampled_from(["", " TTL toDate(0) + 1"]))
    return f"{prefix}{draw(_names)} {draw(_types)}{kind}{expr}{ttl}"


_commands = st.one_of(
    _column("ADD COLUMN "),
    _column("ADD COLUMN IF NOT EXISTS "),
    _column("MODIFY COLUMN "),
    _names.map(lambda n: f"MATERIALIZE COLUMN {n}"),
    _names.map(lambda n: f"CLEAR COLUMN {n}"),
    st.just("MODIFY TTL toDate(0) + 1"),
    st.just("REMOVE TTL"),
    st.tuples(_names, _exprs).map(lambda t: f"UPDATE {t[0]} = {t[1]} WHERE 1"),
    _exprs.map(lambda e: f"DELETE WHERE id = {e}"),
)
_statements = st.one_of(
    st.lists(_commands, min_size=1, max_size=3).map(lambda cs: "ALTER TABLE m " + ", ".join(cs)),
    st.tuples(st.lists(_names, max_size=2, unique=True), st.lists(_exprs, min_size=1, max_size=3))
    .map(lambda t: (f"({', '.join(t[0])}) " if t[0] else "", ", ".join(t[1])))
    .flatmap(
        lambda t: st.sampled_from(
            [
                f"INSERT INTO m {t[0]}VALUES ({t[1]})",
                f"INSERT INTO m {t[0]}VALUES ({t[1]}), ({t[1]});",
                f"INSERT INTO m {t[0]}SELECT {t[1]}",
                f"INSERT INTO m {t[0]}SELECT {t[1]} FROM m;",
                f"INSERT INTO m {t[0]}WITH 1 AS k SELECT {t[1]} FROM numbers(2)",
                f"INSERT INTO m {t[0]}SETTINGS async_insert = 0 VALUES ({t[1]})",
            ]
        )
    ),
    st.tuples(st.lists(_column(""), min_size=1, max_size=3), st.booleans(), _exprs).map(
        lambda t: (
            f"CREATE TABLE IF NOT EXISTS n ({', '.join(t[0])}) ENGINE = MergeTree "
            "ORDER BY tuple()" + (f" AS SELECT {t[2]}" if t[1] else "")
        )
    ),
    st.sampled_from(
        ["DELETE FROM m WHERE c < now()", "TRUNCATE TABLE m", "DROP TABLE IF EXISTS n"]
    ),
)


@given(_statements)
@settings(max_examples=300)
def test_execute_raises_nothing_but_durable_errors(
    fuzz_object: durable_obj.DurableObject, sql: str
) -> None:
    """Whatever the statement, execute() runs it or raises a DurableError: the
    parsers, the pinner and the column rules never leak an IndexError, a
    KeyError or a UnicodeDecodeError."""
    with contextlib.suppress(durable_obj.DurableError):
        fuzz_object.execute(sql)


@pytest.fixture(scope="module")
def fuzz_object() -> Iterator[durable_obj.DurableObject]:
    with durable_obj.open(f"memory://fuzz-{uuid.uuid4().hex}/o", owner="w") as obj:
        obj.execute(
            "CREATE TABLE m (id UInt32, c DateTime DEFAULT now(), s String) ENGINE = MergeTree ORDER BY id"
        )
        obj.execute("INSERT INTO m (id, s) VALUES (1, 'a')")
        yield obj


def test_bare_time_words_are_pinned_like_their_calls(tmp_path: Path) -> None:
    """`now`, `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP` ... are calls the engine
    evaluates without parentheses: pinned to a literal like now(), refused
    where a column or alias of that name makes the word ambiguous, and
    refused in an ALIAS or EPHEMERAL column like a call."""
    with durable_obj.Namespace(str(tmp_path), owner="w").open("o") as obj:
        obj.execute("CREATE TABLE t (k UInt8, ts DateTime) ENGINE = MergeTree ORDER BY k")
        obj.execute(
            "CREATE TABLE d (k UInt8, ts DateTime DEFAULT now) ENGINE = MergeTree ORDER BY k"
        )
        obj.execute("CREATE TABLE c (k UInt8, today Date) ENGINE = MergeTree ORDER BY k")
        for sql in (
            "INSERT INTO t VALUES (1, CURRENT_TIMESTAMP)",
            "INSERT INTO t SELECT 2, LOCALTIMESTAMP",
            "INSERT INTO t SELECT 3, now",
            "ALTER TABLE t UPDATE ts = current_timestamp WHERE k = 1",
            "INSERT INTO d (k) VALUES (4)",
            "INSERT INTO c (k, today) VALUES (5, '2024-01-02')",  # the column list names it
            "INSERT INTO c SELECT 6, `today` FROM c",  # quoted: the column
        ):
            obj.execute(sql)
        for sql, match in (
            ("INSERT INTO c SELECT 7, today FROM c", "column or alias"),
            ("INSERT INTO t SELECT 8, toDateTime(now) FROM (SELECT 1 AS now)", "column or alias"),
            (
                "CREATE TABLE a (k UInt8, ts DateTime ALIAS CURRENT_TIMESTAMP) "
                "ENGINE = MergeTree ORDER BY k",
                "ALIAS column",
            ),
            (
                "CREATE TABLE e (k UInt8, ts DateTime EPHEMERAL now(), a DateTime DEFAULT ts) "
                "ENGINE = MergeTree ORDER BY k",
                "EPHEMERAL column",
            ),
        ):
            with pytest.raises(durable_obj.errors.Nondeterministic, match=match):
                obj.execute(sql)
        obj.flush()
        logged = obj.rows("SELECT k, ts FROM t ORDER BY k")
        reference = obj.rows("SELECT k, ts FROM d ORDER BY k")
    wal = "".join(p.read_text() for p in sorted((tmp_path / "o" / "wal").iterdir()))
    for word in ("CURRENT_TIMESTAMP", "LOCALTIMESTAMP", "current_timestamp", " now"):
        assert word not in wal.replace("DEFAULT now", ""), word  # each pinned to a literal
    assert wal.count("CAST('") >= 5
    with durable_obj.Namespace(str(tmp_path)).open("o", read_only=True) as replica:
        assert replica.rows("SELECT k, ts FROM t ORDER BY k") == logged
        assert replica.rows("SELECT k, ts FROM d ORDER BY k") == reference
        assert replica.rows("SELECT k FROM c ORDER BY k") == [(5,), (6,)]


def test_a_write_that_reads_a_view_of_the_clock_is_refused(tmp_path: Path) -> None:
    """A plain view is computed when it is read: one whose SELECT calls
    now() (or reads such a view) would make a write that reads it store
    other values on every replay. Its own DDL, and reads, stay free."""
    with durable_obj.Namespace(str(tmp_path), owner="w").open("o") as obj:
        obj.execute("CREATE TABLE t (k UInt8, ts DateTime) ENGINE = MergeTree ORDER BY k")
        obj.execute("CREATE VIEW v AS SELECT now() AS ts")
        obj.execute("CREATE VIEW w AS SELECT ts FROM v")
        obj.execute("CREATE VIEW plain AS SELECT k FROM t")
        for sql in (
            "INSERT INTO t SELECT 1, ts FROM v",
            "INSERT INTO t SELECT 1, ts FROM w",
            "ALTER TABLE t DELETE WHERE ts < (SELECT ts FROM w)",
            "CREATE TABLE c ENGINE = MergeTree ORDER BY ts AS SELECT ts FROM v",
        ):
            with pytest.raises(durable_obj.errors.Nondeterministic, match=r"the view [vw] "):
                obj.execute(sql)
        obj.execute("INSERT INTO t SELECT k, toDateTime(0) FROM plain")
        assert obj.rows("SELECT count() FROM v") == [(1,)]
        obj.execute("DROP VIEW w")
        obj.execute("DROP VIEW v")
