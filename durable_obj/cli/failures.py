"""Every failure of the CLI as one line, `error: <category>: <message>`.

Exit codes: 2 for bad input (category `invalid_argument`, click's usage
errors), 130 for Ctrl-C, 1 for everything else. Messages are redacted and
folded onto one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO, Any

import click

from durable_obj.errors import DurableError

_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", click.exceptions.Exit)
#: Not failures: --help, --version, and a bare command showing its help (click >= 8.2).
PASS_THROUGH: tuple[type[BaseException], ...] = (click.exceptions.Exit, _NO_ARGS_IS_HELP)


class Failure(click.ClickException):
    """A failure shown as one line: `error: <category>: <message>`."""

    def __init__(self, category: str, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.category = category
        # click >= 8.5 declares exit_code a ClassVar; each failure has its own.
        object.__setattr__(self, "exit_code", exit_code)

    def format_message(self) -> str:
        return f"error: {self.category}: {one_line(self.message)}"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(self.format_message(), file=file, err=file is None)


def one_line(text: str) -> str:
    """`text` with its line breaks (and the blanks around them) as one space."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def exit_code(category: str) -> int:
    return 2 if category == "invalid_argument" else 1


def convert(exc: BaseException, redact: Callable[[str], str]) -> Failure:
    """Any failure as a one-line, redacted `Failure`."""
    if isinstance(exc, Failure):
        return Failure(exc.category, redact(exc.message), exc.exit_code)
    if isinstance(exc, click.exceptions.Abort):
        return Failure("aborted", "nothing was changed", 1)
    if isinstance(exc, click.ClickException):
        message = exc.format_message()
        usage_ctx = getattr(exc, "ctx", None)
        if isinstance(exc, click.UsageError) and usage_ctx is not None:
            message += f" (see '{usage_ctx.command_path} --help')"
        return Failure("invalid_argument", redact(message), exc.exit_code or 2)
    if isinstance(exc, DurableError):
        category = exc.category
        return Failure(category, redact(str(exc)), exit_code(category))
    if isinstance(exc, KeyboardInterrupt):
        return Failure("interrupted", "stopped by the user", 130)
    return Failure("internal", redact(f"{type(exc).__name__}: {exc}"), 1)
