"""Query parameters: ClickHouse's `{name:Type}` placeholders, bound to
Python values before a statement is judged, run or logged.

Each value goes to the engine as a query parameter, so ClickHouse itself
reads it as the type the placeholder names: a value is never SQL, whatever
text it holds (no quoting by hand, no injection). The engine then writes
the value back as an exact literal (`durable_obj.gate.literals`: the same value
in every time zone and every reader), and that literal takes the
placeholder's place. What the gates judge, what runs and what the WAL logs
is that one literal statement, so a bound mutation replays exactly, and
chdb.durable replays it too.

`{name:Identifier}` names a table or column: its value (a `str`) is written
as a quoted identifier, and the gates judge the statement that names it.

Python values map to ClickHouse text as you would expect: None is NULL,
bool, int, float (nan and inf too), Decimal, str, bytes (any bytes, for a
String), date, datetime (a naive one is in the object's time zone, an
aware one is converted to it), UUID, list (Array), tuple (Tuple) and dict
(Map), nested at any depth. A `str` given for another type is read as that
type's text (`'2026-12-01'` for a Date, `'[1,2]'` for an Array).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from durable_obj.errors import InvalidArgument
from durable_obj.gate import fits
from durable_obj.gate.quoting import quote_ident, splice, typed_literal
from durable_obj.gate.sql import Token, tokenize

if TYPE_CHECKING:
    from durable_obj.gate.literals import Literals

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What a placeholder's type may hold: a data type's own tokens, nothing else.
_TYPE_PUNCT = frozenset("(),=-")


@dataclass(frozen=True, slots=True)
class Placeholder:
    name: str
    type_name: str
    start: int
    end: int


def placeholders(sql: str) -> list[Placeholder]:
    """Every `{name:Type}` in `sql`'s code (not in strings or comments), in
    order. A `{` that does not open one (a map literal) is left alone."""
    tokens = tokenize(sql)
    found: list[Placeholder] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.text == "{" and i + 2 < len(tokens):
            name, colon = tokens[i + 1], tokens[i + 2]
            if name.kind == "ident" and colon.text == ":":
                close = _type_end(tokens, i + 3)
                if close is not None:
                    type_name = sql[colon.end : tokens[close].start].strip()
                    found.append(Placeholder(name.text, type_name, tok.start, tokens[close].end))
                    i = close + 1
                    continue
        i += 1
    return found


def _type_end(tokens: list[Token], start: int) -> int | None:
    """The index of the `}` closing a placeholder's type at `start`, if the
    tokens between are a data type's (names, numbers, strings, balanced
    brackets); None if they are anything else."""
    depth = 0
    for j in range(start, len(tokens)):
        tok = tokens[j]
        if tok.text == "}" and depth == 0:
            return j if j > start else None
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
            if depth < 0:
                return None
        elif tok.kind == "punct" and tok.text not in _TYPE_PUNCT:
            return None
    return None


def bind(sql: str, params: Mapping[str, Any] | None, literals: Literals, timezone: str) -> str:
    """`sql` with every placeholder replaced by the exact literal of its
    value in `params`. `InvalidArgument` for a missing or unused name, a
    Python value with no ClickHouse form, or a value the engine cannot
    read as the placeholder's type (the value itself is never quoted)."""
    if params is None:
        return sql
    if not isinstance(params, Mapping):
        raise InvalidArgument(
            f"params must be a dict of name -> value, not {type(params).__name__}"
        )
    found = placeholders(sql)
    used = {p.name for p in found}
    unused = sorted(set(params) - used)
    if unused:
        raise InvalidArgument(
            f"params {', '.join(map(repr, unused))} appear in no {{name:Type}} placeholder "
            "of the statement; nothing was run or logged"
        )
    missing = sorted(used - set(params))
    if missing:
        raise InvalidArgument(
            f"the statement's placeholder(s) {', '.join(map(repr, missing))} have no value "
            "in params; nothing was run or logged"
        )
    zone = ZoneInfo(timezone)
    typed: dict[tuple[str, str], str] = {}  # (name, type) -> wire text, in order
    values: dict[tuple[str, str], str] = {}
    for p in found:
        key = (p.name, p.type_name)
        if p.type_name.lower() != "identifier" and key not in typed and key not in values:
            fits.check(params[p.name], p.type_name, p.name, zone)  # checked, not converted
            direct = _direct(params[p.name], p.type_name)
            if direct is not None:
                values[key] = direct
            else:
                typed[key] = encode(params[p.name], p.name, zone)
    values.update(zip(typed, literals.bound(list(typed.items())), strict=True))
    replacements = []
    for p in found:
        if p.type_name.lower() == "identifier":
            value = params[p.name]
            if not isinstance(value, str):
                raise InvalidArgument(f"param {p.name!r} names an Identifier: give a str")
            replacements.append((p.start, p.end, quote_ident(value)))
        else:
            replacements.append((p.start, p.end, values[(p.name, p.type_name)]))
    return splice(sql, replacements)


#: The integer types whose text form is Python's `str(int)`.
_INTEGERS = frozenset(
    f"{sign}Int{bits}" for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256)
)


def _direct(value: Any, type_name: str) -> str | None:
    """The exact literal of `value` as `type_name` without an engine round
    trip, for the two cases where the engine's reading of the parameter is
    the value itself: a `str` as `String` (its UTF-8 bytes) and an `int` as
    an integer type (its decimal digits; `fits.check` proved the range).
    The same literal `Literals.bound` makes from the engine's answer."""
    if type(value) is str and type_name == "String":
        try:
            return typed_literal("String", value.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: the engine decides
            return None
    if type(value) is int and type_name in _INTEGERS:
        return typed_literal(type_name, str(value).encode("ascii"))
    return None


def encode(value: Any, name: str, zone: ZoneInfo) -> str:
    """`value` as a query parameter's text (ClickHouse's escaped form)."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "".join(_byte(b) for b in bytes(value))
    text = _nested(value, name, zone)
    if isinstance(value, dt.date | uuid.UUID):
        return text[1:-1]  # unquoted at the top, as a String is
    return text


def _nested(value: Any, name: str, zone: ZoneInfo) -> str:
    """`value` as it is written inside an Array, Tuple or Map."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InvalidArgument(f"param {name!r}: a Decimal must be finite, not {value}")
        return format(value, "f")
    if isinstance(value, str):
        return "'" + _escape(value).replace("'", "\\'") + "'"
    if isinstance(value, bytes | bytearray | memoryview):
        return "'" + "".join(_byte(b) for b in bytes(value)) + "'"
    if isinstance(value, dt.datetime):
        local: dt.datetime = value
        if local.tzinfo is not None:
            local = local.astimezone(zone).replace(tzinfo=None)
        return "'" + local.isoformat(sep=" ") + "'"
    if isinstance(value, dt.date):
        return "'" + value.isoformat() + "'"
    if isinstance(value, uuid.UUID):
        return "'" + str(value) + "'"
    if isinstance(value, list):
        return "[" + ",".join(_nested(v, name, zone) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ",".join(_nested(v, name, zone) for v in value) + ")"
    if isinstance(value, Mapping):
        items = (f"{_nested(k, name, zone)}:{_nested(v, name, zone)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    raise InvalidArgument(
        f"param {name!r}: a value of type {type(value).__name__} has no ClickHouse form; give "
        "None, bool, int, float, Decimal, str, bytes, date, datetime, UUID, or a list, tuple "
        "or dict of them"
    )


def _escape(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return out.replace("\r", "\\r").replace("\0", "\\0")


def _byte(b: int) -> str:
    if b in (0x5C, 0x27) or b < 0x20 or b >= 0x7F:
        return f"\\x{b:02x}"
    return chr(b)
