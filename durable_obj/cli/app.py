"""The `durable-obj` command group: one-line failures, log lines and
warnings on stderr, redaction of all of it. The commands themselves live in
`read` (change nothing) and `admin` (change stored state)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from durable_obj.cli.failures import PASS_THROUGH, cli_words, convert, one_line
from durable_obj.cli.session import Session, session
from durable_obj.service.namespace import check_oid, split_object_url

#: Warnings meant for the user; any other category goes back to the warnings
#: machinery (it is meant for developers).
_USER_WARNINGS = (UserWarning, RuntimeWarning)


class _LogHandler(logging.Handler):
    """durable_obj's log records as one redacted line each on stderr."""

    def __init__(self, sess: Session, level: int) -> None:
        super().__init__(level)
        self._session = sess

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(cli_words(record.getMessage()))
            prefix = "warning" if record.levelno >= logging.WARNING else "info"
            self._session.echo(f"{prefix}: {text}", err=True)
        except Exception:
            self.handleError(record)


class _Group(click.Group):
    """Turns every failure into one line on stderr and a non-zero exit."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except PASS_THROUGH:
            raise
        except Exception as exc:
            raise convert(exc, Session().redact) from None

    def invoke(self, ctx: click.Context) -> Any:
        sess = session(ctx)
        verbose = bool(ctx.params.get("verbose"))
        handler = _LogHandler(sess, logging.INFO if verbose else logging.WARNING)
        logger = logging.getLogger("durable_obj")
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if verbose else logging.WARNING)
        others: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    return super().invoke(ctx)
                finally:
                    for w in caught:
                        if issubclass(w.category, _USER_WARNINGS):
                            text = one_line(cli_words(str(w.message)))
                            sess.echo(f"warning: {text}", err=True)
                        else:
                            others.append(w)
        except PASS_THROUGH:
            raise
        except BrokenPipeError:
            # The reader of our output went away (`| head -1`): nothing more
            # to say to it, and nothing failed. Stdout goes to /dev/null so
            # the interpreter's last flush stays quiet too.
            _quiet_stdout()
            raise SystemExit(0) from None
        except BaseException as exc:
            if isinstance(exc, SystemExit | GeneratorExit):
                raise
            raise convert(exc, sess.redact) from None
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            # Warnings meant for developers go back to the warnings machinery.
            for w in others:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _quiet_stdout() -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Also show durable_obj's info log lines.")
@click.version_option(package_name="durable_obj", prog_name="durable-obj")
def cli(verbose: bool) -> None:
    """Inspect, change and administer durable objects (chDB databases in object storage).

    An OBJECT_URL's last path segment is the object id; the rest is its namespace
    (a local folder, file://, memory://, s3://, gs://, az://).
    """


def parse_object_url(url: str) -> tuple[str, str]:
    """(namespace URL, checked object id) of an OBJECT_URL argument."""
    namespace, oid = split_object_url(url)
    return namespace, check_oid(oid)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point (`durable-obj`)."""
    cli.main(args=None if argv is None else list(argv), prog_name="durable-obj")
    raise SystemExit(0)  # pragma: no cover - cli.main always exits
