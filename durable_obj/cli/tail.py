"""`durable-obj tail`: an object's commits as they land, like `tail -f`.

    durable-obj tail /srv/agents/checkout-api --since 0 --json

Reads only (no engine, no lease): the change feed (`Namespace.changes`),
one conditional read of the head per poll while nothing is committed. An
encrypted object's statements need its key (`--key-env`, `--key-file`,
`--kms-key`, as every command takes them).
"""

from __future__ import annotations

import json
from typing import Any

import click

from durable_obj import Namespace
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.keys import key_options
from durable_obj.cli.session import session, storage_options
from durable_obj.core import history as histories


@cli.command("tail")
@click.argument("object_url")
@click.option(
    "--since",
    type=click.IntRange(min=0),
    default=None,
    metavar="SEQ",
    help="Start after this seq (0: every commit still served); default: only new commits.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per commit, per line.")
@click.option(
    "--poll",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between reads of the head while nothing is new.",
)
@click.option(
    "--no-follow", is_flag=True, help="Print the commits there are now, then exit (no -f)."
)
@key_options
@storage_options
def tail_cmd(
    object_url: str,
    since: int | None,
    as_json: bool,
    poll: float,
    no_follow: bool,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Print each commit of an object as it lands: its seq, commit time, writer
    and statements (a checkpoint is a line of its own). Ctrl-C stops it.

    A seq outside the retention window, or collected by gc, stops it with
    not_found naming the oldest seq it can still serve: never a silent gap."""
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(namespace, storage_options=storage_options, encryption=encryption)
    sess = session()
    try:
        for change in ns.changes(oid, since, follow=not no_follow, poll=poll):
            if as_json:
                sess.echo(json.dumps(change.to_json(), ensure_ascii=False))
                continue
            who = f"gen {'-' if change.generation is None else change.generation}"
            if change.owner:
                who += f", {change.owner}"
            stamp = histories.iso(change.committed_at) or "time unknown"
            sess.echo(f"{change.seq}  {stamp}  {change.kind}  ({who})")
            for sql in change.statements:
                sess.echo(f"    {sql}")
    except KeyboardInterrupt:
        return  # Ctrl-C: the way a tail -f ends
