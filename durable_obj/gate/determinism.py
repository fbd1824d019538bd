"""Does a statement replay to what the writer saw? Pin it, or refuse it.

The WAL re-executes SQL. A statement that reads the clock, a random source,
the host or anything outside the object gives another result on every
replay, and every replica silently differs from the writer. For each
`execute()` this module decides, from the engine's own catalogue
(`system.functions.deterministic`, `system.table_functions`) and the lexer
of `durable_obj.gate.sql`, which knows ClickHouse strings, quoted identifiers and
comments (so `'now()'`, `` `now()` `` and `-- now()` are not calls):

* deterministic: logged unchanged;
* pinnable: evaluated once now and replaced by a literal of the same type
  (`durable_obj.gate.literals`: exact, and the same in every time zone), and the
  writer runs the pinned text, so writer and replay agree exactly:
  - any non-deterministic call inside the rows of `INSERT ... VALUES` (each
    occurrence is evaluated once per row anyway),
  - a query-constant call anywhere (`now()`, `today()`, `randConstant()`, ...),
  - an omitted column whose DEFAULT / MATERIALIZED expression is
    non-deterministic (`durable_obj.gate.defaults`: the value is made explicit);
* refused with `Nondeterministic` otherwise: per-row randomness outside
  VALUES, table functions that read outside the object (`url`, `file`, `s3`,
  `remote`, ...), `system.*` tables other than pure generators, calls whose
  value cannot be computed on its own, and DDL that gives existing rows a
  value computed at read or merge time (`durable_obj.gate.defaults`).

Mode "pin" (default) pins; "refuse" never rewrites and refuses instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_obj.errors import Nondeterministic
from durable_obj.gate import shipped, volatile
from durable_obj.gate.defaults import ColumnRules
from durable_obj.gate.literals import Literals
from durable_obj.gate.params import bind as bind_params
from durable_obj.gate.quoting import after_settings, quote_string, splice
from durable_obj.gate.reading import code_of
from durable_obj.gate.shapes import InsertShape, evaluated_from, insert_shape
from durable_obj.gate.sql import (
    Call,
    Token,
    code_words,
    find_calls,
    outermost,
    tokenize,
    tokenize_head,
)
from durable_obj.gate.volatile import Volatile

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Non-deterministic per the engine, but replaying identically inside an
#: object: the database is pinned, the time zone is pinned, and the rest only
#: describe their argument.
REPLAY_STABLE = frozenset(
    {
        "arrayjoin",
        "unnest",
        "currentdatabase",
        "current_database",
        "database",
        "schema",
        "timezone",
        "tocolumntypename",
        "dumpcolumnstructure",
        "isconstant",
        "hascolumnintable",
        "joinget",
        "joingetornull",
    }
)

#: Constant within one query: evaluating once and logging the value is exact
#: wherever the call stands.
QUERY_CONSTANT = frozenset(
    {
        "now",
        "now64",
        "today",
        "yesterday",
        "curdate",
        "current_date",
        "current_timestamp",
        "localtime",
        "localtimestamp",
        "utctimestamp",
        "utc_timestamp",
        "randconstant",
        "servertimezone",
        "initialquerystarttime",
        "initial_query_start_time",
        "hostname",
        "fqdn",
        "fullhostname",
        "version",
        "revision",
        "buildid",
        "chdb",
        "uptime",
        "getsetting",
        "getsettingordefault",
        "currentuser",
        "current_user",
        "user",
        "session_user",
        "serveruuid",
    }
)

#: Table functions that generate data from their arguments alone.
PURE_TABLE_FUNCTIONS = frozenset(
    {
        "numbers",
        "numbers_mt",
        "zeros",
        "zeros_mt",
        "generate_series",
        "generateseries",
        "values",
        "null",
        "view",
        "format",
    }
)
#: Table engines and dictionary sources whose data lives outside the object
#: (beyond those that are also table functions, such as url, file, s3, mysql).
EXTERNAL_ENGINES = frozenset(
    {"kafka", "rabbitmq", "nats", "filelog", "s3queue", "azurequeue", "distributed"}
    | {"externaldistributed", "executablepool", "keepermap", "materializedpostgresql"}
    | {"materializedmysql", "url", "file", "s3", "hdfs", "mysql", "postgresql", "mongodb"}
    | {"redis", "odbc", "jdbc", "sqlite", "azureblobstorage", "hive", "deltalake", "hudi"}
    | {"iceberg", "icebergs3", "icebergazure", "iceberghdfs", "iceberglocal", "executable"}
    | {"merge", "buffer", "gcs", "oss", "cosn", "ytsaurus", "arrowflight", "timeseries"}
)
EXTERNAL_SOURCES = frozenset({"http", "https", "executable_pool", "cassandra"})
#: system tables that are pure generators.
PURE_SYSTEM_TABLES = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "one"})


@dataclass(frozen=True, slots=True)
class Catalog:
    """What the engine says is non-deterministic or reads outside."""

    nondeterministic: frozenset[str]
    table_functions: frozenset[str]

    @property
    def suspicious(self) -> frozenset[str]:
        """Every word that sends a statement down the full analysis."""
        return (
            self.nondeterministic
            | self.table_functions
            | EXTERNAL_ENGINES
            | EXTERNAL_SOURCES
            | {"system", "information_schema", "clickhouse", "materialized"}
            | {"materialize", "clear", "ttl"}  # DDL that computes column values
        )

    @classmethod
    def load(cls, engine: Engine) -> Catalog:
        found = shipped.lists(engine)  # read once per process, or shipped
        return cls(
            frozenset(name for name, *_, det in found.functions if det == 0) - REPLAY_STABLE,
            frozenset(found.table_functions) - PURE_TABLE_FUNCTIONS,
        )


_FIX = "compute the value in the caller and insert it as a literal"
_CATALOG: dict[str, Catalog] = {}


def catalog(engine: Engine) -> Catalog:
    """The catalogue of this engine version, read once per process."""
    found = _CATALOG.get(engine.version)
    if found is None:
        found = _CATALOG[engine.version] = Catalog.load(engine)
    return found


#: The code words of an INSERT's rows, asked for only when needed.
Words = Callable[[], frozenset[str]]


class Pinner:
    """Applies the rule to one statement on one engine."""

    def __init__(self, engine: Engine, *, mode: str, timezone: str) -> None:
        self._engine = engine
        self._known: Catalog | None = None
        self._mode = mode
        self._tz = timezone
        self._literals = Literals(engine, timezone)
        self._rules = ColumnRules(
            engine,
            self._literals,
            nondeterministic=lambda: self._catalog.nondeterministic,
            query_constant=QUERY_CONSTANT,
            mode=mode,
        )
        self._suspicious: frozenset[str] | None = None
        #: What of the object reads the clock or chance when run (by db).
        self._volatile: dict[str, Volatile] = {}

    @property
    def _catalog(self) -> Catalog:
        # Read on first use: a reader that only replays never pays for it.
        if self._known is None:
            self._known = catalog(self._engine)
        return self._known

    @property
    def timezone(self) -> str:
        """The object's session time zone, which every logged INSERT carries."""
        return self._tz

    def bind(self, sql: str, params: Mapping[str, Any]) -> str:
        """`sql` with its placeholders bound to exact literals (`durable_obj.gate.params`)."""
        return bind_params(sql, params, self._literals, self._tz)

    def schema_changed(self) -> None:
        """Forget cached column definitions (call after any non-INSERT)."""
        self._rules.forget()
        self._literals.forget()
        self._volatile.clear()
        self._engine.known.forget()

    def prepare(self, sql: str, db: str) -> str:
        """The text to run and log: `sql` itself, or `sql` with values pinned.
        Raises `Nondeterministic` naming the culprit and the fix."""
        if self._suspicious is None:
            self._suspicious = self._catalog.suspicious
        code = code_of(sql)  # rows the engine reads as literals only are no code
        words = code_words(code)
        # the rows' code words, for the DEFAULT check: none to read in rows
        # the engine reads as literals only (our lexer cannot read them)
        rows_words: Words | None = None if code is not sql else (lambda: words)

        if volatile.reads_rows(sql, words):  # an INSERT among them (a DDL pays no catalog read)
            self._refuse_volatile(sql, words, db)
        if not words & self._suspicious:
            # The common case, in regex scans rather than a full lexing: no
            # word of the statement's code (strings and comments are data)
            # names anything non-deterministic or outside. Only an INSERT's
            # head is lexed, for its defaults and the time zone.
            fast = self._prepare_plain(sql, db, rows_words)
            if fast is not None:
                return fast
        return self._prepare_full(sql, db, rows_words)

    def _refuse_volatile(self, sql: str, words: frozenset[str], db: str) -> None:
        """`Nondeterministic` for a write that reads what gives other values
        on a replay (`gate.volatile`), or an INSERT that runs a view that does."""
        found = self._volatile_of(db)
        read = sorted(words & found.views.keys())
        if read:
            raise Nondeterministic(found.refusal(read[0]))
        if column := volatile.layout_read(words):
            raise Nondeterministic(
                f"{column} is where a row lies in the table's parts, which a restore "
                "renumbers and a replay merges otherwise, so a write that reads it would "
                "change other rows on every replay; name rows by their columns instead. "
                "Nothing was run."
            )
        if found.triggers and (table := volatile.inserted(sql, db)) in found.triggers:
            raise Nondeterministic(
                f"an INSERT into {table} runs the materialized view "
                f"{found.triggers[table]}, which reads the clock, chance, a dictionary or a "
                "part's layout (directly, through a view, or down a chain of views), so every "
                "replay would store other values; make what it reads deterministic (or drop "
                "the materialized view), and compute such values in the INSERT, where they "
                "are pinned. Nothing was run."
            )

    def _volatile_of(self, db: str) -> Volatile:
        """What of `db` reads the clock or chance when run (`gate.volatile`)."""
        found = self._volatile.get(db)
        if found is None:
            found = self._volatile[db] = volatile.read(
                self._engine, db, self._catalog.nondeterministic
            )
        return found

    def leaves_rows(self, shape: InsertShape, db: str) -> bool:
        """Whether an INSERT of `shape` may have its rows go unread by the
        gate: none of its table's columns is left to a non-deterministic
        DEFAULT."""
        return self._rules.leaves_rows(shape, db)

    def _prepare_plain(self, sql: str, db: str, words: Words | None) -> str | None:
        """`sql` with the time zone setting if it is a plain INSERT; None if a
        column's default needs the full path."""
        tokens = tokenize_head(sql)
        shape = insert_shape(tokens)
        if shape is None:
            return sql
        if self._rules.missing(shape, db):
            return None
        needed = self._rules.carried(shape, db, words)
        if shape.settings_at is not None:
            return after_settings(sql, tokens, shape, needed) if needed else sql
        if any(t.word == "settings" for t in tokens if t.kind == "ident"):
            return None if needed else sql  # the full path refuses to add to them
        if shape.head_end >= len(tokens):
            return sql
        at = tokens[shape.head_end].start
        settings = ", ".join([*needed, f"session_timezone = {quote_string(self._tz)}"])
        return f"{sql[:at]}SETTINGS {settings} {sql[at:]}"

    def _prepare_full(self, sql: str, db: str, words: Words | None) -> str:
        tokens = tokenize(sql)
        calls = find_calls(tokens)
        self._refuse_outside_reads(tokens, calls)
        self._rules.check_ddl(tokens, calls, db)
        shape = insert_shape(tokens)
        rows = [] if shape is None else [(tokens[a].start, tokens[b].end) for a, b in shape.rows]
        evaluated, pinnable = evaluated_from(tokens)
        named = 0 if shape is None else shape.head_end  # an INSERT's table and column list
        culprits = [
            c
            for c in calls
            if c.name in self._catalog.nondeterministic
            and c.first >= evaluated
            and not (c.bare and c.first < named)
        ]
        self._refuse_ambiguous(tokens, [c for c in culprits if c.bare], db)
        to_pin = outermost(culprits)
        replacements: list[tuple[int, int, str]] = []
        pin: list[Call] = []
        for call in to_pin:
            if not pinnable:
                raise Nondeterministic(
                    f"{call.shown}() is stored in a definition that runs on every future "
                    "insert, so each replay would compute other values; use a "
                    "deterministic expression. Nothing was run."
                )
            if call.name in QUERY_CONSTANT or any(a <= call.start < b for a, b in rows):
                pin.append(call)
            else:
                raise Nondeterministic(
                    f"{call.shown}() gives a different value on every row and every replay, "
                    "and outside the rows of INSERT ... VALUES it cannot be pinned to the "
                    f"values the writer saw; {_FIX} (or use a checkpoint() after a bulk "
                    "transformation). Nothing was run."
                )
        if pin:
            if self._mode == "refuse":
                raise Nondeterministic(
                    f"{pin[0].shown}() would replay to a different value and this object "
                    f"refuses to pin (nondeterminism='refuse'); {_FIX}. Nothing was run."
                )
            replacements += self._evaluate(sql, pin)
        needed: list[str] = []
        if shape is not None:
            needed = self._rules.make_explicit(tokens, shape, db, replacements)
            needed += self._rules.carried(shape, db, words)
        if replacements:
            sql = splice(sql, replacements)
        return self._with_settings(sql, needed)

    def _refuse_ambiguous(self, tokens: list[Token], bare: list[Call], db: str) -> None:
        """A bare `now` (`BARE_CALLS`) is the clock unless the scope has a
        column or an alias of that name; pinning it then would change what
        the statement means, so it is refused: quote the column (`now`),
        or write the call (now())."""
        if not bare:
            return
        words = {c.name for c in bare}
        aliased = {
            tokens[i + 1].word
            for i, t in enumerate(tokens[:-1])
            if t.kind == "ident" and t.word == "as" and tokens[i + 1].kind in ("ident", "quoted")
        }
        named = self._engine.json_rows(
            "SELECT DISTINCT lower(name) FROM system.columns WHERE database = {db:String} "
            "AND lower(name) IN {w:Array(String)}",
            {"db": db, "w": "[" + ", ".join(quote_string(w) for w in sorted(words)) + "]"},
        )
        clash = sorted(words & (aliased | {str(row[0]) for row in named}))
        if clash:
            raise Nondeterministic(
                f"`{clash[0]}` here is a column or alias of that name or the engine's "
                f"{clash[0]} (the time, the user, ...), and the two replay differently; "
                f"quote it as `{clash[0]}` for the column, or write {clash[0]}() for the "
                "value. Nothing was run."
            )

    def refuse_outside_reads(self, sql: str) -> None:
        """`Nondeterministic` if `sql` reads outside the object (a table
        function, an external engine or source, a system table)."""
        tokens = tokenize(sql)
        self._refuse_outside_reads(tokens, find_calls(tokens))

    def _refuse_outside_reads(self, tokens: list[Token], calls: list[Call]) -> None:
        for call in calls:
            after_engine = call.first >= 1 and (
                tokens[call.first - 1].word == "engine"
                or (call.first >= 2 and tokens[call.first - 2].word == "engine")
            )
            if after_engine and call.name in EXTERNAL_ENGINES:
                raise Nondeterministic(
                    f"a table with ENGINE = {tokens[call.first].text} keeps its data outside the "
                    "object, where no checkpoint or replay can reach it; use MergeTree and "
                    "INSERT the rows. Nothing was run."
                )
            if call.name == "clickhouse" and any(
                t.word in ("host", "port") for t in tokens[call.first : call.last]
            ):
                raise Nondeterministic(
                    "a dictionary SOURCE(CLICKHOUSE(HOST ...)) reads another server, which may "
                    "differ on replay; load the rows with INSERT. Nothing was run."
                )
            if call.name in self._catalog.table_functions or call.name in EXTERNAL_SOURCES:
                raise Nondeterministic(
                    f"the table function {call.shown}() reads data from outside the object, "
                    "which may differ on replay; load the rows in the caller and INSERT "
                    "literals. Nothing was run."
                )
        for i in range(len(tokens) - 1):
            # ENGINE [=] GenerateRandom with no arguments is no call: a
            # table whose every read gives other rows, so a write reading it
            # (INSERT ... SELECT FROM it) would store other rows on replay.
            if tokens[i].kind == "ident" and tokens[i].word == "engine":
                at = i + 2 if tokens[i + 1].text == "=" else i + 1
                if at < len(tokens) and tokens[at].word == "generaterandom":
                    raise Nondeterministic(
                        "a table with ENGINE = GenerateRandom gives other rows on every read, "
                        "so a write that reads it would store other rows on every replay; "
                        "read generateRandom(...) in query() instead, or INSERT the rows "
                        "as literals. Nothing was run."
                    )
        for i in range(len(tokens) - 2):
            if (
                tokens[i].word in ("system", "information_schema")
                and tokens[i + 1].text == "."
                and tokens[i].kind in ("ident", "quoted")
            ):
                table = tokens[i + 2].word
                if tokens[i].word == "system" and table in PURE_SYSTEM_TABLES:
                    continue
                raise Nondeterministic(
                    f"{tokens[i].word}.{table} describes this process, not the object's "
                    "data, and replays differently; query it with query() and insert "
                    "literals instead. Nothing was run."
                )

    def _evaluate(self, sql: str, calls: list[Call]) -> list[tuple[int, int, str]]:
        """One value per occurrence: occurrences of the same text are evaluated
        as k rows of one query (identical calls in one row would be merged)."""
        by_text: dict[str, list[Call]] = {}
        for call in calls:
            by_text.setdefault(sql[call.start : call.end], []).append(call)
        out = []
        for text, group in by_text.items():
            literals = self._literals.values(text, len(group))
            if literals is None:
                raise Nondeterministic(
                    f"{group[0].shown}() could not be evaluated on its own to pin its value "
                    f"(its arguments are not constants); {_FIX}. Nothing was run."
                )
            out += [(c.start, c.end, lit) for c, lit in zip(group, literals, strict=True)]
        return out

    def _with_settings(self, sql: str, needed: list[str]) -> str:
        """Make an INSERT carry the object's time zone, so a reader that does
        not pin it (chdb.durable) parses its DateTime literals the same way,
        plus any setting the rewrite needs."""
        tokens = tokenize(sql)
        shape = insert_shape(tokens)
        if shape is None or shape.head_end >= len(tokens):
            return sql
        if shape.settings_at is not None or any(
            t.word == "settings" for t in tokens if t.kind == "ident"
        ):
            return after_settings(sql, tokens, shape, needed) if needed else sql
        settings = ", ".join([*needed, f"session_timezone = {quote_string(self._tz)}"])
        at = tokens[shape.head_end].start
        return f"{sql[:at]}SETTINGS {settings} {sql[at:]}"
