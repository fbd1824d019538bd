"""Encryption with the caller's key, and a zstd WAL (issue 29).

A marker written through every path (execute, parameters, write(), a
checkpoint, time travel, fork, the MCP memory, the LangGraph store) to an
encrypted object is in no stored byte, on a folder and on an S3 server;
the same writes to a plain object do show it (so the search can fail).
Tampering is `Corrupt` naming the blob and the key; the wrong key or none
is `KeyRefused` naming the key id, with nothing changed; chdb.durable
refuses an encrypted or compressed object by its feature list.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import KeyRefused, StaticKey
from durable_obj.errors import Corrupt, InvalidArgument
from durable_obj.stores import open_store
from durable_obj.wire import compression, keyring, sealing
from tests.integration import _proc

MARKER = "MARKER-7f3a91-do-not-leak"
DDL = "CREATE TABLE m (k String, v String) ENGINE = MergeTree ORDER BY k"


@pytest.fixture(params=["file", "moto_s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "file":
        return str(tmp_path / "ns"), {}
    root, options = request.getfixturevalue(request.param)
    return f"{root}/enc-{uuid.uuid4().hex[:12]}", dict(options)


def stored_bytes(url: str, options: dict[str, Any]) -> dict[str, bytes]:
    """Every key under `url` and its bytes, as the store holds them."""
    store = open_store(url, options)
    try:
        out = {}
        for entry in store.list_keys(""):
            blob = store.get(entry.key)
            if blob is not None:
                out[entry.key] = blob.data
        return out
    finally:
        store.close()


def leaks(blobs: dict[str, bytes], marker: str = MARKER) -> list[str]:
    """Keys whose bytes show `marker` as text, hex or UTF-16."""
    forms = [
        marker.encode(),
        marker.encode().hex().encode(),
        marker.encode().hex().upper().encode(),
        marker.encode("utf-16-le"),
    ]
    return sorted(key for key, data in blobs.items() if any(f in data for f in forms))


def write_everything(url: str, options: dict[str, Any], **enc: Any) -> None:
    """The marker through every path of the library, into objects under `url`."""
    ns = durable_obj.Namespace(url, owner="w", storage_options=options, **enc)
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute(f"INSERT INTO m VALUES ('literal', '{MARKER}')")
        obj.flush()
        obj.execute(
            "INSERT INTO m VALUES ({k:String}, {v:String})", params={"k": "param", "v": MARKER}
        )
        obj.write(("INSERT INTO m VALUES ('write', {v:String})", {"v": MARKER}))
        obj.checkpoint()  # a base, and the manifest it supersedes archived
        obj.execute(f"INSERT INTO m VALUES ('after', '{MARKER}')")
        seq = obj.seq
        obj.flush()
    with ns.open("o", read_only=True, at=seq) as past:  # time travel reads it back
        assert (
            past.query("SELECT count() FROM m WHERE v = {v:String}", params={"v": MARKER}) == "3\n"
        )
    ns.fork("o", "copy")
    with ns.open("copy", read_only=True) as copy:
        assert copy.query("SELECT count() FROM m", "TSV") == "4\n"
    # the MCP memory server's remember(), and the LangGraph store
    from durable_obj.mcp.memory import MemoryServer

    async def remember() -> None:
        async with await durable_obj.aopen(
            f"{url.rstrip('/')}/mcp", owner="m", storage_options=options, **enc
        ) as mem:
            await MemoryServer(mem).remember(f"the user said {MARKER}", tags=["t"])

    asyncio.run(remember())
    from durable_obj.langgraph import DurableStore

    with DurableStore(f"{url.rstrip('/')}/lg", storage_options=options, **enc) as store:
        store.put(("users", "u1"), "fact", {"text": MARKER})


def test_a_marker_is_in_no_stored_byte_of_an_encrypted_object(
    where: tuple[str, dict[str, Any]],
) -> None:
    url, options = where
    plain_url = url.rstrip("/") + "-plain"
    write_everything(plain_url, options)
    shown = leaks(stored_bytes(plain_url, options))
    # the search can fail: a plain object shows it in its WAL, bases and MCP/LangGraph data
    assert any("/wal/" in k for k in shown) and any("/checkpoints/" in k for k in shown)
    assert any(k.startswith("mcp/") for k in shown) and any(k.startswith("lg/") for k in shown)

    key = StaticKey(os.urandom(32))
    write_everything(url, options, encryption=key)
    blobs = stored_bytes(url, options)
    assert leaks(blobs) == []
    kinds = {k.split("/")[1] for k in blobs if k.count("/") >= 2}
    assert {"wal", "checkpoints", "history"} <= kinds
    for name, data in blobs.items():
        # the catalog holds only what each head shows in the clear (docs/guides/operations.md)
        if name.endswith(("head.json", ".lock", "_catalog.json")):
            continue
        assert sealing.is_sealed(data), name  # every blob but the head is sealed
    head = json.loads(blobs["o/head.json"])
    assert keyring.ENCRYPTED in head["protocol"]["reader_features"]
    assert keyring.ENCRYPTED in head["protocol"]["writer_features"]
    with durable_obj.open(f"{url}/o", read_only=True, storage_options=options, encryption=key) as o:
        assert o.query("SELECT count() FROM m WHERE v = {v:String}", params={"v": MARKER}) == "4\n"
    report = durable_obj.Namespace(url, storage_options=options, encryption=key).verify("o")
    assert report.tags_checked is True and len(report.checked) >= 2


def _object(tmp_path: Path, key: StaticKey, **extra: Any) -> str:
    url = str(tmp_path / "ns" / "o")
    with durable_obj.open(url, owner="w", encryption=key, **extra) as obj:
        obj.execute(DDL)
        obj.execute(f"INSERT INTO m VALUES ('a', '{MARKER}')")
        obj.flush()
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES ('b', 'x')")
        obj.flush()
    return url


def _head(url: str) -> dict[str, Any]:
    return json.loads(Path(url, "head.json").read_bytes())  # type: ignore[no-any-return]


def _resign(url: str, ref: dict[str, Any], data: bytes) -> None:
    """Write `data` as `ref`'s blob and fix the head's size and SHA-256 to
    match, as someone with write access to the bucket could."""
    Path(url, ref["key"]).write_bytes(data)
    head = _head(url)
    for r in [head["manifest"]["base"], *head["manifest"]["wal"]]:
        if r and r["key"] == ref["key"]:
            r["size"], r["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    Path(url, "head.json").write_text(json.dumps(head))


@pytest.mark.parametrize("what", ["segment", "base"])
def test_tampering_any_byte_is_corrupt_naming_the_blob_and_the_key(
    tmp_path: Path, what: str
) -> None:
    key = StaticKey(os.urandom(32))
    url = _object(tmp_path, key)
    head = _head(url)
    ref = head["manifest"]["wal"][0] if what == "segment" else head["manifest"]["base"]
    good = Path(url, ref["key"]).read_bytes()
    # a flipped byte the head's SHA-256 still catches ...
    Path(url, ref["key"]).write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(Corrupt, match=ref["key"].split("/")[-1]):
        durable_obj.open(url, read_only=True, encryption=key)
    # ... and with the head re-signed (write access to the bucket), the tags:
    # every position in the header, the first and the last chunk
    step = max(1, len(good) // 40)
    for at in sorted({*range(0, sealing.HEADER_SIZE), *range(0, len(good), step), len(good) - 1}):
        bad = bytearray(good)
        bad[at] ^= 0x40
        _resign(url, ref, bytes(bad))
        with pytest.raises(Corrupt) as info:
            durable_obj.open(url, read_only=True, encryption=key)
        assert ref["key"] in str(info.value) or ref["key"].split("/")[-1] in str(info.value)
        assert "key" in str(info.value)
    _resign(url, ref, good)
    with durable_obj.open(url, read_only=True, encryption=key) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "2\n"


def test_a_segment_moved_to_another_position_or_object_does_not_open(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    url = _object(tmp_path, key)
    with durable_obj.open(url, owner="w", encryption=key) as obj:
        obj.execute("INSERT INTO m VALUES ('c', 'y')")
        obj.flush()
    head = _head(url)
    first, second = head["manifest"]["wal"]
    _resign(url, second, Path(url, first["key"]).read_bytes())  # first's bytes at second's place
    with pytest.raises(Corrupt, match="altered, cut or moved"):
        durable_obj.open(url, read_only=True, encryption=key)


def test_the_wrong_key_or_none_is_refused_naming_the_key_id_and_nothing_changes(
    tmp_path: Path,
) -> None:
    key = StaticKey(os.urandom(32))
    url = _object(tmp_path, key)
    before = {p.name: p.read_bytes() for p in Path(url).rglob("*") if p.is_file()}
    wrong = StaticKey(os.urandom(32))
    for attempt in (
        lambda: durable_obj.open(url, owner="x", encryption=wrong),
        lambda: durable_obj.open(url, read_only=True, encryption=wrong),
        lambda: durable_obj.open(url, owner="x"),
        lambda: durable_obj.open(url, read_only=True),
    ):
        with pytest.raises(KeyRefused, match=key.key_id) as info:
            attempt()
        assert info.value.category == "key_refused"
    after = {p.name: p.read_bytes() for p in Path(url).rglob("*") if p.is_file()}
    assert after == before  # no lease taken, nothing written
    # a key for a plain object is refused too: it would silently stay plain
    plain = str(tmp_path / "ns" / "plain")
    with durable_obj.open(plain, owner="w") as obj:
        obj.execute(DDL)
    with pytest.raises(InvalidArgument, match="not encrypted"):
        durable_obj.open(plain, owner="w", encryption=key)


def test_chdb_durable_refuses_encrypted_and_compressed_objects(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    _object(tmp_path, key)
    with durable_obj.open(str(tmp_path / "ns" / "z"), owner="w", compression="zstd") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 'b')")
        obj.flush()
    with _proc.Worker("chdb.durable") as w:
        for oid, feature in (("o", keyring.ENCRYPTED), ("z", keyring.COMPRESSED)):
            with pytest.raises(_proc.OpFailed) as info:
                w.open(f"local:{tmp_path / 'ns'}", oid, read_only=True)
            assert info.value.category == "protocol_unsupported"
            assert feature in str(info.value)


def test_rotate_key_rewraps_in_one_head_write_and_checkpoints_rotate_the_data_key(
    tmp_path: Path,
) -> None:
    old, new = StaticKey(os.urandom(32)), StaticKey(os.urandom(32))
    url = _object(tmp_path, old)
    before = _head(url)
    data_before = sorted(p.name for p in Path(url).rglob("*") if p.is_file())
    with durable_obj.open(url, owner="w", encryption=old) as obj:
        assert obj.rotate_key(new) == len(before["durable_obj"]["encryption"]["keys"])
        obj.execute("INSERT INTO m VALUES ('c', 'after rotation')")
        obj.flush()
    after = _head(url)
    assert {k["kek"] for k in after["durable_obj"]["encryption"]["keys"]} == {new.key_id}
    assert (
        after["durable_obj"]["encryption"]["active"]
        == before["durable_obj"]["encryption"]["active"]
    )  # the data keys themselves did not change: nothing was re-encrypted
    assert set(data_before) <= {p.name for p in Path(url).rglob("*") if p.is_file()}
    with pytest.raises(KeyRefused, match=new.key_id):
        durable_obj.open(url, read_only=True, encryption=old)
    with durable_obj.open(url, owner="w", encryption=new) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "3\n"
        active = _head(url)["durable_obj"]["encryption"]["active"]
        obj.checkpoint(full=True)
    keys = _head(url)["durable_obj"]["encryption"]
    assert keys["active"] != active  # a new data key at a full checkpoint
    retired = [k for k in keys["keys"] if k["id"] == active]
    assert retired and retired[0]["retired_at"] is not None  # kept for the history window
    with durable_obj.open(url, read_only=True, encryption=new, at=3) as past:
        assert past.query("SELECT count() FROM m", "TSV") == "2\n"


def test_without_history_retired_data_keys_go_at_the_next_checkpoint(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    url = _object(tmp_path, key, retention=0)
    with durable_obj.open(url, owner="w", encryption=key, retention=0) as obj:
        for _ in range(3):
            obj.execute("INSERT INTO m VALUES ('x', 'y')")
            obj.checkpoint()
    assert len(_head(url)["durable_obj"]["encryption"]["keys"]) == 1


def test_fork_into_a_key_another_key_and_plain(tmp_path: Path) -> None:
    one, two = StaticKey(os.urandom(32)), StaticKey(os.urandom(32))
    ns_url = str(tmp_path / "ns")
    with durable_obj.open(f"{ns_url}/plain", owner="w") as obj:
        obj.execute(DDL)
        obj.execute(f"INSERT INTO m VALUES ('a', '{MARKER}')")
    plain = durable_obj.Namespace(ns_url)
    plain.fork("plain", "sealed", dst_encryption=one)
    sealed = durable_obj.Namespace(ns_url, encryption=one)
    sealed.fork("sealed", "rekeyed", dst_encryption=two)
    sealed.fork("sealed", "opened", dst_encryption=None)
    assert leaks(stored_bytes(f"{ns_url}/sealed", {})) == []
    assert leaks(stored_bytes(f"{ns_url}/rekeyed", {})) == []
    assert leaks(stored_bytes(f"{ns_url}/opened", {})) != []
    for oid, key in (("sealed", one), ("rekeyed", two), ("opened", None)):
        with durable_obj.open(f"{ns_url}/{oid}", read_only=True, encryption=key) as obj:
            assert obj.query("SELECT v FROM m", "TSV") == f"{MARKER}\n"
    with pytest.raises(KeyRefused, match=two.key_id):
        durable_obj.open(f"{ns_url}/rekeyed", read_only=True, encryption=one)


def test_gc_and_history_of_an_encrypted_object_need_its_key(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    _object(tmp_path, key)
    bare = durable_obj.Namespace(str(tmp_path / "ns"))
    with pytest.raises(KeyRefused, match=key.key_id):
        bare.gc("o", grace=0)
    with pytest.raises(KeyRefused, match=key.key_id):
        bare.history("o")
    assert bare.verify("o").tags_checked is False  # digests only, and it says so
    keyed = durable_obj.Namespace(str(tmp_path / "ns"), encryption=key)
    assert [p.seq for p in keyed.history("o").points][:1] == [1]
    keyed.gc("o", grace=0)
    with durable_obj.open(str(tmp_path / "ns" / "o"), read_only=True, encryption=key) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "2\n"


def test_a_compressed_wal_is_smaller_and_reads_back(tmp_path: Path) -> None:
    sizes = {}
    for name, extra in (("plain", {}), ("zstd", {"compression": "zstd"})):
        url = str(tmp_path / "ns" / name)
        with durable_obj.open(url, owner="w", **extra) as obj:
            obj.execute(DDL)
            for i in range(200):
                obj.execute(
                    "INSERT INTO m VALUES ({k:String}, {v:String})",
                    params={"k": f"pref-{i}", "v": f"the user prefers region eu-central-{i % 3}"},
                )
            obj.flush()
        wal = [p for p in Path(url, "wal").iterdir()]
        sizes[name] = sum(p.stat().st_size for p in wal)
        if name == "zstd":
            assert all(p.read_bytes()[:4] == compression.ZSTD_MAGIC for p in wal)
        with durable_obj.open(url, read_only=True) as obj:  # no option needed to read
            assert obj.query("SELECT count() FROM m", "TSV") == "200\n"
    assert sizes["zstd"] < sizes["plain"] / 2


def test_a_reader_follows_an_encrypted_writer_across_checkpoints(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    url = _object(tmp_path, key)
    with (
        durable_obj.open(url, owner="w", encryption=key) as writer,
        durable_obj.open(url, read_only=True, encryption=key) as reader,
    ):
        for n in range(3):
            writer.execute(f"INSERT INTO m VALUES ('r{n}', 'x')")
            writer.flush()
            assert reader.refresh()
            writer.checkpoint()  # a new base under a new data key
            assert reader.refresh()
            assert reader.query("SELECT count() FROM m", "TSV") == f"{3 + n}\n"
        assert not reader.refresh()


def test_a_base_of_many_chunks_round_trips_and_a_cut_at_a_chunk_boundary_is_corrupt(
    tmp_path: Path,
) -> None:
    key = StaticKey(os.urandom(32))
    url = str(tmp_path / "ns" / "big")
    with durable_obj.open(url, owner="w", encryption=key) as obj:
        obj.execute("CREATE TABLE b (n UInt64, h String) ENGINE = MergeTree ORDER BY n")
        obj.execute(
            "INSERT INTO b SELECT number, hex(SHA256(toString(number))) FROM numbers(80000)"
        )
        obj.checkpoint()
    ref = _head(url)["manifest"]["base"]
    sealed_base = Path(url, ref["key"]).read_bytes()
    step = sealing.SEAL_CHUNK + sealing.TAG
    chunks = -(-(len(sealed_base) - sealing.HEADER_SIZE) // step)
    assert chunks >= 3  # several chunks, streamed both ways
    with durable_obj.open(url, read_only=True, encryption=key) as obj:
        assert obj.query("SELECT count(), sum(n) FROM b", "TSV") == "80000\t3199960000\n"
    _resign(url, ref, sealed_base[: sealing.HEADER_SIZE + 2 * step])
    with pytest.raises(Corrupt, match="chunk 1 does not verify"):
        durable_obj.open(url, read_only=True, encryption=key)


def test_a_pool_and_aopen_carry_the_key(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    ns_url = str(tmp_path / "ns")
    with durable_obj.Pool(ns_url, owner="svc", encryption=key, compression="zstd") as pool:
        for oid in ("a", "b"):
            with pool.object(oid) as obj:
                obj.write(DDL, f"INSERT INTO m VALUES ('{oid}', '{MARKER}')")
    assert leaks(stored_bytes(ns_url, {})) == []

    async def read() -> str:
        async with await durable_obj.aopen(f"{ns_url}/a", read_only=True, encryption=key) as a:
            return str(await a.aquery("SELECT k FROM m", "TSV"))

    assert asyncio.run(read()) == "a\n"
    with pytest.raises(KeyRefused):
        asyncio.run(durable_obj.aopen(f"{ns_url}/b", read_only=True))
