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

from typing import TYPE_CHECKING

from durable_obj.errors import DurableError
from durable_obj.sql import quote_string, type_in_zone, typed_literal

if TYPE_CHECKING:
    from durable_obj.engine import Engine

#: The zone every pinned DateTime is written in.
WIRE_ZONE = "UTC"
_MAX_CACHED_TYPES = 1000


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
            wire = type_in_zone(type_name, WIRE_ZONE)
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
