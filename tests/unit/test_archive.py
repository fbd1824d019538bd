"""`replica.archive`: a base's definitions read as RESTORE reads them, and
every archive that could be read two ways refused (`Corrupt`)."""

from __future__ import annotations

import hashlib
import io
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest

from durable_obj.errors import Corrupt
from durable_obj.replica import archives
from durable_obj.replica.archive import Definition, contents

VIEW = b"CREATE VIEW default.v (`s` String) AS SELECT s FROM default.t"
EVIL = b"CREATE VIEW default.v (`s` String) AS SELECT * FROM file('/etc/passwd')"


def definitions(path: str, db: str) -> list[Definition]:
    return contents(path, db).definitions


def _listing(files: list[tuple[str, bytes, str]], extra: str = "") -> bytes:
    entries = "".join(
        f"<file><name>{name}</name><size>{len(data)}</size>"
        f"<checksum>{hashlib.md5(data).hexdigest()}</checksum>"
        + (f"<data_file>{data_file}</data_file>" if data_file else "")
        + "</file>"
        for name, data, data_file in files
    )
    return f"<config><version>1</version>{extra}<contents>{entries}</contents></config>".encode()


def _tar(path: Path, entries: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def test_a_definition_is_read_where_the_listing_says(tmp_path: Path) -> None:
    """Deduplication points a file at another entry (`data_file`): the text
    checked is that entry's, which RESTORE reads, not the innocent one."""
    listing = _listing([("metadata/default/v.sql", EVIL, "data/x/evil.bin")])
    path = _tar(
        tmp_path / "b.tar",
        [("metadata/default/v.sql", VIEW), ("data/x/evil.bin", EVIL), (".backup", listing)],
    )
    [found] = definitions(path, "default")
    assert (found.table, found.text) == ("v", EVIL.decode())


def test_only_the_restored_database_is_read(tmp_path: Path) -> None:
    listing = _listing(
        [
            ("metadata/default.sql", b"CREATE DATABASE default ENGINE = Atomic", ""),
            ("metadata/default/v.sql", VIEW, ""),
            ("metadata/other/w.sql", EVIL, ""),
            # the same bytes: the engine stores them once (deduplicated)
            ("metadata/%20efault/x%2Ey.sql", VIEW, "metadata/default/v.sql"),
        ]
    )
    entries = [
        ("metadata/default.sql", b"CREATE DATABASE default ENGINE = Atomic"),
        ("metadata/default/v.sql", VIEW),
        ("metadata/other/w.sql", EVIL),
        (".backup", listing),
    ]
    path = _tar(tmp_path / "b.tar", entries)
    assert [d.table for d in definitions(path, "default")] == ["v"]
    assert [d.table for d in definitions(path, " efault")] == ["x.y"]


@pytest.mark.parametrize(
    ("names", "versioned"),
    [
        (["data/default/t/all_1_1_0/data.bin", "data/default/t/202401_2_9_3/data.bin"], False),
        (["shards/1/replicas/1/data/default/t/-1-2_3_3_0/columns.txt"], False),
        (["data/default/log/data.bin", "metadata/default/log.sql"], False),  # no parts
        (["data/default/t/all_1_1_0/data.bin", "data/default/t/all_2_2_0_5/data.bin"], True),
        (["data/default/t/all_1_1_0_0/data.bin"], True),
        # not read as a part without a mutation version: the engine is asked
        (["data/default/t/a_b_1_1_0/data.bin"], True),
        (["data/default/t/detached/all_1_1_0/data.bin"], True),
        (["data/default/t/all_1_1_0/p.proj/data.bin"], False),
    ],
)
def test_a_base_says_whether_a_part_carries_a_mutation_version(
    tmp_path: Path, names: list[str], versioned: bool
) -> None:
    """Only such a part can leave a restored table whose next mutation gets
    a version its parts already carry (`archives._recount_blocks`)."""
    files = [(name, name.encode(), "") for name in names]
    path = _tar(tmp_path / "b.tar", [(n, d) for n, d, _ in files] + [(".backup", _listing(files))])
    assert contents(path, "default").versioned is versioned


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        (
            [("metadata/default/v.sql", VIEW), ("metadata/default/v.sql", EVIL)],
            "two entries of one name",
        ),
        ([("metadata/default/v.sql", VIEW + b" ")], "not its size"),
        ([], "not its size"),
    ],
)
def test_an_archive_read_two_ways_is_corrupt(
    tmp_path: Path, entries: list[tuple[str, bytes]], match: str
) -> None:
    listing = _listing([("metadata/default/v.sql", VIEW, "")])
    path = _tar(tmp_path / "b.tar", [*entries, (".backup", listing)])
    with pytest.raises(Corrupt, match=match):
        definitions(path, "default")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("<base_backup>File('/elsewhere.tar')</base_backup>", "incremental"),
        ("<!-- a comment -->", "declaration"),
    ],
)
def test_a_listing_that_reaches_elsewhere_is_corrupt(
    tmp_path: Path, extra: str, match: str
) -> None:
    listing = _listing([("metadata/default/v.sql", VIEW, "")], extra)
    path = _tar(tmp_path / "b.tar", [("metadata/default/v.sql", VIEW), (".backup", listing)])
    with pytest.raises(Corrupt, match=match):
        definitions(path, "default")


def test_a_file_from_a_base_backup_is_corrupt(tmp_path: Path) -> None:
    listing = _listing([("metadata/default/v.sql", VIEW, "")]).replace(
        b"</size>", b"</size><use_base>true</use_base>"
    )
    path = _tar(tmp_path / "b.tar", [("metadata/default/v.sql", VIEW), (".backup", listing)])
    with pytest.raises(Corrupt, match="takes files from a base it does not name"):
        definitions(path, "default")


def test_archive_formats(tmp_path: Path) -> None:
    """Read as the engine would by the name's suffix: a tar, plain or
    compressed. A zip is refused (its two directories read differently by
    different readers), as is a suffix this module cannot read: never guessed."""
    listing = _listing([("metadata/default/v.sql", VIEW, "")])
    with zipfile.ZipFile(tmp_path / "b.zip", "w") as zf:
        zf.writestr("metadata/default/v.sql", VIEW)
        zf.writestr(".backup", listing)
    with pytest.raises(Corrupt, match="not an archive this library can check"):
        definitions(str(tmp_path / "b.zip"), "default")
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tf:
        for name, data in (("metadata/default/v.sql", VIEW), (".backup", listing)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    assert [d.table for d in definitions(str(tmp_path / "b.tar.gz"), "default")] == ["v"]
    (tmp_path / "b.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(Corrupt, match="not an archive this library can check"):
        definitions(str(tmp_path / "b.tar.zst"), "default")
    (tmp_path / "bad.tar").write_bytes(b"not a tar at all" * 64)
    with pytest.raises(Corrupt):
        definitions(str(tmp_path / "bad.tar"), "default")


def _entry(name: str, data: bytes, *, extra: str = "", checksum: str | None = None) -> str:
    digest = checksum or hashlib.md5(data).hexdigest()
    head = f"<file><name>{name}</name><size>{len(data)}</size>"
    return f"{head}<checksum>{digest}</checksum>{extra}</file>"


@pytest.mark.parametrize(
    ("files", "match"),
    [
        # a namespace hides an element from ElementTree, not from the engine's reader
        (
            _entry("metadata/default/v.sql", VIEW, extra='<data_file xmlns="urn:x">e</data_file>'),
            "attribute",
        ),
        (_entry("metadata/default/v.sql", VIEW, extra="<?pi x?>"), "processing instruction"),
        (_entry("metadata/default/v.sql", VIEW, extra="<other>x</other>"), "no engine's listing"),
        (
            _entry("metadata/default/v.sql", VIEW, checksum=hashlib.md5(VIEW).hexdigest().upper()),
            "odd size or checksum",
        ),
        (_entry("metadata/default/v.sql", VIEW) * 2, "twice"),
    ],
)
def test_a_listing_two_readers_could_read_apart_is_refused(files: str, match: str) -> None:
    import tempfile

    listing = f"<config><version>1</version><contents>{files}</contents></config>".encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = _tar(
            Path(tmp) / "b.tar",
            [("metadata/default/v.sql", VIEW), ("metadata/zz/r.sql", VIEW), (".backup", listing)],
        )
        with pytest.raises(Corrupt, match=match):
            definitions(path, "default")


@pytest.mark.parametrize("kind", ["global", "odd key"])
def test_a_tar_header_two_readers_apply_apart_is_refused(tmp_path: Path, kind: str) -> None:
    """A pax global header renames the entries after it for Python's reader
    and not for the engine's (libarchive); an odd pax key may do the like."""
    listing = _listing([("metadata/default/v.sql", VIEW, "")])
    path = tmp_path / "b.tar"
    headers = {"comment": "x"} if kind == "global" else {}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
        for name, data in (("metadata/default/v.sql", VIEW), (".backup", listing)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if kind == "odd key":
                info.pax_headers = {"hdrcharset": "BINARY"}
            tf.addfile(info, io.BytesIO(data))
    with pytest.raises(Corrupt, match="not a plain tar as an engine writes it"):
        definitions(str(path), "default")


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, "v7", "trailing"])
def test_a_plain_tar_is_read_only_as_an_engine_writes_it(tmp_path: Path, fmt: object) -> None:
    """A plain tar is read in place by the engine's libarchive: GNU and V7
    headers (whose prefix field the two readers apply differently) and
    bytes after the end blocks are refused; POSIX ustar reads."""
    listing = _listing([("metadata/default/v.sql", VIEW, "")])
    path = tmp_path / "b.tar"
    entries = [("metadata/default/v.sql", VIEW), (".backup", listing)]
    tar_format = fmt if isinstance(fmt, int) else tarfile.USTAR_FORMAT
    with tarfile.open(path, "w", format=tar_format) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    raw = bytearray(path.read_bytes())
    if fmt == "v7":  # no magic: an old V7 header
        raw[257:265] = b"\0" * 8
        raw[148:156] = b"%06o\0 " % (sum(raw[:148]) + 256 + sum(raw[156:512]))
    if fmt == "trailing":
        raw += b"x" * 10
    path.write_bytes(bytes(raw))
    if fmt == tarfile.USTAR_FORMAT:
        assert [d.table for d in definitions(str(path), "default")] == ["v"]
    else:
        with pytest.raises(Corrupt, match="not a plain tar as an engine writes it"):
            definitions(str(path), "default")


def test_a_file_is_read_where_the_engine_finds_it_by_size_and_checksum(tmp_path: Path) -> None:
    """The engine reads a file's bytes from the first entry of its size and
    checksum, whichever entry names it: a listing that gives another
    database's (unread) file the pair of `v` makes the engine read that
    file for `v`, and the gate reads the same bytes."""
    pair = hashlib.md5(VIEW).hexdigest()
    evil = EVIL[: len(VIEW)].ljust(len(VIEW), b" ")
    files = _entry("metadata/zz/r.sql", evil, checksum=pair) + _entry(
        "metadata/default/v.sql", VIEW
    )
    listing = f"<config><version>1</version><contents>{files}</contents></config>".encode()
    path = _tar(
        tmp_path / "b.tar",
        [("metadata/zz/r.sql", evil), ("metadata/default/v.sql", VIEW), (".backup", listing)],
    )
    (found,) = definitions(path, "default")
    assert found.table == "v" and found.text == evil.decode()


@pytest.mark.parametrize("second", ["./.backup", ".//.backup", "metadata/../.backup"])
def test_a_second_name_for_an_entry_is_refused(tmp_path: Path, second: str) -> None:
    """`./.backup` lands on `.backup` when the archive is unpacked (a
    `.tar.gz`, or a table RESTORE cannot read in place): the later entry
    would replace the listing the gate read. Both readers refuse it."""
    listing = _listing([("metadata/default/v.sql", VIEW, "")])
    decoy = _listing([("metadata/default/v.sql", EVIL, "")])
    entries = [("metadata/default/v.sql", VIEW), (".backup", listing), (second, decoy)]
    path = _tar(tmp_path / "b.tar", entries)
    with pytest.raises(Corrupt, match="not a plain relative path"):
        definitions(path, "default")
    with (
        pytest.raises(archives.Refused, match="not a plain relative path"),
        archives.unpacked(path, str(tmp_path)),
    ):
        pass


def test_two_entries_of_one_name_are_not_unpacked(tmp_path: Path) -> None:
    path = _tar(tmp_path / "b.tar", [(".backup", b"one"), (".backup", b"two")])
    with (
        pytest.raises(archives.Refused, match="two entries named"),
        archives.unpacked(path, str(tmp_path)),
    ):
        pass


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


def test_a_gzip_header_extra_field_is_no_second_archive(tmp_path: Path) -> None:
    """A gzip header's extra field holding a deflate stream of another tar:
    GzipFile (the gate's reader) skips it, tarfile's stream mode inflated
    it. Unpacking reads with the gate's reader: the same entries, the same
    bytes (attack on 674af0c)."""
    gate = _tar(tmp_path / "x.tar", [(".backup", b"the listing the gate read")])
    other = _tar(tmp_path / "y.tar", [(".backup", b"a listing the gate never read")])
    x, y = Path(gate).read_bytes(), Path(other).read_bytes()
    pad = 0
    for _ in range(50):  # an extra field of `pad` bytes that inflates to `pad` zeros, then y
        extra = _raw_deflate(b"\0" * pad + y)
        if len(extra) == pad:
            break
        pad = len(extra)
    header = b"\x1f\x8b\x08\x04\0\0\0\0\x00\xff" + struct.pack("<H", len(extra))
    trailer = struct.pack("<II", zlib.crc32(x), len(x))
    path = tmp_path / "b.tar.gz"
    path.write_bytes(header + extra + _raw_deflate(x) + trailer)
    with archives.unpacked(str(path), str(tmp_path)) as folder:
        assert (Path(folder) / ".backup").read_bytes() == b"the listing the gate read"
