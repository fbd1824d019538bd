"""Wire compatibility with chdb.durable, both directions, on a local folder.

Each implementation runs in its own interpreter (chDB runs one engine per
process); one `Worker` child opens objects one after another. An object is
equal across implementations when a fixed set of queries prints identical
CSV in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.core import ops
from durable_obj.stores import open_store
from tests.integration import _proc

pytestmark = pytest.mark.slow

SCHEMA = [
    "CREATE TABLE events (id UInt64, name String, score Float64, at DateTime64(3, 'UTC'), "
    "tags Array(String), note Nullable(String)) ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE kv (k String, v UInt32) ENGINE = ReplacingMergeTree ORDER BY k",
]

#: What makes two copies "the same object" for these tests.
FINGERPRINT = [
    "SELECT currentDatabase()",
    "SELECT * FROM events ORDER BY id",
    "SELECT * FROM kv FINAL ORDER BY k",
    "SELECT count(), sum(score), min(at), max(at), uniqExact(name) FROM events",
    "SELECT name, engine, create_table_query FROM system.tables "
    "WHERE database = currentDatabase() ORDER BY name",
]


def batch(tag: str, start: int, n: int = 3) -> list[str]:
    """`n` single-row inserts plus one multi-row insert and a kv upsert, with
    quoting, unicode, NULLs and arrays in the data."""
    stmts = []
    for i in range(start, start + n):
        note = "NULL" if i % 2 else f"'n{i} ü'"
        stmts.append(
            f"INSERT INTO events VALUES ({i}, '{tag}-{i} ''q'' é', {i}.25, "
            f"'2024-01-02 03:04:{i % 60:02d}.{i % 1000:03d}', ['{tag}', 'x{i}'], {note})"
        )
    stmts.append(
        f"INSERT INTO events SELECT {start} * 1000 + number, concat('{tag}', toString(number)), "
        "number / 4, toDateTime64('2024-01-01 00:00:00', 3, 'UTC') + number, "
        f"[toString(number)], if(number % 2 = 0, NULL, 'odd') FROM numbers(20)"
    )
    stmts.append(f"INSERT INTO kv VALUES ('{tag}', {start}), ('shared', {start})")
    # over 64 KiB: durable_obj logs it with the settings that make the engine
    # read its rows as literals only (`reading.with_literal_rows`)
    pad = "y" * 80
    stmts.append(
        "INSERT INTO events VALUES "
        + ", ".join(
            f"({1_000_000 + start * 1000 + j}, '{tag}-bulk-{j} {pad}', {j}.5, "
            f"'2024-01-02 03:04:05.{j % 1000:03d}', ['{tag}'], NULL)"
            for j in range(700)
        )
    )
    return stmts


def head_of(root: Path, oid: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / oid / "head.json").read_text())
    return doc


def fingerprint(worker: _proc.Worker) -> list[str]:
    return [worker.query(sql) for sql in FINGERPRINT]


def run_all(worker: _proc.Worker, stmts: list[str]) -> None:
    for sql in stmts:
        worker.execute(sql)


def add_unknown_fields(root: Path, oid: str) -> dict[str, Any]:
    """Fields neither implementation knows, at every level of head.json, as a
    newer writer would leave them. Written while no one has the object open."""
    path = root / oid / "head.json"
    doc = json.loads(path.read_text())
    marks: dict[str, Any] = {
        "x_top": {"nested": [1, "two", None]},
        "protocol": {"x_proto": "p"},
        "engine": {"x_engine": 7},
        "lease": {"x_lease": True},
        "manifest": {"x_manifest": {"k": "v"}},
    }
    doc["x_top"] = marks["x_top"]
    for section in ("protocol", "engine", "lease", "manifest"):
        doc[section].update(marks[section])
    tmp = path.with_suffix(".edit")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return marks


def assert_unknown_fields_kept(doc: dict[str, Any], marks: dict[str, Any]) -> None:
    assert doc.get("x_top") == marks["x_top"]
    for section in ("protocol", "engine", "lease", "manifest"):
        for key, value in marks[section].items():
            assert doc[section].get(key) == value, (section, key, doc[section])


@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["wal-only", "checkpoint+wal"])
def test_durable_obj_writes_chdb_durable_reads_and_writes(
    tmp_path: Path, with_checkpoint: bool
) -> None:
    oid = "made-by-durable-obj"
    ours_url = str(tmp_path)
    theirs_url = f"local:{tmp_path}"

    # 1. durable_obj creates and writes the object.
    with _proc.Worker("durable_obj") as w:
        w.open(ours_url, oid, owner="do-writer", db="app")
        run_all(w, SCHEMA + batch("a", 1))
        w.flush()
        run_all(w, batch("b", 10))
        w.flush()
        if with_checkpoint:
            base_key = w.checkpoint()
            assert base_key.endswith(".tar")
            run_all(w, batch("c", 20))
            w.flush()
        written = fingerprint(w)
        w.close()
        assert w.exit() == 0
    assert "b-10" in written[1] and "app" in written[0]
    logged = "".join(p.read_text() for p in (tmp_path / oid / "wal").iterdir())
    assert "input_format_values_interpret_expressions = 0" in logged  # read by V1 below
    head = head_of(tmp_path, oid)
    assert "durable_obj" in head
    if with_checkpoint:
        assert head["manifest"]["base"]["key"].endswith(".tar")
        assert len(head["manifest"]["wal"]) == 1
    else:
        assert head["manifest"]["base"] is None
        assert len(head["manifest"]["wal"]) == 2
    generation = head["lease"]["generation"]
    assert head["lease"]["owner"] is None
    marks = add_unknown_fields(tmp_path, oid)

    # 2. chdb.durable opens it read-only, then as a writer, and appends.
    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, read_only=True)
        assert fingerprint(w) == written
        w.close()
        info = w.open(theirs_url, oid, owner="cd-writer")
        assert w.warnings == []
        assert info["generation"] > generation
        assert fingerprint(w) == written
        run_all(w, batch("d", 30))
        w.flush()
        appended = fingerprint(w)
        w.close()
        assert w.exit() == 0
    assert appended != written and "d-30" in appended[1]
    head = head_of(tmp_path, oid)
    assert head["lease"]["owner"] is None
    assert "durable_obj" in head  # our extension survives chdb.durable's writes
    assert_unknown_fields_kept(head, marks)
    their_generation = head["lease"]["generation"]

    # 3. durable_obj reopens (read-only, then writer) and sees everything.
    with _proc.Worker("durable_obj") as w:
        w.open(ours_url, oid, read_only=True)
        assert fingerprint(w) == appended
        w.close()
        info = w.open(ours_url, oid, owner="do-writer")
        assert w.warnings == []
        assert info["generation"] == their_generation + 1
        assert fingerprint(w) == appended
        run_all(w, batch("e", 40))
        w.flush()
        final = fingerprint(w)
        w.close()
        assert w.exit() == 0
    head = head_of(tmp_path, oid)
    assert_unknown_fields_kept(head, marks)
    assert head["lease"] == {
        "generation": their_generation + 1,
        "owner": None,
        "instance": None,
        "expires_at": None,
        "x_lease": True,
    }

    # 4. ... and chdb.durable reads durable_obj's latest writes in turn.
    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, read_only=True)
        assert fingerprint(w) == final
        w.close()
        assert w.exit() == 0


@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["wal-only", "checkpoint+wal"])
def test_chdb_durable_writes_durable_obj_reads_and_writes(
    tmp_path: Path, with_checkpoint: bool
) -> None:
    oid = "made-by-chdb-durable"
    ours_url = f"file://{tmp_path}"
    theirs_url = f"local:{tmp_path}"

    # 1. chdb.durable creates and writes the object.
    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, owner="cd-writer", db="shop")
        run_all(w, SCHEMA + batch("a", 1))
        w.flush()
        run_all(w, batch("b", 10))
        if with_checkpoint:
            assert w.checkpoint().endswith(".tar.gz")
            run_all(w, batch("c", 20))
        w.flush()
        written = fingerprint(w)
        w.close()
        assert w.exit() == 0
    assert "shop" in written[0] and "b-10" in written[1]
    head = head_of(tmp_path, oid)
    assert "durable_obj" not in head
    if with_checkpoint:
        assert head["manifest"]["base"]["key"].endswith(".tar.gz")
        assert len(head["manifest"]["wal"]) == 1
    else:
        assert head["manifest"]["base"] is None
        assert len(head["manifest"]["wal"]) == 2
    generation = head["lease"]["generation"]
    marks = add_unknown_fields(tmp_path, oid)

    # 2. durable_obj opens it read-only, then as a writer, and writes more.
    with _proc.Worker("durable_obj") as w:
        w.open(ours_url, oid, read_only=True)
        assert fingerprint(w) == written
        w.close()
        info = w.open(ours_url, oid, owner="do-writer")
        assert w.warnings == []
        assert info["generation"] == generation + 1
        assert fingerprint(w) == written
        run_all(w, batch("d", 30))
        w.flush()
        if with_checkpoint:
            # Our own .tar base on top of theirs, then WAL after it.
            assert w.checkpoint().endswith(".tar")
            run_all(w, batch("e", 40))
            w.flush()
        appended = fingerprint(w)
        w.close()
        assert w.exit() == 0
    assert appended != written and "d-30" in appended[1]
    head = head_of(tmp_path, oid)
    assert head["manifest"]["db"] == "shop"
    assert head["lease"]["owner"] is None
    assert head["lease"]["generation"] == generation + 1
    assert_unknown_fields_kept(head, marks)

    # 3. chdb.durable reads it again, read-only and as a writer.
    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, read_only=True)
        assert fingerprint(w) == appended
        w.close()
        w.open(theirs_url, oid, owner="cd-writer")
        assert w.warnings == []
        assert fingerprint(w) == appended
        w.close()
        assert w.exit() == 0
    assert head_of(tmp_path, oid)["lease"]["generation"] == generation + 2


def test_chdb_durable_opens_reads_and_writes_an_object_with_history(tmp_path: Path) -> None:
    """An object durable_obj wrote with time travel on (stamped refs, history
    archives) opens, reads and writes in chdb.durable, which keeps the stamps
    of the refs it carries over; durable_obj then still opens every past
    point, chdb.durable's unstamped segment by the store's modified time."""
    oid = "with-history"
    ours_url, theirs_url = str(tmp_path), f"local:{tmp_path}"
    at: dict[int, list[str]] = {}
    with _proc.Worker("durable_obj") as w:
        w.open(ours_url, oid, owner="do-writer", db="app", fold_segments=0)
        run_all(w, SCHEMA + batch("a", 1))
        w.flush()
        at[w.info()["seq"]] = fingerprint(w)
        run_all(w, batch("b", 10))
        w.checkpoint()  # archives the manifest it supersedes
        at[w.info()["seq"]] = fingerprint(w)
        run_all(w, batch("c", 20))
        w.flush()
        at[w.info()["seq"]] = fingerprint(w)
        w.close()
        assert w.exit() == 0
    head = head_of(tmp_path, oid)
    stamped = head["manifest"]["wal"][0]["durable_obj"]
    assert stamped["owner"] == "do-writer" and isinstance(stamped["committed_at"], float)
    assert head["manifest"]["base"]["durable_obj"]["owner"] == "do-writer"
    assert len(list((tmp_path / oid / "history").iterdir())) == 1

    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, read_only=True)
        assert fingerprint(w) == at[3]
        w.close()
        w.open(theirs_url, oid, owner="cd-writer")
        assert w.warnings == []
        run_all(w, batch("d", 30))
        w.flush()
        at[w.info()["seq"]] = fingerprint(w)
        w.close()
        assert w.exit() == 0
    head = head_of(tmp_path, oid)
    assert head["manifest"]["seq"] == 4
    first, theirs = head["manifest"]["wal"]
    assert first["durable_obj"] == stamped  # chdb.durable kept our ref's fields
    assert "durable_obj" not in theirs  # ... and stamps nothing of its own
    past = ops.history(open_store(ours_url), oid)
    assert [(p.seq, p.time_source) for p in past.points] == [
        (1, "stamp"),  # from the archive
        (2, "stamp"),
        (3, "stamp"),
        (4, "store"),  # the store's modified time of chdb.durable's segment
    ] and [p.seq for p in past.restorable] == [1, 2, 3, 4]
    assert past.points[-1].owner is None and past.points[-1].committed_at is not None

    with _proc.Worker("durable_obj") as w:
        for seq, expected in sorted(at.items()):
            info = w.open(ours_url, oid, read_only=True, at=seq)
            assert info["seq"] == seq
            assert fingerprint(w) == expected, seq
            w.close()
        w.open(ours_url, oid, owner="do-writer")
        run_all(w, batch("e", 40))
        w.flush()
        final = fingerprint(w)
        w.close()
        assert w.exit() == 0
    with _proc.Worker("chdb.durable") as w:
        w.open(theirs_url, oid, read_only=True)
        assert fingerprint(w) == final
        w.close()
        assert w.exit() == 0


def test_several_objects_in_one_process_interoperate(tmp_path: Path) -> None:
    """Three objects (logical databases default, app, shop) open at once in
    this process, written side by side, one checkpointed: chdb.durable reads
    and extends each, and this process, again with all three open at once,
    sees exactly what chdb.durable left."""
    import durable_obj

    dbs = {"x-default": "default", "x-app": "app", "x-shop": "shop"}
    objs = {
        oid: durable_obj.open(f"{tmp_path}/{oid}", owner="do", db=db) for oid, db in dbs.items()
    }
    try:
        for n, (oid, obj) in enumerate(objs.items()):
            for sql in SCHEMA + batch(oid, 1 + 10 * n):
                obj.execute(sql)
            obj.execute(f"INSERT INTO {dbs[oid]}.kv VALUES ('qualified', {n})")
            obj.flush()
        objs["x-app"].checkpoint()
        objs["x-app"].execute("INSERT INTO kv VALUES ('after', 1)")
        written = {oid: [obj.query(sql) for sql in FINGERPRINT] for oid, obj in objs.items()}
    finally:
        for obj in objs.values():
            obj.close()
    for oid, db in dbs.items():
        assert written[oid][0] == f'"{db}"\n'
        assert f"CREATE TABLE {db}.events" in written[oid][4]
    appended = {}
    with _proc.Worker("chdb.durable") as w:
        for n, oid in enumerate(dbs):
            w.open(f"local:{tmp_path}", oid, owner="cd")
            assert fingerprint(w) == written[oid]
            run_all(w, batch(f"cd-{oid}", 100 + 10 * n))
            w.execute(f"INSERT INTO {dbs[oid]}.kv VALUES ('theirs', {n})")
            w.flush()
            appended[oid] = fingerprint(w)
            w.close()
        assert w.exit() == 0
    objs = {oid: durable_obj.open(f"{tmp_path}/{oid}", owner="do") for oid in dbs}
    try:
        for oid, obj in objs.items():
            assert [obj.query(sql) for sql in FINGERPRINT] == appended[oid]
            assert "theirs" in obj.query("SELECT k FROM kv ORDER BY k")
    finally:
        for obj in objs.values():
            obj.close()


@pytest.mark.slow
def test_durable_obj_opens_a_chdb_durable_base_of_the_default_database(tmp_path: Path) -> None:
    """Issue 26: V1's base of `default` (its default database) failed to
    RESTORE here with CANNOT_RESTORE_DATABASE ("a different definition")."""
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "d", owner="v1")
        w.execute("CREATE TABLE t (x String) ENGINE = MergeTree ORDER BY x")
        w.execute("INSERT INTO t VALUES ('from v1')")
        w.flush()
        w.checkpoint()
        w.close()
        assert w.exit() == 0
    with durable_obj.open(f"file://{tmp_path}/d", read_only=True) as obj:
        assert obj.db == "default"
        assert obj.rows("SELECT x FROM t") == [("from v1",)]


@pytest.mark.slow
def test_chdb_durable_opens_a_durable_obj_base_of_the_default_database(tmp_path: Path) -> None:
    """Issue 26, the other way: our base of `default` recorded the database as
    `... UUID '...' ENGINE = Atomic`, which chdb-core's restore_database
    refused; it is now written in V1's shape (durable_obj/v1base.py), through
    a checkpoint and through a fork, and still opens here."""
    url = f"file://{tmp_path}/d"
    with durable_obj.open(url, owner="ours") as obj:
        obj.execute("CREATE TABLE t (x String) ENGINE = MergeTree ORDER BY x")
        obj.execute("INSERT INTO t VALUES ('base')")
        obj.checkpoint()
        obj.execute("INSERT INTO t VALUES ('wal')")
        obj.flush()
    durable_obj.fork(url, "copy")
    for oid in ("d", "copy"):
        with _proc.Worker("chdb.durable") as w:
            w.open(f"local:{tmp_path}", oid, read_only=True)
            assert w.query("SELECT x FROM t ORDER BY x") == '"base"\n"wal"\n'
            w.close()
            assert w.exit() == 0
        with durable_obj.open(f"file://{tmp_path}/{oid}", read_only=True) as obj:
            assert obj.rows("SELECT x FROM t ORDER BY x") == [("base",), ("wal",)]


def test_chdb_durable_minds_no_catalog(tmp_path: Path) -> None:
    """A namespace durable_obj keeps a catalog in (`_catalog.json` beside the
    object folders): chdb.durable opens, writes and creates objects there as
    if it were not, and leaves it alone; the catalog is then behind (what
    chdb.durable wrote is not in it) until a rebuild, which reads both."""
    with _proc.Worker("durable_obj") as w:
        for oid in ("a", "b"):
            w.open(str(tmp_path), oid, owner="do-writer")
            run_all(w, SCHEMA + batch(oid, 1))
            w.flush()
            w.close()
        assert w.exit() == 0
    catalog_file = tmp_path / "_catalog.json"
    before = catalog_file.read_bytes()
    assert [r["id"] for r in json.loads(before)["rows"]] == ["a", "b"]
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "a", owner="cd-writer")
        run_all(w, batch("v1", 100))
        w.flush()
        w.checkpoint()
        w.close()
        w.open(f"local:{tmp_path}", "c", owner="cd-writer")
        run_all(w, SCHEMA)
        w.flush()
        w.close()
        assert w.exit() == 0
    assert catalog_file.read_bytes() == before
    ns = durable_obj.Namespace(str(tmp_path))
    hinted = {i.oid: i.seq for i in ns.list()}
    truth = {i.oid: i.seq for i in ns.list(verify=True)}
    assert set(hinted) == {"a", "b"} and set(truth) == {"a", "b", "c"}
    assert hinted["a"] < truth["a"] and hinted["b"] == truth["b"]
    assert ns.rebuild_catalog() == 3
    assert {i.oid: i.seq for i in ns.list()} == truth
    with _proc.Worker("durable_obj") as w:
        w.open(str(tmp_path), "a", owner="do-writer")
        assert "v1-100" in w.query("SELECT * FROM events ORDER BY id")
        w.close()
        assert w.exit() == 0
    assert {i.oid: i.seq for i in ns.list()}["a"] == truth["a"]
    with _proc.Worker("chdb.durable") as w:  # and opens the object durable_obj wrote last
        w.open(f"local:{tmp_path}", "a", owner="cd-writer")
        assert "v1-100" in w.query("SELECT * FROM events ORDER BY id")
        w.close()
        assert w.exit() == 0
