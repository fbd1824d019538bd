"""`durable-obj mcp OBJECT_URL`: serve one object as an MCP memory server.

stdio by default (stdout carries only the protocol: every message of ours
goes to stderr), streamable HTTP with `--transport http` (bound to
127.0.0.1 unless `--host` says otherwise). The server writes only the object
it was started on; a second server on the same object is refused, or serves
read-only with `--if-held read-only`. SIGTERM and the client closing stdin
both stop it cleanly: the object is flushed, closed and its lease released.
A server killed without that (kill -9, a crash) leaves its lease live until
it expires; started again under the same owner name with `--reclaim`, it
takes that lease at once instead of waiting.

Needs the `mcp` extra: `pip install 'durable_obj[mcp]'`.
"""

from __future__ import annotations

import signal
import socket
from types import FrameType
from typing import Any, Literal, cast

import click

from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure
from durable_obj.cli.keys import key_options
from durable_obj.cli.session import session, storage_options
from durable_obj.errors import LeaseHeld


def default_owner() -> str:
    """The lease owner of a memory server: durable-obj-mcp@HOST."""
    return f"durable-obj-mcp@{socket.gethostname() or 'localhost'}"


def refusal(exc: LeaseHeld, url: str, owner: str, *, reclaim: bool) -> str:
    """The server's refusal to start on a held lease, in this command's
    flags (the library's own text names Python arguments, and a --force
    this command does not have)."""
    if exc.holder is None:
        return f"{exc} Start it again, or with --if-held read-only to serve reads."
    wait = "" if exc.wait is None else f"; a start succeeds in {exc.wait:.1f} s if not renewed"
    text = f"{url} is held by {exc.holder!r} (generation {exc.generation}){wait}. "
    text += "Nothing was changed. "
    if exc.holder == owner:
        text += (
            "It carries this server's owner name: if it is an earlier run of this server "
            "(killed or restarted), start it with --reclaim to take the lease at once (that "
            "run, if still alive, is fenced at its next write). "
        )
    elif reclaim:
        text += (
            f"--reclaim takes only a lease held under this server's own owner name ({owner!r}, "
            "set with --owner), and this lease is another writer's. "
        )
    return text + (
        "Otherwise stop that writer, wait, or start this server with --if-held read-only (to "
        "serve reads beside it) or --read-only. If that writer is known to be gone, "
        f"'durable-obj release {url} --force' frees its lease (what it did not flush is lost)."
    )


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@cli.command("mcp")
@click.argument("object_url")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio, or streamable HTTP (at http://HOST:PORT/mcp).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option("--port", type=int, default=8000, show_default=True, help="HTTP: port to bind.")
@click.option(
    "--allow-sql",
    is_flag=True,
    help="Add the `sql` tool: one read-only statement over this object's tables.",
)
@click.option(
    "--embed",
    metavar="MODULE:FUNCTION",
    help="Embedding function (text -> list of floats) for vector search, by import path.",
)
@click.option("--table", default="memories", show_default=True, help="The memories table.")
@click.option("--owner", help="Name in the lease (default: durable-obj-mcp@HOST).")
@click.option(
    "--if-held",
    type=click.Choice(["refuse", "read-only"]),
    default="refuse",
    show_default=True,
    help="When another writer holds the lease: refuse to start, or serve read-only.",
)
@click.option("--read-only", is_flag=True, help="Serve read-only (takes no lease).")
@click.option(
    "--reclaim",
    is_flag=True,
    help="Take at once a live lease held under this server's owner name by an earlier run "
    "(killed, restarted) instead of waiting for it to expire; that run, if still alive, is "
    "fenced. Only when no other live server uses this owner name. Another owner's lease "
    "still refuses (or --if-held read-only).",
)
@click.option(
    "--follow",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Serving read-only: move to the writer's commits every this many seconds and tell "
    "listening clients the memory changed (0: a fixed view).",
)
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0),
    help="Forget every memory not updated for this many days: the object's TTL policy, "
    "kept by the object for every later writer (0: remove it). A writer sweeps every minute.",
)
@click.option(
    "--lease-ttl",
    type=float,
    help="Seconds the lease lasts without renewal (default: the object's default).",
)
@key_options
@storage_options
def mcp_cmd(
    object_url: str,
    transport: str,
    host: str,
    port: int,
    allow_sql: bool,
    embed: str | None,
    table: str,
    owner: str | None,
    if_held: str,
    read_only: bool,
    reclaim: bool,
    follow: float,
    retention_days: float | None,
    lease_ttl: float | None,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Serve OBJECT_URL to agents as an MCP memory server.

    Tools: remember, search, get, list, revise, forget (and sql with
    --allow-sql). Every write is durable when its tool answers. An encrypted
    object is served with its key (--key-env, --key-file or --kms-key); with
    a key, a new object is created encrypted under it. --retention-days N
    forgets memories not updated for N days.
    """
    parse_object_url(object_url)  # a bad URL or id fails before anything opens
    try:
        from durable_obj import mcp as memory
    except ImportError as exc:
        raise Failure(
            "invalid_argument",
            f"the mcp command needs the mcp extra: pip install 'durable_obj[mcp]' ({exc})",
            2,
        ) from None
    embedder = memory.load_embedder(embed) if embed else None
    options: dict[str, Any] = {} if lease_ttl is None else {"lease_ttl": lease_ttl}
    if encryption is not None:
        options["encryption"] = encryption
    owner = owner or default_owner()
    announcer = memory.Announcer()
    try:
        obj, reason = memory.open_for_serving(
            object_url,
            owner=owner,
            if_held=cast(Literal["refuse", "read-only"], if_held),
            read_only=read_only,
            reclaim=reclaim,
            storage_options=storage_options,
            follow=follow or None,
            on_change=announcer,
            **options,
        )
    except LeaseHeld as exc:
        raise Failure("lease_held", refusal(exc, object_url, owner, reclaim=reclaim)) from None
    sess = session()
    try:
        server = memory.build_server(
            obj,
            allow_sql=allow_sql,
            embed=embedder,
            table=table,
            read_only_reason=reason,
            announcer=announcer,
            retention_days=retention_days,
        )
        where = "stdio" if transport == "stdio" else f"http://{host}:{port}/mcp"
        mode = "read-only" if obj.read_only else "writer"
        sess.echo(f"serving {obj.oid} ({mode}) over {where}", err=True)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            memory.serve(
                server,
                transport=cast(Literal["stdio", "http"], transport),
                host=host,
                port=port,
            )
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
    except BaseException:
        obj.close(discard=True)  # every acknowledged write was flushed already
        raise
    obj.close()
    sess.echo(f"stopped; {obj.oid} closed at seq {obj.seq}", err=True)
