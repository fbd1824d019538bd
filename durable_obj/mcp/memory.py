"""The memories table: its schema, its SQL, the quoting of every literal.

`MemoryServer` holds the tools' logic over one open durable object: each
tool builds its statement here, with values reaching SQL only as literals
quoted by `_quote`, and every write is flushed before it returns. The SQL
tool's refusal of table functions that reach outside the object is here too.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from durable_obj import Bounds
from durable_obj.aio import AsyncDurableObject
from durable_obj.core.object import DurableObject
from durable_obj.errors import ClassificationRefused, DurableError, InvalidArgument, NotFound
from durable_obj.mcp.limits import (
    Embedder,
    Limits,
    _check_content,
    _check_days,
    _check_id,
    _check_metadata,
    _check_page,
    _check_tags,
    stored_metadata,
)

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: The library method a gate refusal names first (`query() takes ...`).
_CALL = re.compile(r"^\w+\(\) ")


# -- literals ---------------------------------------------------------------------


def _quote(text: str) -> str:
    """`text` as a ClickHouse string literal that reads back exactly `text`.

    Backslash and quote are escaped, control characters are written as
    `\\xHH` (nothing unprintable reaches the engine or the WAL raw). A text
    that is not valid Unicode (a lone surrogate, which JSON can carry) has
    no UTF-8 form and is refused. Written here rather than taken from
    `durable_obj.gate.sql`, which is the core's lexer, not public API.
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


def _shortened(row: dict[str, Any], cap: int) -> dict[str, Any]:
    """`row` with every string value cut so the row fits in about `cap` bytes."""
    share = max(16, cap // max(1, 2 * len(row)))
    return {
        k: (v[:share] + "...(cut)" if isinstance(v, str) and len(v) > share else v)
        for k, v in row.items()
    }


def _time_literal(when: datetime) -> str:
    """A UTC instant as the literal a DateTime64(6, 'UTC') column reads."""
    return "'" + when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


def memories_ddl(table: str) -> str:
    """The memories table, created on the first write (or to set its retention)."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "id String, content String, tags Array(String), metadata String, "
        "created_at DateTime64(6, 'UTC'), updated_at DateTime64(6, 'UTC'), "
        "embedding Array(Float32), version UInt64"
        ") ENGINE = ReplacingMergeTree(version) ORDER BY id"
    )


def _iso(text: str) -> str:
    """The engine's '2024-05-01 10:00:00.123456' (UTC) as ISO 8601."""
    return text.replace(" ", "T", 1) + "Z"


# -- the memory ---------------------------------------------------------------------


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
                f"lease_held: this memory server is read-only: {why}. Nothing was written, "
                "and retrying will not change that; what is already stored is safe, and "
                "search, get and list still work."
            )

    async def _exists(self) -> bool:
        if self.read_only:
            await self.obj.arefresh()
        return self.table in await self.obj.atables()

    async def _ensure_table(self) -> None:
        if self._ready:
            return
        await self.obj.aexecute(memories_ddl(self.table))
        self._ready = True

    async def _rows(
        self, sql: str, bounds: Bounds | None = None
    ) -> tuple[list[dict[str, Any]], bool]:
        """Rows of a JSONEachRow query, cut at the result byte limit (a row
        alone over it comes back with its long strings shortened)."""
        text = await self.obj.aquery(sql, fmt="JSONEachRow", bounds=bounds)
        rows: list[dict[str, Any]] = []
        used = 0
        cap = self.limits.result_bytes
        for line in str(text).split("\n"):
            if not line:
                continue
            used += len(line)
            if used > cap:
                if not rows:
                    rows.append(_shortened(json.loads(line), cap))
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
            "metadata": stored_metadata(row["metadata"]),
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
                # as text: JSON has no NaN or infinity (the engine writes null),
                # and a revise keeps the stored vector as it is
                f"SELECT {self._columns()}, arrayMap(x -> toString(x), embedding) AS embedding "
                f"FROM {self.table} FINAL WHERE id = {_quote(mid)}"
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
        self,
        content: str,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        memory_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a memory, durable when this answers. A `memory_id` the caller
        chose makes a retry safe: the same id with the same memory is never
        stored twice (a retry after a failed answer makes the first durable).
        When the store fails, the answer says whether the memory is kept
        (buffered: it commits with the next write) or dropped."""
        self._require_writable()
        content = _check_content(content, self.limits)
        tag_list = _check_tags(tags, self.limits)
        meta = _check_metadata(metadata, self.limits)
        mid = uuid.uuid4().hex if memory_id is None else _check_id(memory_id)
        _quote(content)  # refuse text that is not Unicode before embedding it
        async with self._write_lock:
            if memory_id is not None and (found := await self._found(mid)) is not None:
                if (found["content"], found["tags"], found["metadata"]) != (
                    content,
                    tag_list,
                    meta,
                ):
                    raise InvalidArgument(
                        f"the memory id {mid} holds another memory; nothing was changed "
                        "(revise changes a memory, a new id stores a new one)"
                    )
                await self._durable(mid, self.obj.aflush())  # a retry: make the first durable
                return self._memory(found)
            vec = await self._embedding(content)
            now = _time_literal(datetime.now(UTC))
            statement = self._insert(mid, content, tag_list, meta, now, now, vec, 1)
            await self._durable(mid, self._commit(statement))
            return self._memory(await self._current(mid))

    async def _found(self, mid: str) -> dict[str, Any] | None:
        try:
            return await self._current(mid)
        except NotFound:
            return None

    async def _durable(self, mid: str, commit: Awaitable[str | None]) -> None:
        """Await `commit`; a failure says what became of memory `mid`."""
        try:
            await commit
        except DurableError as exc:
            sync = self.obj.sync
            if sync.pending and not sync.fenced:
                fate = (
                    f"The memory {mid} is kept here, not yet durable: it commits with the next "
                    f"write, or call remember again with memory_id={mid!r} (never stored twice)."
                )
            else:
                fate = f"The memory {mid} was not stored."
            raise type(exc)(f"{exc} {fate}") from None

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
            now = _time_literal(datetime.now(UTC))
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

    async def forget(
        self,
        memory_id: str | None = None,
        older_than_days: float | None = None,
        tags: list[str] | None = None,
    ) -> dict[str, Any]:
        """Forget one memory by id, or every memory (carrying all `tags`) not
        updated for `older_than_days`: a logged DELETE whose cutoff, computed
        here, is a literal. Durable when this answers."""
        self._require_writable()
        if (memory_id is None) == (older_than_days is None):
            raise InvalidArgument(
                "give memory_id (one memory) or older_than_days (every memory not updated "
                "for that many days), not both and not neither; nothing was changed"
            )
        if memory_id is not None:
            if tags:
                raise InvalidArgument("tags narrow older_than_days only; nothing was changed")
            mid = _check_id(memory_id)
            async with self._write_lock:
                await self._current(mid)  # NotFound when absent
                await self._commit(f"DELETE FROM {self.table} WHERE id = {_quote(mid)}")
                return {"id": mid, "forgotten": True}
        days = _check_days(older_than_days)
        tag_list = _check_tags(tags, self.limits)
        async with self._write_lock:
            before = datetime.now(UTC) - timedelta(days=days)
            answer: dict[str, Any] = {"forgotten": 0, "before": before.isoformat()}
            if not await self._exists():
                return answer
            conds = [f"updated_at < {_time_literal(before)}"]
            conds += [f"has(tags, {_quote(t)})" for t in tag_list]
            where = " AND ".join(conds)
            rows, _ = await self._rows(f"SELECT count() AS n FROM {self.table} FINAL WHERE {where}")
            answer["forgotten"] = int(rows[0]["n"])
            if answer["forgotten"]:  # every version of each (a revision is a row of its own)
                await self._commit(
                    f"DELETE FROM {self.table} WHERE id IN "
                    f"(SELECT id FROM {self.table} FINAL WHERE {where})"
                )
            return answer

    async def sql(self, statement: str) -> dict[str, Any]:
        """One read-only statement over the object's own tables, rows as JSON."""
        if len(statement) > self.limits.sql_chars:
            raise InvalidArgument(f"the statement is over {self.limits.sql_chars} characters")
        if not statement.strip():
            raise InvalidArgument("the statement is empty")
        if self.read_only:
            await self.obj.arefresh()
        # The statement gate (`durable_obj.gate`) refuses every table function
        # but the pure generators before anything resolves one.
        limits = self.limits
        bounds = Bounds(
            seconds=limits.sql_seconds,
            result_bytes=limits.result_bytes,
            memory_bytes=limits.sql_memory_bytes,
        )
        try:
            rows, cut = await self._rows(statement, bounds)
        except ClassificationRefused as exc:
            # The gate names the library's methods; an MCP client has tools.
            text = _CALL.sub("the sql tool ", str(exc), count=1).replace(
                "Use execute() for a change, which logs it to the WAL.",
                "It only reads: change memories with the remember, revise and forget tools.",
            )
            raise ClassificationRefused(text) from None
        return {"rows": rows, "truncated": cut}
