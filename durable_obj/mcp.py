"""The MCP memory server: one durable object served to agents as tools.

    durable-obj mcp /srv/agents/alice                       # stdio
    durable-obj mcp s3://bucket/agents/alice --transport http --port 8765 \\
        -o endpoint_url=http://127.0.0.1:9000 --embed mypkg.embed:embed --allow-sql

or, in Python, `build_server(obj)` on an open object (`durable_obj.open`)
and any mcp 2 transport.

Tools: `remember`, `search`, `get`, `list`, `revise`, `forget` and, only
with `allow_sql=True`, `sql` (one read-only statement over the object's own
tables). What the existing memory servers get wrong, and this one does not:

* Two servers on one memory never overwrite each other silently. A server
  that writes holds the object's lease; a second one is refused at start
  (`LeaseHeld`, naming the holder) or, if asked, serves read-only and says
  so in every write tool's error (`if_held="read-only"` / `--if-held`).
* A crash loses nothing acknowledged: every remember / revise / forget is
  flushed (the durability boundary) before the tool answers.
* A corrupt or hostile input (a huge string, a bad id, quotes and SQL in
  content, arguments of the wrong type, text that is not Unicode) is a tool
  error with a message, never a dead server. Values reach SQL only as
  literals quoted here, exactly (`_quote`).
* The server is scoped to the object it was started on: the SQL tool runs
  through the object's `query()` (it refuses writes, other databases and
  reaching outside), after a check of its own that refuses every table
  function but the pure generators *before* the engine sees the statement
  (the engine's schema inference would otherwise fetch a `url()` while the
  statement is only being checked).

Memories live in one table (default `memories`) created on the first write:
id, content, tags, metadata (JSON text), created_at, updated_at, embedding,
version. A revision is a new row with the next version (ReplacingMergeTree,
read `FINAL`); forgetting is a `DELETE`. Ids (uuid4 hex), times and
embeddings are computed here, in Python, and logged as literals, so a replay
means exactly what the writer did; an embedding is never recomputed.

Embeddings: pass `embed=` a function `str -> sequence of floats`, or on the
command line `--embed module:function` (an import path). Without one,
`search` filters by text (case-insensitive substring) and tags; with one, it
ranks by cosine distance (`mode="auto"` or `"vector"`).

Needs the `mcp` extra: `pip install 'durable_obj[mcp]'`. Public API only:
`DurableObject`, `AsyncDurableObject`, the errors.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

import anyio

from durable_obj.aio import AsyncDurableObject
from durable_obj.errors import (
    DurableError,
    InvalidArgument,
    LeaseHeld,
    MissingDependency,
    NotFound,
)
from durable_obj.namespace import open as open_object
from durable_obj.object import DurableObject

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency(
        "the MCP memory server needs the mcp extra: pip install 'durable_obj[mcp]'"
    ) from exc

__all__ = [
    "Embedder",
    "Limits",
    "MemoryServer",
    "build_server",
    "load_embedder",
    "open_for_serving",
    "serve",
]

log = logging.getLogger("durable_obj")

#: A function from a text to its embedding.
Embedder = Callable[[str], Sequence[float]]

#: Table functions that compute their rows from their arguments alone: the
#: only ones the SQL tool lets through.
_PURE_TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries"}
    | {"values", "null", "view"}
)
_ID = re.compile(r"[0-9a-f]{32}")
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_AST_FUNCTION = re.compile(r"Function (\S+)")


@dataclass(frozen=True)
class Limits:
    """What one tool call may carry or return (a larger input is a tool error)."""

    content_bytes: int = 256 * 1024
    tags: int = 32
    tag_chars: int = 128
    metadata_bytes: int = 64 * 1024
    query_chars: int = 4096
    page: int = 1000
    sql_chars: int = 64 * 1024
    #: A list, search or sql answer stops adding rows past this many bytes
    #: and says `truncated`.
    result_bytes: int = 1024 * 1024
    embedding_dims: int = 8192


# -- literals ---------------------------------------------------------------------


def _quote(text: str) -> str:
    """`text` as a ClickHouse string literal that reads back exactly `text`.

    Backslash and quote are escaped, control characters are written as
    `\\xHH` (nothing unprintable reaches the engine or the WAL raw). A text
    that is not valid Unicode (a lone surrogate, which JSON can carry) has
    no UTF-8 form and is refused. Written here rather than taken from
    `durable_obj.sql`, which is the core's lexer, not public API.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            "the text is not valid Unicode (it holds a lone surrogate); nothing was written"
        ) from None
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch < " " or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def _time_literal(when: datetime) -> str:
    """A UTC instant as the literal a DateTime64(6, 'UTC') column reads."""
    return "'" + when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


def _iso(text: str) -> str:
    """The engine's '2024-05-01 10:00:00.123456' (UTC) as ISO 8601."""
    return text.replace(" ", "T", 1) + "Z"


# -- validation -------------------------------------------------------------------


def _check_id(memory_id: str) -> str:
    mid = memory_id.strip().lower().replace("-", "") if len(memory_id) <= 64 else ""
    if not _ID.fullmatch(mid):
        raise InvalidArgument(
            "not a memory id (32 hex digits, as remember returned it); nothing was changed"
        )
    return mid


def _check_content(content: str, limits: Limits) -> str:
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > limits.content_bytes:
        raise InvalidArgument(
            f"content is {size} bytes, over the limit of {limits.content_bytes}; "
            "nothing was written. Split it into several memories."
        )
    if not content.strip():
        raise InvalidArgument("content is empty; nothing was written")
    return content


def _check_tags(tags: Sequence[str] | None, limits: Limits) -> list[str]:
    if tags is None:
        return []
    if len(tags) > limits.tags:
        raise InvalidArgument(f"{len(tags)} tags, over the limit of {limits.tags}")
    out: list[str] = []
    for tag in tags:
        if not tag or len(tag) > limits.tag_chars:
            raise InvalidArgument(f"a tag must have 1 to {limits.tag_chars} characters")
        if tag not in out:
            out.append(tag)
    return out


def _check_metadata(metadata: dict[str, Any] | None, limits: Limits) -> str:
    try:
        text = json.dumps(metadata or {}, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"metadata is not a JSON object: {exc}") from None
    if len(text.encode("utf-8", "surrogatepass")) > limits.metadata_bytes:
        raise InvalidArgument(f"metadata is over the limit of {limits.metadata_bytes} bytes")
    return text


def _check_page(limit: int, offset: int, limits: Limits) -> None:
    if not 1 <= limit <= limits.page:
        raise InvalidArgument(f"limit must be 1 to {limits.page}")
    if not 0 <= offset <= 2**53 - 1:
        raise InvalidArgument("offset must be 0 or more")


def load_embedder(spec: str) -> Embedder:
    """The function named by `module:function` (an import path), e.g.
    `mypkg.embeddings:embed`. It takes a text and returns its embedding."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgument(f"--embed takes module:function, got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot load the embedding function {spec!r}: {exc}") from None
    if not callable(target):
        raise InvalidArgument(f"the embedding function {spec!r} is not callable")
    fn: Embedder = target
    return fn


# -- the memory ---------------------------------------------------------------------


def _tool_error(exc: DurableError) -> ToolError:
    return ToolError(f"{exc.category}: {exc}")


class MemoryServer:
    """The tools' logic over one open durable object.

    Each write runs under one lock (a revision reads the current version,
    then writes the next) and is flushed before it returns. A read-only
    object (another server holds the lease) serves reads of what its writer
    flushed (refreshed before each read) and refuses writes, saying why.
    """

    def __init__(
        self,
        obj: DurableObject | AsyncDurableObject,
        *,
        table: str = "memories",
        embed: Embedder | None = None,
        limits: Limits | None = None,
        read_only_reason: str | None = None,
    ) -> None:
        if not _TABLE_NAME.fullmatch(table):
            raise InvalidArgument(f"table name {table!r} is not a plain identifier")
        self.obj = obj if isinstance(obj, AsyncDurableObject) else AsyncDurableObject.wrap(obj)
        self.table = table
        self.embed = embed
        self.limits = limits or Limits()
        self.read_only_reason = read_only_reason
        self._write_lock = anyio.Lock()
        self._ready = False

    # -- plumbing -----------------------------------------------------------------
    @property
    def read_only(self) -> bool:
        return self.obj.sync.read_only

    def _require_writable(self) -> None:
        if self.read_only:
            why = self.read_only_reason or "it was started read-only"
            raise ToolError(
                f"lease_held: this memory server is read-only ({why}); nothing was written"
            )

    async def _exists(self) -> bool:
        if self.read_only:
            await self.obj.arefresh()
        return self.table in await self.obj.atables()

    async def _ensure_table(self) -> None:
        if self._ready:
            return
        await self.obj.aexecute(
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            "id String, content String, tags Array(String), metadata String, "
            "created_at DateTime64(6, 'UTC'), updated_at DateTime64(6, 'UTC'), "
            "embedding Array(Float32), version UInt64"
            ") ENGINE = ReplacingMergeTree(version) ORDER BY id"
        )
        self._ready = True

    async def _rows(self, sql: str) -> tuple[list[dict[str, Any]], bool]:
        """Rows of a JSONEachRow query, cut at the result byte limit."""
        text = await self.obj.aquery(sql, fmt="JSONEachRow")
        rows: list[dict[str, Any]] = []
        used = 0
        for line in str(text).split("\n"):
            if not line:
                continue
            used += len(line)
            if rows and used > self.limits.result_bytes:
                return rows, True
            rows.append(json.loads(line))
        return rows, False

    async def _embedding(self, text: str) -> list[float] | None:
        if self.embed is None:
            return None
        embed = self.embed
        try:
            raw = await anyio.to_thread.run_sync(lambda: list(embed(text)))
            vec = [float(x) for x in raw]
        except Exception as exc:
            raise ToolError(
                f"the embedding function failed ({type(exc).__name__}: {exc}); nothing was written"
            ) from None
        if not vec or len(vec) > self.limits.embedding_dims:
            raise ToolError(
                f"the embedding function returned {len(vec)} numbers "
                f"(1 to {self.limits.embedding_dims} expected); nothing was written"
            )
        if not all(math.isfinite(x) for x in vec):
            raise ToolError("the embedding function returned a NaN or infinite number")
        return vec

    @staticmethod
    def _vector(vec: list[float] | None) -> str:
        return "[" + ", ".join(repr(x) for x in vec or []) + "]"

    def _columns(self) -> str:
        return (
            "id, content, tags, metadata, toString(created_at) AS created_at, "
            "toString(updated_at) AS updated_at, toString(version) AS version"
        )

    @staticmethod
    def _memory(row: dict[str, Any]) -> dict[str, Any]:
        out = {
            "id": row["id"],
            "content": row["content"],
            "tags": row["tags"],
            "metadata": json.loads(row["metadata"] or "{}"),
            "created_at": _iso(row["created_at"]),
            "updated_at": _iso(row["updated_at"]),
            "version": int(row["version"]),
        }
        if "score" in row:
            out["score"] = row["score"]
        return out

    async def _current(self, mid: str) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        if await self._exists():
            rows, _ = await self._rows(
                f"SELECT {self._columns()}, embedding FROM {self.table} FINAL "
                f"WHERE id = {_quote(mid)}"
            )
        if not rows:
            raise NotFound(f"no memory with id {mid}")
        return rows[0]

    async def _commit(self, statement: str) -> str | None:
        """Run one statement and flush: durable when this returns."""
        await self._ensure_table()
        await self.obj.aexecute(statement)
        return await self.obj.aflush()

    def _insert(
        self,
        mid: str,
        content: str,
        tags: list[str],
        metadata: str,
        created: str,
        updated: str,
        vec: list[float] | None,
        version: int,
    ) -> str:
        tag_list = "[" + ", ".join(_quote(t) for t in tags) + "]"
        return (
            f"INSERT INTO {self.table} (id, content, tags, metadata, created_at, updated_at, "
            f"embedding, version) VALUES ({_quote(mid)}, {_quote(content)}, {tag_list}, "
            f"{_quote(metadata)}, {created}, {updated}, {self._vector(vec)}, {version})"
        )

    # -- tools ----------------------------------------------------------------------
    async def remember(
        self, content: str, tags: list[str] | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self._require_writable()
        content = _check_content(content, self.limits)
        tag_list = _check_tags(tags, self.limits)
        meta = _check_metadata(metadata, self.limits)
        _quote(content)  # refuse text that is not Unicode before embedding it
        vec = await self._embedding(content)
        async with self._write_lock:
            mid = uuid.uuid4().hex
            now = _time_literal(datetime.now(timezone.utc))
            await self._commit(self._insert(mid, content, tag_list, meta, now, now, vec, 1))
            return self._memory(await self._current(mid))

    async def get(self, memory_id: str) -> dict[str, Any]:
        return self._memory(await self._current(_check_id(memory_id)))

    async def list_memories(
        self, tags: list[str] | None = None, limit: int = 20, offset: int = 0
    ) -> dict[str, Any]:
        tag_list = _check_tags(tags, self.limits)
        _check_page(limit, offset, self.limits)
        if not await self._exists():
            return {"memories": [], "truncated": False}
        where = " AND ".join(f"has(tags, {_quote(t)})" for t in tag_list) or "1"
        rows, cut = await self._rows(
            f"SELECT {self._columns()} FROM {self.table} FINAL WHERE {where} "
            f"ORDER BY updated_at DESC, id LIMIT {limit} OFFSET {offset}"
        )
        return {"memories": [self._memory(r) for r in rows], "truncated": cut}

    async def search(
        self,
        query: str = "",
        tags: list[str] | None = None,
        limit: int = 10,
        mode: Literal["auto", "text", "vector"] = "auto",
    ) -> dict[str, Any]:
        if len(query) > self.limits.query_chars:
            raise InvalidArgument(
                f"query is over the limit of {self.limits.query_chars} characters"
            )
        tag_list = _check_tags(tags, self.limits)
        _check_page(limit, 0, self.limits)
        if mode == "vector" and self.embed is None:
            raise InvalidArgument(
                "vector search needs an embedding function (start the server with "
                "--embed module:function); use mode='text'"
            )
        vector = mode == "vector" or (mode == "auto" and self.embed is not None and bool(query))
        if vector and not query:
            raise InvalidArgument("vector search needs a query text")
        _quote(query)
        if not await self._exists():
            return {"mode": "vector" if vector else "text", "results": [], "truncated": False}
        conds = [f"has(tags, {_quote(t)})" for t in tag_list]
        if vector:
            qvec = await self._embedding(query)
            assert qvec is not None
            conds.append(f"length(embedding) = {len(qvec)}")
            score = f"1 - cosineDistance(embedding, {self._vector(qvec)})"
            order = "score DESC, id"
        else:
            if query:
                conds.append(f"positionCaseInsensitiveUTF8(content, {_quote(query)}) > 0")
            score = "toFloat64(1)"
            order = "updated_at DESC, id"
        where = " AND ".join(conds) or "1"
        rows, cut = await self._rows(
            f"SELECT {self._columns()}, {score} AS score FROM {self.table} FINAL "
            f"WHERE {where} ORDER BY {order} LIMIT {limit}"
        )
        return {
            "mode": "vector" if vector else "text",
            "results": [self._memory(r) for r in rows],
            "truncated": cut,
        }

    async def revise(
        self,
        memory_id: str,
        content: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self._require_writable()
        mid = _check_id(memory_id)
        if content is None and tags is None and metadata is None:
            raise InvalidArgument("nothing to revise: give content, tags or metadata")
        new_content = None if content is None else _check_content(content, self.limits)
        new_tags = None if tags is None else _check_tags(tags, self.limits)
        new_meta = None if metadata is None else _check_metadata(metadata, self.limits)
        vec = None
        if new_content is not None:
            _quote(new_content)
            vec = await self._embedding(new_content)
        async with self._write_lock:
            cur = await self._current(mid)
            if new_content is None:
                vec = [float(x) for x in cur["embedding"]]
            created = _quote(cur["created_at"])
            now = _time_literal(datetime.now(timezone.utc))
            await self._commit(
                self._insert(
                    mid,
                    cur["content"] if new_content is None else new_content,
                    cur["tags"] if new_tags is None else new_tags,
                    cur["metadata"] if new_meta is None else new_meta,
                    created,
                    now,
                    vec,
                    int(cur["version"]) + 1,
                )
            )
            return self._memory(await self._current(mid))

    async def forget(self, memory_id: str) -> dict[str, Any]:
        self._require_writable()
        mid = _check_id(memory_id)
        async with self._write_lock:
            await self._current(mid)  # NotFound when absent
            await self._commit(f"DELETE FROM {self.table} WHERE id = {_quote(mid)}")
            return {"id": mid, "forgotten": True}

    async def sql(self, statement: str) -> dict[str, Any]:
        """One read-only statement over the object's own tables, rows as JSON."""
        if len(statement) > self.limits.sql_chars:
            raise InvalidArgument(f"the statement is over {self.limits.sql_chars} characters")
        if not statement.strip():
            raise InvalidArgument("the statement is empty")
        if self.read_only:
            await self.obj.arefresh()
        # Parse only (no schema inference, nothing fetched): refuse every
        # table function but the pure generators before the engine runs it.
        ast = str(await self.obj.aquery("EXPLAIN AST " + statement, fmt="TSVRaw"))
        lines = ast.split("\n")
        for n, line in enumerate(lines[:-1]):
            if line.strip().startswith("TableExpression"):
                depth = len(line) - len(line.lstrip())
                child = lines[n + 1]
                found = _AST_FUNCTION.match(child.strip())
                if (
                    found
                    and len(child) - len(child.lstrip()) > depth
                    and found.group(1).lower() not in _PURE_TABLE_FUNCTIONS
                ):
                    raise ToolError(
                        f"classification_refused: the table function {found.group(1)}() reaches "
                        "outside this memory; the SQL tool reads only this object's tables. "
                        "Nothing was run."
                    )
        rows, cut = await self._rows(statement)
        return {"rows": rows, "truncated": cut}


# -- the server --------------------------------------------------------------------

_INSTRUCTIONS = (
    "A durable memory. remember stores a fact (with optional tags and JSON metadata) and "
    "returns its id; search finds memories by text (and by meaning, when the server has an "
    "embedding function); get, list, revise and forget work on ids. Every write is durable "
    "when the tool answers."
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
) -> MCPServer:
    """An MCP server whose tools read and write memories in `obj` (open)."""
    mem = MemoryServer(
        obj, table=table, embed=embed, limits=limits, read_only_reason=read_only_reason
    )
    server: MCPServer = MCPServer(name, instructions=_INSTRUCTIONS, log_level="WARNING")
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
        content: str, tags: list[str] | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store a new memory; durable when this answers. Returns it, with its id."""
        return await guarded(mem.remember(content, tags, metadata))

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
    async def forget(memory_id: str) -> dict[str, Any]:
        """Delete a memory for good; durable when this answers."""
        return await guarded(mem.forget(memory_id))

    if allow_sql:

        @server.tool(annotations=reads)
        async def sql(statement: str) -> dict[str, Any]:
            """Run one read-only ClickHouse SQL statement over this memory's own tables
            (the memories table is `%s`); rows come back as JSON objects."""
            return await guarded(mem.sql(statement))

        sql.__doc__ = (sql.__doc__ or "") % table

    return server


def open_for_serving(
    url: str,
    *,
    owner: str | None = None,
    if_held: Literal["refuse", "read-only"] = "refuse",
    read_only: bool = False,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[DurableObject, str | None]:
    """Open `url` for a server: as its writer, or read-only (and why).

    If another writer holds the lease, `if_held="refuse"` raises `LeaseHeld`
    (the default: a second server never writes next to the first), and
    `"read-only"` opens read-only and returns the reason to show."""
    if read_only:
        obj = open_object(url, read_only=True, storage_options=storage_options, **options)
        return obj, "it was started with --read-only"
    try:
        obj = open_object(url, owner=owner, storage_options=storage_options, **options)
    except LeaseHeld as exc:
        if if_held != "read-only":
            raise
        log.warning("%s: serving read-only: %s", url, exc)
        obj = open_object(url, read_only=True, storage_options=storage_options, **options)
        return obj, f"another writer holds the lease: {exc}"
    return obj, None


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
