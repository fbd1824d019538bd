"""MCP `forget` with time, and a retention on memories through the object's
TTL policy (`durable_obj.mcp.server.set_retention`), through the mcp SDK's
own client in-process."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

import durable_obj
from durable_obj import errors
from durable_obj.core.expiry import TtlPolicy
from durable_obj.mcp import build_server, set_retention
from durable_obj.mcp.memory import memories_ddl
from tests.integration.test_mcp import err, ok


@pytest.fixture
def url(tmp_path: Path) -> str:
    return str(tmp_path / "agents" / "memory")


def old(obj: durable_obj.DurableObject, mid: str, days: float, tags: str, version: int) -> None:
    """A memory row last updated `days` ago (as if written then)."""
    when = (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%d %H:%M:%S.%f")
    obj.write(
        memories_ddl("memories"),
        f"INSERT INTO memories VALUES ('{mid}', 'c{mid}', {tags}, '{{}}', '{when}', '{when}', "
        f"[], {version})",
    )


def ids(obj: durable_obj.DurableObject) -> list[str]:
    return [r[0] for r in obj.rows("SELECT id FROM memories FINAL ORDER BY id")]


def test_forget_older_than_days_forgets_whole_memories_by_a_literal_cutoff(url: str) -> None:
    a, b, c = "a" * 32, "b" * 32, "c" * 32

    async def main() -> None:
        with durable_obj.open(url, owner="t", ttl_sweep_interval=0) as obj:
            old(obj, a, 10, "['x']", 1)
            old(obj, b, 10, "['x']", 1)
            old(obj, b, 9, "['y']", 2)  # revised: its newest version carries only y
            old(obj, c, 1, "['y']", 1)
            async with Client(build_server(obj)) as client:
                seq = obj.seq
                answer = ok(await client.call_tool("forget", {"older_than_days": 5, "tags": ["y"]}))
                assert answer["forgotten"] == 1
                assert ids(obj) == [a, c]  # b is gone whole: its old version never comes back
                (change,) = list(obj.changes(since=seq, follow=False))
                (stmt,) = change.statements
                assert stmt.startswith("DELETE FROM memories WHERE id IN (SELECT id FROM")
                assert "updated_at < '20" in stmt and "now" not in stmt.lower()
                answer = ok(await client.call_tool("forget", {"older_than_days": 5}))
                assert answer["forgotten"] == 1 and ids(obj) == [c]
                assert (
                    ok(await client.call_tool("forget", {"older_than_days": 5}))["forgotten"] == 0
                )
                assert obj.pending == 0
        with durable_obj.open(url, read_only=True) as reader:
            assert ids(reader) == [c]

    anyio.run(main)


def test_forget_refuses_unclear_requests(url: str) -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({}, "give memory_id"),
        ({"memory_id": "a" * 32, "older_than_days": 1}, "not both"),
        ({"memory_id": "a" * 32, "tags": ["x"]}, "tags narrow older_than_days only"),
        ({"older_than_days": 0}, "over 0"),
        ({"older_than_days": -3}, "over 0"),
        ({"older_than_days": 1e9}, "at most 100000"),
        ({"older_than_days": 1, "tags": [""]}, "a tag must have"),
        ({"older_than_days": "1; DROP TABLE memories"}, "older_than_days"),
    ]

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj)) as client:
                for args, message in bad:
                    assert message in err(await client.call_tool("forget", args)), args
            assert obj.seq == 0 and obj.pending == 0
        with durable_obj.open(url, read_only=True) as reader:
            async with Client(build_server(reader, read_only_reason="test")) as client:
                text = err(await client.call_tool("forget", {"older_than_days": 1}))
                assert "read-only" in text

    anyio.run(main)


def test_a_retention_is_the_objects_ttl_policy(url: str, caplog: pytest.LogCaptureFixture) -> None:
    with durable_obj.open(url, owner="t", ttl_sweep_interval=0) as obj:
        build_server(obj, retention_days=7)
        week = TtlPolicy("memories", "updated_at", 7 * 86400.0)
        assert obj.ttl() == [week]
        seq = obj.seq
        set_retention(obj, 7)  # the same policy: nothing written
        assert obj.seq == seq
        old(obj, "a" * 32, 8, "[]", 1)
        old(obj, "b" * 32, 6, "[]", 1)
        assert obj.sweep_ttl() == 1 and ids(obj) == ["b" * 32]
        for days, message in ((-1, "over 0"), (True, "number of days"), (1e9, "at most")):
            with pytest.raises(errors.InvalidArgument, match=message):
                set_retention(obj, days)
        with pytest.raises(errors.InvalidArgument, match="plain identifier"):
            set_retention(obj, 1, table="m; DROP TABLE memories")
        assert obj.ttl() == [week]
    with durable_obj.open(url, owner="later") as later:
        assert later.ttl() == [week]  # kept by the object for every later writer
        with durable_obj.open(url, read_only=True) as reader:
            with caplog.at_level(logging.WARNING, logger="durable_obj"):
                build_server(reader, retention_days=1)
            assert "a read-only server sets no retention" in caplog.text
        set_retention(later, 0)
        assert later.ttl() == []
