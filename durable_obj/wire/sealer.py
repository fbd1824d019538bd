"""A base sealed as BACKUP writes it, its chunks encrypted on every core.

The plaintext is read in chunk-sized runs straight from the growing archive
(`read(offset, n)`: n bytes, fewer only at its end), so nothing is copied
to regroup it; a chunk is known to be the last when the read after it comes
back empty. Chunks are encrypted on a pool (AES-GCM releases the GIL) and
written in order, each flushed at once (the store may be uploading the
sealed file while it grows); the SHA-256 of what is written is taken on a
thread of its own as it is written, so nobody reads the sealed file back to
hash it. The bytes are exactly those of `sealing.seal_chunks`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

from durable_obj.wire.sealing import SEAL_CHUNK, DataKey, _new_blob, _nonce
from durable_obj.wire.unsealing import IN_FLIGHT, WORKERS, Hashing


def seal_read(
    key: DataKey,
    oid: str,
    name: str,
    read: Callable[[int, int], bytes],
    out: BinaryIO,
    *,
    size: int = SEAL_CHUNK,
) -> Hashing:
    """Write the sealed blob of the plaintext `read` gives to `out`; the
    size and SHA-256 of what was written (pending: `result()` waits)."""
    header, prefix, aead, aad = _new_blob(key, oid, name, 0, size)
    hashing = Hashing()
    done = False
    try:
        out.write(header)
        out.flush()
        hashing.feed(header)
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="durable_obj-seal") as pool:
            sealed: deque[Future[bytes]] = deque()

            def drain(keep: int) -> None:
                # what is sealed already is written now, not once more than
                # `keep` wait: it is hashed while BACKUP still writes, not after
                while len(sealed) > keep or (sealed and sealed[0].done()):
                    piece = sealed.popleft().result()
                    out.write(piece)
                    out.flush()
                    hashing.feed(piece)

            index, offset = 0, 0
            chunk = read(0, size)
            while True:
                after = read(offset + len(chunk), size) if len(chunk) == size else b""
                last = not after
                sealed.append(pool.submit(aead.encrypt, _nonce(prefix, index, last), chunk, aad))
                drain(0 if last else IN_FLIGHT)
                if last:
                    break
                index, offset, chunk = index + 1, offset + len(chunk), after
        done = True
    finally:
        if not done:
            hashing.result()  # its thread ends; what it hashed is dropped
    return hashing
