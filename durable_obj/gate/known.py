"""What the object's database held when it was restored: one engine query for the checks.

Several checks ask the engine what a table is:
* what RESTORE made of a base (`restored.check_restored`): every table's
  engine, definition and SELECT;
* which tables replay may merge INSERTs into (`replay.Replayer`): engine,
  settings, dependent views;
* which views read the clock (`determinism`): each view's SELECT;
* which columns an INSERT leaves to a default (`defaults`);
* what a checkpoint refuses (`replica.archives.backup`: a detached table
  or part, a Join or Set table), which tables hold a lightweight UPDATE's
  patch part (applied first), and whether it may be an increment
  (`core.chains`: no table whose files change in place).

Each is its own query on system.tables, system.columns or
system.detached_tables, 2-4 ms apiece in chDB 26.9 (about 1 ms of it the
engine's fixed cost of any query): four on every open of a base, and two
on every checkpoint. Once RESTORE has run, `read` answers all of them in
one query (7-8 ms at three tables in a bare engine), for the restored base's check, and
keeps it (without the definitions' text) for the checks of the
statements that follow, until the catalog may have changed (`forget`).
Then each check asks the engine again its own narrow question, as it
always did (one table's row, the views, one table's columns), so what a
statement's check reads inside the statement's own bounds never grows
with the other tables, and a run of CREATE-then-INSERT pairs costs what it
did. A checkpoint's question is asked once (`checkpointing`) and kept
until `forget` too. So is each read the gate let through
(`pipeline.Gate.read`): what it reads and resolves to is the catalog's
doing, so the same text passes again, unchecked, until the catalog may
have changed (an agent asks the same recall again and again; its check
cost one engine query, EXPLAIN QUERY TREE, as much as the read itself);
never for an object with `external_reads` (`pipeline.Gate.read`).

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
The caches the checks keep of their own narrow answers are forgotten at
the same places. `check_restored`, right after RESTORE, always reads
afresh. Only the object's own database is kept; a check of any other
database asks the engine itself.

The queries carry their own result settings: a caller's read bound
(`max_result_rows` with `result_overflow_mode = 'break'`) set on the
connection must never cut an answer short, or a table or view would be
missing from what the checks see.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import DurableError

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

_SETTINGS = "SETTINGS max_result_rows = 0, max_result_bytes = 0, result_overflow_mode = 'throw'"
#: Every table with its definition, every column, every detached table.
_FULL = (
    "SELECT 't', name, engine, engine_full, toString(length(dependencies_table)), "
    "create_table_query, as_select, toUInt64(position(create_table_query, 'CONSTRAINT') > 0) "
    "FROM system.tables "
    "WHERE database = {db:String} "
    "UNION ALL SELECT 'c', table, name, type, default_kind, default_expression, '', position "
    "FROM system.columns WHERE database = {db:String} "
    "UNION ALL SELECT 'd', table, '', '', '', '', '', toUInt64(0) FROM system.detached_tables "
    "WHERE database = {db:String} " + _SETTINGS
)
#: Engines that keep no rows of their own: no reason for a full base.
_NO_ROWS = frozenset({"View", "MaterializedView", "Dictionary", "Null", "GenerateRandom"})
#: What a checkpoint judges, when nothing is kept: the detached tables,
#: the Join and Set tables, the tables that are neither of MergeTree's
#: family nor without rows (their files change in place).
_CHECKPOINT = (
    "SELECT 'd', table, '' FROM system.detached_tables WHERE database = {db:String} "
    "UNION ALL SELECT 'p', table, name FROM system.detached_parts WHERE database = {db:String} "
    "AND reason = '' "  # detached by a statement (the engine's own carry a reason: broken, ...)
    "UNION ALL SELECT 't', name, engine FROM system.tables WHERE database = {db:String} "
    "AND NOT endsWith(engine, 'MergeTree') AND engine NOT IN {no_rows:Array(String)} "
    # a lightweight UPDATE's patch part: its partition is `patch-...`
    "UNION ALL SELECT DISTINCT 'u', table, '' FROM system.parts WHERE database = {db:String} "
    "AND active AND startsWith(partition_id, 'patch-') " + _SETTINGS
)
#: The tables with a patch part the engine applies to some part when
#: reading it: a patch's block is newer than the part's data version. (A
#: merge that applied it may leave a data version behind: then it is
#: applied again, which changes nothing.)
UNAPPLIED = (
    "SELECT table FROM system.parts WHERE database = {db:String} AND active GROUP BY table "
    "HAVING countIf(NOT startsWith(partition_id, 'patch-')) > 0 "  # a part to apply them to
    "AND maxIf(max_block_number, startsWith(partition_id, 'patch-')) > "
    "minIf(toInt64(data_version), NOT startsWith(partition_id, 'patch-')) " + _SETTINGS
)


@dataclass(frozen=True, slots=True)
class Table:
    """One row of system.tables."""

    name: str
    engine: str
    engine_full: str
    #: How many views depend on it (`length(dependencies_table)`).
    dependents: int
    #: The CREATE statement: in what `Known.read` returns; '' in what it keeps.
    create_table_query: str
    as_select: str
    #: Does its definition name a CONSTRAINT (or hold the word anywhere)?
    constrained: bool


@dataclass(frozen=True, slots=True)
class Catalog:
    """The object's database as one query saw it."""

    #: The logical and internal database names it was read under.
    logical: str
    database: str
    #: By exact name, in name order.
    tables: dict[str, Table]
    #: [name, type, default_kind, default_expression] of each table's
    #: columns, in position order.
    columns: dict[str, list[list[str]]]

    def views(self) -> list[Table]:
        return [t for t in self.tables.values() if t.engine == "View"]


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """What a checkpoint judges of the object's tables."""

    #: Detached tables, by name: BACKUP DATABASE would leave them out.
    detached: list[str]
    #: Parts a statement detached, as "table/part": BACKUP leaves them out
    #: too (it takes a table's active parts), and an ATTACH would bring back
    #: rows no replica of the base has.
    detached_parts: list[str]
    #: (name, engine) of Join and Set tables: RESTORE gives them back empty.
    aside: list[tuple[str, str]]
    #: Is there a table whose files change in place (Log, Memory, ...)?
    #: Then a base must be full, never an increment.
    in_place: bool
    #: Tables holding a lightweight UPDATE's patch part: BACKUP leaves them
    #: out, so a patch not yet applied to the parts it updates would be in
    #: no replica of the base (`archives.backup` applies them first).
    patched: list[str] = dataclasses.field(default_factory=list)


def _checkpointing(
    detached: list[str],
    tables: list[tuple[str, str]],
    parts: list[str] | None = None,
    patched: list[str] | None = None,
) -> Checkpointing:
    """From the detached tables' names, (name, engine) of every table, the
    detached parts ("table/part") and the tables holding patch parts."""
    return Checkpointing(
        sorted(detached),
        sorted(parts or []),
        sorted((n, e) for n, e in tables if e in ("Join", "Set")),
        any(not e.endswith("MergeTree") and e not in _NO_ROWS for _, e in tables),
        sorted(patched or []),
    )


class Known:
    """The catalog read once RESTORE has run, and what a checkpoint judges,
    each kept until `forget`."""

    def __init__(self) -> None:
        self._kept: Catalog | None = None
        self._checkpointing: Checkpointing | None = None
        #: Has every definition passed the checks a restored base gets
        #: (`restored.check_restored`) since the catalog last changed?
        self.verified = False
        #: Each table's CREATE text as it passed that check (kept across
        #: `forget`: a text that passed passes again).
        self.passed: dict[str, str] = {}
        #: Per table: does a view read it (`fires_views`)?
        self.views: dict[str, bool] = {}
        #: The reads that passed the gate (`pipeline.Gate.read`): what it
        #: vouched for, by the text it was given; at most `READS_KEPT`.
        self.reads: dict[tuple[str, str, tuple[str, ...]], tuple[str, bool]] = {}

    def forget(self) -> None:
        self._kept = None
        self._checkpointing = None
        self.verified = False
        self.views.clear()
        self.reads.clear()

    def read(self, engine: Engine) -> Catalog:
        """The object's database as it is now, in full (one engine query):
        every table with its definition and every column, kept without the
        definitions' text for the checks after it; and what a checkpoint
        judges (the detached tables too), kept as well."""
        self.forget()
        tables: dict[str, Table] = {}
        columns: dict[str, list[tuple[int, list[str]]]] = {}
        detached: list[str] = []
        for kind, name, a, b, c, d, e, n in engine.json_rows(_FULL, {"db": engine.database}):
            if kind == "t":
                tables[name] = Table(name, a, b, int(c), d, e, bool(int(n)))
            elif kind == "c":
                columns.setdefault(name, []).append((int(n), [a, b, c, d]))
            else:
                detached.append(name)
        full = Catalog(
            engine.logical,
            engine.database,
            {name: tables[name] for name in sorted(tables)},
            {
                t: [row for _, row in sorted(rows, key=lambda r: r[0])]
                for t, rows in columns.items()
            },
        )
        self._kept = dataclasses.replace(
            full,
            tables={
                name: dataclasses.replace(t, create_table_query="")
                for name, t in full.tables.items()
            },
        )
        # no patch part: a base holds none (BACKUP leaves them out)
        self._checkpointing = _checkpointing(
            detached, [(t.name, t.engine) for t in tables.values()]
        )
        return full

    def kept(self, engine: Engine, db: str) -> Catalog | None:
        """What is kept of `db` (a logical name, as the checks pass it); None
        when nothing is, or `db` is not the object's own database: the
        caller then asks the engine its own question."""
        kept = self._kept
        if kept is None or db != engine.logical or kept.logical != db:
            return None
        return kept if kept.database == engine.database else None

    def checkpointing(self, engine: Engine) -> Checkpointing:
        """What a checkpoint judges of the object's tables: kept, or read now
        (one engine query) and kept."""
        if self._checkpointing is None:
            rows = engine.json_rows(
                _CHECKPOINT, {"db": engine.database, "no_rows": _array(_NO_ROWS)}
            )
            self._checkpointing = _checkpointing(
                [name for kind, name, _ in rows if kind == "d"],
                [(name, e) for kind, name, e in rows if kind == "t"],
                [f"{name}/{part}" for kind, name, part in rows if kind == "p"],
                [name for kind, name, _ in rows if kind == "u"],
            )
        return self._checkpointing


def fires_views(engine: Engine, database: str | None, table: str) -> bool:
    """Whether an INSERT into `table` (of the object's own database, or
    `database` by its logical name) runs views: a materialized view reads
    it. True when that is not known: a view's failure leaves the block in
    the table, so a failed INSERT there may have applied part of itself."""
    if database not in (None, engine.logical):
        return True
    known = engine.known.kept(engine, engine.logical)
    if known is not None:
        found = known.tables.get(table)
        return found is None or found.dependents > 0
    fires = engine.known.views.get(table)
    if fires is None:
        try:
            rows = engine.json_rows(
                "SELECT length(dependencies_table) FROM system.tables "
                "WHERE database = {db:String} AND name = {t:String}",
                {"db": engine.database, "t": table},
            )
        except DurableError:
            return True  # asked after a failure too: not known, so it may
        fires = engine.known.views[table] = not rows or int(rows[0][0]) > 0
    return fires


def _array(names: frozenset[str]) -> str:
    """`names` as a query parameter of type Array(String)."""
    return "[" + ", ".join(f"'{name}'" for name in sorted(names)) + "]"
