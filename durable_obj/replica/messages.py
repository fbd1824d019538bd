"""What the engine says, made safe to show: its message without the stack
trace, and a syntax error without the statement's text (which may carry a
credential), keeping what helps: where, the word there, "Maybe you meant"
and what it expected."""

from __future__ import annotations

import re

from durable_obj.gate.sql import tokenize


def describe_syntax_error(message: str, sql: str) -> str:
    """The useful parts of a ClickHouse syntax error about `sql`: position,
    the word there when it is a name, keyword or punctuation (never a string
    or a number, which may be a secret), "Maybe you meant", and the start of
    what it expected."""
    at = re.search(r"failed at position (\d+)", message)
    if at is None:
        return "it does not parse"
    pos = int(at.group(1))
    out = f"syntax error at position {pos}"
    # What follows "(word): " is the statement from that position on: cut it.
    quoted = re.search(r"\): ", message[at.end() :])
    rest = message[at.end() + quoted.end() :] if quoted else ""
    tail = sql[pos - 1 :]
    same = 0
    while same < min(len(rest), len(tail)) and rest[same] == tail[same]:
        same += 1
    message = rest[same:]
    tok = next((t for t in tokenize(sql) if t.start == pos - 1), None)
    if tok is not None and tok.kind in ("ident", "punct") and len(tok.text) <= 40:
        out += f" ({tok.text})"
    maybe = re.search(r"Maybe you meant: ([A-Za-z_ ,]{1,80})\.", message)
    if maybe:
        out += f"; maybe you meant: {maybe.group(1)}"
    expected = re.search(r"Expected one of: (.*?)(?:: In scope|\. \(SYNTAX_ERROR\)|$)", message)
    if expected:
        names = [n.strip() for n in expected.group(1).split(",")]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        out += f"; expected one of: {shown}"
    return out


def clean(exc: BaseException) -> str:
    """The engine's message without its stack trace."""
    text = str(exc).split("Stack trace", 1)[0].strip()
    return text[:2000]
