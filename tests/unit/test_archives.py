"""Unpacking an untrusted base (`replica/archives.unpacked`): a chDB backup's
regular files land in a fresh folder, which is gone afterwards; an entry
that is a link or a device, or whose path is absolute or climbs out, is
`Corrupt` before anything of it is written; too many entries or more bytes
than the disk has free is `LimitExceeded`, also through gzip (a tar bomb)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from durable_obj.errors import Corrupt, LimitExceeded
from durable_obj.replica import archives


def _member(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


def _archive(path: Path, *members: tuple[str, dict[str, object]], gz: bool = False) -> str:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        _member(tar, "metadata/default.sql", b"CREATE DATABASE default")
        for name, attrs in members:
            _member(tar, name, **attrs)  # type: ignore[arg-type]
        _member(tar, ".backup", b"<config/>")
    return str(path)


def _left(into: Path) -> list[str]:
    return sorted(str(p.relative_to(into)) for p in into.rglob("*"))


@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
def test_a_backup_unpacks_into_a_folder_that_is_gone_afterwards(tmp_path: Path, gz: bool) -> None:
    into = tmp_path / "backups"
    into.mkdir()
    path = _archive(tmp_path / "b.tar", ("data/default/m/data.bin", {}), gz=gz)
    with archives.unpacked(path, str(into)) as folder:
        got = Path(folder)
        assert got.parent == into
        assert (got / "metadata" / "default.sql").read_bytes() == b"CREATE DATABASE default"
        assert (got / ".backup").exists()
        assert (got / "data" / "default" / "m" / "data.bin").read_bytes() == b"x"
    assert _left(into) == []


HOSTILE = {
    "a climb out": ("../escaped.txt", {}),
    "a deep climb": ("data/../../escaped.txt", {}),
    "an absolute path": ("{abs}", {}),
    "a symlink out": ("data/link", {"type": tarfile.SYMTYPE, "linkname": "{out}"}),
    "a symlink in": ("data/link", {"type": tarfile.SYMTYPE, "linkname": "default"}),
    "a hard link": ("data/hard", {"type": tarfile.LNKTYPE, "linkname": "metadata/default.sql"}),
    "a device": ("data/dev", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}),
    "a fifo": ("data/fifo", {"type": tarfile.FIFOTYPE}),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
def test_a_hostile_entry_is_corrupt_and_nothing_lands_outside(
    tmp_path: Path, kind: str, gz: bool
) -> None:
    into = tmp_path / "backups"
    into.mkdir()
    out = tmp_path / "outside"
    out.mkdir()
    name, attrs = HOSTILE[kind]
    name = name.format(abs=out / "abs.txt")
    attrs = {k: v.format(out=out) if isinstance(v, str) else v for k, v in attrs.items()}
    path = _archive(tmp_path / "b.tar", (name, attrs), ("data/link/x.txt", {}), gz=gz)
    with (
        pytest.raises(Corrupt, match="nothing was written outside"),
        archives.unpacked(path, str(into)),
    ):
        pytest.fail("unpacked")
    assert _left(into) == []  # the folder is gone, and nothing climbed into `into`
    assert _left(out) == []
    assert sorted(os.listdir(tmp_path)) == ["b.tar", "backups", "outside"]


def test_an_unreadable_archive_is_corrupt(tmp_path: Path) -> None:
    into = tmp_path / "backups"
    into.mkdir()
    path = tmp_path / "b.tar.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(600))
    with (
        pytest.raises(Corrupt, match="not a readable archive"),
        archives.unpacked(str(path), str(into)),
    ):
        pytest.fail("unpacked")
    assert _left(into) == []


def test_too_many_entries_is_a_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    into = tmp_path / "backups"
    into.mkdir()
    monkeypatch.setattr(archives, "MAX_ENTRIES", 10)
    path = _archive(tmp_path / "b.tar", *((f"data/f{i}", {}) for i in range(20)))
    with pytest.raises(LimitExceeded, match="entries"), archives.unpacked(path, str(into)):
        pytest.fail("unpacked")
    assert _left(into) == []


def test_a_tar_bomb_stops_at_the_free_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB of zeros gzip to 64 KiB; with 1 MiB free (past the reserve) it
    stops at the entry that would pass it, before writing that entry."""
    into = tmp_path / "backups"
    into.mkdir()
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        _member(tar, "data/zeros", b"\0" * (64 << 20))
    assert path.stat().st_size < 1 << 20
    free = shutil.disk_usage(into).free
    monkeypatch.setattr(archives, "RESERVE", free - (1 << 20))
    with (
        pytest.raises(LimitExceeded, match="disk has free"),
        archives.unpacked(str(path), str(into)),
    ):
        pytest.fail("unpacked")
    assert _left(into) == []
