"""durable_obj/stores/growing.py: a file read, and synced, while it is written."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from durable_obj.stores import growing
from durable_obj.stores.growing import GrowingFile


def test_a_growing_file_is_synced_each_time_enough_more_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sync_while_growing` asks the disk for what is written each time
    `every` more bytes are there, while the producer still writes, and
    never for the same bytes twice; it returns once the producer ends."""
    synced: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(growing.os, "fdatasync", fdatasync)
    source = GrowingFile(str(tmp_path / "archive"))
    steps = [threading.Event() for _ in range(4)]
    seen = [threading.Event() for _ in range(4)]

    def write() -> None:
        with open(source.path, "wb") as out:
            for i, step in enumerate(steps):
                out.write(b"x" * (300 if i == 1 else 1000))
                out.flush()
                step.set()
                assert seen[i].wait(10)

    producer = source.produce(write)
    syncer = threading.Thread(target=source.sync_while_growing, args=(1000, 0.001))
    syncer.start()
    for i, step in enumerate(steps):
        assert step.wait(10)
        # the producer goes on once the syncer is level with it (what is
        # left unsynced is under 1000 bytes)
        deadline = time.monotonic() + 30
        while not (synced and synced[-1] > os.path.getsize(source.path) - 1000):
            assert time.monotonic() < deadline, f"no sync of {os.path.getsize(source.path)}"
            time.sleep(0.002)
        seen[i].set()
    producer.join()
    syncer.join(10)
    assert not syncer.is_alive()
    # 1000 bytes: a sync; 1300: not yet 1000 more; 2300 and 3300: one each
    assert synced == [1000, 2300, 3300]
    source.close()


@pytest.mark.parametrize("how", ["closed", "abandoned"])
def test_a_growing_file_given_up_refuses_its_readers(tmp_path: Path, how: str) -> None:
    """A reader left running past its caller (an upload on a thread) never
    takes a closed file's missing bytes for its end: it was read short, and
    an S3 upload stored a truncated base that way (found by attack).
    `abandon` stops readers the same way, and `wait`."""
    source = GrowingFile(str(tmp_path / "archive"))
    release = threading.Event()

    def write() -> None:
        with open(source.path, "wb") as out:
            out.write(b"x" * 1000)
            out.flush()
            assert release.wait(10)
            out.write(b"y" * 1000)

    producer = source.produce(write)
    assert source.read(0, 1000) == b"x" * 1000
    if how == "closed":
        source.close()
    else:
        source.abandon()
        with pytest.raises(growing.SourceFailed, match="given up"):
            source.wait()
    with pytest.raises(growing.SourceFailed, match="given up"):
        source.read(0, 2000)
    release.set()
    producer.join()
    source.close()
