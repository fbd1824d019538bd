"""A base sealed in parallel as it is read (wire/sealer.py) is the format
`seal_chunks` writes: it opens to its plaintext every way, its digest is
that of the bytes written, and a failed read fails the sealing."""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_obj.wire import sealer, sealing, unsealing
from durable_obj.wire.sealing import HEADER_SIZE, DataKey, Unsealer

KEY = DataKey.new()
OID = "agent-1"
NAME = "checkpoints/1-2-0a1b2c3d.tar"


@pytest.fixture(autouse=True)
def _few_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sealer, "WORKERS", 2)
    monkeypatch.setattr(sealer, "IN_FLIGHT", 2)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plain=st.binary(max_size=700), size=st.integers(min_value=1, max_value=64))
def test_sealed_as_read_opens_every_way(tmp_path: Path, plain: bytes, size: int) -> None:
    out = io.BytesIO()
    digest = sealer.seal_read(KEY, OID, NAME, lambda at, n: plain[at : at + n], out, size=size)
    blob = out.getvalue()
    assert digest.result() == (len(blob), hashlib.sha256(blob).hexdigest())
    assert len(blob) == len(b"".join(sealing.seal_chunks(KEY, OID, NAME, [plain], size=size)))
    assert blob[:HEADER_SIZE][4:6] == bytes([sealing.VERSION, 0])  # version 1, no flags
    opener = Unsealer({KEY.id: KEY}, "static:test")
    assert b"".join(opener.open_chunks(OID, NAME, [blob], what="base")) == plain
    (tmp_path / "s").write_bytes(blob)
    unsealing.open_file(opener, OID, NAME, str(tmp_path / "s"), str(tmp_path / "p"), what="base")
    assert (tmp_path / "p").read_bytes() == plain


def test_a_failed_read_fails_the_sealing() -> None:
    class Gone(Exception):
        pass

    def read(at: int, n: int) -> bytes:
        if at >= 64:
            raise Gone
        return b"x" * n

    with pytest.raises(Gone):
        sealer.seal_read(KEY, OID, NAME, read, io.BytesIO(), size=16)


def test_each_piece_is_written_once_sealed_not_once_more_are_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A piece sealed is written (and hashed) while the archive still
    grows, not held back until `IN_FLIGHT` more are read: with 16 allowed
    in flight and 8 chunks that come 20 ms apart (BACKUP still writing),
    pieces are in the output before the archive's end is read."""
    monkeypatch.setattr(sealer, "IN_FLIGHT", 16)
    out = io.BytesIO()
    written: list[int] = []

    def read(at: int, n: int) -> bytes:
        written.append(len(out.getbuffer()))
        if at:
            time.sleep(0.02)
        return b"x" * n if at < 8 * n else b""

    digest = sealer.seal_read(KEY, OID, NAME, read, out, size=16)
    assert digest.result()[0] == len(out.getvalue())
    assert max(written) > HEADER_SIZE, f"nothing written while the archive grew: {written}"
    opener = Unsealer({KEY.id: KEY}, "static:test")
    assert b"".join(opener.open_chunks(OID, NAME, [out.getvalue()], what="base")) == b"x" * 128
