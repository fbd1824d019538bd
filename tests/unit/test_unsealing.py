"""Sealed bases opened into a local file, chunks in parallel (wire/unsealing.py):
from a local file and from a stream, at any chunk and piece size; any cut,
flipped byte, swapped, repeated or added chunk is `Corrupt` and leaves no
file for RESTORE to read; a blob sealed before this module existed opens."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_obj.errors import Corrupt
from durable_obj.wire import sealing, unsealing
from durable_obj.wire.sealing import HEADER_SIZE, TAG, DataKey, Unsealer

KEY = DataKey.new()
OID = "agent-1"
NAME = "checkpoints/1-2-0a1b2c3d.tar"
OPENER = Unsealer({KEY.id: KEY}, "static:test")
WHAT = "base checkpoint"
SLOW = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(autouse=True)
def _many_small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers and one chunk per run: small blobs take the parallel paths."""
    monkeypatch.setattr(unsealing, "WORKERS", 2)
    monkeypatch.setattr(unsealing, "RUN", 1)
    monkeypatch.setattr(unsealing, "IN_FLIGHT", 3)


def sealed(plain: bytes, size: int, *, name: str = NAME, key: DataKey = KEY) -> bytes:
    return b"".join(sealing.seal_chunks(key, OID, name, [plain], size=size))


def from_file(tmp: Path, blob: bytes, *, name: str = NAME) -> tuple[bytes, tuple[int, str]]:
    src, dst = tmp / "sealed", tmp / "plain"
    src.write_bytes(blob)
    try:
        digest = unsealing.open_file(OPENER, OID, name, str(src), str(dst), what=WHAT)
    except Corrupt:
        assert not dst.exists(), "a refused blob left a file for RESTORE to read"
        raise
    return dst.read_bytes(), digest.result()


def from_stream(
    tmp: Path, blob: bytes, piece: int, *, false_start: bytes = b""
) -> tuple[bytes, tuple[int, str]]:
    dst = tmp / "streamed"
    sink = unsealing.StreamOpener(OPENER, OID, NAME, str(dst), what=WHAT)
    if false_start:  # a first attempt that broke off: restart() forgets it
        sink.restart()
        sink.write(false_start)
    sink.restart()
    for at in range(0, len(blob), max(1, piece)):
        sink.write(blob[at : at + max(1, piece)])
    try:
        digest = sink.finish()
    except Corrupt:
        assert not dst.exists(), "a refused blob left a file for RESTORE to read"
        raise
    return dst.read_bytes(), digest.result()


def both(tmp: Path, blob: bytes, piece: int) -> Iterator[tuple[bytes, tuple[int, str]]]:
    yield from_file(tmp, blob)
    yield from_stream(tmp, blob, piece)


@SLOW
@given(
    plain=st.binary(max_size=600),
    size=st.integers(min_value=1, max_value=64),
    piece=st.integers(min_value=1, max_value=200),
    false_start=st.binary(max_size=100),
)
def test_both_ways_open_any_blob_and_hash_what_was_stored(
    tmp_path: Path, plain: bytes, size: int, piece: int, false_start: bytes
) -> None:
    blob = sealed(plain, size)
    expected = (len(blob), hashlib.sha256(blob).hexdigest())
    assert from_file(tmp_path, blob) == (plain, expected)
    assert from_stream(tmp_path, blob, piece, false_start=false_start) == (plain, expected)


def _damaged(blob: bytes, size: int, data: st.DataObject) -> bytes:
    """`blob` cut, with a byte flipped, two chunks swapped, a chunk repeated,
    dropped or added: every way but none leaves it as it was."""
    step = size + TAG
    chunks = [blob[at : at + step] for at in range(HEADER_SIZE, len(blob), step)]
    head = blob[:HEADER_SIZE]
    how = data.draw(st.sampled_from(["cut", "flip", "swap", "repeat", "drop", "append"]))
    if how == "cut":
        return blob[: data.draw(st.integers(min_value=0, max_value=len(blob) - 1))]
    if how == "flip":
        out = bytearray(blob)
        at = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
        out[at] ^= data.draw(st.integers(min_value=1, max_value=255))
        return bytes(out)
    if how == "append":
        return blob + data.draw(st.binary(min_size=1, max_size=2 * step))
    if len(chunks) < 2:
        return blob[:-1]
    i = data.draw(st.integers(min_value=0, max_value=len(chunks) - 2))
    if how == "swap":
        chunks[i], chunks[i + 1] = chunks[i + 1], chunks[i]
        if chunks[i] == chunks[i + 1]:
            return blob[:-1]  # identical plaintext and tag cannot be: never drawn
    elif how == "repeat":
        chunks.insert(i, chunks[i])
    else:
        del chunks[i]
    return head + b"".join(chunks)


@SLOW
@given(
    plain=st.binary(min_size=1, max_size=400),
    size=st.integers(min_value=1, max_value=48),
    piece=st.integers(min_value=1, max_value=150),
    data=st.data(),
)
def test_a_damaged_blob_is_corrupt_both_ways_and_leaves_no_file(
    tmp_path: Path, plain: bytes, size: int, piece: int, data: st.DataObject
) -> None:
    blob = sealed(plain, size)
    bad = _damaged(blob, size, data)
    assert bad != blob
    with pytest.raises(Corrupt, match=NAME):
        from_file(tmp_path, bad)
    with pytest.raises(Corrupt, match=NAME):
        from_stream(tmp_path, bad, piece)


def test_the_errors_name_the_chunk_the_blob_and_the_key_never_a_secret(tmp_path: Path) -> None:
    blob = sealed(b"x" * 100, 16)  # seven chunks
    step = 16 + TAG
    swapped = blob[:HEADER_SIZE] + blob[HEADER_SIZE + step : HEADER_SIZE + 2 * step]
    swapped += blob[HEADER_SIZE : HEADER_SIZE + step] + blob[HEADER_SIZE + 2 * step :]
    for way in (lambda b: from_file(tmp_path, b), lambda b: from_stream(tmp_path, b, 7)):
        with pytest.raises(Corrupt, match="chunk 0 does not verify") as caught:
            way(swapped)
        text = str(caught.value)
        assert KEY.hex_id in text and "static:test" in text and NAME in text
        assert KEY.secret.hex() not in text and repr(KEY.secret) not in text
        with pytest.raises(Corrupt, match="chunk 5 does not verify"):
            way(blob[: HEADER_SIZE + 6 * step])  # cut at a chunk boundary: 5 was not the last
        with pytest.raises(Corrupt, match="not sealed, yet the object is encrypted"):
            way(b"ustar" + b"\0" * 600)
        with pytest.raises(Corrupt, match="does not hold"):
            way(sealed(b"x", 16, key=DataKey.new()))
        with pytest.raises(Corrupt, match="chunk 0 does not verify"):
            way(sealed(b"x" * 40, 16, name="checkpoints/1-3-ffffffff.tar"))  # moved


def test_a_blob_too_short_for_its_header_or_its_first_tag(tmp_path: Path) -> None:
    blob = sealed(b"", 16)
    assert len(blob) == HEADER_SIZE + TAG
    assert from_file(tmp_path, blob)[0] == b""
    assert from_stream(tmp_path, blob, 5)[0] == b""
    for cut in (0, 3, HEADER_SIZE, HEADER_SIZE + TAG - 1):
        with pytest.raises(Corrupt):
            from_file(tmp_path, blob[:cut])
        with pytest.raises(Corrupt):
            from_stream(tmp_path, blob[:cut], 4)


#: Sealed by durable_obj before this module (data key id 00..07, secret
#: 32..63, chunks of 64 bytes): a base already stored opens as it did.
LEGACY_KEY = DataKey(bytes(range(8)), bytes(range(32, 64)))
LEGACY_PLAIN = b"a base sealed by durable_obj before bases were opened in parallel\n" * 3
LEGACY = base64.b64decode(
    "AERPUwEAAAECAwQFBgfWt/0VT7gcmjvxqY7mxWbp6HQhg8sDewAAAEC3t6YySFEFGvaqdK3X7Ji0lMOZZzxJrx2vtgbg"
    "DlGF4tuQvGNQA/gx7qXwqSRWwBPpFiJwnfvM4vJ/6OYTjZOG2Wfr7DYDlxmZKzruNxdYVNMXqo2BzI1JK0Y36Z+7TnGe"
    "wChiXPQYqVnLnuDaELGzq6Gs+eewuJHPtr1TWSyVgjd29IGj/+Al38yrdnCTx8IA4E4ZdoHUWFhM0tF/V/Jp2ZdSkaVA"
    "HLkv7HPvJ6aPjqM5w6mcrW5v3ZAwIN95r5ss5Ni0Uo1HWqLh20uwsQuSdI13j+lp6VJWE/5qml0aCwxXwXLgRum7iFJB"
    "a1VWAD7im0L3MzZmkZi8eI13fEEBH7iJOb/E"
)


def test_a_base_sealed_by_the_earlier_code_opens_every_way(tmp_path: Path) -> None:
    opener = Unsealer({LEGACY_KEY.id: LEGACY_KEY}, "static:legacy")
    src, dst = tmp_path / "legacy", tmp_path / "plain"
    src.write_bytes(LEGACY)
    digest = unsealing.open_file(opener, OID, NAME, str(src), str(dst), what=WHAT)
    assert dst.read_bytes() == LEGACY_PLAIN
    assert digest.result() == (len(LEGACY), hashlib.sha256(LEGACY).hexdigest())
    sink = unsealing.StreamOpener(opener, OID, NAME, str(tmp_path / "s"), what=WHAT)
    sink.restart()
    for at in range(0, len(LEGACY), 10):
        sink.write(LEGACY[at : at + 10])
    sink.finish()
    assert (tmp_path / "s").read_bytes() == LEGACY_PLAIN
    assert b"".join(opener.open_chunks(OID, NAME, [LEGACY], what=WHAT)) == LEGACY_PLAIN
    flipped = bytearray(LEGACY)
    flipped[-1] ^= 1
    src.write_bytes(bytes(flipped))
    with pytest.raises(Corrupt, match="chunk 3 does not verify"):
        unsealing.open_file(opener, OID, NAME, str(src), str(dst), what=WHAT)
    assert not dst.exists()


def test_a_stream_closed_before_its_end_keeps_no_file_open(tmp_path: Path) -> None:
    blob = sealed(os.urandom(300), 16)
    sink = unsealing.StreamOpener(OPENER, OID, NAME, str(tmp_path / "p"), what=WHAT)
    sink.restart()
    sink.write(blob[:200])
    sink.close()
    unsealing.remove(str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_hashing_in_batches_holds_a_bounded_backlog_and_hashes_everything() -> None:
    data = os.urandom(20 * 1024 * 1024 + 3)
    hashing = unsealing.Hashing()
    for at in range(0, len(data), 65536):
        hashing.feed(data[at : at + 65536])
        assert len(hashing._queued) <= unsealing.Hashing.HELD
    assert hashing.result() == (len(data), hashlib.sha256(data).hexdigest())


@pytest.fixture
def submits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many runs of chunks are handed to the pool (2 workers)."""
    count = [0]
    real = ThreadPoolExecutor.submit

    def counted(self: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", counted)
    monkeypatch.setattr(unsealing, "WORKERS", 2)
    return count


def test_a_forged_tiny_chunk_size_queues_no_work(tmp_path: Path, submits: list[int]) -> None:
    """A header naming 1-byte chunks over a sparse hole (what write access to
    the bucket allows): chunk 0 is opened alone first, so the header's chunk
    size is authenticated before the count of runs it implies is queued."""
    src = tmp_path / "src"
    with open(src, "wb") as handle:
        handle.write(
            sealing._HEADER.pack(sealing.MAGIC, 1, 0, KEY.id, os.urandom(16), os.urandom(7), 1)
        )
        handle.truncate(HEADER_SIZE + 17 * 100_000)
    with pytest.raises(Corrupt, match="chunk 0"):
        unsealing.open_file(OPENER, "o", NAME, str(src), str(tmp_path / "dst"), what="base")
    assert submits[0] == 0
    assert not (tmp_path / "dst").exists()


def test_a_genuine_blob_grown_by_a_hole_keeps_few_runs_in_flight(
    tmp_path: Path, submits: list[int]
) -> None:
    """The genuine blob with a sparse hole appended: at most 2 x WORKERS runs
    are in flight, and the first failure stops the rest."""
    src = tmp_path / "src"
    src.write_bytes(sealed(os.urandom(300), 100))
    os.truncate(src, os.path.getsize(src) + 116 * 100_000)
    with pytest.raises(Corrupt):
        unsealing.open_file(OPENER, "o", NAME, str(src), str(tmp_path / "dst"), what="base")
    assert submits[0] <= 2 * 2 + 1


def test_a_forged_big_chunk_size_holds_two_buffers_until_chunk_0_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream whose header names big chunks: before chunk 0's tag holds,
    at most two chunk buffers are made (a forged size costs two chunks of
    memory, not IN_FLIGHT)."""
    made: set[int] = set()
    real = unsealing.StreamOpener._buffer

    def watched(self: unsealing.StreamOpener, step: int) -> bytearray:
        buf = real(self, step)
        made.add(id(buf))
        return buf

    monkeypatch.setattr(unsealing.StreamOpener, "_buffer", watched)
    real_open = sealing.SealedBlob.open

    def slow(self: sealing.SealedBlob, *args: Any) -> Any:
        time.sleep(0.2)  # workers behind the download, as on a loaded machine
        return real_open(self, *args)

    monkeypatch.setattr(sealing.SealedBlob, "open", slow)
    size = 1 << 20
    sink = unsealing.StreamOpener(OPENER, "o", NAME, str(tmp_path / "dst"), what="base")
    sink.restart()
    sink.write(
        sealing._HEADER.pack(sealing.MAGIC, 1, 0, KEY.id, os.urandom(16), os.urandom(7), size)
    )
    junk = os.urandom(size)
    for _ in range(12):
        sink.write(junk)
    with pytest.raises(Corrupt):
        sink.finish()
    assert len(made) <= 2
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("way", ["file", "stream"])
def test_opening_a_sealed_base_takes_no_chunk_of_heap(tmp_path: Path, way: str) -> None:
    """Chunks are read and opened into mapped buffers, reused (`scratch`):
    a chunk's worth of heap, freed, would raise glibc's mmap threshold and
    leave every thread's arena holding freed chunks (an idle object's RSS)."""
    import tracemalloc

    size = sealing.SEAL_CHUNK
    plain = os.urandom(3 * size + 5)
    blob = sealed(plain, size)
    src, dst = tmp_path / "sealed", tmp_path / "plain"
    src.write_bytes(blob)
    view = memoryview(blob)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        if way == "file":
            digest = unsealing.open_file(OPENER, OID, NAME, str(src), str(dst), what=WHAT)
        else:
            sink = unsealing.StreamOpener(OPENER, OID, NAME, str(dst), what=WHAT)
            sink.restart()
            for at in range(0, len(blob), 256 * 1024):
                sink.write(view[at : at + 256 * 1024])  # type: ignore[arg-type]  # as a body's pieces
            digest = sink.finish()
        got = digest.result()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert dst.read_bytes() == plain
    assert got == (len(blob), hashlib.sha256(blob).hexdigest())
    assert peak < 256 * 1024, f"{peak} bytes from the heap to open {len(plain)}"
