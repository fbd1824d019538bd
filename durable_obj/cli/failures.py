"""Every failure of the CLI as one line, `error: <category>: <message>`.

Exit codes: 2 for bad input (category `invalid_argument`, click's usage
errors), 130 for Ctrl-C, 1 for everything else. Messages are redacted and
folded onto one line.

The library's messages speak to a Python caller ("pass force=True", "use
query()"); `cli_words` says the same in the command line's words ("pass
--force", "use 'durable-obj sql'") without changing the library's text.
The lease words (--force, --reclaim) are flags of the writer commands
`exec` and `checkpoint`; `mcp`, which has other flags, words its own
lease_held before a message gets here.
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


#: Python-speak in library messages -> the CLI's words; applied in order, so the
#: specific phrases come before the bare names they contain.
_CLI_WORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        # LeaseHeld, and a writer feature this library lacks
        (r"\bOpen it read_only=True( instead)?", "Read it with 'durable-obj sql' (no lease)"),
        (r"\bopen it read_only=True( instead)?", "read it with 'durable-obj sql' (no lease)"),
        (r"\bopen with reclaim=True\b", "run it again with --reclaim"),
        (r"\breclaim=True\b", "--reclaim"),
        (r"\bpass force=True\b", "pass --force"),
        (r"\bforce=True\b", "--force"),
        (r"\bread_only=True\b", "read-only ('durable-obj sql')"),
        # KeyRefused, and a key given for a plain object
        (
            r"\bopen it with encryption= a key provider for that key",
            "give that key with --key-env, --key-file or --kms-key",
        ),
        (
            r"\bencryption= applies to a new object\. Fork it into an encrypted one "
            r"\(durable_obj\.fork\(src, dst, encryption=\.\.\.\)\) or open it without a key",
            "a key applies to a new object (exec --create). Fork it into an encrypted copy "
            "('durable-obj fork SRC DST --to-key-env VAR') or run it without a key",
        ),
        (r"\bpass encryption=(?=\W)", "give it with --key-env, --key-file or --kms-key"),
        # ClassificationRefused from query() / execute()
        (r"\bUse execute\(\) for a change", "Use 'durable-obj exec' for a change"),
        (r"\bquery\(\) takes", "'durable-obj sql' takes"),
        (r"\bquery\(\) could not", "'durable-obj sql' could not"),
        (r"\bexecute\(\) takes", "'durable-obj exec' takes"),
        (r"\bexecute\(\) could not", "'durable-obj exec' could not"),
        (
            r"\bcall execute\(\) once per statement",
            "pass each statement as its own argument to 'durable-obj exec'",
        ),
        (r"\b[Uu]se query\(\)", "use 'durable-obj sql'"),
        (r"\bwith query\(\)", "with 'durable-obj sql'"),
        # what to do next
        # A command's buffer ends with it: what "stay buffered" means here.
        (r"\bThe statements stay buffered; retry flush\(\)", "Nothing was committed; run it again"),
        (
            r"\bThe statements stay buffered; retry checkpoint\(\)",
            "Run 'durable-obj checkpoint' again",
        ),
        (
            r"\bThe statements stay buffered; the next open shows whether they were committed",
            "'durable-obj info' shows whether they were (the seq moved); run it again only if not",
        ),
        (r" and the statements stay buffered\b", "; run it again"),
        (r"(?<![\w'])flush\(\) first\.?", "commit them in smaller 'durable-obj exec' runs."),
        (r"\b(?:use a )?checkpoint\(\)", "'durable-obj checkpoint'"),
        (r"\bretry close\(\) or flush\(\), or call close\(discard=True\)", "run it again"),
        (r"\bclose\(discard=True\) dropped\b", "dropped"),
        (r"\ballow_nondeterministic=True\b", "--allow-nondeterministic"),
        (r"\banon=True\b", "-o anon=true"),
        (r"\bstorage_options\b", "storage options (-o KEY=VALUE)"),
        # any bare name left: the verb that does it here
        (r"\bquery\(\)", "'durable-obj sql'"),
        (r"\bexecute\(\)", "'durable-obj exec'"),
        (r"\bflush\(\)", "'durable-obj exec' (which flushes)"),
    )
)


def cli_words(message: str) -> str:
    """`message` with the library's Python-speak hints in the CLI's words."""
    for pattern, words in _CLI_WORDS:
        message = pattern.sub(words, message)
    return message


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
        return Failure(category, redact(cli_words(str(exc))), exit_code(category))
    if isinstance(exc, KeyboardInterrupt):
        return Failure("interrupted", "stopped by the user", 130)
    return Failure("internal", redact(f"{type(exc).__name__}: {exc}"), 1)
