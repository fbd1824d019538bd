"""What the engine says, made safe to show: its message without the stack
trace, and a syntax error without the statement's text (which may carry a
credential), keeping what helps: where, the word there, "Maybe you meant"
and what it expected."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from durable_obj.gate.isolation import RESERVED_PREFIX
from durable_obj.gate.sql import tokenize
from durable_obj.replica.server import decoded

#: Words a statement can begin with: only to suggest one for a mistyped
#: first word (the engine suggests none there).
STATEMENT_WORDS = (
    "SELECT", "WITH", "INSERT", "CREATE", "ALTER", "DROP", "DELETE", "UPDATE", "TRUNCATE",
    "RENAME", "EXCHANGE", "OPTIMIZE", "ATTACH", "DETACH", "UNDROP", "SHOW", "DESCRIBE",
    "EXPLAIN", "EXISTS", "CHECK", "KILL", "SYSTEM", "SET", "USE", "GRANT", "REVOKE",
    "BACKUP", "RESTORE", "FROM", "VALUES",
)  # fmt: skip

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
#: A table's name as the engine logs it, `db.t (uuid)`: the name says it all.
_NAMED_UUID = re.compile(rf"(?<=\S) \({_UUID}\)")
#: A table the engine names by its UUID alone.
_BARE_UUID = re.compile(rf"(?i)\b(table )`?({_UUID})`?")


def describe_syntax_error(message: str, sql: str, keywords: frozenset[str] = frozenset()) -> str:
    """The useful parts of a ClickHouse syntax error about `sql`: position,
    the word there when it is a name, keyword or punctuation (never a string
    or a number, which may be a secret), "Maybe you meant", and the start of
    what it expected.

    `keywords` (every word of the engine's keywords, upper case) lets a
    mistyped first word be named: the engine reads `INSRT INTO log ...` as
    an implicit SELECT of a column `INSRT` aliased `INTO` and stops at the
    word after (`log`), which is not where the mistake is."""
    at = re.search(r"failed at position (\d+)", message)
    if at is None:
        return "it does not parse"
    pos = int(at.group(1))
    typo = _unknown_first_word(sql, pos, keywords)
    if typo is not None:
        return typo
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


def _unknown_first_word(sql: str, pos: int, keywords: frozenset[str]) -> str | None:
    """ "syntax error at position 1 (INSRT): ..." when the statement begins
    with a bare word that is no keyword of the engine, followed by another
    word or a number, and the parser stopped after it; else None."""
    tokens = tokenize(sql)[:2]
    if not keywords or len(tokens) < 2:
        return None
    first, second = tokens
    word = first.text
    if (
        first.kind != "ident"
        or not word.isalpha()
        or len(word) > 40
        or word.upper() in keywords
        or second.kind not in ("ident", "number")
        or pos - 1 <= first.start
    ):
        return None
    out = f"syntax error at position {first.start + 1} ({word}): not a statement keyword"
    close = difflib.get_close_matches(word.upper(), STATEMENT_WORDS, n=1, cutoff=0.6)
    return out + (f"; maybe you meant: {close[0]}" if close else "")


def without_table_uuids(text: str, name_of: Callable[[str], str | None]) -> str:
    """`text` with the engine's internal table UUIDs taken out: dropped after
    a name (`default.t (5f3c...)` -> `default.t`), else replaced by the name
    `name_of` gives for it, else dropped. Costs nothing when there is none."""
    if "-" not in text:
        return text
    text = _NAMED_UUID.sub("", text)

    def named(m: re.Match[str]) -> str:
        name = name_of(m.group(2))
        return m.group(1) + name if name else m.group(1).rstrip()

    return _BARE_UUID.sub(named, text)


def clean(exc: BaseException) -> str:
    """The engine's message without its stack trace."""
    text = str(exc).split("Stack trace", 1)[0].strip()
    return text[:2000]


#: An engine hint ("Maybe you meant db.t?"), with the punctuation around it.
HINT = re.compile(r"([.:]?)\s*Maybe you meant[^?]*\?(\.?)")
#: An engine hint naming another object's internal database.
FOREIGN_HINT = re.compile(rf"([.:]?)\s*Maybe you meant[^?]*{RESERVED_PREFIX}[^?]*\?(\.?)")


def dropped_hint(hint: re.Match[str]) -> str:
    """What is left of a message when the hint `hint` is dropped: exactly what
    the engine writes with no hint ("exist. (", "exist: Maybe ...?." ->
    "exist.", "'. Maybe ...? In scope" -> "'. In scope"), so whether there
    was one (another object has a table of a like name) does not show."""
    return "." if hint.group(1) or hint.group(2) else ""


#: The words of the engine's keywords (`keywords`), once read.
_KEYWORDS: frozenset[str] | None = None


def keywords(conn: Any) -> frozenset[str]:
    """Every word of the engine's keywords (`system.keywords`), upper case;
    read once per process, on the first syntax error."""
    global _KEYWORDS
    if _KEYWORDS is None:
        try:
            out = decoded(conn.query("SELECT keyword FROM system.keywords", "TSVRaw"))
        except Exception:  # an error path: without them, the engine's position stands
            return frozenset()
        _KEYWORDS = frozenset(w for line in out.splitlines() for w in line.upper().split())
    return _KEYWORDS


def parser_says(conn: Any, sql: str) -> str:
    """`describe_syntax_error` of what chDB's parser answers for `sql` on
    `conn` (`formatQuery`, the text given as a parameter)."""
    try:
        conn.query("SELECT formatQuery({q:String})", "TSV", params={"q": sql})
    except Exception as exc:
        return describe_syntax_error(str(exc), sql, keywords(conn))
    return "it parses but is not a statement chDB can classify"
