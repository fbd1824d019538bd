"""Statement shapes read off the gate's tokens: where an INSERT's table,
columns, SETTINGS and rows are (`insert_shape`), and where a statement's
evaluated expressions start (`evaluated_from`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from durable_obj.gate.sql import Token, depth_zero, match_parens


@dataclass
class InsertShape:
    """Where the parts of `INSERT INTO t [(cols)] [SETTINGS ...] VALUES rows` are."""

    table: str
    database: str | None
    columns: list[str] | None
    values_at: int | None  # token index of VALUES, None for INSERT ... SELECT
    settings_at: int | None
    head_end: int  # token index after the table name / column list
    rows: list[tuple[int, int]] = field(default_factory=list)  # (open, close) token idx
    select_at: int | None = None  # token index of the SELECT / WITH of INSERT ... SELECT


def insert_shape(tokens: list[Token]) -> InsertShape | None:
    """The shape of an INSERT, or None for anything else (incl. INSERT INTO FUNCTION)."""
    words = [t.word if t.kind == "ident" else "" for t in tokens]
    if len(tokens) < 3 or words[0] != "insert" or words[1] != "into":
        return None
    i = 2
    if words[i] == "table":
        i += 1
    if i >= len(tokens) or words[i] == "function":
        return None
    name = [tokens[i].name]
    i += 1
    if i + 1 < len(tokens) and tokens[i].text == ".":
        name.append(tokens[i + 1].name)
        i += 2
    columns: list[str] | None = None
    closing = match_parens(tokens)
    if i < len(tokens) and tokens[i].text == "(":
        end = closing.get(i)
        if end is None:
            return None
        columns = [t.name for t in tokens[i + 1 : end] if t.kind in ("ident", "quoted")]
        i = end + 1
    head_end = i
    settings_at = i if i < len(tokens) and words[i] == "settings" else None
    values_at = select_at = None
    for j, _ in depth_zero(tokens, i):
        if words[j] in ("select", "with"):
            select_at = j
            break
        if words[j] == "format":
            break
        if words[j] == "values":
            values_at = j
            break
    shape = InsertShape(
        table=name[-1],
        database=name[0] if len(name) == 2 else None,
        columns=columns,
        values_at=values_at,
        settings_at=settings_at,
        head_end=head_end,
        select_at=select_at,
    )
    if values_at is not None:
        j = values_at + 1
        while j < len(tokens):
            if tokens[j].text == "(" and j in closing:
                shape.rows.append((j, closing[j]))
                j = closing[j] + 1
            elif tokens[j].text in (",", ";"):
                j += 1
            else:
                return None  # not a plain list of tuples: treat as unknown shape
    return shape


def evaluated_from(tokens: list[Token]) -> tuple[int, bool]:
    """(first token index whose calls run now, whether pinning keeps the meaning).

    Definitions are stored, not evaluated: a column DEFAULT, a plain VIEW, a
    FUNCTION, a DICTIONARY layout. `CREATE TABLE ... AS SELECT` evaluates its
    SELECT; `ALTER ... UPDATE/DELETE` evaluates; a MATERIALIZED VIEW runs its
    query on every future insert, so a value there can neither be left to the
    engine nor pinned.
    """
    words = [t.word if t.kind == "ident" else t.text for t in tokens]
    if not words:
        return 0, True
    head = words[:8]
    if words[0] in ("create", "attach"):
        # MATERIALIZED VIEW, not a column's MATERIALIZED expression (stored:
        # an INSERT that leaves the column to the engine is pinned, defaults.py)
        if any(a == "materialized" and b == "view" for a, b in itertools.pairwise(head)):
            return 0, False
        if "view" in head or "function" in head or "dictionary" in head:
            return len(tokens), True
        for i, _ in depth_zero(tokens):
            if words[i] == "as" and words[i + 1 : i + 2] in (["select"], ["with"], ["("]):
                return i + 1, True
        return len(tokens), True
    if words[0] == "alter":
        if any(words[i] in ("update", "delete") for i, _ in depth_zero(tokens)):
            return 0, True
        return len(tokens), True
    return 0, True
