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
from hypothesis import given, settings
from hypothesis import strategies as st

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


# -- the listing found by walking the headers (`links._walk`) ------------------------
_FORMATS = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}
_NAMES = st.one_of(
    st.sampled_from([".backup", "data/a.bin", ".backup/", "x/.backup", "metadata/t.sql"]),
    st.text("ab/._", min_size=1, max_size=12),
    st.text("ab", min_size=101, max_size=130),  # a long name: GNU 'L', pax or a ustar prefix
    st.builds(lambda d: "d" * 60 + "/" + d, st.text("ab", min_size=41, max_size=60)),
    st.just("d" * 110 + "/.backup"),  # ustar: a prefix and the name ".backup"
)
_MEMBERS = st.lists(
    st.tuples(_NAMES, st.sampled_from(["file", "dir", "symlink"]), st.binary(max_size=1300)),
    max_size=6,
)


def _tar(fmt: str, members: list[tuple[str, str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=_FORMATS[fmt]) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "data/a.bin"
            else:
                info.size = len(data)
            try:
                tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
            except ValueError:  # a name this format cannot hold
                continue
    return buf.getvalue()


def _either(path: Path, read: Any) -> bytes | str:
    try:
        return cast(bytes, read(str(path)))
    except Corrupt as exc:
        return str(exc)


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from(sorted(_FORMATS)),
    members=_MEMBERS,
    cut=st.one_of(st.none(), st.integers(0, 6000)),
    flip=st.one_of(st.none(), st.tuples(st.integers(0, 6000), st.integers(1, 255))),
)
def test_the_walked_listing_is_what_tarfile_reads(
    tmp_path_factory: pytest.TempPathFactory,
    fmt: str,
    members: list[tuple[str, str, bytes]],
    cut: int | None,
    flip: tuple[int, int] | None,
) -> None:
    """Any archive, truncated or with a byte changed anywhere: the listing
    (or the `Corrupt`) is the one tarfile alone gives."""
    data = bytearray(_tar(fmt, members))
    if flip is not None and flip[0] < len(data):
        data[flip[0]] ^= flip[1]
    if cut is not None:
        del data[cut:]
    path = tmp_path_factory.mktemp("walk") / "a.tar"
    path.write_bytes(bytes(data))
    assert _either(path, links.listing) == _either(path, links._read_by_tarfile)


def _header(name: bytes, size: bytes, kind: bytes = b"0") -> bytes:
    """A tar header with the raw `size` field and typeflag `kind`."""
    block = bytearray(512)
    block[: len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = size.ljust(11, b" ")[:11] + b"\0"
    block[156:157] = kind
    block[257:265] = b"ustar  \0"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


_FAKE = _header(b".backup", b"%o" % 3) + _padded(b"AAA")
_CRAFTED = {
    # a V7 directory: a regular typeflag of NUL and a name ending in "/";
    # tarfile reads no data of it, so its "data" is the next header
    "v7 directory": _header(b"x/", b"%o" % len(_FAKE), b"\0")
    + _FAKE
    + _header(b".backup", b"3")
    + _padded(b"BBB"),
    "negative size": _header(b"a", b"-1") + _FAKE,
    "large negative size": _header(b"a", b"-1001") + _FAKE + _FAKE,
    "listing cut short": _header(b".backup", b"%o" % 600) + b"x" * 300,
    "ustar prefix": tarfile.TarInfo("d" * 110 + "/.backup").tobuf(tarfile.USTAR_FORMAT)
    + bytes(1024),
    "no listing": _header(b"a", b"3") + _padded(b"abc") + bytes(1024),
}


@pytest.mark.parametrize("name", sorted(_CRAFTED))
def test_crafted_headers_read_as_tarfile_reads_them(tmp_path: Path, name: str) -> None:
    path = tmp_path / "a.tar"
    path.write_bytes(_CRAFTED[name])
    assert _either(path, links.listing) == _either(path, links._read_by_tarfile)


def test_an_archive_of_ours_is_walked_not_read_by_tarfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [(f"data/default/t/all_{i}_{i}_0/data.bin", "file", b"x" * i) for i in range(30)]
    path = tmp_path / "a.tar"
    path.write_bytes(_tar("gnu", [*members, (".backup", "file", b"<config/>")]))

    def refused(archive: str) -> bytes:
        raise AssertionError("read by tarfile")

    monkeypatch.setattr(links, "_read_by_tarfile", refused)
    assert links.listing(str(path)) == b"<config/>"


_FIELDS = {
    "mode": (100, 108),
    "uid": (108, 116),
    "gid": (116, 124),
    "mtime": (136, 148),
    "devmajor": (329, 337),
    "devminor": (337, 345),
}


@pytest.mark.parametrize("where", [0, 1024])
@pytest.mark.parametrize("field", sorted(_FIELDS))
def test_a_numeric_field_tarfile_would_not_read_is_read_as_tarfile_reads_it(
    tmp_path: Path, field: str, where: int
) -> None:
    """Garbage in any numeric field of the first member or of `.backup`
    itself: tarfile stops there, and so does the listing (found by the
    attack round: the walk read only the size and the checksum)."""
    data = bytearray(
        _tar("gnu", [("data/x.bin", "file", b"abc"), (".backup", "file", b"<config/>")])
    )
    start, end = _FIELDS[field]
    data[where + start : where + end] = b"zz".ljust(end - start, b"\0")
    header = data[where : where + 512]
    header[148:156] = b" " * 8
    data[where + 148 : where + 156] = b"%06o\0 " % sum(header)
    path = tmp_path / "a.tar"
    path.write_bytes(bytes(data))
    with pytest.raises(Corrupt):
        links._read_by_tarfile(str(path))
    assert _either(path, links.listing) == _either(path, links._read_by_tarfile)
