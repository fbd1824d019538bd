"""Views that read the clock or chance, and the INSERTs that run one.

A plain view is computed on every read: one whose SELECT calls now(),
rand() and the like (or reads such a view) gives other rows each time, and
nothing in the text of a write that reads it pins them. So the pinner
(`determinism.Pinner.prepare`) refuses a write that reads one, by name.

A materialized view is the same query run on every INSERT into its
source table: its own SELECT may not call such a function (refused when
it is created, `sql.evaluated_from`), but it may read a volatile view,
made before it or after it (`CREATE OR REPLACE VIEW`, `RENAME`,
`EXCHANGE`), or run its rows on into a table another such view reads.
Measured before this: `INSERT INTO src VALUES (1)` with `mv` reading
`clock` (`SELECT now64(6)`) stored one time on the writer and another on
every replay. Judged when the INSERT comes, whatever order the
definitions came in: `Volatile.triggers` names each table an INSERT into
which runs such a view, directly or down a chain of views.

Two more things give a write other values on a replay, and are judged
the same way (a write that reads one, a view over one, a materialized
view that reads one):
* a dictionary, read as a table (`FROM d`, `JOIN d`): it answers from
  what it loaded when it last loaded (its LIFETIME), not from its source
  as it is now (`dictGet` is refused for the same reason);
* a part's layout, the virtual columns `_part`, `_part_offset`,
  `_block_number` and the like: a restore renumbers blocks and renames
  parts, and replay merges INSERTs into fewer parts (measured: `DELETE
  FROM t WHERE _part = 'all_2_2_0'` deleted a row on the writer, none on
  the replica).

Read once per schema change (the pinner forgets it with its other
caches), from what `gate.known` keeps when it can; the views' target
tables and dependents only when the object has a materialized view.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import code_words, find_calls, tokenize, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

_MATERIALIZED = (
    "SELECT name, engine, as_select, create_table_query, dependencies_table "
    "FROM system.tables WHERE database = {db:String} "
    "AND (engine = 'MaterializedView' OR notEmpty(dependencies_table)) "
    "SETTINGS max_result_rows = 0, max_result_bytes = 0, result_overflow_mode = 'throw'"
)
#: `... MATERIALIZED VIEW db.name TO db.target` in the engine's own text.
_TARGET = re.compile(
    r"^CREATE MATERIALIZED VIEW (?:[^\s.`]+|`(?:[^`\\]|\\.)*`)\.(?:[^\s`]+|`(?:[^`\\]|\\.)*`) "
    r"TO (?:[^\s.`]+|`(?:[^`\\]|\\.)*`)\.([^\s`(]+|`(?:[^`\\]|\\.)*`)"
)


#: Virtual columns of a part's layout: other values after a restore or a
#: replay (`_partition_id`, `_partition_value` and `_row_exists` are not:
#: the rows decide them).
LAYOUT = frozenset(
    {"_part", "_part_index", "_part_uuid", "_part_offset", "_part_starting_offset"}
    | {"_part_granule_offset", "_part_data_version", "_block_number", "_block_offset"}
    | {"_disk_name"}
)
_CLOCK = "computes a value of the clock or of chance when it is read"
_CACHE = "answers from what it loaded when it last loaded (its LIFETIME), not from its source"
_LAYOUT = "reads a part's layout (_part, _block_number, ...), which a restore or a replay changes"


@dataclass(frozen=True)
class Volatile:
    """What of one database gives other values when run again."""

    #: Views and dictionaries (lower-cased) -> what of them does: a write
    #: that reads one is refused.
    views: dict[str, str] = field(default_factory=dict)
    #: Table (exact name) -> the materialized view an INSERT into it runs
    #: that reads one of `views` (or the clock, or a layout column).
    triggers: dict[str, str] = field(default_factory=dict)

    def refusal(self, name: str) -> str:
        """Why a write may not read `name`, one of `views`."""
        kind = "dictionary" if self.views[name] is _CACHE else "view"
        return (
            f"the {kind} {name} {self.views[name]}, so a write (or a materialized view) "
            "that reads it would store other values on every replay; read its tables in "
            "the statement instead (where now() and the like are pinned). Nothing was run."
        )


def layout_read(words: frozenset[str] | set[str]) -> str | None:
    """A layout column among a statement's `words`, or None."""
    found = sorted(words & LAYOUT)
    return found[0] if found else None


def read(engine: Engine, db: str, nondeterministic: frozenset[str]) -> Volatile:
    """The volatile views of database `db` (a logical name), and the tables
    whose INSERTs run a volatile materialized view."""
    kinds = ("View", "MaterializedView", "Dictionary")
    known = engine.known.kept(engine, db)
    if known is not None:
        rows = [[t.name, t.engine, t.as_select] for t in known.tables.values()]
        rows = [row for row in rows if row[1] in kinds]
    else:
        rows = engine.json_rows(
            "SELECT name, engine, as_select FROM system.tables WHERE database = {db:String} "
            "AND engine IN ('View', 'MaterializedView', 'Dictionary')",
            {"db": db},
        )

    def why(body: str) -> str | None:
        if any(c.name in nondeterministic for c in find_calls(tokenize(body))):
            return _CLOCK
        return _LAYOUT if layout_read(code_words(body)) else None

    volatile = {str(n).lower(): _CACHE for n, kind, _ in rows if kind == "Dictionary"}
    views = {str(n).lower(): str(body) for n, kind, body in rows if kind == "View"}
    words = {name: code_words(body) for name, body in views.items()}
    volatile |= {name: found for name, body in views.items() if (found := why(body))}
    while True:  # a view that reads a volatile view (or dictionary) is volatile
        more = {
            n: f"reads {(first := sorted(used & volatile.keys())[0])}, which {volatile[first]}"
            for n, used in words.items()
            if n not in volatile and used & volatile.keys()
        }
        if not more:
            break
        volatile |= more
    if not any(kind == "MaterializedView" for _, kind, _ in rows):
        return Volatile(volatile)
    return Volatile(volatile, _triggers(engine, db, set(volatile), why))


def _triggers(
    engine: Engine, db: str, volatile: set[str], why: Callable[[str], str | None]
) -> dict[str, str]:
    """Table -> a volatile materialized view an INSERT into it runs: one
    whose SELECT reads a volatile view (or calls such a function: a line
    from before, or chdb.durable's), or one whose rows go on into a table
    that is itself such a trigger (a chain of views)."""
    rows = engine.json_rows(_MATERIALIZED, {"db": db})
    views: dict[str, tuple[bool, set[str]]] = {}  # name -> (volatile, where its rows go)
    dependents: dict[str, list[str]] = {}
    for name, kind, body, create, deps in rows:
        dependents[name] = [str(d) for d in deps]
        if kind == "MaterializedView":
            found = _TARGET.match(str(create))
            goes = {name} | ({found.group(1).strip("`")} if found else set())
            reads = bool(code_words(str(body)) & volatile) or why(str(body)) is not None
            views[name] = (reads, goes)
    triggers: dict[str, str] = {}
    changed = True
    while changed:  # down the chains, to a fixed point
        changed = False
        for table, runs in dependents.items():
            if table in triggers:
                continue
            for view in runs:
                reads, goes = views.get(view, (False, set()))
                onward = sorted(goes & triggers.keys())
                if reads or onward:
                    triggers[table] = view if reads else triggers[onward[0]]
                    changed = True
                    break
    return triggers


def inserted(sql: str, db: str) -> str | None:
    """The table an INSERT into the object's database writes, or None."""
    shape = insert_shape(tokenize_head(sql))
    if shape is None or shape.database not in (None, db):
        return None
    return shape.table


def reads_rows(sql: str, words: frozenset[str] | set[str]) -> bool:
    """Does this statement write rows computed from what it reads (an
    INSERT, an UPDATE or DELETE, a CREATE TABLE ... AS SELECT, a
    MATERIALIZED VIEW)? A plain view's own DDL (CREATE VIEW over it, DROP,
    RENAME) reads no rows."""
    head = [t.word for t in tokenize_head(sql)[:4] if t.kind == "ident"]
    if not head:
        return False
    if head[0] in ("insert", "delete", "update"):
        return True
    if head[0] == "alter":
        return bool(words & {"update", "delete"})
    # a MATERIALIZED VIEW runs its SELECT on every future INSERT
    plain_view = "view" in head and "materialized" not in head
    return head[0] in ("create", "replace") and "select" in words and not plain_view
