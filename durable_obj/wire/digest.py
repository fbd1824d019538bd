"""Size and SHA-256: what a manifest says about an immutable key.

Both are checked before any byte is used. They catch different failures: a
truncated upload has the right prefix, a replaced object has the right length.
Files are hashed in a streaming pass, so a checkpoint never sits in memory.
"""

from __future__ import annotations

import hashlib
import io
import mmap
from collections.abc import Iterable, Iterator
from typing import Protocol

from durable_obj.errors import Corrupt
from durable_obj.wire.beside import Beside
from durable_obj.wire.head import ObjectRef

CHUNK = 4 * 1024 * 1024


def bytes_digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()


def file_digest(path: str) -> tuple[int, str]:
    with open(path, "rb") as handle:
        return handle_digest(handle)


def handle_digest(handle: io.RawIOBase | io.BufferedIOBase) -> tuple[int, str]:
    """Size and SHA-256 of what `handle` reads from where it stands."""
    return chunks_digest(read_chunks(handle))


def scratch(size: int) -> memoryview:
    """A writable buffer of `size` bytes in a mapping of its own, for a read
    buffer of megabytes: unmapped as soon as it is dropped.

    The same buffer from the heap (a bytearray, or the bytes `read(n)`
    allocates before it shrinks) is mapped by glibc too, but freeing it
    raises glibc's mmap threshold to its size: from then on every thread's
    arena keeps up to twice that of freed buffers resident, for good.
    Measured (`python benchmarks/run.py --only multi --stores local --
    --quick --only many`): 0.85-0.93 MiB of RSS per idle object with 200
    open, 0.42-0.45 with the base's digest reading through this."""
    return memoryview(mmap.mmap(-1, size))


def read_chunks(handle: io.RawIOBase | io.BufferedIOBase) -> Iterator[memoryview]:
    """What `handle` reads from where it stands, `CHUNK` bytes at a time,
    read into one buffer (`scratch`): each chunk holds only until the next
    is taken (hashing it first, `chunks_digest` never keeps one). A new
    bytes object per chunk is a fresh allocation the kernel maps and zeroes
    each time: measured, 10-20% more CPU for hashing a 1 GB base."""
    view = scratch(CHUNK)
    while size := handle.readinto(view):
        yield view[:size]


def chunks_digest(chunks: Iterable[bytes | memoryview]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        digest.update(chunk)
    return size, digest.hexdigest()


class Digest(Protocol):
    """Size and SHA-256 of a blob's bytes, perhaps still being taken:
    `result()` waits for them (and raises what failed while taking them)."""

    def result(self) -> tuple[int, str]: ...


class BackgroundDigest(Beside[tuple[int, str]]):
    """`chunks_digest` on a thread, so that hashing a file overlaps other
    work on the same bytes (BACKUP still writing them, a store's fsync or
    upload of them: all release the GIL, as hashlib does on large chunks).
    `result()` waits for it."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        super().__init__(lambda: chunks_digest(chunks), name="durable_obj-digest")

    def sha256(self) -> str:
        return self.result()[1]


def verify_size(size: int, ref: ObjectRef, what: str) -> None:
    """Raise `Corrupt` unless `size` is what `ref` promises."""
    if size != ref.size:
        raise Corrupt(
            f"{what} {ref.key} is {size} bytes but the head says {ref.size}: it is truncated "
            "or replaced. It was not used; nothing was changed."
        )


def verify(size: int, sha256: str, ref: ObjectRef, what: str) -> None:
    """Raise `Corrupt` unless (size, sha256) is what `ref` promises."""
    verify_size(size, ref, what)
    if sha256 != ref.sha256:
        raise Corrupt(
            f"{what} {ref.key} has SHA-256 {sha256[:16]}... but the head says "
            f"{ref.sha256[:16]}...: it was altered. It was not used; nothing was changed."
        )


def verify_bytes(data: bytes, ref: ObjectRef, what: str) -> None:
    verify(*bytes_digest(data), ref, what)


def verify_file(path: str, ref: ObjectRef, what: str) -> None:
    verify(*file_digest(path), ref, what)
