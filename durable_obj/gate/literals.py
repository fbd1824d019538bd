"""Exact literals: a value the engine computed, written back as SQL text that
means the same value to every reader.

A pinned value is replayed by other processes, in other time zones, by
chdb.durable (which pins no session time zone), and inside mutations
(`ALTER ... UPDATE`, `DELETE`), where ClickHouse gives a DateTime that names
no zone the process's zone, not the session's. So a literal may depend on
nothing but itself:

* every DateTime / DateTime64, at any depth of the type, is written in UTC
  and parsed with the zone in the literal (UTC has no ambiguous local hour),
  then cast to the value's type, where a DateTime that named no zone now
  names the object's: `now()` in an object in UTC pins as
  `CAST('2026-12-01 05:13:17', 'DateTime(\\'UTC\\')')`. It is the same instant,
  and `toString()` of it reads the same everywhere (a `CREATE TABLE ... AS
  SELECT now()` column is therefore `DateTime('UTC')`);
* text that is not UTF-8 is written as `unhex('...')` (and never decoded);
* everything else in the engine's own text form, which is exact: floats in
  their shortest round-trip form (`-0`, `nan`, `inf`), decimals and wide
  integers in full, Enum labels, IPs, UUIDs. A NaN keeps neither its sign
  nor its payload (no ClickHouse text form carries them); the writer runs
  the pinned text too, so writer and readers still hold the same bits.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from durable_obj.errors import DurableError, InvalidArgument
from durable_obj.gate.quoting import quote_string, splice, type_in_zone, typed_literal
from durable_obj.gate.sql import match_parens, tokenize

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: The zone every pinned DateTime is written in.
WIRE_ZONE = "UTC"
_MAX_CACHED_TYPES = 1000


def maps_as_arrays(type_name: str) -> str:
    """`type_name` with every `Map(K, V)` in it, at any depth, spelled
    `Array(Tuple(K, V))`: a Map's text cannot be CAST from a String, an
    Array of Tuples can, and casts back to the Map."""
    tokens = tokenize(type_name)
    closing = match_parens(tokens)
    replacements = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.kind == "ident" and tok.text.lower() == "map" and tokens[i + 1].text == "(":
            close = closing.get(i + 1)
            if close is not None:
                replacements.append((tok.start, tokens[i + 1].end, "Array(Tuple("))
                replacements.append((tokens[close].start, tokens[close].end, "))"))
    return splice(type_name, replacements)


class Literals:
    """Evaluates constant expressions on one engine into exact literals."""

    def __init__(self, engine: Engine, timezone: str) -> None:
        self._engine = engine
        self._timezone = timezone  # the object's: what a DateTime without a zone means
        self._types: dict[str, str] = {}

    def forget(self) -> None:
        """Drop cached expression types (the schema may have changed)."""
        self._types.clear()

    def values(self, expr: str, count: int) -> list[str] | None:
        """`count` independent evaluations of `expr` (evaluated `count` times,
        as `count` rows of one query), each as an exact literal; None if `expr`
        cannot be evaluated on its own."""
        try:
            type_name = self._type_of(expr)
            if type_name is None:
                return None
            wire = maps_as_arrays(type_in_zone(type_name, WIRE_ZONE))
            rows = self._engine.json_rows(
                f"SELECT hex(toString(CAST(e, {quote_string(wire)}))) "
                f"FROM (SELECT {expr} AS e FROM numbers({count}))"
            )
        except DurableError:
            return None
        values = [row[0] for row in rows]
        if len(values) != count:
            return None
        zoned = type_in_zone(type_name, self._timezone, keep_zones=True)
        return [typed_literal(zoned, None if v is None else bytes.fromhex(v), wire) for v in values]

    def bound(self, items: list[tuple[tuple[str, str], str]]) -> list[str]:
        """The exact literal of each ((name, type), text): `text` read by the
        engine as a query parameter of that type (`durable_obj.gate.params`).
        `InvalidArgument` naming the parameter (never its value) if one does
        not read as its type."""
        if not items:
            return []
        params = {f"p{i}": text for i, (_, text) in enumerate(items)}
        wires = [maps_as_arrays(type_in_zone(t, WIRE_ZONE)) for (_, t), _ in items]
        columns = ", ".join(
            f"hex(toString(CAST({{p{i}:{type_name}}}, {quote_string(wire)})))"
            for i, (((_, type_name), _), wire) in enumerate(zip(items, wires, strict=True))
        )
        try:
            rows = self._engine.json_rows(f"SELECT {columns}", params)
        except DurableError:
            for i, ((name, type_name), text) in enumerate(items):
                try:
                    self._engine.json_rows(f"SELECT {{p{i}:{type_name}}}", {f"p{i}": text})
                except DurableError as exc:
                    code = re.search(r"\(([A-Z_]+)\)\s*$", str(exc))
                    why = f" ({code.group(1)})" if code else ""
                    raise InvalidArgument(
                        f"param {name!r} could not be read as {type_name[:100]}{why}; "
                        "nothing was run or logged"
                    ) from None
            raise
        out = []
        for ((_, type_name), _), wire, value in zip(items, wires, rows[0], strict=True):
            zoned = type_in_zone(type_name, self._timezone, keep_zones=True)
            out.append(typed_literal(zoned, None if value is None else bytes.fromhex(value), wire))
        return out

    def _type_of(self, expr: str) -> str | None:
        """The type of a constant expression, without evaluating it."""
        found = self._types.get(expr)
        if found is None:
            described = self._engine.json_rows(f"DESCRIBE (SELECT {expr} AS e)")
            if not described:
                return None
            found = str(described[0][1])
            if len(self._types) >= _MAX_CACHED_TYPES:
                self._types.clear()
            self._types[expr] = found
        return found
