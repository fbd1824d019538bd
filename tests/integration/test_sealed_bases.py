"""A sealed base is opened while it downloads (S3) or from the stored file
(a folder), chunks in parallel (wire/unsealing.py), and RESTORE never reads
a byte of one that does not authenticate: a base cut at a chunk boundary,
with two chunks swapped, one dropped or a byte flipped, its head re-signed
as someone with write access to the bucket could, is `Corrupt` naming the
base and the key, and the engine's RESTORE was never called. A base whose
tags hold but whose SHA-256 is not the head's is `Corrupt` too."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import StaticKey
from durable_obj.errors import Corrupt
from durable_obj.replica.engine import Engine
from durable_obj.stores import open_store
from durable_obj.stores.base import Store
from durable_obj.wire import sealing

ROWS = 80_000  # a base of several 1 MiB chunks


@pytest.fixture(params=["file", "moto_s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "file":
        return str(tmp_path / "ns"), {}
    root, options = request.getfixturevalue(request.param)
    return f"{root}/sealed-{uuid.uuid4().hex[:12]}", dict(options)


def _rewrite(store: Store, key: str, data: bytes) -> None:
    store.delete(key)
    assert store.create(key, data) is not None


def _resign(store: Store, oid: str, base: bytes, sha256: str | None = None) -> None:
    """`base` as the object's base, the head's ref made to match it (or to
    `sha256`): what write access to the bucket allows."""
    got = store.get(f"{oid}/head.json")
    assert got is not None
    head = json.loads(got.data)
    ref = head["manifest"]["base"]
    _rewrite(store, f"{oid}/{ref['key']}", base)
    ref["size"], ref["sha256"] = len(base), sha256 or hashlib.sha256(base).hexdigest()
    head["resigned"] = uuid.uuid4().hex  # every head write changes the bytes
    assert store.replace(f"{oid}/head.json", json.dumps(head).encode(), got.version) is not None


def test_a_damaged_base_never_reaches_restore(
    where: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, options = where
    key = StaticKey(os.urandom(32))
    url = f"{root}/o"
    with durable_obj.open(url, owner="w", storage_options=options, encryption=key) as obj:
        obj.execute("CREATE TABLE b (n UInt64, h String) ENGINE = MergeTree ORDER BY n")
        obj.execute(
            f"INSERT INTO b SELECT number, hex(SHA256(toString(number))) FROM numbers({ROWS})"
        )
        obj.checkpoint()
    store = open_store(root, options)
    try:
        got = store.get("o/head.json")
        assert got is not None
        ref = json.loads(got.data)["manifest"]["base"]
        blob = store.get(f"o/{ref['key']}")
        assert blob is not None
        good = blob.data
        step = sealing.SEAL_CHUNK + sealing.TAG
        head, body = good[: sealing.HEADER_SIZE], good[sealing.HEADER_SIZE :]
        chunks = [body[at : at + step] for at in range(0, len(body), step)]
        assert len(chunks) >= 3
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x01
        damaged = {
            "chunk 1 does not verify": head + b"".join(chunks[:2]),  # cut at a boundary
            "chunk 0 does not verify": head + chunks[1] + chunks[0] + b"".join(chunks[2:]),
            "chunk 2 does not verify": head + b"".join(chunks[:2] + chunks[3:]) + chunks[-1],
            f"chunk {(len(good) // 2 - sealing.HEADER_SIZE) // step} does not": bytes(flipped),
        }
        restores: list[str] = []
        real = Engine.restore

        def watched(self: Engine, db: str, path: str, *args: Any, **kwargs: Any) -> None:
            restores.append(path)
            real(self, db, path, *args, **kwargs)

        monkeypatch.setattr(Engine, "restore", watched)
        for why, bad in damaged.items():
            _resign(store, "o", bad)
            with pytest.raises(Corrupt, match=why) as caught:
                durable_obj.open(url, read_only=True, storage_options=options, encryption=key)
            assert ref["key"] in str(caught.value) and key.key_id in str(caught.value)
            assert restores == [], f"RESTORE read a base that did not authenticate ({why})"
        # tags that hold, a SHA-256 that is not the head's: Corrupt, nothing shown
        _resign(store, "o", good, sha256="0" * 64)
        with pytest.raises(Corrupt, match="altered"):
            durable_obj.open(url, read_only=True, storage_options=options, encryption=key)
        _resign(store, "o", good)
        with durable_obj.open(url, read_only=True, storage_options=options, encryption=key) as obj:
            assert obj.query("SELECT count() FROM b", "TSV") == f"{ROWS}\n"
    finally:
        store.close()


def test_a_streamed_read_restarts_with_each_attempt(
    where: tuple[str, dict[str, Any]],
) -> None:
    root, options = where
    store = open_store(root, options)
    try:
        data = os.urandom(3 * 1024 * 1024 + 5)
        assert store.create("k/blob", data) is not None
        got: list[bytes] = []
        restarts = []

        class Sink:
            def restart(self) -> None:
                restarts.append(len(got))
                got.clear()

            def write(self, piece: bytes) -> None:
                got.append(piece)

        assert store.read_into("k/blob", Sink()) is True
        assert b"".join(got) == data and restarts == [0]
        assert store.read_into("k/none", Sink()) is False
    finally:
        store.close()


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "plain"])
def test_a_base_grown_past_its_heads_size_is_read_by_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed: bool
) -> None:
    """The stored base, genuine, with a sparse hole appended in place (the
    head untouched): its size is judged before a byte of it is read, so a
    hole of any size costs nothing, and RESTORE is never called."""
    root = tmp_path / "ns"
    key = StaticKey(os.urandom(32)) if sealed else None
    with durable_obj.open(str(root / "o"), owner="w", encryption=key) as obj:
        obj.execute("CREATE TABLE b (n UInt64) ENGINE = MergeTree ORDER BY n")
        obj.execute("INSERT INTO b SELECT number FROM numbers(1000)")
        obj.checkpoint()
    ref = json.loads((root / "o" / "head.json").read_bytes())["manifest"]["base"]
    path = root / "o" / ref["key"]
    os.truncate(path, path.stat().st_size + (1 << 40))  # a terabyte of hole
    restores: list[str] = []
    monkeypatch.setattr(Engine, "restore", lambda self, *args, **_: restores.append(args[1]))
    with pytest.raises(Corrupt, match=f"is {(1 << 40) + ref['size']} bytes but the head says"):
        durable_obj.open(str(root / "o"), read_only=True, encryption=key)
    assert restores == []
