"""zstd frames: what a compressed WAL segment is, sealed or not.

A compressed segment of an object that is not encrypted is a bare zstd frame
(its magic `28 b5 2f fd` cannot begin a JSONL line); in an encrypted object
the frame is the sealed blob's plaintext (`sealing.py`, flag bit 0).
Decompression is bounded by the V1 segment limit, so a crafted frame cannot
exhaust memory. zstandard is imported by the first object that compresses
or reads a frame.
"""

from __future__ import annotations

from typing import Any, Final

from durable_obj.errors import Corrupt, MissingDependency
from durable_obj.wire.protocol import MAX_WAL_SEGMENT_BYTES

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
#: zstd level for WAL segments: SQL text compresses several times over at 3.
ZSTD_LEVEL: Final = 3
#: Input a streaming frame holds before it compresses a block: what is left
#: for the flush to compress when it finishes the frame.
FRAME_BLOCK: Final = 8 * 1024


def compress(data: bytes) -> bytes:
    out: bytes = _zstd().ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    return out


class Frame:
    """A zstd frame of a segment's lines, compressed as they are buffered,
    so that a flush only finishes it (at most `FRAME_BLOCK` bytes are left to
    compress) instead of compressing the whole segment on its path. `start`:
    the buffer position of its first line; `lines`: how many it holds."""

    def __init__(self, start: int) -> None:
        self.start, self.lines = start, 0
        self._obj = _zstd().ZstdCompressor(level=ZSTD_LEVEL).compressobj()
        self._out: list[bytes] = []
        self._held = 0

    def feed(self, line: bytes) -> None:
        self._out.append(self._obj.compress(line))
        self.lines += 1
        self._held += len(line)
        if self._held >= FRAME_BLOCK:
            self._out.append(self._obj.flush(_zstd().COMPRESSOBJ_FLUSH_BLOCK))
            self._held = 0

    def finish(self) -> bytes:
        self._out.append(self._obj.flush())
        return b"".join(self._out)


def decompress(data: bytes, name: str, limit: int = MAX_WAL_SEGMENT_BYTES) -> bytes:
    """A zstd frame's content, at most `limit` bytes; `Corrupt` otherwise."""
    zstd = _zstd()
    try:
        reader = zstd.ZstdDecompressor().decompressobj()
        out = reader.decompress(data)
    except zstd.ZstdError as exc:
        raise Corrupt(f"WAL segment {name} is not a valid zstd frame ({exc}); not used") from None
    if len(out) > limit:
        raise Corrupt(f"WAL segment {name} decompresses past the {limit}-byte segment limit")
    if not reader.eof:
        raise Corrupt(f"WAL segment {name} is a cut zstd frame; not used")
    return bytes(out)


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a dependency of the package
        raise MissingDependency(
            "this object's WAL is zstd-compressed; install zstandard (pip install zstandard)"
        ) from None
    return zstandard
