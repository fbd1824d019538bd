"""Chains of incremental bases: how the head names them, and how their
links are put where the engine reads them (`wire/head.py`, `replica/links.py`)."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from durable_obj.errors import Corrupt
from durable_obj.replica import links
from durable_obj.wire.head import Head, Lease, ObjectRef
from durable_obj.wire.protocol import INCREMENTAL_FEATURE

SHA = "0" * 64


def _ref(key: str) -> ObjectRef:
    return ObjectRef(key=key, size=1, sha256=SHA)


def _head() -> Head:
    head = Head.cold(db="default", engine_version="26.9.0", lease=Lease(generation=1))
    head.manifest.base = _ref("checkpoints/1-3-0000000c.tar")
    return head


def test_a_chain_round_trips_and_declares_its_feature_while_it_exists() -> None:
    head = _head()
    chain = [_ref("checkpoints/1-1-0000000a.tar"), _ref("checkpoints/1-2-0000000b.tar")]
    head.set_chain(chain)
    again = Head.parse(head.to_bytes())
    assert [r.key for r in again.manifest.chain] == [r.key for r in chain]
    assert again.manifest.all_bases()[-1] == again.manifest.base
    assert INCREMENTAL_FEATURE in again.protocol.reader_features
    assert INCREMENTAL_FEATURE in again.protocol.writer_features
    assert again.incremental
    again.set_chain([])
    assert again.manifest.chain == [] and not again.incremental
    assert "durable_obj" not in (again.manifest.model_extra or {})
    assert INCREMENTAL_FEATURE not in again.protocol.writer_features


@pytest.mark.parametrize(
    "chain",
    [
        "checkpoints/1-1-0000000a.tar",
        [{"key": "../x", "size": 1, "sha256": SHA}],
        [{"key": "checkpoints/a.tar", "size": -1, "sha256": SHA}],
        [{"key": "checkpoints/a.tar", "size": 1, "sha256": "x"}],
        [None],
    ],
)
def test_a_chain_that_is_not_a_list_of_refs_is_corrupt(chain: Any) -> None:
    doc = _head().model_dump(mode="json")
    doc["manifest"]["durable_obj"] = {"chain": chain}
    head = Head.model_validate(doc)
    with pytest.raises(Corrupt, match="chain"):
        _ = head.manifest.chain


def test_links_named_under_no_base_are_corrupt() -> None:
    doc = _head().model_dump(mode="json")
    doc["manifest"]["base"] = None
    doc["manifest"]["durable_obj"] = {"chain": [_ref("checkpoints/1-1-0000000a.tar").model_dump()]}
    with pytest.raises(Corrupt, match="no base"):
        _ = Head.model_validate(doc).manifest.chain


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("checkpoints/1-2-0123abcd.tar", "links/1-2-0123abcd.tar"),
        ("checkpoints/1-2-0123abcd.tar.gz", None),  # chdb.durable's
        ("checkpoints/x'); DROP.tar", None),
        ("checkpoints/1-2-0123ABCD.tar", None),
        ("checkpoints/../1-2-0123abcd.tar", "links/1-2-0123abcd.tar"),  # the name alone
    ],
)
def test_only_our_own_base_names_become_link_paths(key: str, path: str | None) -> None:
    assert links.link_path(key) == path


def test_placed_puts_links_for_the_block_and_takes_turns_on_a_name(tmp_path: Path) -> None:
    engine = cast(Any, SimpleNamespace(backups=str(tmp_path)))
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"first")
    b.write_bytes(b"second")
    seen: list[bytes] = []

    def other() -> None:
        with links.placed(engine, [("links/x.tar", str(b))]):
            seen.append((tmp_path / "links" / "x.tar").read_bytes())

    with links.placed(engine, [("links/x.tar", str(a))]):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(0.5)  # without the lock it would be done at once
        assert thread.is_alive() and seen == []  # it waits for this block
        assert (tmp_path / "links" / "x.tar").read_bytes() == b"first"
    thread.join(5)
    assert seen == [b"second"]
    assert not (tmp_path / "links" / "x.tar").exists()
    assert a.exists() and b.exists()  # the sources stay


def test_a_stub_holds_only_the_listing_without_the_default_definition(tmp_path: Path) -> None:
    listing = (
        b"<config><uuid>u</uuid><contents>"
        b"<file><name>metadata/default.sql</name><size>23</size><checksum>c</checksum></file>"
        b"<file><name>metadata/default/t.sql</name><size>9</size><checksum>d</checksum></file>"
        b"</contents></config>"
    )
    archive = tmp_path / "base.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("data/default/t/x.bin", os.urandom(3000)), (".backup", listing)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    stub = links.stub(str(archive), str(tmp_path / "stub"))
    with tarfile.open(stub) as tar:
        assert tar.getnames() == [".backup"]
        handle = tar.extractfile(".backup")
        assert handle is not None
        kept = handle.read()
    assert b"metadata/default.sql" not in kept and b"metadata/default/t.sql" in kept
    (tmp_path / "bad.tar").write_bytes(b"not a tar")
    with pytest.raises(Corrupt):
        links.stub(str(tmp_path / "bad.tar"), str(tmp_path / "stub2"))
    assert not (tmp_path / "stub2").exists()
