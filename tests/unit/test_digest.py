"""Reading stored files without megabyte heap buffers (`wire.digest`,
`stores.fileswap.read_all`): what they return, and that they allocate no
buffer of `CHUNK` bytes from the heap. A heap buffer of megabytes, once
freed, raises glibc's mmap threshold to its size, and from then on every
thread's arena keeps that much of freed buffers resident: the idle RSS of
every object open in the process (issue 39)."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_obj.stores.fileswap import read_all
from durable_obj.wire.digest import CHUNK, file_digest, read_chunks

SIZES = [0, 1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 5]
#: Far below CHUNK, far above what the calls keep of their own.
HEAP_LIMIT = 256 * 1024


def _file(tmp_path: Path, size: int) -> tuple[str, bytes]:
    data = os.urandom(size)
    path = tmp_path / f"blob-{size}"
    path.write_bytes(data)
    return str(path), data


class _Peak:
    """The heap's peak above where it stood on entry (tracemalloc traces
    every allocation of the interpreter's allocators, not a mapping)."""

    def __enter__(self) -> _Peak:
        tracemalloc.start()
        self.base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = tracemalloc.get_traced_memory()[1] - self.base
        tracemalloc.stop()


@pytest.mark.parametrize("size", SIZES)
def test_a_file_digest_is_hashlibs(tmp_path: Path, size: int) -> None:
    path, data = _file(tmp_path, size)
    assert file_digest(path) == (size, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("size", SIZES)
def test_read_chunks_reads_the_file_from_where_it_stands(tmp_path: Path, size: int) -> None:
    path, data = _file(tmp_path, size)
    with open(path, "rb", buffering=0) as handle:
        handle.seek(min(size, 3))
        got = b"".join(bytes(chunk) for chunk in read_chunks(handle))
    assert got == data[3:]


@pytest.mark.parametrize("size", SIZES)
def test_read_all_reads_the_whole_file(tmp_path: Path, size: int) -> None:
    path, data = _file(tmp_path, size)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_all(fd) == data
    finally:
        os.close(fd)


def test_hashing_a_large_file_takes_no_heap_buffer(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 2 * CHUNK + 5)
    with _Peak() as heap:
        got = file_digest(path)
    assert got == (len(data), hashlib.sha256(data).hexdigest())
    assert heap.peak < HEAP_LIMIT, f"{heap.peak} bytes from the heap to hash a file"


def test_reading_a_small_file_takes_no_chunk_of_heap(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 3000)  # a head's size
    fd = os.open(path, os.O_RDONLY)
    try:
        with _Peak() as heap:
            got = read_all(fd)
    finally:
        os.close(fd)
    assert got == data
    assert heap.peak < HEAP_LIMIT, f"{heap.peak} bytes from the heap to read {len(data)}"


def test_a_chunk_holds_until_the_next_is_taken(tmp_path: Path) -> None:
    """The buffer is reused: a consumer must use each chunk before the next
    (as `chunks_digest` does); the bytes seen in order are the file's."""
    path, data = _file(tmp_path, CHUNK + 10)
    with open(path, "rb", buffering=0) as handle:
        chunks: Iterator[memoryview] = read_chunks(handle)
        first = next(chunks)
        assert bytes(first) == data[:CHUNK]
        second = next(chunks)
        assert bytes(second) == data[CHUNK:]
        assert next(chunks, None) is None
