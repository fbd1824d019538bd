"""The zstd frame a compressing writer's buffer builds as statements arrive
(core/pending.py, wire/compression.Frame): a commit gets it only when it holds
exactly the lines the commit takes, and then it is those lines, compressed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from durable_obj.core.pending import Pending
from durable_obj.wire.compression import FRAME_BLOCK, decompress


def line(n: int, size: int = 40) -> bytes:
    return (f'{{"sql": "INSERT INTO t VALUES ({n})"}}' + " " * size).encode() + b"\n"


def test_a_plain_object_builds_no_frame() -> None:
    pending = Pending()
    pending.add(line(1), line(2))
    outgoing, upto = pending.take()
    assert (outgoing.lines, outgoing.frame, upto) == ([line(1), line(2)], None, 2)


def test_the_frame_is_exactly_the_taken_lines() -> None:
    pending = Pending(lambda: True)
    lines = [line(n, size=n * 37 % 1400) for n in range(300)]  # past several FRAME_BLOCKs
    assert sum(map(len, lines)) > 3 * FRAME_BLOCK
    for one in lines:
        pending.add(one)
    outgoing, _ = pending.take()
    assert outgoing.frame is not None
    assert decompress(outgoing.frame, "wal/x") == b"".join(lines)


def test_a_retry_after_a_failed_commit_gets_no_stale_frame() -> None:
    pending = Pending(lambda: True)
    pending.add(line(1), line(2))
    first, _ = pending.take()  # ... and its commit fails: nothing is dropped
    assert first.frame is not None
    pending.add(line(3))
    retry, upto = pending.take()  # lines 1-3; the frame begun at 3 holds only 3
    assert retry.lines == [line(1), line(2), line(3)] and retry.frame is None
    pending.committed("wal/a", caller_told=True, upto=upto)
    pending.add(line(4))
    after, _ = pending.take()
    assert after.frame is not None and decompress(after.frame, "wal/x") == line(4)


def test_lines_added_during_a_commit_start_their_own_frame() -> None:
    pending = Pending(lambda: True)
    pending.add(line(1))
    _, upto = pending.take()
    pending.add(line(2), line(3))  # while the commit is on the wire
    pending.committed("wal/a", caller_told=True, upto=upto)
    nxt, _ = pending.take()
    assert nxt.lines == [line(2), line(3)]
    assert nxt.frame is not None and decompress(nxt.frame, "wal/x") == line(2) + line(3)


def test_a_checkpoint_or_drop_discards_the_frame() -> None:
    pending = Pending(lambda: True)
    pending.add(line(1))
    pending.committed("base/a", caller_told=True)  # a checkpoint took the buffer
    pending.add(line(2))
    got, _ = pending.take()
    assert got.lines == [line(2)] and got.frame is not None
    assert decompress(got.frame, "wal/x") == line(2)
    pending.add(line(3))
    pending.drop()
    pending.add(line(4))
    got, _ = pending.take()
    assert got.frame is not None and decompress(got.frame, "wal/x") == line(4)


@settings(max_examples=100)
@given(st.lists(st.sampled_from(["add", "unit", "take_ok", "take_fail", "ckpt", "drop"])))
def test_any_history_never_publishes_a_frame_that_is_not_its_lines(ops: list[str]) -> None:
    pending, n = Pending(lambda: True), 0
    for op in ops:
        if op in ("add", "unit"):
            count = 1 if op == "add" else 3
            pending.add(*(line(n + i, size=(n + i) * 37 % 900) for i in range(count)))
            n += count
        elif op.startswith("take"):
            outgoing, upto = pending.take()
            if outgoing.frame is not None:
                assert decompress(outgoing.frame, "wal/x") == b"".join(outgoing.lines)
            if op == "take_ok":
                pending.committed("wal/k", caller_told=True, upto=upto)
        elif op == "ckpt":
            pending.committed("base/k", caller_told=True)
        else:
            pending.drop()
