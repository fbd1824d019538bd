"""The object's whole path in one process, on memory and on a local folder.

Objects share the process's one engine, each in its own database; tests
that need two processes (a writer and a reader across a crash, say) are in
test_processes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.stores import open_store
from durable_obj.testing import abandon
from durable_obj.wire.protocol import MAX_SQL_BYTES

DDL = "CREATE TABLE m (k String, v UInt32) ENGINE = MergeTree ORDER BY k"


def rows(obj: durable_obj.DurableObject) -> str:
    return obj.query("SELECT k, v FROM m ORDER BY k, v")


def test_create_flush_checkpoint_reopen(ns_url: str) -> None:
    url = f"{ns_url}/agent-1"
    with durable_obj.open(url, owner="w1") as obj:
        assert (obj.generation, obj.seq, obj.pending) == (1, 0, 0)
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 1)")
        assert obj.pending == 2
        key = obj.flush()
        assert key is not None and key.startswith("wal/1-1-") and key.endswith(".jsonl")
        assert (obj.seq, obj.pending) == (1, 0)
        assert obj.flush() is None
        obj.execute("INSERT INTO m VALUES ('b', 2)")
        base = obj.checkpoint()
        assert base.startswith("checkpoints/1-2-") and base.endswith(".tar")
        assert obj.pending == 0
        obj.execute("INSERT INTO m VALUES ('c', 3)")
    assert obj.closed
    with durable_obj.open(url, owner="w2") as again:
        assert again.generation == 2
        assert again.seq == 3
        assert rows(again) == '"a",1\n"b",2\n"c",3\n'
        assert again.query("SELECT count() FROM m").data() == "3\n"
    with durable_obj.open(url, read_only=True) as reader:
        assert rows(reader) == '"a",1\n"b",2\n"c",3\n'
        with pytest.raises(errors.ClassificationRefused, match="read-only"):
            reader.execute("INSERT INTO m VALUES ('d', 4)")


def test_release_keeps_generation(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
    head = ns.store.get("o/head.json")
    assert head is not None
    lease = json.loads(head.data)["lease"]
    assert lease == {"generation": 1, "owner": None, "instance": None, "expires_at": None}


def test_read_only_open_of_missing_object(ns_url: str) -> None:
    with pytest.raises(errors.NotFound) as info:
        durable_obj.open(f"{ns_url}/ghost", read_only=True)
    assert info.value.category == "not_found"
    assert open_store(ns_url).list_keys() == []


def test_unflushed_statements_are_not_durable(ns_url: str) -> None:
    url = f"{ns_url}/o"
    obj = durable_obj.open(url, owner="w")
    obj.execute(DDL)
    obj.flush()
    obj.execute("INSERT INTO m VALUES ('lost', 1)")
    obj.close(discard=True)
    with durable_obj.open(url, read_only=True) as reader:
        assert rows(reader) == ""


def test_closed_object_refuses_everything(ns_url: str) -> None:
    obj = durable_obj.open(f"{ns_url}/o")
    obj.close()
    obj.close()  # idempotent
    for call in (
        lambda: obj.execute(DDL),
        obj.flush,
        obj.checkpoint,
        lambda: obj.query("SELECT 1"),
    ):
        with pytest.raises(errors.Closed):
            call()


def test_db_option_names_a_new_objects_database(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o", db="memdb") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('x', 1)")
        assert obj.query("SELECT currentDatabase()") == '"memdb"\n'
    with durable_obj.open(f"{ns_url}/o", db="ignored") as obj:
        assert obj.db == "memdb"
        assert obj.query("SELECT k FROM memdb.m") == '"x"\n'


# -- bad input: each gets its own typed error, nothing is published, the
#    object still opens afterwards ------------------------------------------


@pytest.mark.parametrize(
    ("sql", "error", "category"),
    [
        ("SELECT * FROM m", errors.ClassificationRefused, "classification_refused"),
        (
            "INSERT INTO m VALUES ('a', 1); INSERT INTO m VALUES ('b', 2)",
            errors.ClassificationRefused,
            "classification_refused",
        ),
        ("INSERTT INTO m VALUES ('a', 1)", errors.ClassificationRefused, "classification_refused"),
        (
            "INSERT INTO m SELECT 'k', 1 FROM s3('http://127.0.0.1:9/b/f.csv', "
            "'AKIAEXAMPLEKEY', 'sekrit-Value-42', 'CSV')",
            errors.SecretRefused,
            "secret_refused",
        ),
        ("CREATE DATABASE other", errors.ClassificationRefused, "classification_refused"),
        (
            "INSERT INTO other.m VALUES ('a', 1)",
            errors.ClassificationRefused,
            "classification_refused",
        ),
        ("SET max_threads = 1", errors.ClassificationRefused, "classification_refused"),
        ("INSERT INTO m VALUES ('a')", errors.EngineError, "engine"),
    ],
)
def test_bad_statements(ns_url: str, sql: str, error: type[Exception], category: str) -> None:
    url = f"{ns_url}/o"
    with durable_obj.open(url) as obj:
        obj.execute(DDL)
        obj.flush()
        seq = obj.seq
        with pytest.raises(error) as info:
            obj.execute(sql)
        assert getattr(info.value, "category", None) == category
        assert "sekrit" not in str(info.value) and "AKIA" not in str(info.value)
        assert obj.pending == 0
        assert obj.flush() is None and obj.seq == seq
        assert rows(obj) == ""
    with durable_obj.open(url) as again:
        assert rows(again) == ""


def test_statement_over_size_limit(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        obj.execute(DDL)
        huge = "INSERT INTO m VALUES ('" + "x" * MAX_SQL_BYTES + "', 1)"
        with pytest.raises(errors.LimitExceeded) as info:
            obj.execute(huge)
        assert info.value.category == "limit_exceeded"
        assert obj.pending == 1
        assert rows(obj) == ""


def test_query_refuses_mutations(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        obj.execute(DDL)
        with pytest.raises(errors.ClassificationRefused, match="execute"):
            obj.query("INSERT INTO m VALUES ('a', 1)")
        assert rows(obj) == ""


def test_invalid_object_id(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url)
    for oid in ("a/b", "..", ""):
        with pytest.raises(errors.InvalidArgument):
            ns.open(oid)
    assert ns.store.list_keys() == []


def _corrupt_after_write(ns_url: str, mutate_key: str, data: bytes | None) -> str:
    """Write an object with a base and a segment, then replace one key's bytes."""
    url = f"{ns_url}/o"
    with durable_obj.open(url) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 1)")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES ('b', 2)")
        obj.flush()
        head = obj.head
    assert head is not None
    store = open_store(ns_url)
    target = {
        "base": head.manifest.base.key if head.manifest.base else "",
        "wal": head.manifest.wal[0].key,
        "head": "head.json",
    }[mutate_key]
    store.delete(f"o/{target}")
    if data is not None:
        store.create(f"o/{target}", data)
    return url


@pytest.mark.parametrize("what", ["base", "wal"])
@pytest.mark.parametrize("how", ["missing", "truncated", "altered"])
def test_corrupt_base_or_segment_refuses_to_open(ns_url: str, what: str, how: str) -> None:
    store = open_store(ns_url)
    url = _corrupt_after_write(ns_url, what, None)
    head = json.loads(store.get("o/head.json").data)  # type: ignore[union-attr]
    ref = head["manifest"]["base"] if what == "base" else head["manifest"]["wal"][0]
    if how != "missing":
        original = b"x" * ref["size"]
        body = original[: ref["size"] // 2] if how == "truncated" else original
        store.create(f"o/{ref['key']}", body)
    before = {e.key: e.size for e in store.list_keys()}
    for read_only in (True, False):
        with pytest.raises(errors.Corrupt) as info:
            durable_obj.open(url, read_only=read_only)
        assert ref["key"] in str(info.value)
        if (what, how) == ("base", "missing"):
            assert "missing base checkpoint" in str(info.value)  # V1's phrase, matched on
        if (what, how) == ("wal", "missing"):
            assert "missing WAL segment" in str(info.value)  # V1's test asserts "missing WAL"
    after_head = json.loads(store.get("o/head.json").data)  # type: ignore[union-attr]
    assert after_head["manifest"] == head["manifest"]
    assert after_head["lease"]["owner"] is None  # the failed writer open released it
    assert {e.key: e.size for e in store.list_keys()} == before


def test_a_base_swapped_for_another_valid_archive_restores_but_never_opens(ns_url: str) -> None:
    # The base is hashed while RESTORE reads it: an archive the engine
    # restores fine, but not the one the head names, still refuses the open.
    store = open_store(ns_url)
    url = f"{ns_url}/o"
    with durable_obj.open(url) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 1)")
        obj.checkpoint()
    with durable_obj.open(f"{ns_url}/other") as other:
        other.execute(DDL)
        other.execute("INSERT INTO m VALUES ('z', 26)")
        other.checkpoint()
        other_base = other.head.manifest.base  # type: ignore[union-attr]
    head = json.loads(store.get("o/head.json").data)  # type: ignore[union-attr]
    key = head["manifest"]["base"]["key"]
    swapped = store.get(f"other/{other_base.key}")  # type: ignore[union-attr]
    assert swapped is not None
    store.delete(f"o/{key}")
    store.create(f"o/{key}", swapped.data)
    for read_only in (True, False):
        with pytest.raises(errors.Corrupt, match="base checkpoint") as info:
            durable_obj.open(url, read_only=read_only)
        assert key in str(info.value)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", errors.Corrupt),
        (b'{"protocol": {"version": 1}}', errors.Corrupt),
        (b"x" * (1024 * 1024 + 1), errors.LimitExceeded),
    ],
)
def test_bad_head(ns_url: str, body: bytes, error: type[Exception]) -> None:
    store = open_store(ns_url)
    store.create("o/head.json", body)
    for read_only in (True, False):
        with pytest.raises(error):
            durable_obj.open(f"{ns_url}/o", read_only=read_only)
    blob = store.get("o/head.json")
    assert blob is not None and blob.data == body


def _edit_head(ns_url: str, edit: dict[str, dict[str, object]]) -> str:
    url = f"{ns_url}/o"
    with durable_obj.open(url) as obj:
        obj.execute(DDL)
    store = open_store(ns_url)
    blob = store.get("o/head.json")
    assert blob is not None
    doc = json.loads(blob.data)
    for section, values in edit.items():
        doc[section].update(values)
    assert store.replace("o/head.json", json.dumps(doc).encode(), blob.version)
    return url


def test_an_unknown_time_zone_is_the_options_fault_or_the_heads(ns_url: str) -> None:
    # Asked twice: a zone the engine refused is never remembered as known.
    for _ in range(2):
        with pytest.raises(errors.InvalidArgument, match="unknown time zone 'Mars/Olympus'"):
            durable_obj.open(f"{ns_url}/o", timezone="Mars/Olympus")
    assert open_store(ns_url).get("o/head.json") is None  # nothing was written
    url = _edit_head(ns_url, {"durable_obj": {"timezone": "Mars/Olympus"}})
    for read_only in (True, False):
        with pytest.raises(errors.Corrupt, match=r"head\.durable_obj\.timezone: unknown time zone"):
            durable_obj.open(url, read_only=read_only)


def test_foreign_protocol_version(ns_url: str) -> None:
    url = _edit_head(ns_url, {"protocol": {"version": 2}})
    with pytest.raises(errors.ProtocolUnsupported):
        durable_obj.open(url, read_only=True)


def test_unknown_writer_feature_allows_read_only(ns_url: str) -> None:
    url = _edit_head(ns_url, {"protocol": {"writer_features": ["parquet-wal"]}})
    with pytest.raises(errors.ProtocolUnsupported, match="read_only"):
        durable_obj.open(url)
    with durable_obj.open(url, read_only=True) as reader:
        assert rows(reader) == ""


def test_unknown_reader_feature_refused(ns_url: str) -> None:
    url = _edit_head(ns_url, {"protocol": {"reader_features": ["encrypted"]}})
    with pytest.raises(errors.ProtocolUnsupported):
        durable_obj.open(url, read_only=True)


@pytest.mark.parametrize(
    "engine",
    [{"name": "duckdb"}, {"backup_format": 2}, {"min_reader": "99.1.0"}, {"min_reader": "??"}],
)
def test_engine_incompatible(ns_url: str, engine: dict[str, object]) -> None:
    url = _edit_head(ns_url, {"engine": engine})
    with pytest.raises(errors.EngineIncompatible):
        durable_obj.open(url, read_only=True)


def test_head_key_with_dotdot_is_corrupt(ns_url: str) -> None:
    url = _edit_head(
        ns_url,
        {"manifest": {"wal": [{"key": "../other/wal/x.jsonl", "size": 1, "sha256": "a" * 64}]}},
    )
    with pytest.raises(errors.Corrupt, match=r"manifest\.wal\[0\]\.key"):
        durable_obj.open(url)


def test_two_objects_in_one_process_are_isolated(tmp_path: Path) -> None:
    """Objects open at once in one process each see only their own database,
    under their own logical name, and survive each other's close."""
    with durable_obj.open(str(tmp_path / "a")) as a, durable_obj.open(str(tmp_path / "b")) as b:
        a.execute(DDL)
        b.execute(DDL)
        a.execute("INSERT INTO default.m VALUES ('a', 1)")
        b.execute("INSERT INTO m VALUES ('b', 2)")
        assert a.query("SELECT k, v, currentDatabase() FROM m") == '"a",1,"default"\n'
        assert b.query("SELECT k, v FROM default.m") == '"b",2\n'
        assert a.query("SELECT name FROM system.databases") == '"default"\n'
        a.flush()
    with durable_obj.open(str(tmp_path / "b"), read_only=True) as b:
        assert b.query("SELECT k FROM m") == '"b"\n'


def test_lease_held_elsewhere_is_answered_while_another_object_is_open(tmp_path: Path) -> None:
    """A writer open of an object leased elsewhere says lease_held, as
    chdb.durable does, while another object is open here; a read-only open of
    it works beside that object."""
    held = durable_obj.open(str(tmp_path / "b"), owner="elsewhere")
    abandon(held)  # its lease stays live
    with durable_obj.open(str(tmp_path / "a")):
        with pytest.raises(errors.LeaseHeld, match="'elsewhere'"):
            durable_obj.open(str(tmp_path / "b"))
        with durable_obj.open(str(tmp_path / "b"), read_only=True) as reader:
            assert reader.tables() == []
    assert open_store(str(tmp_path)).get("b/head.json") is not None


def test_objects_opened_in_turn_share_nothing(tmp_path: Path) -> None:
    """One engine serves objects opened one after another: it is emptied in
    between, views, materialized views, dictionaries and temporary tables too."""
    with durable_obj.open(str(tmp_path / "a")) as a:
        a.execute(DDL)
        a.execute("INSERT INTO m VALUES ('x', 1)")
        a.execute("CREATE VIEW v AS SELECT k FROM m")
        a.execute(
            "CREATE MATERIALIZED VIEW mv ENGINE = SummingMergeTree ORDER BY k "
            "AS SELECT k, sum(v) AS s FROM m GROUP BY k"
        )
        a.execute(
            "CREATE DICTIONARY d (k String, v UInt32) PRIMARY KEY k "
            "SOURCE(CLICKHOUSE(TABLE 'm')) LAYOUT(HASHED()) LIFETIME(0)"
        )
    with durable_obj.open(str(tmp_path / "b"), db="other") as b:
        assert (
            b.query(
                "SELECT count() FROM system.tables WHERE database NOT IN "
                "('system', 'information_schema', 'INFORMATION_SCHEMA')"
            )
            == "0\n"
        )
        assert b.query(
            "SELECT name FROM system.databases WHERE name NOT IN "
            "('system', 'information_schema', 'INFORMATION_SCHEMA') ORDER BY name"
        ) == ('"other"\n')
    with durable_obj.open(str(tmp_path / "a"), read_only=True) as again:
        assert again.query("SELECT count() FROM v") == "1\n"
        assert again.tables() == ["d", "m"]


def test_query_with_a_format_clause(tmp_path: Path) -> None:
    """A FORMAT clause in the query text prints the result in that format, and
    the read check still sees through it: the plan it inspects is printed as a
    query tree whatever the statement's own FORMAT (found by the MCP helper:
    `SELECT 1 FORMAT JSON` was refused as reading `system.one"`)."""
    obj = durable_obj.open(str(tmp_path / "ns" / "o"), owner="w")
    try:
        obj.execute("CREATE TABLE t (id UInt32) ENGINE = MergeTree ORDER BY id")
        obj.execute("INSERT INTO t VALUES (7)")
        assert json.loads(obj.query("SELECT 1 AS one FORMAT JSON"))["data"] == [{"one": 1}]
        assert obj.query("SELECT id FROM t FORMAT JSONEachRow") == '{"id":7}\n'
        with pytest.raises(durable_obj.ClassificationRefused):
            obj.query("SELECT * FROM system.zookeeper_connection FORMAT JSON")
    finally:
        obj.close(discard=True)


def test_tables_named_with_line_separators(tmp_path: Path) -> None:
    """Table names may hold U+0085 or U+2028, which str.splitlines() splits on:
    tables() (and export) list them whole."""
    obj = durable_obj.open(str(tmp_path / "ns" / "o"), owner="w")
    try:
        for name in ("a\u0085b", "c\u2028d"):
            obj.execute(f"CREATE TABLE `{name}` (id UInt32) ENGINE = MergeTree ORDER BY id")
        assert obj.tables() == ["a\u0085b", "c\u2028d"]
    finally:
        obj.close(discard=True)
