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
  A server restarted after a crash under the same owner name takes its
  earlier run's lease at once with `reclaim=True` / `--reclaim`.
* A crash loses nothing acknowledged: every remember / revise / forget is
  flushed (the durability boundary) before the tool answers.
* A corrupt or hostile input (a huge string, a bad id, quotes and SQL in
  content, arguments of the wrong type, text that is not Unicode) is a tool
  error with a message, never a dead server. Values reach SQL only as
  literals quoted here, exactly (`memory._quote`).
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

Forgetting with time: `forget(older_than_days=N)` (optionally with `tags`)
forgets every memory not updated for N days, by one logged DELETE whose
cutoff is a literal computed here. A retention (`build_server(...,
retention_days=N)`, `set_retention`, `--retention-days N`) does it for good:
it sets the object's TTL policy on the memories' `updated_at`
(`DurableObject.set_ttl`), which the object keeps for every later writer and
whose writer sweeps it every `ttl_sweep_interval` (docs/guides/ttl.md).

Embeddings: pass `embed=` a function `str -> sequence of floats`, or on the
command line `--embed module:function` (an import path). Without one,
`search` filters by text (case-insensitive substring) and tags; with one, it
ranks by cosine distance (`mode="auto"` or `"vector"`).

Changes: a server serving a memory read-only follows it (`--follow`,
default every second) and announces each commit of the writer as
`notifications/resources/updated` for the resource `durable-obj://memory`
to the clients listening (`subscriptions/listen`; `changes.py` says why the
2025-era `resources/subscribe` is not served).

The package: `limits.py` (what a tool call may carry, input checks, the
embedder loader), `memory.py` (the table, its SQL and the quoting of
literals: `MemoryServer`), `changes.py` (announcing changes), `server.py`
(the MCP tools and the memory resource, opening and serving).

Needs the `mcp` extra: `pip install 'durable_obj[mcp]'`. Public API only:
`DurableObject`, `AsyncDurableObject`, the errors.
"""

from __future__ import annotations

# Imported first, so that without the extra the package fails here, with the
# install hint, whichever of its modules was asked for.
try:
    from mcp.server.mcpserver import MCPServer  # noqa: F401
    from mcp.server.mcpserver.exceptions import ToolError  # noqa: F401
    from mcp.types import ToolAnnotations  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from durable_obj.errors import MissingDependency

    raise MissingDependency(
        "the MCP memory server needs the mcp extra: pip install 'durable_obj[mcp]'"
    ) from exc

from durable_obj.mcp.changes import MEMORY_URI, Announcer
from durable_obj.mcp.limits import Embedder, Limits, load_embedder
from durable_obj.mcp.memory import MemoryServer
from durable_obj.mcp.server import build_server, open_for_serving, serve, set_retention

__all__ = [
    "MEMORY_URI",
    "Announcer",
    "Embedder",
    "Limits",
    "MemoryServer",
    "build_server",
    "load_embedder",
    "open_for_serving",
    "serve",
    "set_retention",
]
