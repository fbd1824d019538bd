"""durable_obj/v1base.py: a base of `default` rewritten in V1's shape, in place."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

from durable_obj.stores.growing import GrowingFile
from durable_obj.wire.v1base import NEW_CHECKSUM, DefaultBase, rewrite_file

OURS = b"CREATE DATABASE default UUID '3a8512dc-0b7d-4d89-8aee-812ec979c541' ENGINE = Atomic"
INDEX = (
    b"<config><contents><file><name>metadata/default.sql</name><size>83</size>"
    b"<checksum>afa6dc529999fdba210f64fe2adeac3a</checksum></file></contents></config>"
)


def _archive(path: Path, first: tuple[str, bytes]) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (first, ("data/t/x.bin", b"x" * 3000), (".backup", INDEX)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_a_finished_archive_of_default_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _archive(path, ("metadata/default.sql", OURS))
    size = path.stat().st_size
    rewrite_file(str(path))
    assert path.stat().st_size == size
    files = _read(path)
    assert files["metadata/default.sql"] == b"CREATE DATABASE default"
    assert b"<size>23</size><checksum>" + NEW_CHECKSUM in files[".backup"]
    assert files["data/t/x.bin"] == b"x" * 3000


def test_another_shape_is_left_as_written(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _archive(path, ("metadata/shop.sql", b"CREATE DATABASE shop UUID 'x' ENGINE = Atomic"))
    before = path.read_bytes()
    rewrite_file(str(path))
    assert path.read_bytes() == before


def test_readers_of_a_growing_archive_see_only_rewritten_bytes(tmp_path: Path) -> None:
    """Written a few bytes at a time: every byte a reader gets is final."""
    whole = tmp_path / "whole.tar"
    _archive(whole, ("metadata/default.sql", OURS))
    data = whole.read_bytes()
    path = tmp_path / "growing.tar"
    source = GrowingFile(str(path), DefaultBase(str(path)))

    def write() -> None:
        with open(path, "wb") as out:
            for i in range(0, len(data), 700):
                out.write(data[i : i + 700])
                out.flush()
                time.sleep(0.02)  # the reader runs between the writes

    thread = source.produce(write)
    got = b"".join(source.chunks(300))
    thread.join()
    source.close()
    rewrite_file(str(whole))
    assert got == whole.read_bytes() == path.read_bytes()
