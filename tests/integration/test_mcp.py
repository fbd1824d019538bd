"""The MCP memory server (issue 15 §4), through the mcp SDK's own client:
in-process for every tool, over stdio against `durable-obj mcp` subprocesses
for restart, two servers on one memory, and a crash."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

import durable_obj
from durable_obj.mcp import Limits, build_server, open_for_serving
from durable_obj.mcp.memory import memories_ddl
from tests.integration.mcp_child import embed

REPO = Path(__file__).resolve().parents[2]


def _text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return result.structured_content


def err(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return _text(result)


def run(main: Callable[[], Awaitable[None]]) -> None:
    anyio.run(main)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return str(tmp_path / "agents" / "memory")


def read_back(url: str, sql: str) -> list[dict[str, Any]]:
    """Rows of `sql` on the object's last flushed state (a read-only open)."""
    with durable_obj.open(url, read_only=True) as obj:
        text = str(obj.query(sql, fmt="JSONEachRow"))
    return [json.loads(line) for line in text.split("\n") if line]


# -- in-process: every tool -------------------------------------------------------


def test_tools_listed_and_sql_only_when_allowed(url: str) -> None:
    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"remember", "search", "get", "list", "revise", "forget"}
            async with Client(build_server(obj, allow_sql=True)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
            assert "sql" in names

    run(main)


def test_remember_get_list_revise_forget(url: str) -> None:
    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj)) as client:
                first = ok(
                    await client.call_tool(
                        "remember",
                        {
                            "content": "the user prefers tea",
                            "tags": ["prefs"],
                            "metadata": {"n": 1},
                        },
                    )
                )
                assert first["content"] == "the user prefers tea"
                assert first["tags"] == ["prefs"] and first["metadata"] == {"n": 1}
                assert first["version"] == 1 and first["created_at"] == first["updated_at"]
                mid = first["id"]
                # durable when the tool answered: a fresh reader sees it
                assert read_back(url, "SELECT id FROM memories") == [{"id": mid}]
                assert obj.pending == 0

                second = ok(await client.call_tool("remember", {"content": "deploys on Fridays"}))
                assert ok(await client.call_tool("get", {"memory_id": mid})) == first
                listed = ok(await client.call_tool("list", {}))["memories"]
                assert [m["id"] for m in listed] == [second["id"], mid]
                tagged = ok(await client.call_tool("list", {"tags": ["prefs"]}))["memories"]
                assert [m["id"] for m in tagged] == [mid]
                page = ok(await client.call_tool("list", {"limit": 1, "offset": 1}))["memories"]
                assert [m["id"] for m in page] == [mid]

                revised = ok(
                    await client.call_tool(
                        "revise", {"memory_id": mid, "content": "the user prefers coffee"}
                    )
                )
                assert revised["content"] == "the user prefers coffee"
                assert revised["tags"] == ["prefs"] and revised["metadata"] == {"n": 1}
                assert revised["version"] == 2 and revised["created_at"] == first["created_at"]
                assert revised["updated_at"] > first["updated_at"]
                retagged = ok(await client.call_tool("revise", {"memory_id": mid, "tags": []}))
                assert retagged["tags"] == [] and retagged["content"] == revised["content"]
                assert read_back(
                    url, "SELECT content FROM memories FINAL WHERE id = '" + mid + "'"
                ) == [{"content": "the user prefers coffee"}]

                gone = ok(await client.call_tool("forget", {"memory_id": mid}))
                assert gone == {"id": mid, "forgotten": True}
                assert "not_found" in err(await client.call_tool("get", {"memory_id": mid}))
                assert "not_found" in err(await client.call_tool("forget", {"memory_id": mid}))
                assert "not_found" in err(
                    await client.call_tool("revise", {"memory_id": mid, "content": "x"})
                )
                assert read_back(url, "SELECT id FROM memories FINAL") == [{"id": second["id"]}]

    run(main)


def test_reads_before_any_write_are_empty(url: str) -> None:
    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj)) as client:
                assert ok(await client.call_tool("list", {}))["memories"] == []
                assert ok(await client.call_tool("search", {"query": "x"}))["results"] == []
                assert "not_found" in err(await client.call_tool("get", {"memory_id": "0" * 32}))
            assert obj.tables() == []  # reading created nothing

    run(main)


def test_search_text_and_tags(url: str) -> None:
    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj)) as client:
                a = ok(
                    await client.call_tool(
                        "remember", {"content": "Paris is in France", "tags": ["geo"]}
                    )
                )
                b = ok(
                    await client.call_tool(
                        "remember", {"content": "paris hilton", "tags": ["people"]}
                    )
                )
                ok(
                    await client.call_tool(
                        "remember", {"content": "Berlin is in Germany", "tags": ["geo"]}
                    )
                )
                found = ok(await client.call_tool("search", {"query": "PARIS"}))
                assert found["mode"] == "text"
                assert {m["id"] for m in found["results"]} == {a["id"], b["id"]}
                geo = ok(await client.call_tool("search", {"query": "paris", "tags": ["geo"]}))
                assert [m["id"] for m in geo["results"]] == [a["id"]]
                assert len(ok(await client.call_tool("search", {"tags": ["geo"]}))["results"]) == 2
                assert len(ok(await client.call_tool("search", {"limit": 1}))["results"]) == 1
                assert "embedding function" in err(
                    await client.call_tool("search", {"query": "x", "mode": "vector"})
                )

    run(main)


def test_vector_search_embeds_once_and_logs_literals(url: str) -> None:
    calls: list[str] = []

    def counting(text: str) -> list[float]:
        calls.append(text)
        return embed(text)

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, embed=counting)) as client:
                cat = ok(await client.call_tool("remember", {"content": "cats purr softly"}))
                ok(await client.call_tool("remember", {"content": "xylophone quiz jazz"}))
                assert len(calls) == 2
                found = ok(await client.call_tool("search", {"query": "cat purring", "limit": 2}))
                assert found["mode"] == "vector"
                assert found["results"][0]["id"] == cat["id"]
                assert found["results"][0]["score"] > found["results"][1]["score"]
                text = ok(await client.call_tool("search", {"query": "purr", "mode": "text"}))
                assert [m["id"] for m in text["results"]] == [cat["id"]]
                ok(await client.call_tool("revise", {"memory_id": cat["id"], "tags": ["pet"]}))
                # a text search and a tags-only revision embed nothing
                assert calls == ["cats purr softly", "xylophone quiz jazz", "cat purring"]

    run(main)
    # the stored embedding is what the writer computed, replayed from literals
    rows = read_back(url, "SELECT content, embedding FROM memories FINAL ORDER BY content")
    assert len(rows) == 2
    for row in rows:
        assert row["embedding"] == pytest.approx(embed(row["content"]), abs=1e-6)


def test_embedding_function_failure_is_a_tool_error(url: str) -> None:
    def broken(text: str) -> list[float]:
        if "boom" in text:
            raise RuntimeError("model unavailable")
        return [float("nan")] if "nan" in text else embed(text)

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, embed=broken)) as client:
                assert "model unavailable" in err(
                    await client.call_tool("remember", {"content": "boom"})
                )
                assert "NaN" in err(await client.call_tool("remember", {"content": "nan"}))
                ok(await client.call_tool("remember", {"content": "fine"}))
                assert len(ok(await client.call_tool("list", {}))["memories"]) == 1

    run(main)


def test_a_stored_vector_with_nan_or_infinity_is_kept_by_a_revise(url: str) -> None:
    """A row of the store is untrusted: one whose embedding holds NaN or an
    infinity (JSON has neither: the engine answered null) made a revise of
    its tags fail with a TypeError. It is now kept as stored."""
    mid = "0123456789abcdef0123456789abcdef"
    with durable_obj.open(url, owner="t") as obj:
        obj.execute(memories_ddl("memories"))
        obj.execute(
            f"INSERT INTO memories VALUES ('{mid}', 'odd', [], '{{}}', now64(6), now64(6), "
            "[nan, inf, -inf, 0.1], 1)"
        )
        obj.flush()

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, embed=embed)) as client:
                ok(await client.call_tool("revise", {"memory_id": mid, "tags": ["x"]}))

    run(main)
    rows = read_back(url, "SELECT tags, toString(embedding) AS e FROM memories FINAL")
    assert rows == [{"tags": ["x"], "e": "[nan,inf,-inf,0.1]"}]


def test_hostile_input_is_a_tool_error_and_the_server_lives(url: str) -> None:
    limits = Limits(content_bytes=1000, tags=4, tag_chars=10, metadata_bytes=200, page=50)
    nasty = "x'); DROP TABLE memories; -- \\' \\\\ \x00\x01\n\t é \u2028 now() rand() {}\"`"

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, limits=limits, allow_sql=True)) as client:
                # SQL in content, tags and metadata is data, read back exactly
                kept = ok(
                    await client.call_tool(
                        "remember",
                        {"content": nasty, "tags": ["'; --", "a\\"], "metadata": {"q": nasty}},
                    )
                )
                again = ok(await client.call_tool("get", {"memory_id": kept["id"]}))
                assert again["content"] == nasty and again["tags"] == ["'; --", "a\\"]
                assert again["metadata"] == {"q": nasty}
                assert [
                    m["id"]
                    for m in ok(await client.call_tool("search", {"query": "'); DROP"}))["results"]
                ] == [kept["id"]]
                for bad in (
                    ("remember", {"content": "x" * 1001}),
                    ("remember", {"content": "   "}),
                    ("remember", {"content": "\ud800 lone surrogate"}),
                    ("remember", {"content": 5}),
                    ("remember", {"content": ["a"]}),
                    ("remember", {}),
                    ("remember", {"content": "x", "tags": "notalist"}),
                    ("remember", {"content": "x", "tags": ["a"] * 5}),
                    ("remember", {"content": "x", "tags": ["x" * 11]}),
                    ("remember", {"content": "x", "tags": [""]}),
                    ("remember", {"content": "x", "metadata": "{not json"}),
                    ("remember", {"content": "x", "metadata": {"k": "v" * 300}}),
                    ("get", {"memory_id": "' OR 1=1 --"}),
                    ("get", {"memory_id": "1" * 10_000}),
                    ("get", {"memory_id": None}),
                    ("revise", {"memory_id": kept["id"]}),
                    ("revise", {"memory_id": "nothex" * 6}),
                    ("forget", {"memory_id": "'; DROP TABLE memories; --"}),
                    ("list", {"limit": 0}),
                    ("list", {"limit": 51}),
                    ("list", {"offset": -1}),
                    ("list", {"limit": 10**30}),
                    ("search", {"query": "q" * 5000}),
                    ("search", {"mode": "telepathy"}),
                    ("sql", {"statement": ""}),
                    ("sql", {"statement": "SELEC nonsense ((("}),
                    ("no_such_tool", {}),
                ):
                    err(await client.call_tool(*bad))
                # still alive, nothing written by any of the above
                listed = ok(await client.call_tool("list", {}))["memories"]
                assert [m["id"] for m in listed] == [kept["id"]]
                # (64-bit integers come back as JSON numbers)
                assert read_back(url, "SELECT count() AS n FROM memories FINAL") == [{"n": 1}]

    run(main)


def test_results_are_cut_at_the_byte_limit(url: str) -> None:
    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            server = build_server(obj, limits=Limits(result_bytes=2000), allow_sql=True)
            async with Client(server) as client:
                for n in range(5):
                    ok(await client.call_tool("remember", {"content": f"{n} " + "y" * 900}))
                listed = ok(await client.call_tool("list", {}))
                assert listed["truncated"] and 1 <= len(listed["memories"]) < 5
                rows = ok(await client.call_tool("sql", {"statement": "SELECT * FROM numbers(10)"}))
                assert rows == {"rows": [{"number": n} for n in range(10)], "truncated": False}

    run(main)


def test_remember_says_what_a_failed_store_left_and_a_retry_stores_once(tmp_path: Path) -> None:
    """Issue 25: `remember` whose flush failed answered an error, yet the
    memory stayed buffered and the next write committed it: a model that
    retried stored it twice. Now the answer says it is kept (and its id),
    and a retry with that id makes the first durable instead of a second."""
    from durable_obj.stores.memory import MemoryStore
    from durable_obj.testing import Fault, FaultyStore

    store = FaultyStore(MemoryStore(f"mcp-{tmp_path.name}"), seed=0, rate=1.0, faults=[Fault.ERROR])
    store.enabled = False
    mid = "0123456789abcdef0123456789abcdef"

    async def main() -> None:
        with durable_obj.Namespace(store, owner="t", commit_deadline=0.5).open("m") as obj:
            async with Client(build_server(obj)) as client:
                ok(await client.call_tool("remember", {"content": "first"}))
                store.enabled = True
                args = {"content": "tea, not coffee", "memory_id": mid}
                said = err(await client.call_tool("remember", args))
                assert f"memory {mid} is kept here" in said and "memory_id=" in said
                store.enabled = False
                again = ok(await client.call_tool("remember", args))
                assert again["id"] == mid and again["content"] == "tea, not coffee"
                assert obj.pending == 0  # durable when answered
                twice = ok(await client.call_tool("remember", args))
                assert twice["id"] == mid
                other = {"content": "something else", "memory_id": mid}
                assert "holds another memory" in err(await client.call_tool("remember", other))
                rows = obj.rows(
                    "SELECT count() FROM memories FINAL WHERE id = {m:String}", params={"m": mid}
                )
                assert rows == [(1,)]
        with durable_obj.Namespace(store).open("m", read_only=True) as obj:
            assert obj.rows("SELECT count() FROM memories FINAL") == [(2,)]

    run(main)


def test_sql_tool_description_names_the_table(url: str) -> None:
    """Issue 27: the description showed a literal `%s` (it was read before
    the table was put in)."""

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, allow_sql=True)) as client:
                tools = (await client.list_tools()).tools
                (described,) = [t.description or "" for t in tools if t.name == "sql"]
                assert "%s" not in described and "`memories`" in described

    run(main)


def test_sql_tool_passes_the_statement_gate(url: str, tmp_path: Path) -> None:
    """Issue 25: the nested-comment prefix read a host file through the sql tool."""
    host = tmp_path / "host.txt"
    host.write_text("host data")

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, allow_sql=True)) as client:
                for statement in (
                    f"/* /* */ ' */ SELECT file('{host}') -- '",
                    f"/* /* */ ' */ SELECT * FROM file('{host}', RawBLOB) -- '",
                    "/* /* */ ' */ SELECT * FROM url('http://127.0.0.1:9/', RawBLOB) -- '",
                    "/* /* */ ' */ SELECT name FROM system.databases WHERE 0 -- '",
                    "SELECT getServerSetting('path')",
                ):
                    result = await client.call_tool("sql", {"statement": statement})
                    if not result.is_error:
                        assert "host data" not in _text(result), statement
                        assert "__durable_obj_" not in _text(result), statement
                    else:
                        assert "classification_refused" in _text(result), statement

    run(main)


def test_sql_tool_is_bounded_by_the_engine(url: str) -> None:
    """Issue 25: a long query is stopped at its time bound and the next call
    runs; SETTINGS cannot raise a bound; a single row over the answer's cap
    comes back cut to it; a huge result is not built whole."""

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            limits = Limits(result_bytes=4000, sql_seconds=0.5)
            server = build_server(obj, limits=limits, allow_sql=True)
            async with Client(server) as client:
                started = time.monotonic()
                slow = "SELECT count() FROM numbers(1000000000000)"
                assert "timeout" in err(await client.call_tool("sql", {"statement": slow}))
                assert time.monotonic() - started < 30
                rows = ok(await client.call_tool("sql", {"statement": "SELECT 1 AS one"}))
                assert rows == {"rows": [{"one": 1}], "truncated": False}
                raise_it = "SELECT 1 SETTINGS max_execution_time = 100000"
                assert "max_execution_time" in err(
                    await client.call_tool("sql", {"statement": raise_it})
                )
                big = ok(
                    await client.call_tool("sql", {"statement": "SELECT repeat('x', 1000000) AS s"})
                )
                assert big["truncated"] and len(json.dumps(big)) < 4000
                many = ok(
                    await client.call_tool(
                        "sql", {"statement": "SELECT number FROM numbers(1000000000)"}
                    )
                )
                assert many["truncated"] and len(json.dumps(many)) < 8000

    run(main)


def test_sql_tool_is_read_only_and_scoped(url: str) -> None:
    hits: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            hits.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()

    async def main() -> None:
        with durable_obj.open(url, owner="t") as obj:
            async with Client(build_server(obj, allow_sql=True)) as client:
                ok(await client.call_tool("remember", {"content": "alpha"}))
                rows = ok(
                    await client.call_tool(
                        "sql", {"statement": "SELECT content FROM memories FINAL"}
                    )
                )
                assert rows == {"rows": [{"content": "alpha"}], "truncated": False}
                for statement in (
                    "DROP TABLE memories",
                    "INSERT INTO memories (id) VALUES ('x')",
                    "ALTER TABLE memories DELETE WHERE 1",
                    "SELECT 1; DROP TABLE memories",
                    f"SELECT * FROM url('http://127.0.0.1:{port}/a', CSV)",
                    f"SELECT * FROM url('http://127.0.0.1:{port}/b', CSV, 'x String')",
                    f"SELECT * FROM s3('http://127.0.0.1:{port}/bucket/c', CSV)",
                    f"SELECT * FROM /* hidden */ `url` ('http://127.0.0.1:{port}/d', CSV)",
                    f"SELECT 1 WHERE 1 IN (SELECT 1 FROM url('http://127.0.0.1:{port}/e', CSV))",
                    "SELECT * FROM file('/etc/passwd')",
                    "SELECT * FROM system.processes",
                    "SELECT * FROM default.memories_elsewhere",
                    "SELECT 1 INTO OUTFILE '/tmp/mcp-outfile'",
                ):
                    err(await client.call_tool("sql", {"statement": statement}))
                # the refusal names the tool and the tools that write, not the library's methods
                drop = err(await client.call_tool("sql", {"statement": "DROP TABLE memories"}))
                assert "the sql tool" in drop and "remember" in drop, drop
                assert "execute()" not in drop and "query()" not in drop, drop
                assert ok(await client.call_tool("list", {}))["memories"][0]["content"] == "alpha"

    try:
        run(main)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert hits == []  # nothing was fetched, not even to infer a schema


def test_second_server_refused_or_read_only(url: str) -> None:
    async def main() -> None:
        writer, why = open_for_serving(url, owner="first")
        assert why is None
        try:
            with pytest.raises(durable_obj.LeaseHeld, match="first"):
                open_for_serving(url, owner="second")
            reader, why = open_for_serving(url, owner="second", if_held="read-only")
            assert reader.read_only and why is not None and "first" in why
            try:
                async with (
                    Client(build_server(writer)) as w,
                    Client(build_server(reader, read_only_reason=why)) as r,
                ):
                    mid = ok(await w.call_tool("remember", {"content": "only the writer writes"}))[
                        "id"
                    ]
                    # the reader sees what the writer flushed
                    assert ok(await r.call_tool("get", {"memory_id": mid}))["content"] == (
                        "only the writer writes"
                    )
                    for name, args in (
                        ("remember", {"content": "x"}),
                        ("revise", {"memory_id": mid, "content": "x"}),
                        ("forget", {"memory_id": mid}),
                    ):
                        message = err(await r.call_tool(name, args))
                        assert "read-only" in message and "first" in message
                        # written for a model: what happened, what is safe, no Python
                        assert "Nothing was written" in message and "search, get" in message
                        assert "force" not in message and "=True" not in message
                    assert len(ok(await w.call_tool("list", {}))["memories"]) == 1
            finally:
                reader.close()
        finally:
            writer.close()

    run(main)


# -- subprocesses over stdio --------------------------------------------------------


def _params(url: str, *extra: str, pidfile: Path | None = None) -> StdioServerParameters:
    argv = [sys.executable, "-m", "durable_obj.cli", "mcp", url, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if pidfile is None:
        return StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO), env=env)
    script = f'echo $$ > "{pidfile}"; exec "$@"'
    return StdioServerParameters(
        command="/bin/sh", args=["-c", script, "sh", *argv], cwd=str(REPO), env=env
    )


@pytest.mark.slow
def test_stdio_restart_reads_memories_back(url: str) -> None:
    embed_arg = ("--embed", "tests.integration.mcp_child:embed")

    async def main() -> None:
        async with Client(_params(url, *embed_arg)) as client:
            a = ok(
                await client.call_tool(
                    "remember", {"content": "the build uses make", "tags": ["ci"]}
                )
            )
            b = ok(await client.call_tool("remember", {"content": "zebra quokka"}))
            ok(
                await client.call_tool(
                    "revise", {"memory_id": b["id"], "content": "zebras and quokkas"}
                )
            )
        # stopped (stdin closed): its lease was released, so this starts at once
        async with Client(_params(url, *embed_arg, "--allow-sql")) as client:
            got = ok(await client.call_tool("get", {"memory_id": a["id"]}))
            assert got["content"] == "the build uses make" and got["tags"] == ["ci"]
            listed = ok(await client.call_tool("list", {}))["memories"]
            assert {m["content"] for m in listed} == {"the build uses make", "zebras and quokkas"}
            found = ok(await client.call_tool("search", {"query": "quokka zebra"}))
            assert found["mode"] == "vector" and found["results"][0]["id"] == b["id"]
            counted = await client.call_tool(
                "sql", {"statement": "SELECT count() AS n FROM memories FINAL"}
            )
            assert ok(counted)["rows"] == [{"n": 2}]

    run(main)
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.head is not None and obj.head.lease.owner is None  # released


@pytest.mark.slow
def test_two_server_processes(url: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(_params(url, "--owner", "server-one")) as first:
            mid = ok(await first.call_tool("remember", {"content": "written by one"}))["id"]
            refused = subprocess.run(
                [sys.executable, "-m", "durable_obj.cli", "mcp", url, "--owner", "server-two"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=120,
            )
            assert refused.returncode == 1
            assert "lease_held" in refused.stderr and "server-one" in refused.stderr
            async with Client(
                _params(url, "--owner", "server-two", "--if-held", "read-only")
            ) as second:
                assert (
                    ok(await second.call_tool("get", {"memory_id": mid}))["content"]
                    == "written by one"
                )
                message = err(await second.call_tool("remember", {"content": "from two"}))
                assert "read-only" in message and "server-one" in message
                ok(await first.call_tool("remember", {"content": "one again"}))
                listed = ok(await second.call_tool("list", {}))["memories"]
                assert {m["content"] for m in listed} == {"written by one", "one again"}

    run(main)
    rows = read_back(url, "SELECT content FROM memories FINAL ORDER BY content")
    assert rows == [{"content": "one again"}, {"content": "written by one"}]


@pytest.mark.slow
def test_crash_loses_nothing_acknowledged(url: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    acknowledged: list[str] = []

    async def main() -> None:
        with pytest.raises(Exception):  # noqa: B017 - the transport dies with the server
            async with Client(_params(url, pidfile=pidfile)) as client:
                for n in range(3):
                    acknowledged.append(
                        ok(await client.call_tool("remember", {"content": f"fact {n}"}))["id"]
                    )
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
                time.sleep(0.2)
                await client.call_tool("remember", {"content": "after the crash"})

    run(main)
    rows = read_back(url, "SELECT id FROM memories FINAL")
    assert sorted(r["id"] for r in rows) == sorted(acknowledged)


@pytest.mark.slow
def test_a_killed_server_restarts_at_once_with_reclaim(url: str, tmp_path: Path) -> None:
    """kill -9 leaves the server's 60 s lease live; started again under the
    same (default) owner name, it is refused naming --reclaim (never a
    --force it does not have), and with --reclaim it serves at once."""
    pidfile = tmp_path / "server.pid"
    acknowledged: list[str] = []

    async def crash() -> None:
        with pytest.raises(Exception):  # noqa: B017 - the transport dies with the server
            async with Client(_params(url, "--lease-ttl", "60", pidfile=pidfile)) as client:
                saved = ok(await client.call_tool("remember", {"content": "before the crash"}))
                acknowledged.append(saved["id"])
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
                time.sleep(0.2)
                await client.call_tool("remember", {"content": "after the crash"})

    run(crash)
    refused = subprocess.run(
        [sys.executable, "-m", "durable_obj.cli", "mcp", url, "--lease-ttl", "60"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert refused.returncode == 1
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: lease_held: "), refused.stderr
    message = errors[0]
    assert "start it with --reclaim" in message and "succeeds in" in message
    assert "pass --force" not in message and "=True" not in message  # no flag mcp lacks
    assert "--if-held read-only" in message

    async def restart() -> None:
        async with Client(_params(url, "--reclaim", "--lease-ttl", "60")) as client:
            got = ok(await client.call_tool("get", {"memory_id": acknowledged[0]}))
            assert got["content"] == "before the crash"
            ok(await client.call_tool("remember", {"content": "after the restart"}))

    run(restart)
    rows = read_back(url, "SELECT content FROM memories FINAL ORDER BY content")
    assert rows == [{"content": "after the restart"}, {"content": "before the crash"}]
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.head is not None and obj.head.lease.owner is None  # released at the end


@pytest.mark.slow
def test_http_transport_and_sigterm(url: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "durable_obj.cli", "mcp", url, "--transport", "http"]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stderr is not None
        assert "serving memory (writer) over http://127.0.0.1:" in proc.stderr.readline()

        deadline = time.monotonic() + 30
        while True:  # the port opens just after the line above
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server never listened"
                time.sleep(0.1)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                saved = ok(await client.call_tool("remember", {"content": "over http"}))
                assert saved["content"] == "over http"

        run(main)
        proc.send_signal(signal.SIGTERM)
        out, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors
    assert out == ""  # nothing but the protocol on stdout (here: nothing at all)
    assert read_back(url, "SELECT content FROM memories FINAL") == [{"content": "over http"}]
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.head is not None and obj.head.lease.owner is None  # SIGTERM released it
