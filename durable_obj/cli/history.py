"""Time travel from a shell: `history`, and the `--at` option of sql and fork."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.table import Table

from durable_obj import Namespace
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure
from durable_obj.cli.keys import key_options
from durable_obj.cli.session import session, storage_options
from durable_obj.core import history as histories

F = TypeVar("F", bound=Callable[..., Any])

_SEQ = re.compile(r"\d+\Z")


def parse_at(text: str | None) -> int | datetime | None:
    """`--at`: a seq (digits), or an ISO 8601 time with a zone (`Z` or
    `+02:00`). A time without a zone is refused: it would name a different
    instant on each machine."""
    if text is None:
        return None
    text = text.strip()
    if _SEQ.match(text):
        return int(text)
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise Failure(
            "invalid_argument",
            f"--at {text!r} is neither a seq (an integer) nor an ISO 8601 time such as "
            "2026-05-01T14:03:00Z. Nothing was read.",
            2,
        ) from None
    if when.tzinfo is None:
        raise Failure(
            "invalid_argument",
            f"--at {text!r} has no time zone: add Z (UTC) or an offset such as +02:00. "
            "Nothing was read.",
            2,
        )
    return when


def at_option(fn: F) -> F:
    """`--at SEQ|TIME` on a command that reads an object."""
    return click.option(
        "--at",
        "at",
        metavar="SEQ|TIME",
        help="A past state: a seq from 'durable-obj history', or the last commit at or before "
        "an ISO 8601 time with a zone (2026-05-01T14:03:00Z).",
    )(fn)


def _iso(t: datetime | None) -> str:
    if t is None:
        return "-"
    return t.astimezone(UTC).isoformat(timespec="seconds")


@cli.command("history")
@click.argument("object_url")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead.")
@click.option("--all", "show_all", is_flag=True, help="Also list points no longer restorable.")
@key_options
@storage_options
def history_cmd(
    object_url: str,
    as_json: bool,
    show_all: bool,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """List the points an object can be opened at (sql --at, fork --at).

    One point per committed seq: a WAL segment or a base, with its writer and
    commit time. Restorable: every point inside the retention window, plus
    the one in effect when the window opens. Reads only. With --json, times
    are ISO 8601 text in UTC, to the microsecond: a point's committed_at
    given to --at names exactly that point. An encrypted object's points
    before its last checkpoint are read with its key (--key-env, ...)."""
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(namespace, storage_options=storage_options, encryption=encryption)
    past = ns.history(oid)
    restorable = {p.seq for p in past.restorable}
    shown = past.points if show_all else past.restorable
    sess = session()
    if as_json:
        doc = {
            "oid": oid,
            "retention": past.retention,
            "now": histories.iso(histories.utc(past.now)),
            "head_seq": past.head_seq,
            "oldest_restorable": None if past.oldest is None else past.oldest.seq,
            "points": [{**p.to_json(), "restorable": p.seq in restorable} for p in shown],
        }
        sess.echo(json.dumps(doc, indent=2))
        return
    table = Table()
    for name in ("seq", "kind", "committed (UTC)", "owner", "gen", "key"):
        table.add_column(name, overflow="fold", justify="right" if name == "seq" else "left")
    for p in shown:
        stamp = _iso(p.committed_at) + (" (store)" if p.time_source == "store" else "")
        mark = "" if p.seq in restorable else " (gone)"
        table.add_row(
            str(p.seq),
            p.kind + mark,
            stamp,
            p.owner or "-",
            "-" if p.generation is None else str(p.generation),
            p.key,
        )
    sess.stdout().print(table)
    sess.echo(
        f"{len(past.restorable)} restorable point(s) of {len(past.points)} known; retention "
        f"{past.retention:g} s; {past.describe_oldest()}"
    )
