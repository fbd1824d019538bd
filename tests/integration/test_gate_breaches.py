"""Issue 25: each breach found on f4500cd, as a named regression test.

Objects A and B are open in one process on a folder store; B holds a
secret. Everything below is tried through A (query, execute, params, a
replayed statement), with a listener on 127.0.0.1 counting every request
made to it. After each test B's data, B's head.json and the host's files
are unchanged, and nothing reached the network.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_obj
from durable_obj import Bounds, errors
from durable_obj.core.object import DurableObject
from durable_obj.gate.replay import Refused, gated
from durable_obj.replica.engine import acquire
from tests.tenants import two_tenants

SECRET = "SECRET-25b1"
#: The nested-comment prefix the issue found: the old lexer saw one string
#: literal from the first quote to the last, the engine sees the statement.
HIDE = "/* /* */ ' */ "
TAIL = " -- '"


class Listener:
    """A TCP listener on 127.0.0.1 that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


class World:
    def __init__(self, root: Path, a: DurableObject, b: DurableObject, net: Listener) -> None:
        self.root, self.a, self.b, self.net = root, a, b, net
        engine = b._local.engine
        assert engine is not None
        self.b_internal = engine.database
        self.host_file = root / "host-file.txt"
        self.host_file.write_text("host data\n")

    def fingerprint(self) -> tuple[str, str, str]:
        head = (self.root / "b" / "head.json").read_bytes()
        return (
            self.b.query("SELECT s FROM secret ORDER BY s"),
            hashlib.sha256(head).hexdigest(),
            self.host_file.read_text(),
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("breaches")
    net = Listener()
    with two_tenants(root, SECRET, column="x") as (a, b):
        yield World(root, a, b, net)
    net.close()


@pytest.fixture
def untouched(world: World) -> Iterator[World]:
    before = world.fingerprint()
    hits = world.net.hits
    yield world
    assert world.fingerprint() == before
    assert world.net.hits == hits, "a statement reached the network"


def _refused(call: object, *args: object, **kwargs: object) -> errors.DurableError:
    refusals = (errors.ClassificationRefused, errors.Nondeterministic, errors.SecretRefused)
    with pytest.raises(refusals) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    return info.value


# -- the gate and the engine read a statement differently --------------------------


def test_nested_comment_prefix_hides_nothing_from_a_read(untouched: World) -> None:
    w = untouched
    url = f"http://127.0.0.1:{w.net.port}/x"
    for sql in (
        f"SELECT * FROM merge('{w.b_internal}', '.*')",
        f"SELECT * FROM {w.b_internal}.secret",
        f"SELECT file('{w.host_file}')",
        f"SELECT * FROM file('{w.host_file}', RawBLOB)",
        f"SELECT * FROM url('{url}', CSV, 'a String')",
    ):
        _refused(w.a.query, HIDE + sql + TAIL)
    # what the engine reads of it is what runs: the databases A sees are its own
    shown = w.a.query(HIDE + "SELECT name FROM system.databases" + TAIL)
    assert "__durable_obj_" not in shown and shown.strip() == '"default"'


def test_nested_comment_prefix_hides_nothing_from_a_write(untouched: World) -> None:
    w = untouched
    pending = w.a.pending
    for sql in (
        f"CREATE MATERIALIZED VIEW mv TO {w.b_internal}.secret AS SELECT x AS s FROM t",
        f"CREATE TABLE buf (s String) ENGINE = Buffer('{w.b_internal}', 'secret', "
        "1, 1, 1, 1, 1, 1, 1)",
        f"CREATE TABLE f (s String) ENGINE = File(RawBLOB, '{w.root}/b/head.json')",
        f"INSERT INTO t SELECT * FROM file('{w.host_file}', RawBLOB)",
    ):
        _refused(w.a.execute, HIDE + sql + TAIL)
    assert w.a.pending == pending


def test_heredoc_tags_with_digits_are_read_as_the_engine_reads_them(untouched: World) -> None:
    w = untouched
    assert w.a.rows("SELECT $a1$it's$a1$ AS s") == [("it's",)]
    # a heredoc whose tag the old lexer did not know hid the quote that follows
    _refused(w.a.query, f"SELECT $a1$ ' $a1$, file('{w.host_file}') -- '")


def test_unicode_quotes_are_read_as_the_engine_reads_them(untouched: World) -> None:
    w = untouched
    assert w.a.rows("SELECT \u2018x\u2019 AS s") == [("x",)]
    _refused(w.a.query, f"SELECT \u2018 ' \u2019, file('{w.host_file}') -- '")


def test_a_params_bound_statement_passes_the_same_gate(untouched: World) -> None:
    w = untouched
    _refused(w.a.query, HIDE + "SELECT file({p:String})" + TAIL, params={"p": str(w.host_file)})
    _refused(
        w.a.execute,
        HIDE + "INSERT INTO t SELECT * FROM file({p:String}, RawBLOB)" + TAIL,
        params={"p": str(w.host_file)},
    )


def test_comments_in_values_rows_are_refused_not_misread(untouched: World) -> None:
    w = untouched
    _refused(w.a.execute, f"INSERT INTO t VALUES ('a'), (/* /* */ file('{w.host_file}') */ 'b')")
    # a comment after the last row is dropped: both lexers read `--` to the line's end
    w.a.execute("INSERT INTO t VALUES ('after') -- a note")
    assert "after" in w.a.query("SELECT x FROM t")
    w.a.execute("ALTER TABLE t DELETE WHERE x = 'after'")


# -- allow_nondeterministic lifted isolation refusals -----------------------------------


def test_allow_nondeterministic_never_lifts_an_isolation_refusal(untouched: World) -> None:
    w = untouched
    url = f"http://127.0.0.1:{w.net.port}/x"
    pending = w.a.pending
    for sql in (
        f"INSERT INTO t SELECT * FROM url('{url}', CSV, 'x String')",
        f"INSERT INTO t SELECT * FROM sqlite('{w.root}/x.db', 't')",
        f"CREATE TABLE u (x String) ENGINE = URL('{url}', CSV)",
        f"CREATE TABLE s (x String) ENGINE = SQLite('{w.root}/x.db', 't')",
        "CREATE DICTIONARY d (k UInt64, v String) PRIMARY KEY k "
        f"SOURCE(HTTP(URL '{url}' FORMAT 'CSV')) LAYOUT(FLAT()) LIFETIME(0)",
        f"INSERT INTO t VALUES (file('{w.host_file}'))",
    ):
        _refused(w.a.execute, sql, allow_nondeterministic=True)
    assert w.a.pending == pending


def test_embedded_rocksdb_with_a_folder_of_its_own_is_refused(untouched: World) -> None:
    w = untouched
    target = w.root / "b" / "wal"
    before = sorted(p.name for p in target.iterdir())
    _refused(
        w.a.execute,
        f"CREATE TABLE r (k UInt64, v String) ENGINE = EmbeddedRocksDB(0, '{target}') "
        "PRIMARY KEY k",
    )
    assert sorted(p.name for p in target.iterdir()) == before
    # in the object's own database (no path) it is an ordinary table
    w.a.execute("CREATE TABLE r (k UInt64, v String) ENGINE = EmbeddedRocksDB PRIMARY KEY k")
    w.a.execute("DROP TABLE r")


def test_table_settings_naming_a_disk_are_refused(untouched: World) -> None:
    w = untouched
    _refused(
        w.a.execute,
        "CREATE TABLE m (x String) ENGINE = MergeTree ORDER BY x "
        f"SETTINGS disk = disk(type = local, path = '{w.root}/disk/')",
    )
    assert not (w.root / "disk").exists()


# -- engine messages and answers named other objects and internal paths ---------------


def test_engine_hints_never_name_another_object(untouched: World) -> None:
    w = untouched
    with pytest.raises(errors.EngineError) as info:
        w.a.query("SELECT * FROM secret")
    assert "__durable_obj_" not in str(info.value)
    assert w.b_internal not in str(info.value)


def test_internal_names_and_paths_never_show(untouched: World) -> None:
    w = untouched
    a_engine = w.a._local.engine
    assert a_engine is not None
    tables = w.a.query("SELECT database, data_paths, metadata_path FROM system.tables")
    assert tables.strip() == '"default","[]",""'
    estimate = w.a.query("EXPLAIN ESTIMATE SELECT * FROM t", "TSV")
    assert estimate.startswith("default\tt\t"), estimate
    for shown in (tables, estimate):
        assert "__durable_obj_" not in shown and "/data/" not in shown
    _refused(w.a.query, "SELECT getServerSetting('path')")
    _refused(w.a.query, "SELECT * FROM system.disks")


def test_a_statement_cannot_raise_a_bound(untouched: World) -> None:
    w = untouched
    for setting in ("max_execution_time = 100000", "readonly = 0", "max_result_bytes = 0"):
        _refused(w.a.query, f"SELECT 1 SETTINGS {setting}")
    assert w.a.query("SELECT 1 SETTINGS output_format_csv_crlf_end_of_line = 0").strip() == "1"


def test_a_refreshable_view_is_refused_with_what_to_do_instead(untouched: World) -> None:
    """Issue 36 item 5: a refreshable view runs its SELECT on the engine's
    own timer, outside every statement's bounds, and would replay to other
    rows. Refused on the engine's parse (its `Refresh strategy definition`),
    however it is spelled and whatever flag is set."""
    w = untouched
    w.a.execute("CREATE TABLE IF NOT EXISTS rdst (n UInt64) ENGINE = MergeTree ORDER BY n")
    for sql in (
        "CREATE MATERIALIZED VIEW rmv REFRESH EVERY 1 SECOND APPEND TO rdst "
        "AS SELECT sum(number) AS n FROM numbers(400000000)",
        "CREATE MATERIALIZED VIEW rmv REFRESH AFTER 1 SECOND TO rdst AS SELECT 1 AS n",
        "CREATE MATERIALIZED VIEW rmv REFRESH EVERY 1 SECOND ENGINE = Memory AS SELECT 1 AS n",
        HIDE
        + "CREATE MATERIALIZED VIEW rmv REFRESH EVERY 1 SECOND TO rdst AS SELECT 1 AS n"
        + TAIL,
        "ALTER TABLE rdst MODIFY REFRESH EVERY 2 SECOND",
    ):
        for flag in (False, True):
            err = _refused(w.a.execute, sql, allow_nondeterministic=flag)
            assert isinstance(err, errors.ClassificationRefused)
            assert "plain materialized view" in str(err) and "INSERT INTO t SELECT" in str(err)
    assert "rmv" not in w.a.query("SELECT name FROM system.tables")
    # a plain materialized view (run inside each INSERT) is what to write instead
    w.a.execute("CREATE TABLE IF NOT EXISTS rsrc (n UInt64) ENGINE = MergeTree ORDER BY n")
    w.a.execute("CREATE MATERIALIZED VIEW IF NOT EXISTS rmv_plain TO rdst AS SELECT n FROM rsrc")


# -- a replayed statement passes the same gate -------------------------------------------


def test_a_replayed_statement_passes_the_same_gate(tmp_path: Path) -> None:
    engine = acquire()
    try:
        engine.create_database("default")
        engine.use_database("default")
        host = tmp_path / "host.txt"
        host.write_text("x")
        for sql in (
            HIDE + f"CREATE TABLE f (s String) ENGINE = File(RawBLOB, '{host}')" + TAIL,
            f"CREATE TABLE f (s String) ENGINE = File(RawBLOB, '{host}')",
            HIDE + f"INSERT INTO FUNCTION file('{host}', RawBLOB) SELECT 'pwned'" + TAIL,
        ):
            with pytest.raises((Refused, errors.EngineError)):
                engine.replay(gated(engine, sql, "default"))
        assert host.read_text() == "x"
    finally:
        engine.release()


def test_a_tampered_wal_line_does_not_open(tmp_path: Path) -> None:
    """A segment holding a statement that reaches outside (written by a V1
    writer, or by anyone who can write the bucket) is `Corrupt` on open:
    never run, never skipped."""
    import json

    host = tmp_path / "host.txt"
    host.write_text("x")
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        obj.flush()
    head_path = tmp_path / "o" / "head.json"
    head = json.loads(head_path.read_text())
    ref = head["manifest"]["wal"][-1]
    hostile = HIDE + f"CREATE TABLE f (s String) ENGINE = File(RawBLOB, '{host}')" + TAIL
    body = (json.dumps({"sql": hostile}) + "\n").encode()
    (tmp_path / "o" / ref["key"]).write_bytes(body)
    ref["size"], ref["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    head_path.write_text(json.dumps(head))
    with pytest.raises(errors.Corrupt, match="reach only its own database"):
        durable_obj.open(url, read_only=True)
    assert host.read_text() == "x"


# -- bounds a statement cannot raise ---------------------------------------------------


def test_a_bounded_query_is_stopped_by_the_engine_and_frees_the_object(world: World) -> None:
    w = world
    started = time.monotonic()
    with pytest.raises(errors.Timeout, match=r"bound of 0\.5 s"):
        w.a.query("SELECT count() FROM numbers(1000000000000)", bounds=Bounds(seconds=0.5))
    assert time.monotonic() - started < 30  # stopped by the engine, not run to the end
    assert w.a.query("SELECT count() FROM t").strip() == "1"  # the next call runs
    # unbounded again: the bounds were on that one read only
    assert w.a.query("SELECT getSetting('max_execution_time')").strip() == "0"


def test_a_bounded_query_stops_reading_past_its_result_size(world: World) -> None:
    text = world.a.query(
        "SELECT number FROM numbers(100000000)", "TSV", bounds=Bounds(result_bytes=1 << 20)
    )
    assert 0 < text.count("\n") < 1_000_000


@pytest.mark.slow
def test_a_base_holding_a_table_that_reads_outside_does_not_open(tmp_path: Path) -> None:
    """A base made by another writer (chdb.durable accepts the statement) or
    before the gate refused it, holding a Merge table: restored, it would let
    a plain SELECT read another database. The open fails `Corrupt`, nothing shown."""
    from tests.integration import _proc

    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "o", owner="v1")
        w.execute("CREATE TABLE t (x String) ENGINE = MergeTree ORDER BY x")
        w.execute("CREATE TABLE m (x String) ENGINE = Merge(REGEXP('.*'), '.*')")
        w.flush()
        w.checkpoint()
        w.close()
        assert w.exit() == 0
    with pytest.raises(errors.Corrupt, match="ENGINE = Merge"):
        durable_obj.open(str(tmp_path / "o"), read_only=True)


def test_a_pool_bounds_every_query_of_its_objects(tmp_path: Path) -> None:
    """Issue 25: query() in a pool gets bounds a statement cannot raise."""
    pool = durable_obj.Pool(str(tmp_path), owner="svc", query_bounds=Bounds(seconds=0.3))
    try:
        with pool.object("a") as obj:
            with pytest.raises(errors.Timeout):
                obj.query("SELECT count() FROM numbers(1000000000000)")
            assert obj.query("SELECT 1").strip() == "1"  # free for the next call
            _refused(obj.query, "SELECT 1 SETTINGS max_execution_time = 0")
    finally:
        pool.close()


def test_infile_and_outfile_never_touch_the_host(untouched: World, tmp_path: Path) -> None:
    """chDB is clickhouse-local inside: INTO OUTFILE and FROM INFILE are its
    client-side file routes. Neither gets through a query() or an execute()."""
    w = untouched
    out = tmp_path / "out.txt"
    for call, sql in (
        (w.a.query, f"SELECT 1 INTO OUTFILE '{out}'"),
        (w.a.query, f"{HIDE}SELECT 1 INTO OUTFILE '{out}' FORMAT CSV{TAIL}"),
        (w.a.execute, f"INSERT INTO t SELECT 'x' INTO OUTFILE '{out}'"),
        (w.a.execute, f"INSERT INTO t FROM INFILE '{w.host_file}' FORMAT RawBLOB"),
    ):
        with pytest.raises(errors.DurableError):
            call(sql)
    assert not out.exists()
    assert "host data" not in w.a.query("SELECT * FROM t")
