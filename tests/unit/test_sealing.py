"""The sealed-blob format (wire/sealing.py) and the key providers (wire/keys.py):
every byte authenticated, every cut, reorder and move caught, the wrong key
named, and a zstd frame bounded."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_obj.errors import Corrupt, InvalidArgument, KeyRefused
from durable_obj.wire import compression, sealing
from durable_obj.wire.keys import KeyFile, StaticKey, parse_key
from durable_obj.wire.sealing import HEADER_SIZE, TAG, Codec, DataKey, Unsealer

KEY = DataKey.new()
OID = "agent-1"
NAME = "wal/1-2-abc.jsonl"


def sealed(
    plain: bytes, size: int, *, key: DataKey = KEY, oid: str = OID, name: str = NAME
) -> bytes:
    return b"".join(sealing.seal_chunks(key, oid, name, [plain], size=size))


def opened(blob: bytes, *, oid: str = OID, name: str = NAME, pieces: int = 0) -> bytes:
    unsealer = Unsealer({KEY.id: KEY}, "static:test")
    parts = [blob] if pieces <= 0 else [blob[i : i + pieces] for i in range(0, len(blob), pieces)]
    return b"".join(unsealer.open_chunks(oid, name, parts, what="WAL segment"))


@settings(max_examples=200)
@given(
    plain=st.binary(max_size=300),
    size=st.integers(min_value=1, max_value=64),
    pieces=st.integers(min_value=0, max_value=50),
)
def test_round_trip_at_any_chunk_size_and_read_size(plain: bytes, size: int, pieces: int) -> None:
    blob = sealed(plain, size)
    chunks = max(1, -(-len(plain) // size))
    assert len(blob) == HEADER_SIZE + len(plain) + chunks * TAG
    assert opened(blob, pieces=pieces) == plain


@settings(max_examples=200)
@given(
    pieces=st.lists(st.binary(max_size=40), max_size=12),
    size=st.integers(min_value=1, max_value=64),
    cut=st.integers(min_value=0, max_value=400),
)
def test_lines_sealed_in_place_open_as_their_join(pieces: list[bytes], size: int, cut: int) -> None:
    """A segment sealed from its lines (never joined) is the same format:
    it opens to the lines' join, at the length `seal_chunks` gives, and a
    cut of it is caught."""
    blob = bytes(sealing.seal_pieces(KEY, OID, NAME, pieces, size=size))
    plain = b"".join(pieces)
    assert len(blob) == len(sealed(plain, size))
    assert opened(blob) == plain
    with pytest.raises(Corrupt):
        opened(blob[: min(cut, len(blob) - 1)])


@settings(max_examples=100)
@given(plain=st.binary(min_size=1, max_size=120), data=st.data())
def test_any_flipped_byte_is_corrupt(plain: bytes, data: st.DataObject) -> None:
    blob = bytearray(sealed(plain, 16))
    at = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    blob[at] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(Corrupt):
        opened(bytes(blob))


@settings(max_examples=100)
@given(plain=st.binary(max_size=120), data=st.data())
def test_any_cut_is_corrupt(plain: bytes, data: st.DataObject) -> None:
    blob = sealed(plain, 16)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises(Corrupt):
        opened(blob[:cut])


def test_a_cut_at_a_chunk_boundary_and_an_appended_chunk_are_corrupt() -> None:
    blob = sealed(b"x" * 64, 16)  # four chunks
    for chunks in (1, 2, 3):
        with pytest.raises(Corrupt, match="chunk"):
            opened(blob[: HEADER_SIZE + chunks * (16 + TAG)])
    with pytest.raises(Corrupt):
        opened(blob + blob[HEADER_SIZE : HEADER_SIZE + 16 + TAG])


def test_reordered_chunks_are_corrupt() -> None:
    blob = sealed(b"a" * 16 + b"b" * 16 + b"c" * 8, 16)
    head, body = blob[:HEADER_SIZE], blob[HEADER_SIZE:]
    one, two, rest = body[: 16 + TAG], body[16 + TAG : 2 * (16 + TAG)], body[2 * (16 + TAG) :]
    with pytest.raises(Corrupt, match="chunk 0 does not verify"):
        opened(head + two + one + rest)


def test_a_blob_moved_to_another_object_or_key_is_corrupt() -> None:
    blob = sealed(b"INSERT 1", 16)
    assert opened(blob) == b"INSERT 1"
    with pytest.raises(Corrupt, match="altered, cut or moved"):
        opened(blob, oid="agent-2")
    with pytest.raises(Corrupt, match="altered, cut or moved"):
        opened(blob, name="wal/1-3-abc.jsonl")


def test_an_unknown_data_key_and_a_plain_blob_are_named() -> None:
    other = DataKey.new()
    with pytest.raises(Corrupt, match=f"data key {other.hex_id}"):
        opened(sealed(b"x", 16, key=other))
    with pytest.raises(Corrupt, match="not sealed, yet the object is encrypted"):
        opened(b'{"sql":"SELECT 1"}\n')


def test_codec_refuses_what_its_head_does_not_promise() -> None:
    plain = Codec(OID)
    with pytest.raises(Corrupt, match=r"sealed \(encrypted\), yet the head declares no encryption"):
        plain.decode(NAME, sealed(b"x", 16))
    assert plain.decode(NAME, b'{"sql":"x"}\n') == b'{"sql":"x"}\n'
    zstd = Codec(OID, zstd=True)
    frame = zstd.encode(NAME, b'{"sql":"x"}\n' * 100)
    assert frame[:4] == compression.ZSTD_MAGIC and len(frame) < 100
    assert plain.decode(NAME, frame) == b'{"sql":"x"}\n' * 100
    both = Codec(OID, key=KEY, opener=Unsealer({KEY.id: KEY}, "k"), zstd=True)
    blob = both.encode(NAME, b"SELECT 1;\n" * 1000)
    assert sealing.is_sealed(blob) and len(blob) < 200
    assert both.decode(NAME, blob) == b"SELECT 1;\n" * 1000


def test_a_zstd_frame_is_bounded_and_checked() -> None:
    bomb = Codec(OID, zstd=True).encode(NAME, b"\0" * 4096)
    with pytest.raises(Corrupt, match="decompresses past"):
        compression.decompress(bomb, NAME, limit=1024)
    with pytest.raises(Corrupt, match="cut zstd frame"):
        compression.decompress(bomb[:-3], NAME)
    with pytest.raises(Corrupt, match="not a valid zstd frame"):
        compression.decompress(compression.ZSTD_MAGIC + b"garbage", NAME)


def test_static_keys_wrap_bound_to_their_context_and_name_their_id() -> None:
    kek = StaticKey(os.urandom(32))
    assert kek.key_id.startswith("static:") and len(kek.key_id) == len("static:") + 16
    wrapped = kek.wrap(KEY.secret, {"object": "a"})
    assert kek.unwrap(wrapped, kek.key_id, {"object": "a"}) == KEY.secret
    with pytest.raises(KeyRefused, match="does not unwrap"):
        kek.unwrap(wrapped, kek.key_id, {"object": "b"})
    other = StaticKey(os.urandom(32))
    assert other.key_id != kek.key_id
    with pytest.raises(KeyRefused, match=other.key_id):
        other.unwrap(wrapped, kek.key_id, {"object": "a"})
    assert "static:" in repr(kek)


def test_key_text_forms_and_files(tmp_path: os.PathLike[str]) -> None:
    raw = os.urandom(32)
    import base64

    assert parse_key(raw.hex(), "k") == raw == parse_key(base64.b64encode(raw).decode(), "k")
    with pytest.raises(InvalidArgument, match="not a 256-bit key") as info:
        parse_key("abcd", "the key")
    assert "abcd" not in str(info.value)  # a key's text is never echoed
    path = os.path.join(str(tmp_path), "key")
    with open(path, "w") as handle:
        handle.write(raw.hex() + "\n")
    assert KeyFile(path).key_id == StaticKey(raw).key_id
    with pytest.raises(InvalidArgument, match="cannot read key file"):
        KeyFile(path + ".missing")
