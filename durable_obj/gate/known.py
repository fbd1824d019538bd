"""What the object's database holds, read in one query and shared by the gate's checks.

Several checks ask the engine what a table is:
* what RESTORE made of a base (`restored.check_restored`): every table's
  engine, definition and SELECT;
* what a checkpoint refuses (`replica.archives.backup`: a detached table,
  a Join or Set table) and whether an increment may be taken
  (`core.chains`: a table whose files change in place);
* which tables replay may merge INSERTs into (`replay.Replayer`): engine,
  settings, dependent views;
* which views read the clock (`determinism`): each view's SELECT;
* which columns an INSERT leaves to a default (`defaults`).

Each was its own query on system.tables, system.columns or
system.detached_tables, 2-4 ms apiece in chDB 26.9 (about 1 ms of it the
engine's fixed cost of any query): four on every open, one more for every
round of concurrent writers, two on every checkpoint. `Known` reads them
in one query and serves each check from that answer until the catalog may
have changed. Once RESTORE has run, the read is full (`read`: every
table's definition and every column, 6-7 ms), for the restored base's
check and then for the first statements' checks. After a change it is
light (`of`): one row per table, no definition or column, so what a
statement's check reads, inside the statement's own bounds, grows with the
number of tables and never with their columns or the text of their
definitions; an INSERT's defaults then read their one table's columns, as
before.

Any statement but an INSERT may change the catalog. Every place that runs
one forgets what is known, whether it succeeded or failed (one that fails
half-way may have changed it too), judged on the text the engine reads
(`reading.engine_text`), never on a line as written: ClickHouse nests
comments and our lexer does not, so `/* /* */ INSERT */ CREATE VIEW ...`
only looks like an INSERT to it.
* `replay.Replayer`, before and after each committed line (or merged run
  of lines) whose gated text is not an INSERT;
* the writer, after each of its statements that is not an INSERT
  (`core.units`, which also tells the pinner: `schema_changed`).
The caches these checks kept before, each its own, were forgotten at the
same places. A check that must see the engine as it is now
(`check_restored`, right after RESTORE) reads afresh (`read`) and never
takes a kept answer. Only the object's own database is kept; a check of
any other database asks the engine itself, as before.

The query carries its own result settings: a caller's read bound
(`max_result_rows` with `result_overflow_mode = 'break'`) set on the
connection must never cut the answer short, or a table or view would be
missing from what the checks see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Every table (its definition only in a full read: `{create}`), its
#: columns (only in a full read: `{columns}`), every detached table.
_SQL = (
    "SELECT 't', name, engine, engine_full, toString(length(dependencies_table)), "
    "{create}, as_select, toUInt64(has_own_data) FROM system.tables "
    "WHERE database = {{db:String}} {columns}"
    "UNION ALL SELECT 'd', table, '', '', '', '', '', toUInt64(0) FROM system.detached_tables "
    "WHERE database = {{db:String}} "
    "SETTINGS max_result_rows = 0, max_result_bytes = 0, result_overflow_mode = 'throw'"
)
_FULL = _SQL.format(
    create="create_table_query",
    columns="UNION ALL SELECT 'c', table, name, type, default_kind, default_expression, '', "
    "position FROM system.columns WHERE database = {db:String} ",
)
_LIGHT = _SQL.format(create="''", columns="")


@dataclass(frozen=True, slots=True)
class Table:
    """One row of system.tables."""

    name: str
    engine: str
    engine_full: str
    #: How many views depend on it (`length(dependencies_table)`).
    dependents: int
    #: The CREATE statement: only in a full read (`Known.read`), else ''.
    create_table_query: str
    as_select: str
    #: Does it keep data of its own (not a view, not a Distributed or Merge)?
    has_own_data: bool


@dataclass(frozen=True, slots=True)
class Catalog:
    """The object's database as one query saw it."""

    #: The logical and internal database names it was read under.
    logical: str
    database: str
    #: By exact name, in name order.
    tables: dict[str, Table]
    #: [name, type, default_kind, default_expression] of each table's
    #: columns, in position order; None when not read (a light read).
    columns: dict[str, list[list[str]]] | None = None
    #: The names of its detached tables (`DETACH TABLE`), in name order.
    detached: list[str] = field(default_factory=list)

    def views(self) -> list[Table]:
        return [t for t in self.tables.values() if t.engine == "View"]


class Known:
    """The last `Catalog` read on one engine, until `forget`."""

    def __init__(self) -> None:
        self._kept: Catalog | None = None

    def forget(self) -> None:
        self._kept = None

    def read(self, engine: Engine) -> Catalog:
        """The object's database as it is now, in full: every table with its
        definition, and every column (one engine query), kept. Made once
        RESTORE has run, where the definitions are checked; a light read
        (`of`, after `forget`) leaves both out, so what a statement's own
        check reads grows with the tables, never with their columns or the
        text of their definitions."""
        return self._read(engine, _FULL, full=True)

    def _read(self, engine: Engine, sql: str, *, full: bool) -> Catalog:
        self._kept = None
        tables: dict[str, Table] = {}
        columns: dict[str, list[tuple[int, list[str]]]] = {}
        detached: list[str] = []
        for kind, name, a, b, c, d, e, n in engine.json_rows(sql, {"db": engine.database}):
            if kind == "t":
                tables[name] = Table(name, a, b, int(c), d, e, bool(int(n)))
            elif kind == "c":
                columns.setdefault(name, []).append((int(n), [a, b, c, d]))
            else:
                detached.append(name)
        by_position = {
            t: [row for _, row in sorted(rows, key=lambda r: r[0])] for t, rows in columns.items()
        }
        self._kept = Catalog(
            engine.logical,
            engine.database,
            {name: tables[name] for name in sorted(tables)},
            by_position if full else None,
            sorted(detached),
        )
        return self._kept

    def of(self, engine: Engine, db: str) -> Catalog | None:
        """What is known of `db` (a logical name, as the checks pass it),
        read now (a light read) if nothing is kept; None when `db` is not
        the object's own database (the caller asks the engine itself)."""
        if db != engine.logical:
            return None
        kept = self.kept(engine, db)
        return kept if kept is not None else self._read(engine, _LIGHT, full=False)

    def kept(self, engine: Engine, db: str) -> Catalog | None:
        """What is kept of `db`, never read now; None if nothing is."""
        kept = self._kept
        if kept is None or kept.logical != db or kept.database != engine.database:
            return None
        return kept
