"""Per-invocation state: the secrets to redact and the (redacting) output,
plus the `-o/--storage-option` click option that feeds both."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, TypeVar, cast

import click
from rich.console import Console

from durable_obj.cli.options import parse_storage_options
from durable_obj.cli.redaction import RedactingStream, Secrets

F = TypeVar("F", bound=Callable[..., Any])

#: Output width when stdout is not a terminal: wide enough that tables of
#: keys and URLs are not folded in logs and pipes.
PIPE_WIDTH = 200

_META = "durable_obj.cli"


class Session:
    """What one invocation prints goes through here, redacted."""

    def __init__(self) -> None:
        self.secrets = Secrets()

    def redact(self, text: str) -> str:
        return self.secrets.redact(text)

    def stdout(self) -> Console:
        return self._console(sys.stdout)

    def stderr(self) -> Console:
        return self._console(sys.stderr)

    def _console(self, stream: IO[str]) -> Console:
        wrapped = RedactingStream(stream, self.redact)
        tty = wrapped.isatty()
        return Console(
            file=cast(IO[str], wrapped),
            width=None if tty or os.environ.get("COLUMNS") else PIPE_WIDTH,
            markup=False,
            highlight=False,
            emoji=False,
            soft_wrap=False,
        )

    def echo(self, text: str, *, err: bool = False, nl: bool = True) -> None:
        click.echo(self.redact(text), err=err, nl=nl)


def session(ctx: click.Context | None = None) -> Session:
    """The invocation's `Session`, kept on the root context."""
    root = (ctx or click.get_current_context()).find_root()
    found = root.meta.get(_META)
    if not isinstance(found, Session):
        found = root.meta[_META] = Session()
    return found


def options_callback(ctx: click.Context, _param: click.Parameter, value: Any) -> dict[str, Any]:
    items: Sequence[str] = value or ()
    secrets = session(ctx).secrets
    # Register what looks like a credential before anything can fail on it.
    secrets.add_items(items)
    parsed = parse_storage_options(items)
    secrets.add_options(parsed)
    return parsed


def storage_options(f: F) -> F:
    """The repeatable `-o/--storage-option KEY=VALUE` option, parsed."""
    return click.option(
        "--storage-option",
        "-o",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        callback=options_callback,
        help="Passed to the store (repeatable; dotted keys nest; true/false and numbers "
        "are typed).",
    )(f)


def reclaim_option(f: F) -> F:
    """The `--reclaim` flag of a command that opens a writer."""
    return click.option(
        "--reclaim",
        is_flag=True,
        help="Take at once a live lease held under this same --owner name by an earlier run "
        "(killed, crashed, restarted), instead of waiting for it to expire; that run, if it "
        "still runs, is fenced and loses what it did not flush. Only when no other live "
        "process uses this owner name. A lease of another owner still refuses.",
    )(f)


def writer_options(f: F) -> F:
    """`--owner`, `--force` and `--reclaim`: how a command that writes takes
    the lease."""
    f = reclaim_option(f)
    f = click.option(
        "--force",
        is_flag=True,
        help="Take an unexpired lease: its holder is fenced and loses what it did not flush.",
    )(f)
    return click.option(
        "--owner", help="Name in the lease while this runs (default: durable-obj-cli@HOST)."
    )(f)


def to_options(what: str) -> Callable[[F], F]:
    """The repeatable `-t/--to-option KEY=VALUE` option: storage options for
    the destination `what` (default: the `-o` options when it has the same
    protocol as the source, else none)."""

    def decorate(f: F) -> F:
        return click.option(
            "--to-option",
            "-t",
            "to_options",
            multiple=True,
            metavar="KEY=VALUE",
            callback=options_callback,
            help=f"Storage options for {what} (default: the -o options when {what} has the "
            "same protocol as the source, else none).",
        )(f)

    return decorate


def _params_callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, item in enumerate(value or (), start=1):
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"#{n} is not NAME=VALUE (e.g. --param n=5)")
        out[name.strip()] = text
    return out


def query_params(f: F) -> F:
    """The repeatable `-p/--param NAME=VALUE` option: values for the
    statement's `{NAME:Type}` placeholders, each read by the engine as
    that Type (text, never SQL)."""
    return click.option(
        "--param",
        "-p",
        "params",
        multiple=True,
        metavar="NAME=VALUE",
        callback=_params_callback,
        help="A value for the placeholder {NAME:Type} in the statement, read as that Type "
        "(repeatable; '[1,2]' for an Array, '2026-12-01' for a Date).",
    )(f)
