"""`durable-obj tail`: an object's commits as they land, like `tail -f`.

    durable-obj tail /srv/agents/checkout-api --since 0 --json

Reads only (no engine, no lease): the change feed (`Namespace.changes`),
one conditional read of the head per poll while nothing is committed. An
encrypted object's statements need its key (`--key-env`, `--key-file`,
`--kms-key`, as every command takes them).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
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
        with _ctrl_c_ends_it():
            _print(sess, ns.changes(oid, since, follow=not no_follow, poll=poll), as_json)
    except KeyboardInterrupt:
        return  # Ctrl-C: the way a tail -f ends


@contextlib.contextmanager
def _ctrl_c_ends_it() -> Iterator[None]:
    """Ctrl-C ends the process at once, with exit status 0, wherever the
    main thread is: a tail only reads and prints whole lines, so there is
    nothing to clean up, and a KeyboardInterrupt raised inside a store call
    or a thread pool's wait could leave a worker the interpreter then waits
    for at exit."""
    if threading.current_thread() is not threading.main_thread():
        yield  # a signal handler can only be set from the main thread
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(0)

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _print(sess: Any, changes: Iterator[Any], as_json: bool) -> None:
    for change in changes:
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
