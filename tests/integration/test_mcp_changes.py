"""A memory server serving read-only follows the writer and tells listening
clients (`subscriptions/listen`, mcp 2.3) that the memory changed; through
the mcp SDK's own client, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from mcp import Client
from mcp.types import TextResourceContents

import durable_obj
from durable_obj.mcp import MEMORY_URI, Announcer, build_server, open_for_serving

#: A failure bound for waits on events, never a measure of anything.
PATIENCE = 60.0


async def _state(client: Client) -> dict[str, object]:
    (content,) = (await client.read_resource(MEMORY_URI)).contents
    assert isinstance(content, TextResourceContents)
    state: dict[str, object] = json.loads(content.text)
    return state


def test_a_read_only_server_announces_each_commit_of_the_writer(tmp_path: Path) -> None:
    url = str(tmp_path / "agents" / "memory")
    writer = durable_obj.open(url, owner="w")
    writer.execute("CREATE TABLE notes (k UInt32) ENGINE = MergeTree ORDER BY k")
    writer.flush()

    async def commit(value: int) -> int:
        def run() -> int:
            writer.execute(f"INSERT INTO notes VALUES ({value})")
            writer.flush()
            return writer.seq

        return await anyio.to_thread.run_sync(run)

    async def main() -> None:
        announcer = Announcer()
        obj, reason = open_for_serving(
            url, if_held="read-only", owner="server", follow=0.02, on_change=announcer
        )
        assert obj.read_only and obj.following and reason is not None
        try:
            async with Client(build_server(obj, read_only_reason=reason, announcer=announcer)) as c:
                assert (await _state(c))["seq"] == writer.seq
                async with c.listen(resource_subscriptions=[MEMORY_URI]) as sub:
                    events = aiter(sub)
                    for value in (1, 2, 3):
                        seq = await commit(value)
                        with anyio.fail_after(PATIENCE):
                            event = await anext(events)  # the announcement of that commit
                        assert event.uri == MEMORY_URI
                        assert (await _state(c))["seq"] == seq  # announced after the view moved
                assert announcer.announced == 3
                state = await _state(c)
                assert state == {
                    "url": obj.url,
                    "seq": writer.seq,
                    "read_only": True,
                    "following": True,
                }
        finally:
            obj.close()

    try:
        anyio.run(main)
    finally:
        writer.close()


def test_a_writer_server_serves_the_resource_and_announces_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "agents" / "memory")

    async def main() -> None:
        announcer = Announcer()
        obj, reason = open_for_serving(url, owner="server", follow=0.02, on_change=announcer)
        assert reason is None and not obj.read_only and not obj.following
        try:
            async with Client(build_server(obj, announcer=announcer)) as client:
                state = await _state(client)
                assert state["read_only"] is False and state["following"] is False
                resources = (await client.list_resources()).resources
                assert [str(r.uri) for r in resources] == [MEMORY_URI]
        finally:
            obj.close()

    anyio.run(main)
