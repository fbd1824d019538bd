"""Size and SHA-256: what a manifest says about an immutable key.

Both are checked before any byte is used. They catch different failures: a
truncated upload has the right prefix, a replaced object has the right length.
Files are hashed in a streaming pass, so a checkpoint never sits in memory.
"""

from __future__ import annotations

import hashlib

from durable_obj.errors import Corrupt
from durable_obj.head import ObjectRef

_CHUNK = 4 * 1024 * 1024


def bytes_digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()


def file_digest(path: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            size += len(chunk)
            digest.update(chunk)
    return size, digest.hexdigest()


def verify(size: int, sha256: str, ref: ObjectRef, what: str) -> None:
    """Raise `Corrupt` unless (size, sha256) is what `ref` promises."""
    if size != ref.size:
        raise Corrupt(
            f"{what} {ref.key} is {size} bytes but the head says {ref.size}: it is truncated "
            "or replaced. It was not used; nothing was changed."
        )
    if sha256 != ref.sha256:
        raise Corrupt(
            f"{what} {ref.key} has SHA-256 {sha256[:16]}... but the head says "
            f"{ref.sha256[:16]}...: it was altered. It was not used; nothing was changed."
        )


def verify_bytes(data: bytes, ref: ObjectRef, what: str) -> None:
    verify(*bytes_digest(data), ref, what)


def verify_file(path: str, ref: ObjectRef, what: str) -> None:
    verify(*file_digest(path), ref, what)
