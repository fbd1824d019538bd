"""An idle object's memory (issue 39): a new connection's 1.25 MiB block
must land on pages the allocator handed back, not on pages a RESTORE just
freed (`server._purge`). Nothing here measures memory: these pin that the
purge runs, that this engine accepts it, and that a refusal is harmless."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.replica import server

DDL = "CREATE TABLE t (k UInt32) ENGINE = MergeTree ORDER BY k"


def test_every_connect_purges_and_the_engine_accepts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = durable_obj.Namespace(str(tmp_path), owner="purge")
    with ns.open("a") as a:
        a.execute(DDL)
        a.execute("INSERT INTO t SELECT number FROM numbers(1000)")
        a.flush()
    seen: list[str] = []
    real = server._purge

    def spy(anchor: Any) -> None:
        seen.append("purge")
        real(anchor)

    monkeypatch.setattr(server, "_purge", spy)
    with ns.open("a") as a, ns.open("b") as b:
        b.execute(DDL)
        assert a.rows("SELECT count() FROM t") == [(1000,)]
        assert b.rows("SELECT count() FROM t") == [(0,)]
    assert len(seen) >= 2  # one per object's connection
    assert server._SERVER.get("purge", True) is True  # this chDB has jemalloc and purges


def test_an_engine_that_refuses_the_purge_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    class Refusing:
        def query(self, sql: str, fmt: str) -> None:
            calls.append(sql)
            raise RuntimeError("Code: 344. SYSTEM JEMALLOC PURGE is not supported")

    monkeypatch.setitem(server._SERVER, "purge", True)
    server._purge(Refusing())
    server._purge(Refusing())
    assert calls == ["SYSTEM JEMALLOC PURGE"]
    assert server._SERVER["purge"] is False
