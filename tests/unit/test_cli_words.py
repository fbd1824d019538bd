"""The CLI says the library's Python-speak hints in its own words."""

from __future__ import annotations

import ast
import re
import uuid
from pathlib import Path

import pytest

from durable_obj.cli.failures import cli_words, convert
from durable_obj.errors import LeaseHeld
from durable_obj.wire import lease
from durable_obj.wire.head import Lease

PACKAGE = Path(__file__).resolve().parents[2] / "durable_obj"

#: What a CLI user cannot type: a Python call or keyword argument of the API.
PYTHON_SPEAK = re.compile(
    r"\b(?:query|execute|flush|checkpoint|close|refresh)\(\)"
    r"|\b(?:force|reclaim|read_only|allow_nondeterministic|anon|discard)=(?:True|False)\b"
    r"|\bstorage_options\b"
)


def test_lease_held_says_force_flag() -> None:
    held = Lease(generation=3, owner="holder", instance=uuid.uuid4().hex, expires_at=130.0)
    me = lease.Holder(owner="cli", instance=uuid.uuid4().hex)
    with pytest.raises(LeaseHeld) as caught:
        lease.check_free(held, me, 100.0, clock_skew=5.0)
    assert "force=True" in str(caught.value)  # the library speaks Python ...
    message = convert(caught.value, lambda text: text).message
    assert "pass --force" in message  # ... the CLI its own flags
    assert "'durable-obj sql'" in message
    assert not PYTHON_SPEAK.search(message), message


def test_lease_held_by_the_same_owner_says_reclaim_flag() -> None:
    twin = Lease(generation=3, owner="ops", instance=uuid.uuid4().hex, expires_at=130.0)
    me = lease.Holder(owner="ops", instance=uuid.uuid4().hex)
    with pytest.raises(LeaseHeld) as caught:
        lease.check_free(twin, me, 100.0, clock_skew=5.0)
    message = convert(caught.value, lambda text: text).message
    assert "run it again with --reclaim" in message and "pass --force" in message
    assert "succeeds in 35.0 s" in message
    assert not PYTHON_SPEAK.search(message), message


@pytest.mark.parametrize(
    ("library", "cli"),
    [
        (
            "query() takes a read-only statement; this one is Delete. Use execute() for a "
            "change, which logs it to the WAL.",
            "'durable-obj sql' takes a read-only statement; this one is Delete. Use "
            "'durable-obj exec' for a change, which logs it to the WAL.",
        ),
        (
            "this statement changes nothing; use query(), which does not write the WAL",
            "this statement changes nothing; use 'durable-obj sql', which does not write the WAL",
        ),
        (
            "execute() takes exactly one statement; chDB counted 2. Nothing was run or logged; "
            "call execute() once per statement.",
            "'durable-obj exec' takes exactly one statement; chDB counted 2. Nothing was run "
            "or logged; pass each statement as its own argument to 'durable-obj exec'.",
        ),
        (
            "x: could not prove whether it landed. The statements stay buffered; retry flush().",
            "x: could not prove whether it landed. Nothing was committed; run it again.",
        ),
        (
            "did not apply; nothing was committed and the statements stay buffered",
            "did not apply; nothing was committed; run it again",
        ),
        (
            "nothing was published. checkpoint() to fold the WAL list away.",
            "nothing was published. 'durable-obj checkpoint' to fold the WAL list away.",
        ),
        (
            "requires writer feature(s) ['x'] this library lacks; open it read_only=True instead.",
            "requires writer feature(s) ['x'] this library lacks; read it with 'durable-obj "
            "sql' (no lease).",
        ),
        ("check storage_options (profile)", "check storage options (-o KEY=VALUE) (profile)"),
        ("or anon=True for a public bucket", "or -o anon=true for a public bucket"),
        ("nothing here to translate", "nothing here to translate"),
    ],
)
def test_cli_words(library: str, cli: str) -> None:
    assert cli_words(library) == cli


def _message_texts(tree: ast.AST) -> list[str]:
    """The string constants of a module that are not docstrings, f-string
    parts joined with a placeholder."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "X"
                for v in node.values
            ]
            texts.append("".join(parts))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            texts.append(node.value)
    return texts


def test_every_library_message_has_cli_words() -> None:
    """No string in the library (outside the CLI) keeps a Python-only hint
    once the CLI has translated it: a new message of that kind needs words here."""
    left = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts or "testing" in path.parts:
            continue
        for text in _message_texts(ast.parse(path.read_text(encoding="utf-8"))):
            if not PYTHON_SPEAK.search(text) or " " not in text:
                continue  # not a message
            translated = cli_words(text)
            if PYTHON_SPEAK.search(translated):
                left.append(f"{path.name}: {translated!r}")
    assert not left, "\n".join(left)
