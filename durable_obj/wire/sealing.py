"""Sealed and compressed blobs: what an encrypted or compressed object stores.

A sealed blob is a streaming AEAD in the manner of STREAM (Hoang, Reyhanitabar,
Rogaway, Vizár) as Tink's AES-GCM-HKDF streaming AEAD does it: a header,
then the plaintext cut into chunks, each sealed with AES-256-GCM under a
key derived for this blob alone::

    header  = MAGIC "\\x00DOS" | version 1 | flags | data key id (8) | salt (16)
              | nonce prefix (7) | chunk size (4, big-endian)
    subkey  = HKDF-SHA256(data key, salt, info="durable_obj seal v1")
    chunk i = AES-256-GCM(subkey, nonce = prefix | i (4, big-endian) | last (1),
                          aad = header | context)

The context is the blob's place: the object id and the key relative to it
(`wal/<gen>-<seq>-<u>.jsonl` names its seq), so a blob copied to another
object or another position fails to open. The counter in the nonce catches a
reordered chunk, the last-chunk flag a cut one, the header in the associated
data an edited flag, key id or chunk size. Nothing here writes cipher code:
the cipher is pyca `cryptography`'s.

Flags: bit 0, the plaintext is a zstd frame (a compressed WAL segment).

A chunk opens on its own given its index and whether it is the last
(`SealedBlob`), so a base is sealed (`sealer.py`) and opened
(`unsealing.py`) on every core, in this same format.

A compressed segment of an object that is not encrypted is a bare zstd frame
(`compression.py`).

`Codec` is one object's way of storing: plain (V1), compressed, sealed, or
both. The head says which (`durable_obj.wire.keyring`); a blob says how it
was written, and a codec refuses a blob that is not what its head promises
(a plain segment in an encrypted object is `Corrupt`, never read as plain).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, BinaryIO, Final

from durable_obj.errors import Corrupt
from durable_obj.wire.compression import ZSTD_MAGIC, compress, decompress

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC: Final = b"\x00DOS"
VERSION: Final = 1
FLAG_ZSTD: Final = 1
#: Plaintext bytes per sealed chunk: large enough that the 16-byte tags cost
#: nothing, small enough that a base streams through a little memory.
SEAL_CHUNK: Final = 1024 * 1024
#: Plaintext bytes per sealed chunk of a WAL segment: small enough that the
#: scratch buffer a segment is gathered in is reused from the heap.
WAL_SEAL_CHUNK: Final = 64 * 1024
_HEADER: Final = struct.Struct(">4sBB8s16s7sI")
HEADER_SIZE: Final = _HEADER.size
TAG: Final = 16
_INFO: Final = b"durable_obj seal v1"


class DataKey:
    """A data key and its id (8 random bytes, named in every blob it seals)."""

    __slots__ = ("id", "secret")

    def __init__(self, key_id: bytes, secret: bytes) -> None:
        assert len(key_id) == 8 and len(secret) == 32
        self.id = key_id
        self.secret = secret

    @classmethod
    def new(cls) -> DataKey:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return cls(os.urandom(8), AESGCM.generate_key(bit_length=256))

    @property
    def hex_id(self) -> str:
        return self.id.hex()

    def __repr__(self) -> str:  # never the secret
        return f"DataKey({self.hex_id})"


def _context(oid: str, name: str) -> bytes:
    return b"durable_obj\x00" + oid.encode("utf-8") + b"\x00" + name.encode("utf-8")


def _subkey(secret: bytes, salt: bytes) -> AESGCM:
    # cryptography is imported by the first object that seals or opens a
    # blob: a plain object's open never loads it.
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_INFO).derive(secret)
    return AESGCM(derived)


def _nonce(prefix: bytes, index: int, last: bool) -> bytes:
    return prefix + struct.pack(">IB", index, 1 if last else 0)


def _new_blob(
    key: DataKey, oid: str, name: str, flags: int, size: int
) -> tuple[bytes, bytes, AESGCM, bytes]:
    """A new sealed blob's header, nonce prefix, cipher (its own subkey, from
    a random salt) and associated data."""
    salt, prefix = os.urandom(16), os.urandom(7)
    header = _HEADER.pack(MAGIC, VERSION, flags, key.id, salt, prefix, size)
    return header, prefix, _subkey(key.secret, salt), header + _context(oid, name)


def seal_chunks(
    key: DataKey,
    oid: str,
    name: str,
    chunks: Iterable[bytes],
    *,
    flags: int = 0,
    size: int = SEAL_CHUNK,
) -> Iterator[bytes]:
    """The sealed blob of the plaintext `chunks` (any sizes), piece by piece:
    the header first, then each sealed chunk of `size` plaintext bytes (the
    header records it; tests use small ones)."""
    header, prefix, aead, aad = _new_blob(key, oid, name, flags, size)
    yield header
    index, pending = 0, _Window()
    for piece in chunks:
        pending.feed(piece)
        while len(pending) > size:  # keep one back: the last chunk is marked
            yield aead.encrypt(_nonce(prefix, index, False), pending.take(size), aad)
            index += 1
    yield aead.encrypt(_nonce(prefix, index, True), pending.take(len(pending)), aad)


def seal_pieces(
    key: DataKey,
    oid: str,
    name: str,
    pieces: Sequence[bytes],
    *,
    flags: int = 0,
    size: int = WAL_SEAL_CHUNK,
) -> bytes:
    """`seal_chunks` of in-memory `pieces` (a segment's lines), sealed into
    one buffer without the plaintext ever being joined whole: each chunk is
    gathered on its own (small: reused from the heap) and encrypted into
    place. At WAL sizes a second fresh buffer of the segment's size costs
    more in page faults than the cipher does."""
    total = sum(len(piece) for piece in pieces)
    count = max(1, -(-total // size))
    header, prefix, aead, aad = _new_blob(key, oid, name, flags, size)
    out = bytearray(HEADER_SIZE + total + count * TAG)
    out[:HEADER_SIZE] = header
    view, at = memoryview(out), HEADER_SIZE
    for index, chunk in enumerate(_gathered(pieces, size, total)):
        end = at + len(chunk) + TAG
        nonce = _nonce(prefix, index, index == count - 1)
        aead.encrypt_into(nonce, chunk, aad, view[at:end])
        at = end
    assert at == len(out)
    return out  # type: ignore[return-value]  # a bytearray: every store takes one


def _gathered(pieces: Iterable[bytes], size: int, total: int) -> Iterator[bytes]:
    """`pieces` regrouped into chunks of `size` bytes (the last shorter;
    one empty chunk when `total` is 0), each joined by itself."""
    group: list[bytes | memoryview] = []
    filled = 0
    for piece in pieces:
        rest = memoryview(piece)
        while len(rest) >= size - filled:
            take = size - filled
            group.append(rest[:take])
            yield b"".join(group)
            group, filled, rest = [], 0, rest[take:]
        if rest:
            group.append(rest)
            filled += len(rest)
    if filled or not total:
        yield b"".join(group)


class _Window:
    """Bytes arriving in pieces of any size, taken from the front in others,
    as zero-copy views where they can be: a piece is copied only to join
    what was left of the one before (slicing a growing bytes object would
    copy the rest at every take, quadratic in a large blob)."""

    def __init__(self) -> None:
        self._data = memoryview(b"")
        self._at = 0

    def feed(self, piece: bytes) -> None:
        rest = self._data[self._at :]
        self._data = memoryview(bytes(rest) + piece) if len(rest) else memoryview(piece)
        self._at = 0

    def __len__(self) -> int:
        return len(self._data) - self._at

    def take(self, n: int) -> memoryview:
        out = self._data[self._at : self._at + n]
        self._at += len(out)
        return out


def is_sealed(data: bytes) -> bool:
    return data[:4] == MAGIC


class SealedBlob:
    """One sealed blob's cipher state, from its authenticated header: each
    chunk is opened on its own (in any order, on any thread: the cipher
    releases the GIL), given its index and whether it is the last."""

    __slots__ = ("_aad", "_aead", "_prefix", "_where", "size")

    def __init__(self, aead: AESGCM, aad: bytes, prefix: bytes, size: int, where: str) -> None:
        self._aead, self._aad, self._prefix, self._where = aead, aad, prefix, where
        #: Plaintext bytes per chunk (the last may hold fewer).
        self.size = size

    @property
    def step(self) -> int:
        """Stored bytes per chunk: its plaintext and its tag."""
        return self.size + TAG

    def open(self, index: int, last: bool, sealed: bytes | memoryview | bytearray) -> bytes:
        """Chunk `index`'s plaintext once its tag holds; else `Corrupt`."""
        if len(sealed) < TAG:
            raise self.bad("it ends inside a chunk")
        try:
            plain: bytes = self._aead.decrypt(_nonce(self._prefix, index, last), sealed, self._aad)
        except Exception as exc:
            raise self._refused(exc, index) from None
        return plain

    def open_into(
        self, index: int, last: bool, sealed: bytes | memoryview | bytearray, out: memoryview
    ) -> memoryview:
        """`open`, its plaintext written into `out` (at least `size` bytes):
        the part of `out` that holds it. Until the tag holds, what `out`
        holds is no one's to use (the cipher may have written into it)."""
        if len(sealed) < TAG:
            raise self.bad("it ends inside a chunk")
        if len(sealed) - TAG > len(out):
            raise self.bad(f"chunk {index} is longer than a chunk")
        plain = out[: len(sealed) - TAG]
        try:
            self._aead.decrypt_into(_nonce(self._prefix, index, last), sealed, self._aad, plain)
        except Exception as exc:
            raise self._refused(exc, index) from None
        return plain

    def _refused(self, exc: Exception, index: int) -> Exception:
        """A chunk's failure to open as raised: `Corrupt` if its tag did not
        hold, else the cipher's own error."""
        from cryptography.exceptions import InvalidTag  # loaded with the cipher

        if isinstance(exc, InvalidTag):
            return self.bad(f"chunk {index} does not verify")
        return exc

    def bad(self, why: str) -> Corrupt:
        return Corrupt(f"{self._where}: {why}; it was altered, cut or moved, and not used")


class Unsealer:
    """Opens sealed blobs whose header names one of `keys` (by id)."""

    def __init__(self, keys: dict[bytes, DataKey], key_ref: str) -> None:
        self._keys = keys
        #: How errors name the key: the provider's key id (never a secret).
        self.key_ref = key_ref

    def begin(self, oid: str, name: str, header: bytes, *, what: str) -> SealedBlob:
        """The sealed blob whose first `HEADER_SIZE` bytes are `header`
        (fewer: a blob too short to be sealed), ready to open its chunks;
        `Corrupt` naming `name` and the key for a header that is not ours,
        a version or chunk size this library does not read, or a data key
        the head does not hold."""
        if len(header) < HEADER_SIZE or header[:4] != MAGIC:
            raise Corrupt(
                f"{what} {name} is not sealed, yet the object is encrypted (key "
                f"{self.key_ref}); not used"
            )
        _, version, _flags, key_id, salt, prefix, size = _HEADER.unpack(header[:HEADER_SIZE])
        if version != VERSION or size <= 0 or size > 64 * SEAL_CHUNK:
            raise Corrupt(
                f"{what} {name} has a sealed header this library cannot read (version "
                f"{version}, chunk size {size}; key {self.key_ref}); altered, or newer; not used"
            )
        key = self._keys.get(key_id)
        if key is None:
            raise Corrupt(
                f"{what} {name} is sealed under data key {key_id.hex()}, which the head's "
                f"key list (under {self.key_ref}) does not hold; not used"
            )
        aad = bytes(header[:HEADER_SIZE]) + _context(oid, name)
        where = f"{what} {name} fails authentication under data key {key_id.hex()} " + (
            f"(key {self.key_ref})"
        )
        return SealedBlob(_subkey(key.secret, salt), aad, prefix, size, where)

    def open_chunks(
        self, oid: str, name: str, pieces: Iterable[bytes], *, what: str
    ) -> Iterator[bytes]:
        """The plaintext of a sealed blob read as `pieces` (any sizes), in
        order; `Corrupt` naming `name` and the key at the first bad byte,
        a missing end, or a header that is not ours. The last chunk is
        yielded only after its tag holds, and nothing follows it."""
        buf = _Window()
        it = iter(pieces)
        for piece in it:
            buf.feed(piece)
            if len(buf) >= HEADER_SIZE:
                break
        blob = self.begin(oid, name, bytes(buf.take(HEADER_SIZE)), what=what)
        index, step = 0, blob.step
        exhausted = False
        while True:
            while len(buf) <= step and not exhausted:
                more = next(it, None)
                if more is None:
                    exhausted = True
                else:
                    buf.feed(more)
            last = exhausted and len(buf) <= step
            yield blob.open(index, last, buf.take(len(buf) if last else step))
            if last:
                return
            index += 1

    def flags(self, data: bytes) -> int:
        return int(_HEADER.unpack(data[:HEADER_SIZE])[2]) if len(data) >= HEADER_SIZE else 0


# -- one object's way of storing -------------------------------------------------------
class Codec:
    """How one object stores its segments, bases and history files: `key`
    seals what is written (None: not encrypted), `opener` opens what is
    read, `zstd` compresses new segments."""

    def __init__(
        self,
        oid: str,
        *,
        key: DataKey | None = None,
        opener: Unsealer | None = None,
        zstd: bool = False,
    ) -> None:
        self.oid = oid
        self.key = key
        self.opener = opener
        self.zstd = zstd

    @property
    def encrypted(self) -> bool:
        return self.opener is not None

    # segments and small files, in memory
    def encode(self, name: str, data: bytes, *, compressible: bool = True) -> bytes:
        zstd = self.zstd and compressible
        body = compress(data) if zstd else data
        if self.key is None:
            return body
        return seal_pieces(self.key, self.oid, name, [body], flags=FLAG_ZSTD if zstd else 0)

    def encode_lines(self, name: str, lines: Sequence[bytes], frame: bytes | None = None) -> bytes:
        """`encode` of a WAL segment given as its lines, which a sealed
        segment never joins; `frame`: the lines already compressed (a
        `Frame`), used if the object compresses."""
        if not self.zstd:
            return seal_pieces(self.key, self.oid, name, lines) if self.key else b"".join(lines)
        body = frame if frame is not None else compress(b"".join(lines))
        if self.key is None:
            return body
        return seal_pieces(self.key, self.oid, name, [body], flags=FLAG_ZSTD)

    def decode(self, name: str, stored: bytes, *, what: str = "WAL segment") -> bytes:
        if self.opener is not None:
            body = b"".join(self.opener.open_chunks(self.oid, name, [stored], what=what))
            if self.opener.flags(stored) & FLAG_ZSTD:
                return decompress(body, name)
            return body
        if is_sealed(stored):
            raise Corrupt(
                f"{what} {name} is sealed (encrypted), yet the head declares no encryption; "
                "not used"
            )
        if stored[:4] == ZSTD_MAGIC:
            return decompress(stored, name)
        return stored

    # bases, streamed
    def seal_file(self, name: str, chunks: Iterable[bytes], out: BinaryIO) -> None:
        """Write the sealed blob of `chunks` to `out`, flushing each piece
        (a reader may be uploading the file while it grows)."""
        assert self.key is not None
        for piece in seal_chunks(self.key, self.oid, name, chunks):
            out.write(piece)
            out.flush()

    def open_file(
        self, name: str, src: str, dst: str, *, what: str = "base checkpoint"
    ) -> tuple[int, str]:
        """Write the plaintext of the sealed file `src` to `dst`, in one pass
        that also hashes what it reads (on a thread of its own, beside the
        decryption: both release the GIL): the size and SHA-256 of `src`."""
        assert self.opener is not None
        digest, size = hashlib.sha256(), 0
        hashing = ThreadPoolExecutor(1, thread_name_prefix="durable_obj-digest")

        def pieces(handle: BinaryIO) -> Iterator[bytes]:
            nonlocal size
            # the header alone, then whole sealed chunks: no piece is split
            first = handle.read(HEADER_SIZE)
            step = SEAL_CHUNK + TAG
            if len(first) == HEADER_SIZE and first[:4] == MAGIC:
                step = _HEADER.unpack(first)[6] + TAG
            for piece in itertools.chain([first], iter(lambda: handle.read(4 * step), b"")):
                hashing.submit(digest.update, piece)  # in order: one worker
                size += len(piece)
                yield piece

        try:
            with open(src, "rb") as handle, open(dst, "wb") as out:
                for plain in self.opener.open_chunks(self.oid, name, pieces(handle), what=what):
                    out.write(plain)
        finally:
            hashing.shutdown(wait=True)
        return size, digest.hexdigest()
