"""The CLI's failure mapping: one redacted line, a category, an exit code."""

from __future__ import annotations

import click
import pytest

from durable_obj.cli.failures import Failure, convert, exit_code, one_line
from durable_obj.errors import Corrupt, InvalidArgument, LeaseHeld, NotFound


def redact(text: str) -> str:
    return text.replace("s3cr3t", "***")


def test_one_line() -> None:
    assert one_line("  first\n  second \r\n\n third  ") == "first second third"
    assert one_line("a  b") == "a  b"


def test_exit_codes() -> None:
    assert exit_code("invalid_argument") == 2
    assert exit_code("not_found") == 1 and exit_code("corrupt") == 1


def test_failure_format() -> None:
    failure = Failure("corrupt", "line one\nline two", 1)
    assert failure.format_message() == "error: corrupt: line one line two"
    assert failure.exit_code == 1 and failure.category == "corrupt"
    assert Failure("x", "y").exit_code == 1
    assert Failure("x", "y", 7).exit_code == 7


@pytest.mark.parametrize(
    ("exc", "category", "code"),
    [
        (NotFound("no object 's3cr3t'"), "not_found", 1),
        (InvalidArgument("bad s3cr3t"), "invalid_argument", 2),
        (LeaseHeld("held by 's3cr3t'"), "lease_held", 1),
        (Corrupt("s3cr3t"), "corrupt", 1),
        (RuntimeError("boom s3cr3t"), "internal", 1),
        (Failure("engine", "s3cr3t in output", 1), "engine", 1),
        (Failure("invalid_argument", "s3cr3t", 2), "invalid_argument", 2),
        (click.BadParameter("s3cr3t is wrong"), "invalid_argument", 2),
        (click.UsageError("no such option s3cr3t"), "invalid_argument", 2),
    ],
)
def test_convert_redacts_and_categorises(exc: BaseException, category: str, code: int) -> None:
    failure = convert(exc, redact)
    assert (failure.category, failure.exit_code) == (category, code)
    assert "s3cr3t" not in failure.format_message() and "***" in failure.format_message()


def test_convert_internal_names_the_type() -> None:
    assert convert(KeyError("k"), redact).message == "KeyError: 'k'"


def test_convert_abort_and_interrupt() -> None:
    aborted = convert(click.exceptions.Abort(), redact)
    assert (aborted.category, aborted.message, aborted.exit_code) == (
        "aborted",
        "nothing was changed",
        1,
    )
    stopped = convert(KeyboardInterrupt(), redact)
    assert (stopped.category, stopped.exit_code) == ("interrupted", 130)


def test_usage_error_points_at_help() -> None:
    ctx = click.Context(click.Command("gc"), info_name="gc")
    failure = convert(click.UsageError("Missing argument 'OBJECT_URL'.", ctx=ctx), redact)
    assert failure.message.endswith("(see 'gc --help')")
    assert failure.message.startswith("Missing argument")
