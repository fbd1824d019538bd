"""Building text ClickHouse reads back exactly: string literals and
identifiers (`quote_string`, `quote_ident`), typed literals, DateTime types
in a zone, spans replaced (`splice`), a statement without its FORMAT clause.

No engine and no policy, like `sql`, whose lexer reads the text these
functions take apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from durable_obj.errors import Nondeterministic
from durable_obj.gate.shapes import InsertShape
from durable_obj.gate.sql import Token, depth_zero, match_parens, tokenize


def without_format(sql: str) -> str:
    """`sql` without its top-level `FORMAT name` clause (what follows it, such
    as SETTINGS, stays): an `EXPLAIN` of the statement must print in the
    caller's chosen format, not the statement's."""
    tokens = tokenize(sql)
    cut: tuple[int, int] | None = None
    for i, tok in depth_zero(tokens):
        if tok.word == "format" and tok.kind == "ident" and i + 1 < len(tokens):
            name = tokens[i + 1]
            after = tokens[i + 2] if i + 2 < len(tokens) else None
            # the clause ends the statement, or comes before its SETTINGS;
            # anything else is a name (`1 AS format FROM t`), never cut
            last = after is None or after.text == ";" or after.word == "settings"
            if name.kind in ("ident", "quoted") and last:
                cut = (tok.start, name.end)
    return sql if cut is None else sql[: cut[0]] + " " + sql[cut[1] :]


def quote_string(text: str) -> str:
    """`text` as a ClickHouse string literal, quotes included: the engine reads
    back exactly `text` (every character, whatever its code point)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_ident(name: str) -> str:
    """`name` as a back-quoted ClickHouse identifier that reads back exactly."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def type_in_zone(type_name: str, zone: str, *, keep_zones: bool = False) -> str:
    """`type_name` (as `toTypeName` spells it) with every DateTime and
    DateTime64 in it, at any depth, carrying the time zone `zone` instead of
    its own or none (with `keep_zones`, only those that name none).
    Named-tuple element names and Enum labels are kept."""
    tokens = tokenize(type_name)
    closing = match_parens(tokens)
    zone_lit = quote_string(zone)
    replacements = []
    for i, tok in enumerate(tokens):
        kind = tok.text.lower() if tok.kind == "ident" else ""
        if kind not in ("datetime", "datetime64"):
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if after is not None and after.kind in ("ident", "quoted"):
            continue  # `DateTime DateTime`: a tuple element named DateTime
        params = closing.get(i + 1) if after is not None and after.text == "(" else None
        end = tokens[params].end if params is not None else tok.end
        inner = [] if params is None else [t for t in tokens[i + 2 : params] if t.text != ","]
        if keep_zones and any(t.kind == "string" for t in inner):
            continue  # it names its zone
        if kind == "datetime":
            replacements.append((tok.start, end, f"DateTime({zone_lit})"))
        else:
            scale = inner[0].text if inner and inner[0].kind == "number" else "3"
            replacements.append((tok.start, end, f"DateTime64({scale}, {zone_lit})"))
    return splice(type_name, replacements)


def typed_literal(type_name: str, text: bytes | None, wire_type: str | None = None) -> str:
    """A constant expression of type `type_name` holding the value whose text
    form (as `toString` writes it for `wire_type`, by default `type_name`) is
    `text`, or NULL for None. Its meaning depends on nothing but itself when
    every DateTime in both types names its zone: not on the zone of the
    session or the process that runs it, not on the text being UTF-8 (other
    bytes are written as `unhex('...')`)."""
    if text is None:
        return f"CAST(NULL, {quote_string(type_name)})"
    try:
        value = quote_string(text.decode("utf-8"))
    except UnicodeDecodeError:
        value = f"unhex('{text.hex().upper()}')"
    if wire_type is not None and wire_type != type_name:
        value = f"CAST({value}, {quote_string(wire_type)})"
    return f"CAST({value}, {quote_string(type_name)})"


def splice(sql: str, replacements: Iterable[tuple[int, int, str]]) -> str:
    """`sql` with each [start, end) span replaced by its text. Spans must not
    overlap; an empty span inserts."""
    out: list[str] = []
    pos = 0
    for start, end, text in sorted(replacements, key=lambda r: (r[0], r[1])):
        out.append(sql[pos:start])
        out.append(text)
        pos = end
    out.append(sql[pos:])
    return "".join(out)


def param_text(value: str) -> str:
    """A query parameter's value as the engine reads it back exactly (the
    TSV escaping: a raw tab or newline would end the value, a backslash
    starts an escape)."""
    return value.translate(_TSV_ESCAPES)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"})


def after_settings(sql: str, tokens: list[Token], shape: InsertShape, needed: list[str]) -> str:
    """`sql` with `needed` after the caller's own SETTINGS (the engine applies
    each in turn), or `Nondeterministic` if the caller's name one of them."""
    data = shape.values_at if shape.values_at is not None else shape.select_at
    start = shape.settings_at
    named = {t.word for t in tokens[start or 0 : data] if t.kind == "ident"}
    if start is None or data is None or named & {n.split(" =")[0] for n in needed}:
        raise Nondeterministic(
            "this INSERT carries SETTINGS of its own that name (or sit where "
            "durable_obj cannot add to them) what its table's non-deterministic "
            f"DEFAULT or MATERIALIZED column needs ({', '.join(needed)}); drop "
            "those SETTINGS. Nothing was run."
        )
    at = tokens[data - 1].end
    return f"{sql[:at]}, {', '.join(needed)}{sql[at:]}"
