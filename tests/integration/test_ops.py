"""Growth policies, gc, list/info, verify, release, fork, export, scan."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from uuid import UUID
from zoneinfo import ZoneInfo

import pyarrow.parquet as pq
import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core import ops
from durable_obj.stores import open_store
from durable_obj.testing import FaultyStore

DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"


def test_long_running_writer_stays_bounded_and_gc_reclaims(ns_url: str) -> None:
    # retention=0: no time travel, the V1 rule (tests/integration/test_history.py
    # covers what a window keeps)
    ns = durable_obj.Namespace(ns_url, owner="w", retention=0)
    segments_seen = []
    with ns.open("o") as obj:
        obj.execute(DDL)
        for i in range(200):
            obj.execute(f"INSERT INTO m VALUES ({i}, '{'x' * 100}')")
            obj.flush()
            head = obj.head
            assert head is not None
            segments_seen.append(len(head.manifest.wal))
    assert max(segments_seen) < 64
    info = ns.info("o")
    store = ns.store
    stored_before = info.stored_bytes
    assert info.live_bytes < stored_before  # superseded bases and folded segments
    # nothing is collected within the grace period
    assert ns.gc("o").deleted == []
    report = ns.gc("o", grace=0, dry_run=True)
    assert report.deleted and all(store.get(k) is not None for k in report.deleted)
    report = ns.gc("o", grace=0)
    after = ns.info("o")
    assert after.stored_bytes == stored_before - report.deleted_bytes
    assert after.stored_bytes - after.live_bytes < after.live_bytes  # only fresh orphans left
    assert all(store.get(k) is None for k in report.deleted)
    with ns.open("o", read_only=True) as reader:
        assert reader.query("SELECT count(), sum(k) FROM m") == f"200,{sum(range(200))}\n"
    assert ns.verify("o", restore=True).rows == {"m": 200}


def test_gc_keeps_everything_a_live_writer_may_commit(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (2, 'b')")
        obj.flush()
        # an upload a writer is about to commit: newer than the base
        ns.store.create("o/wal/1-99-deadbeef.jsonl", b'{"sql": "SELECT 1"}\n')
        ns.store.create("o/notes.txt", b"user file")
        report = ns.gc("o", grace=0)
        assert report.deleted == []
        obj.execute("INSERT INTO m VALUES (3, 'c')")
        obj.flush()
    with ns.open("o", read_only=True) as reader:
        assert reader.query("SELECT count() FROM m") == "3\n"


def test_list_and_info(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="lister")
    for oid in ("b", "a"):
        with ns.open(oid) as obj:
            obj.execute(DDL)
    holder = ns.open("c")
    try:
        listed = ns.list()
        assert [i.oid for i in listed] == ["a", "b", "c"]
        c = next(i for i in listed if i.oid == "c")
        assert c.owner == "lister" and c.expires_at is not None and c.expires_at > time.time()
        a = ns.info("a")
        assert a.owner is None and a.segments == 1 and a.seq == 1 and a.timezone == "UTC"
        assert a.live_bytes > 0 and a.last_write is not None
    finally:
        holder.close()
    with pytest.raises(errors.NotFound):
        ns.info("nope")


def test_list_reads_folders_not_every_key(ns_url: str) -> None:
    """list() is one folder listing plus each object's head and folder, and
    shows exactly what describe() (info) shows for each object."""
    ns = durable_obj.Namespace(ns_url, owner="lister")
    for oid in ("b", "a", "c"):
        with ns.open(oid) as obj:
            obj.execute(DDL)
            obj.execute("INSERT INTO m VALUES (1, 'x')")
            obj.checkpoint()
            obj.execute("INSERT INTO m VALUES (2, 'y')")
    ns.store.create("a/notes.txt", b"a user file counts in the stored size")
    ns.store.create("not-an-object/wal/1-1-ab.jsonl", b"no head beside it")
    ns.store.create("stray.txt", b"a file at the top is no object")
    counting = FaultyStore(ns.store, seed=0, rate=0.0)
    listed = ops.list_objects(counting)
    assert [i.oid for i in listed] == ["a", "b", "c"]
    assert listed == [ops.describe(ns.store, oid) for oid in ("a", "b", "c")]
    a = listed[0]
    assert a.stored_bytes > a.live_bytes and a.last_write is not None and a.segments == 1
    calls = [op for op, _ in counting.calls]
    assert calls.count("list_folders") == 1
    # every key of the namespace is never listed: only each folder's keys
    assert sorted(key for op, key in counting.calls if op == "list_keys") == [
        "a",
        "b",
        "c",
        "not-an-object",
    ]
    assert sorted(key for op, key in counting.calls if op == "get_many") == [
        "a/head.json",
        "b/head.json",
        "c/head.json",
        "not-an-object/head.json",
    ]
    assert durable_obj.Namespace(f"{ns_url}-none").list() == []
    # stored=False: the heads only, one request per object
    counting.calls.clear()
    heads_only = ops.list_objects(counting, stored=False)
    assert [op for op, _ in counting.calls if op != "get_many"] == ["list_folders"]
    assert [(i.stored_bytes, i.last_write) for i in heads_only] == [(None, None)] * 3
    assert [replace(i, stored_bytes=None, last_write=None) for i in listed] == heads_only


def test_list_many_objects(ns_url: str) -> None:
    """Many objects, written straight through the store as a copy of one head."""
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("seed", description="the seed") as obj:
        obj.execute(DDL)
    head = ops.read_head(ns.store, "seed")
    head.lease.generation = 1
    oids = [f"agent-{n:03d}" for n in range(120)]
    for oid in oids:
        assert ns.store.create(f"{oid}/head.json", head.to_bytes()) is not None
    # written behind the catalog's back: it names the seed only, until rebuilt
    assert [i.oid for i in ns.list()] == ["seed"]
    listed = ns.list(verify=True)
    assert [i.oid for i in listed] == sorted([*oids, "seed"])
    assert {i.description for i in listed} == {"the seed"}
    assert ns.rebuild_catalog() == len(oids) + 1
    from_catalog = ns.list()
    assert all(i.from_catalog for i in from_catalog)
    assert [(i.oid, i.seq, i.live_bytes, i.description) for i in from_catalog] == [
        (i.oid, i.seq, i.live_bytes, i.description) for i in listed
    ]
    assert all(
        i.segments == 1 and i.stored_bytes == i.live_bytes - i.head.manifest.wal[0].size
        for i in listed
        if i.oid != "seed"
    )


def test_description(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("a", description="Alice's support agent — tickets") as obj:
        obj.execute(DDL)
    with durable_obj.open(f"{ns_url}/b", description="Bob") as obj:
        obj.execute(DDL)
    with ns.open("plain") as obj:
        obj.execute(DDL)
    # an existing object keeps its own; a writer's commits carry it along
    with ns.open("a", description="ignored: the head decides") as obj:
        obj.execute("INSERT INTO m VALUES (1, 'x')")
        obj.checkpoint()
    by_id = {i.oid: i for i in ns.list()}
    assert by_id["a"].description == "Alice's support agent — tickets"
    assert by_id["b"].description == "Bob"
    assert by_id["plain"].description is None
    assert ns.info("a").description == by_id["a"].description
    head = ops.head_document(ns.store, "a")
    assert isinstance(head, dict)
    assert head["durable_obj"]["description"] == by_id["a"].description
    # a namespace-wide description names every object it creates
    named = durable_obj.Namespace(ns_url, owner="w", description="batch 7")
    with named.open("c") as obj:
        obj.execute(DDL)
    assert named.info("c").description == "batch 7"
    # a fork keeps the source's description
    assert ns.fork("a", "a2").description == by_id["a"].description
    for bad in ("", "two\nlines", "tab\there", "x" * 501):
        with pytest.raises(errors.InvalidArgument, match="description"):
            ns.open("d", description=bad)
    assert "d" not in {i.oid for i in ns.list()}


def test_release_fences_the_holder(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    obj = ns.open("o")
    obj.execute(DDL)
    obj.flush()
    ns.release("o")
    assert ns.info("o").owner is None
    obj.execute("INSERT INTO m VALUES (1, 'lost')")
    with pytest.raises(errors.LeaseFenced, match="the lease was released at generation 1"):
        obj.flush()
    with pytest.raises(errors.LeaseFenced):
        obj.close()
    with ns.open("o") as again:
        assert again.query("SELECT count() FROM m") == "0\n"


def test_fork_holds_the_same_rows_and_is_independent(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("src") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3, 'c')")
        obj.flush()
        expected = obj.query("SELECT * FROM m ORDER BY k")
    info = ns.fork("src", "dst")
    assert info.seq == 1 and info.segments == 0 and info.owner is None
    with ns.open("dst") as fork:
        assert fork.query("SELECT * FROM m ORDER BY k") == expected
        fork.execute("INSERT INTO m VALUES (4, 'only in the fork')")
    with ns.open("src", read_only=True) as src:
        assert src.query("SELECT * FROM m ORDER BY k") == expected
    with pytest.raises(errors.DurableError, match="already exists"):
        ns.fork("src", "dst")


def test_export_parquet_roundtrip(ns_url: str, tmp_path: Path) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute("CREATE TABLE n (x Float64) ENGINE = MergeTree ORDER BY x")
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b')")
        obj.execute("INSERT INTO n VALUES (0.5)")
        obj.execute("CREATE VIEW v AS SELECT k FROM m")
    out = tmp_path / "export"
    written = ns.export("o", str(out))
    assert sorted(os.path.basename(w) for w in written) == ["m.parquet", "n.parquet"]
    table = pq.read_table(out / "m.parquet").to_pydict()
    assert table == {"k": [1, 2], "v": ["a", "b"]}
    assert pq.read_table(out / "n.parquet").to_pydict() == {"x": [0.5]}
    # the module-level form, from a URL, to an fsspec memory location
    written = durable_obj.export(f"{ns_url}/o", "memory://exports/o", format="csv")
    assert len(written) == 2
    with pytest.raises(errors.InvalidArgument):
        durable_obj.export(f"{ns_url}/o", str(out), format="xlsx")


#: tables whose names statements chose to leave the export destination, or to
#: meet another table's file; and ordinary ones
# (a tab in a name is refused: the engine writes it escaped in a base)
HOSTILE_TABLES = ["../../escaped/pwn", "a/b", "sp ace", "%41", "A", "..", "m"]


def _ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def test_export_keeps_every_file_under_the_destination(ns_url: str, tmp_path: Path) -> None:
    from urllib.parse import unquote

    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        for table in HOSTILE_TABLES:
            obj.execute(f"CREATE TABLE {_ident(table)} (s String) ENGINE = MergeTree ORDER BY s")
            obj.execute(f"INSERT INTO {_ident(table)} VALUES ('{table[0]}')")
        assert sorted(obj.tables()) == sorted(HOSTILE_TABLES)
    (tmp_path / "a" / "escaped").mkdir(parents=True)  # where `../../escaped` would land
    before = {p for p in tmp_path.rglob("*")}
    dest = tmp_path / "a" / "b" / "dest"
    written = ns.export("o", str(dest), format="csv")
    after = {p for p in tmp_path.rglob("*")} - before
    # only the destination's folders and files are new; nothing escaped
    assert {p for p in after if p.is_file()} == set(dest.iterdir())
    assert all(p == dest or dest.is_relative_to(p) for p in after if p.is_dir())
    assert not (tmp_path / "escaped").exists() and not any((tmp_path / "a" / "escaped").iterdir())
    names = sorted(p.name for p in dest.iterdir())
    assert sorted(os.path.basename(w) for w in written) == names
    # each file name decodes back to its table; ordinary names are unchanged
    assert sorted(unquote(n.removesuffix(".csv")) for n in names) == sorted(HOSTILE_TABLES)
    assert {"A.csv", "m.csv", "%2541.csv", "a%2Fb.csv", "%2E..csv"} <= set(names)
    assert (dest / "%2E.%2F..%2Fescaped%2Fpwn.csv").read_text() == '"s"\n"."\n'
    assert (dest / "%2541.csv").read_text() == '"s"\n"%"\n'
    assert (dest / "A.csv").read_text() == '"s"\n"A"\n'
    # an object-store destination: every key under the prefix
    written = durable_obj.export(f"{ns_url}/o", "memory://exports/hostile/d", format="jsonl")
    assert all(w.startswith("memory:///exports/hostile/d/") for w in written)
    assert all("/" not in w.removeprefix("memory:///exports/hostile/d/") for w in written)


def test_scan_reads_each_object(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    for i, oid in enumerate(("a", "b")):
        with ns.open(oid) as obj:
            obj.execute(DDL)
            obj.execute(f"INSERT INTO m VALUES ({i}, '{oid}')")
    assert ns.scan("SELECT v FROM m") == [("a", [("a",)]), ("b", [("b",)])]
    assert ns.scan("SELECT k, v FROM m WHERE k > {k:UInt32}", params={"k": 0}) == [
        ("a", []),
        ("b", [(1, "b")]),
    ]


def test_scan_rows_are_typed_as_rows_gives_them(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", timezone="Asia/Tokyo")
    ddl = (
        "CREATE TABLE typed (k UInt64, d Decimal(18, 4), t DateTime, u UUID, "
        "a Array(Int32), n Nullable(String), f Float64) ENGINE = MergeTree ORDER BY k"
    )
    with ns.open("x") as obj:
        obj.execute(ddl)
        obj.execute(
            "INSERT INTO typed VALUES (18446744073709551615, 1.25, '2026-05-01 14:03:00', "
            "'00000000-0000-0000-0000-00000000000a', [1, -2], NULL, 0.5), "
            "(1, -3.5, '2026-01-01 00:00:00', '00000000-0000-0000-0000-000000000001', [], 'z', "
            "inf)"
        )
        expected = obj.rows("SELECT * FROM typed ORDER BY k")
    [(oid, got)] = ns.scan("SELECT * FROM typed ORDER BY k", ["x"])
    assert oid == "x" and got == expected
    assert got[1] == (
        2**64 - 1,
        Decimal("1.2500"),
        datetime(2026, 5, 1, 14, 3, tzinfo=ZoneInfo("Asia/Tokyo")),
        UUID(int=10),
        [1, -2],
        None,
        0.5,
    )
    assert [type(v) for v in got[0]] == [int, Decimal, datetime, UUID, list, str, float]
    assert got[1][2].utcoffset() == timedelta(hours=9)  # the object's zone


def test_scan_skips_missing_ids_when_asked_and_names_the_failing_object(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("a") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a')")
    ids = ["nope", "a", "gone"]
    assert ns.scan("SELECT v FROM m", ids, missing_ok=True) == [("a", [("a",)])]
    with pytest.raises(errors.NotFound, match="nope"):
        ns.scan("SELECT v FROM m", ids)
    with pytest.raises(errors.DurableError, match="scan of 'a' failed") as failed:
        ns.scan("SELECT no_such_column FROM m", ["a"])
    assert type(failed.value) is type(failed.value.__cause__)  # the category is kept


def test_close_folds_a_long_wal(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
        for i in range(9):
            obj.execute(f"INSERT INTO m VALUES ({i}, 'x')")
            obj.flush()
    info = ns.info("o")
    assert info.segments == 0 and info.head.manifest.base is not None


def test_auto_flush_by_size(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w", auto_flush=True, auto_flush_bytes=500)
    with ns.open("o") as obj:
        obj.execute(DDL)
        for i in range(10):
            obj.execute(f"INSERT INTO m VALUES ({i}, '{'x' * 100}')")
        assert obj.pending < 5  # flushed by itself along the way
        seq = obj.seq
    assert seq > 1
    assert ops.read_head(open_store(ns_url), "o").lease.owner is None


def test_gc_refuses_a_negative_grace(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
    with pytest.raises(errors.InvalidArgument, match="grace"):
        ns.gc("o", grace=-1)
