"""The MCP server: the tools over a `MemoryServer`, opening and serving.

`build_server` registers the tools (each turns a `DurableError` into a tool
error naming its category), `open_for_serving` opens an object as its writer
or read-only, and `serve` runs a server over stdio or streamable HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from durable_obj.aio import AsyncDurableObject
from durable_obj.core.object import DurableObject
from durable_obj.errors import DurableError, InvalidArgument, LeaseHeld
from durable_obj.mcp.changes import MEMORY_URI, Announcer, memory_state
from durable_obj.mcp.limits import Embedder, Limits, _check_days
from durable_obj.mcp.memory import _TABLE_NAME, MemoryServer, memories_ddl
from durable_obj.service.namespace import open as open_object

log = logging.getLogger("durable_obj")


def _tool_error(exc: DurableError) -> ToolError:
    return ToolError(f"{exc.category}: {exc}")


# -- the server --------------------------------------------------------------------

_INSTRUCTIONS = (
    "A durable memory. remember stores a fact (with optional tags and JSON metadata) and "
    "returns its id; search finds memories by text (and by meaning, when the server has an "
    "embedding function); get, list, revise and forget work on ids, and forget also forgets "
    "every memory older than a number of days. Every write is durable when the tool answers."
)


def build_server(
    obj: DurableObject | AsyncDurableObject,
    *,
    allow_sql: bool = False,
    embed: Embedder | None = None,
    table: str = "memories",
    limits: Limits | None = None,
    read_only_reason: str | None = None,
    name: str = "durable-obj-memory",
    announcer: Announcer | None = None,
    retention_days: float | None = None,
) -> MCPServer:
    """An MCP server whose tools read and write memories in `obj` (open).
    `announcer`: the `on_change` `obj` follows with (`open_for_serving`),
    which tells listening clients the memory changed (`changes.py`).
    `retention_days` (a writer only): see `set_retention`."""
    if retention_days is not None:
        if (obj.sync if isinstance(obj, AsyncDurableObject) else obj).read_only:
            log.warning("a read-only server sets no retention: its writer's policy applies")
        else:
            set_retention(obj, retention_days, table=table)
    mem = MemoryServer(
        obj, table=table, embed=embed, limits=limits, read_only_reason=read_only_reason
    )
    server: MCPServer = MCPServer(
        name, instructions=_INSTRUCTIONS, log_level="WARNING", subscriptions=announcer
    )
    sync = obj.sync if isinstance(obj, AsyncDurableObject) else obj

    @server.resource(MEMORY_URI, name="memory", mime_type="application/json")
    def memory() -> str:
        """Which memory this server serves and the seq it shows; a server serving it
        read-only announces each change (subscriptions/listen)."""
        return memory_state(sync)

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    async def guarded(call: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await call
        except DurableError as exc:
            raise _tool_error(exc) from None
        return result

    @server.tool(annotations=writes)
    async def remember(
        content: str,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        memory_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a new memory; durable when this answers. Returns it, with its id.
        Pass a memory_id (32 hex digits) of your own to retry safely: the same id
        with the same memory is stored once."""
        return await guarded(mem.remember(content, tags, metadata, memory_id))

    @server.tool(annotations=reads)
    async def search(
        query: str = "",
        tags: list[str] | None = None,
        limit: int = 10,
        mode: Literal["auto", "text", "vector"] = "auto",
    ) -> dict[str, Any]:
        """Find memories: by meaning (vector, when the server has an embedding function)
        or by a case-insensitive text match, among those carrying all `tags`."""
        return await guarded(mem.search(query, tags, limit, mode))

    @server.tool(annotations=reads)
    async def get(memory_id: str) -> dict[str, Any]:
        """One memory by its id."""
        return await guarded(mem.get(memory_id))

    @server.tool(name="list", annotations=reads)
    async def list_memories(
        tags: list[str] | None = None, limit: int = 20, offset: int = 0
    ) -> dict[str, Any]:
        """Memories, most recently updated first, optionally only those carrying all `tags`."""
        return await guarded(mem.list_memories(tags, limit, offset))

    @server.tool(annotations=writes)
    async def revise(
        memory_id: str,
        content: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Change a memory's content, tags or metadata (what is not given is kept)."""
        return await guarded(mem.revise(memory_id, content, tags, metadata))

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def forget(
        memory_id: str | None = None,
        older_than_days: float | None = None,
        tags: list[str] | None = None,
    ) -> dict[str, Any]:
        """Delete memories for good; durable when this answers. Give memory_id for
        one memory, or older_than_days to forget every memory not updated for that
        many days (only those carrying all `tags`, if given); returns how many."""
        return await guarded(mem.forget(memory_id, older_than_days, tags))

    if allow_sql:

        async def sql(statement: str) -> dict[str, Any]:
            return await guarded(mem.sql(statement))

        # the description is read when the tool is registered: written first
        sql.__doc__ = (
            "Run one read-only ClickHouse SQL statement over this memory's own tables "
            f"(the memories table is `{table}`); rows come back as JSON objects. It runs "
            "under a time and size bound, and cannot reach files, the network or other data."
        )
        server.tool(annotations=reads)(sql)

    return server


def set_retention(
    obj: DurableObject | AsyncDurableObject, days: float, *, table: str = "memories"
) -> None:
    """Forget every memory not updated for `days` days, from now on: the
    object's TTL policy on the table's `updated_at` (`DurableObject.set_ttl`),
    swept by whichever writer has the object open (every
    `ttl_sweep_interval`), each sweep a logged DELETE with a literal cutoff.
    It is the object's, so it outlives this server. 0: no retention. Durable
    on return; `obj` must be its writer."""
    sync = obj.sync if isinstance(obj, AsyncDurableObject) else obj
    if not _TABLE_NAME.fullmatch(table):
        raise InvalidArgument(f"table name {table!r} is not a plain identifier")
    if days == 0 and not isinstance(days, bool):
        sync.remove_ttl(table)
        return
    seconds = _check_days(days, "retention_days") * 86400
    sync.write(memories_ddl(table))
    if [(p.table, p.column, p.seconds) for p in sync.ttl() if p.table == table] != [
        (table, "updated_at", seconds)
    ]:
        sync.set_ttl(table, "updated_at", seconds)


def open_for_serving(
    url: str,
    *,
    owner: str | None = None,
    if_held: Literal["refuse", "read-only"] = "refuse",
    read_only: bool = False,
    reclaim: bool = False,
    storage_options: dict[str, Any] | None = None,
    follow: float | None = None,
    on_change: Callable[[Any], object] | None = None,
    **options: Any,
) -> tuple[DurableObject, str | None]:
    """Open `url` for a server: as its writer, or read-only (and why).

    `reclaim=True` (with `owner`): a live lease held under this server's
    owner name, by an earlier run of it (killed, restarted), is taken at
    once; that run, if it still runs, is fenced at its next write. If
    another writer holds the lease, `if_held="refuse"` raises `LeaseHeld`
    (the default: a second server never writes next to the first), and
    `"read-only"` opens read-only and returns the reason to show: it is
    written for the model that calls the write tools, and says what an
    operator can do. A read-only open follows the writer every `follow`
    seconds (None: a fixed view), calling `on_change` (an `Announcer`)."""
    reader = dict(options)
    if follow is not None:
        reader.update(follow=follow, on_change=on_change)
    if read_only:
        obj = open_object(url, read_only=True, storage_options=storage_options, **reader)
        return obj, (
            "it was started with --read-only; an operator can restart it without that flag "
            "to let it write"
        )
    try:
        obj = open_object(
            url, owner=owner, reclaim=reclaim, storage_options=storage_options, **options
        )
    except LeaseHeld as exc:
        if if_held != "read-only":
            raise
        log.warning(
            "%s: serving read-only: the write lease is held by %r (generation %s)",
            url,
            exc.holder,
            exc.generation,
        )
        obj = open_object(url, read_only=True, storage_options=storage_options, **reader)
        return obj, held_reason(exc, owner)
    return obj, None


def held_reason(exc: LeaseHeld, owner: str | None) -> str:
    """Why a server that found the lease held serves read-only, for a model:
    who holds it, and what an operator can do (never a Python argument)."""
    who = "another writer" if exc.holder is None else f"another writer ({exc.holder!r})"
    reason = (
        f"{who} holds this memory's write lease; an operator can restart this server as the "
        "writer once that writer has stopped"
    )
    if exc.holder is not None and exc.holder == owner:
        reason += (
            ", or at once with --reclaim, since that writer carries this server's own owner "
            "name and may be an earlier run of it"
        )
    return reason


def serve(
    server: MCPServer,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Run `server` until its client goes away (stdio) or it is stopped (http)."""
    if transport == "stdio":
        anyio.run(server.run_stdio_async)
    else:
        anyio.run(lambda: server.run_streamable_http_async(host=host, port=port))
