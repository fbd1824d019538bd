"""A writer's open re-asserts the lease it took only when the restore took
longer than a heartbeat interval (`core/opening._reassert`): a faster one
hands out a lease with at least `lease_ttl` minus that interval left, which
the heartbeat renews one interval later."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.replica import restore
from durable_obj.stores.file import FileStore
from durable_obj.wire.head import Head


def _head_writes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The lease expiry of every head FileStore.replace writes, in order."""
    written: list[float] = []
    real = FileStore.replace

    def counted(self: FileStore, key: str, data: bytes, version: Any) -> Any:
        if key.endswith("/head.json"):
            written.append(Head.parse(data, key).lease.expires_at or 0.0)
        return real(self, key, data, version)

    monkeypatch.setattr(FileStore, "replace", counted)
    return written


@pytest.mark.parametrize(("slow", "stepped"), [(False, False), (True, False), (True, True)])
def test_an_open_re_asserts_the_lease_only_after_a_slow_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: bool, stepped: bool
) -> None:
    """`stepped`: the wall clock steps back as far as the restore took, so
    the lease taken looks as fresh as when it was taken: the monotonic
    clock still says the restore was slow."""
    url = f"file://{tmp_path}/o"
    with durable_obj.open(url, owner="a") as obj:
        obj.execute("CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO t VALUES (1)")
        obj.checkpoint()
    ttl, interval = 30.0, 1.0
    real = restore.restore

    def restoring(*args: Any, **kwargs: Any) -> Any:
        if slow:
            time.sleep(interval * 1.5)
        if stepped:
            wall = time.time
            monkeypatch.setattr(time, "time", lambda: wall() - interval * 1.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(restore, "restore", restoring)
    written = _head_writes(monkeypatch)
    with durable_obj.open(url, owner="b", lease_ttl=ttl, heartbeat_interval=interval) as obj:
        # the take, and after a slow restore the re-assert, whose lease runs later
        assert len(written) == (2 if slow else 1)
        if slow and not stepped:
            assert written[1] - written[0] >= interval
        assert obj._w.expires_at - time.time() > ttl - 2 * interval
        assert obj.rows("SELECT k FROM t") == [(1,)]
