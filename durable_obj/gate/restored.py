"""A restored base passes the gate its statements would have passed.

Everything in the store is untrusted, a base too: a real BACKUP archive
with the right size and SHA-256 can be written by anyone with access to
the store, or by chdb.durable, whose gate is looser. Its tables are
statements the engine runs on its own: a view's SELECT runs inside every
read of it (and the read gate's `EXPLAIN QUERY TREE` shows only the view,
a table of the object's own), a materialized view's inside every INSERT
into its source, a dictionary's source query on load, a refreshable view's
on a timer, a column's DEFAULT on insert, a TTL on merges. So each
definition is judged as the statement that made it would be, twice:

* before RESTORE, on the archive's own text (`check_definitions`, given
  `replica.archive.contents`): the engine's reading, `localize`
  (another database, `merge()`, `file()`, a dictionary source with its own
  QUERY, HOST, USER, ... refused) and `reach.check` on the engine's parse
  (engines, dictionary sources and layouts, every function, settings, a
  REFRESH). Nothing refused here is ever created: a refreshable view would
  start refreshing as RESTORE creates it;
* after RESTORE, on what the engine made (`check_restored`): every
  `create_table_query` in the object's database, named by the logical
  database, through the same checks; and every view's and materialized
  view's SELECT through what a read gets on the engine's resolution
  (`Scope.check_tree`, `reach.check_resolved` on `EXPLAIN QUERY TREE`).

A refusal is `ClassificationRefused` naming the table (by its logical
name: the message never names an internal database); `replica.restore`
makes it `Corrupt`: the open fails, the engine's database is dropped,
nothing is shown and no WAL line is replayed. Functions (`CREATE
FUNCTION`) are engine-global and BACKUP DATABASE holds none; RESTORE
DATABASE restores only the tables of the one database it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused, SecretRefused
from durable_obj.gate import reach, writes
from durable_obj.gate.bounds import Bounds
from durable_obj.gate.classify import check_mutation
from durable_obj.gate.reading import engine_text
from durable_obj.gate.sql import tokenize_head

if TYPE_CHECKING:
    from collections.abc import Iterable

    from durable_obj.replica.engine import Engine

#: Table engines a restored table may have besides `reach.ALLOWED_ENGINES`.
_RESTORED_KINDS = frozenset({"View", "MaterializedView", "Dictionary"})
#: What the engine may spend resolving one view's SELECT (constant folding
#: and scalar subqueries run while it plans).
_PLAN_BOUNDS = Bounds(seconds=10.0)


def refused(table: str, why: str) -> ClassificationRefused:
    return ClassificationRefused(f"a table {table[:60]!r} the gate refuses: {why}")


def check_definition(engine: Engine, table: str, text: str) -> None:
    """`ClassificationRefused` unless `text`, one CREATE statement naming the
    object's logical database, passes the checks a mutation gets (the
    engine's reading, `localize`, V1's classification, `reach.check`)."""
    try:
        canonical = engine_text(engine, text)
        head = tokenize_head(canonical)
        if not head or head[0].word not in ("create", "attach"):
            raise ClassificationRefused("its definition is not a CREATE statement")
        local = engine.localize(canonical)
        analysis = engine.analyze(local, engine.logical)
        syntax = engine.syntax_error(canonical) if analysis.query_class == "UNKNOWN" else ""
        check_mutation(analysis, engine.logical, syntax)
        reach.check(engine, canonical)
    except (ClassificationRefused, SecretRefused) as exc:
        raise refused(table, _shown(engine, str(exc))) from None


def check_definitions(engine: Engine, definitions: Iterable[tuple[str, str]]) -> None:
    """Each (table, CREATE text) of an archive, before RESTORE creates any."""
    for table, text in definitions:
        check_definition(engine, table, text)


def check_restored(engine: Engine) -> None:
    """What RESTORE made of the base: every table's definition as a
    statement, every view's SELECT as a read (see the module's docstring)."""
    # read afresh (and kept for the checks that follow: replay's batching,
    # the pinner's views and defaults), never an answer kept from before
    tables = engine.known.read(engine).tables.values()
    _check_tables(engine, [(t.name, t.engine, t.create_table_query, t.as_select) for t in tables])


#: What `check_changed` reads of the object's tables.
_DEFINITIONS = (
    "SELECT name, engine, create_table_query, as_select FROM system.tables "
    "WHERE database = {db:String} "
    "SETTINGS max_result_rows = 0, max_result_bytes = 0, result_overflow_mode = 'throw'"
)


def check_changed(engine: Engine) -> None:
    """`check_restored` of the live database before a checkpoint, for the
    tables whose CREATE text has not passed it yet (one engine query when
    none changed): what the open of the new base will check."""
    rows = engine.json_rows(_DEFINITIONS, {"db": engine.database})
    passed = engine.known.passed
    _check_tables(engine, [row for row in rows if passed.get(row[0]) != row[2]])


def _check_tables(engine: Engine, tables: Iterable[Iterable[str]]) -> None:
    """Each (name, engine, CREATE text, SELECT) through the checks; each that
    passes is kept as passed (`Known.passed`), then the catalog verified."""
    for table, kind, create, select in tables:
        if kind not in reach.ALLOWED_ENGINES and kind not in _RESTORED_KINDS:
            raise refused(table, f"ENGINE = {kind[:40]} is not an engine of the object's own")
        check_definition(engine, table, engine.scope.shown(create))
        if select:
            _check_select(engine, table, select)
        engine.known.passed[table] = create
    engine.known.verified = True  # until a statement changes the catalog


def _check_select(engine: Engine, table: str, select: str) -> None:
    """A view's SELECT (`as_select`, naming the internal database) through
    the resolved-tree allow-list a read gets: every table the object's own
    or an allowed system table, every table function pure, every function
    allowed. A SELECT the engine no longer resolves (a source dropped since)
    fails the same way when read; its text passed `check_definition`."""
    try:
        with engine.bounded(_PLAN_BOUNDS, caller=False):
            tree = engine.query_tree(select)
        if tree is not None:
            writes.resolved(engine, tree)
    except ClassificationRefused as exc:
        raise refused(table, _shown(engine, str(exc))) from None


def _shown(engine: Engine, text: str) -> str:
    """`text` as the object may see it: no internal database named."""
    return engine.message(Exception(text))
