"""Does a statement replay to what the writer saw? Pin it, or refuse it.

The WAL re-executes SQL. A statement that reads the clock, a random source,
the host or anything outside the object gives another result on every
replay, and every replica silently differs from the writer. For each
`execute()` this module decides, from the engine's own catalogue
(`system.functions.deterministic`, `system.table_functions`) and a lexer
that knows ClickHouse strings, quoted identifiers and comments (so `'now()'`,
`` `now()` `` and `-- now()` are not calls):

* deterministic: logged unchanged;
* pinnable: evaluated once now and replaced by a literal of the same type,
  and the writer runs the pinned text, so writer and replay agree exactly:
  - any non-deterministic call inside the rows of `INSERT ... VALUES` (each
    occurrence is evaluated once per row anyway),
  - a query-constant call anywhere (`now()`, `today()`, `randConstant()`, ...),
  - an omitted column whose DEFAULT / MATERIALIZED expression is
    non-deterministic, in `INSERT ... VALUES` (the value is made explicit);
* refused with `Nondeterministic` otherwise: per-row randomness outside
  VALUES, table functions that read outside the object (`url`, `file`, `s3`,
  `remote`, ...), `system.*` tables other than pure generators, and calls
  whose value cannot be computed on its own.

Mode "pin" (default) pins; "refuse" never rewrites and refuses instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable_obj.errors import DurableError, Nondeterministic

if TYPE_CHECKING:
    from durable_obj.engine import Engine

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

# The lexer's rules, one fragment each: _TOKEN, and the two fast scans
# that must skip exactly what it skips (_CODE_SCAN, _ROW_SKIP), are built
# from these, so they cannot drift apart.
_COMMENT = r"--[^\n]*|\#[^\n]*|/\*.*?\*/"
_STRING = r"'(?:[^'\\]|\\.|'')*'"
_HEREDOC = r"\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$"
_QUOTED = r'"(?:[^"\\]|\\.|"")*"|`(?:[^`\\]|\\.|``)*`'
_NUMBER = r"0[xX][0-9A-Fa-f]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
_IDENT = r"[A-Za-z_][A-Za-z0-9_$]*"

_TOKEN = re.compile(
    rf"""
    (?P<ws>\s+)
  | (?P<comment>{_COMMENT})
  | (?P<string>{_STRING})
  | (?P<heredoc>{_HEREDOC})
  | (?P<quoted>{_QUOTED})
  | (?P<number>(?:{_NUMBER}))
  | (?P<ident>{_IDENT})
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    start: int
    end: int

    @property
    def name(self) -> str:
        """An identifier as the engine sees it: unquoted, case kept."""
        if self.kind == "quoted":
            return re.sub(r"\\(.)|``|\"\"", lambda m: m.group(1) or m.group()[0], self.text[1:-1])
        return self.text

    @property
    def word(self) -> str:
        """An identifier's name, unquoted and lower-cased; '' for others."""
        if self.kind == "ident":
            return self.text.lower()
        if self.kind == "quoted":
            return self.text[1:-1].lower()
        return ""


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What `_TOKEN` skips as data, its numbers and identifiers: matched from the same
#: positions as the lexer (an identifier is consumed whole, so a `$` in it
#: never opens a heredoc), so text the lexer reads as code is never skipped.
_CODE_SCAN = re.compile(
    rf"{_COMMENT}|{_STRING}|{_HEREDOC}|(?P<quoted>{_QUOTED})|{_NUMBER}|(?P<ident>{_IDENT})",
    re.DOTALL,
)


def code_words(sql: str) -> set[str]:
    """Lower-cased identifiers of `sql` outside strings and comments (quoted
    ones by their words): a superset of the names the lexer's tokens carry,
    at the cost of a regex scan instead of a full lexing."""
    words: set[str] = set()
    for m in _CODE_SCAN.finditer(sql):
        if (ident := m.group("ident")) is not None:
            words.add(ident.lower())
            words.update(w.lower() for w in _WORD.findall(ident))
        elif (quoted := m.group("quoted")) is not None:
            words.add(quoted[1:-1].lower())  # as Token.word has it
            words.update(w.lower() for w in _WORD.findall(quoted))
    return words


_BODY = frozenset({"values", "select", "with", "format"})


def tokenize_head(sql: str) -> list[Token]:
    """Tokens up to and including the first VALUES / SELECT / WITH / FORMAT
    at depth 0: an INSERT's head, without lexing its (maybe huge) body."""
    out: list[Token] = []
    depth = 0
    for tok in _tokens(sql):
        out.append(tok)
        if tok.text in ("(", "["):
            depth += 1
        elif tok.text in (")", "]"):
            depth -= 1
        elif depth == 0 and tok.kind == "ident" and tok.text.lower() in _BODY:
            break
    return out


_ROW_PLAIN = re.compile(r"[^'\"`()\[\]{}\-/#$]+")
_ROW_SKIP = re.compile(rf"{_STRING}|{_QUOTED}|{_HEREDOC}|{_COMMENT}", re.DOTALL)
_SPACE = re.compile(r"\s*")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def split_rows(tail: str) -> list[str] | None:
    """The row texts of a VALUES tail `(..), (..) [;]`, exactly as written, or
    None if the tail is anything else (a comment between rows, data after
    them, an unterminated string or bracket). Strings, quoted names,
    heredocs and comments are skipped by the same rules as `tokenize`, so a
    bracket inside them is never counted. Linear, and far cheaper than
    lexing every number of a long row."""
    rows: list[str] = []
    n = len(tail)
    pos = _SPACE.match(tail).end()  # type: ignore[union-attr]
    while pos < n and tail[pos] == "(":
        start, open_ = pos, []
        while True:
            pos = m.end() if (m := _ROW_PLAIN.match(tail, pos)) else pos
            if pos >= n:
                return None
            ch = tail[pos]
            if ch in _CLOSER:
                open_.append(_CLOSER[ch])
                pos += 1
            elif ch in ")]}":
                if not open_ or open_.pop() != ch:
                    return None
                pos += 1
                if not open_:
                    break
            elif (skip := _ROW_SKIP.match(tail, pos)) is not None:
                pos = skip.end()
            elif ch in "'\"`" or tail.startswith(("/*", "--"), pos):
                return None  # unterminated
            else:
                pos += 1  # a lone '-', '/' or '$'
        rows.append(tail[start:pos])
        pos = _SPACE.match(tail, pos).end()  # type: ignore[union-attr]
        if pos >= n or tail[pos] != ",":
            break
        pos = _SPACE.match(tail, pos + 1).end()  # type: ignore[union-attr]
        if pos >= n or tail[pos] != "(":
            return None
    if pos < n and tail[pos] == ";":
        pos = _SPACE.match(tail, pos + 1).end()  # type: ignore[union-attr]
    return rows if rows and pos == n else None


def tokenize(sql: str) -> list[Token]:
    return list(_tokens(sql))


def _tokens(sql: str) -> Iterator[Token]:
    """Significant tokens (no whitespace or comments). An unterminated
    string or comment ends as one punct token, which never matches a name."""
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "punct"
        if kind == "tag":
            kind = "heredoc"
        if kind in ("ws", "comment"):
            continue
        if kind == "heredoc":
            kind = "string"
        yield Token(kind, m.group(), m.start(), m.end())


@dataclass(frozen=True, slots=True)
class Call:
    """A function call: its name and the [start, end) span of `name(...)`."""

    name: str  # lower-cased, for matching
    start: int
    end: int
    first: int  # token index of the name
    last: int  # token index of the closing parenthesis
    shown: str = ""  # as written, for messages


def find_calls(tokens: list[Token]) -> list[Call]:
    """Every `name(` ... `)` in the statement, nested ones included."""
    closing = _match_parens(tokens)
    calls = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.kind in ("ident", "quoted") and tokens[i + 1].text == "(":
            # `a.b(` is still a call of b (a qualified name, e.g. a table function)
            j = closing.get(i + 1)
            if j is not None:
                calls.append(Call(tok.word, tok.start, tokens[j].end, i, j, tok.name))
    return calls


def _match_parens(tokens: list[Token]) -> dict[int, int]:
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, tok in enumerate(tokens):
        if tok.text in ("(", "["):
            stack.append(i)
        elif tok.text in (")", "]") and stack:
            pairs[stack.pop()] = i
    return pairs


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
    closing = _match_parens(tokens)
    if i < len(tokens) and tokens[i].text == "(":
        end = closing.get(i)
        if end is None:
            return None
        columns = [t.name for t in tokens[i + 1 : end] if t.kind in ("ident", "quoted")]
        i = end + 1
    head_end = i
    settings_at = i if i < len(tokens) and words[i] == "settings" else None
    values_at = None
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].text in ("(", "["):
            depth += 1
        elif tokens[j].text in (")", "]"):
            depth -= 1
        elif depth == 0 and words[j] in ("select", "with", "format"):
            break
        elif depth == 0 and words[j] == "values":
            values_at = j
            break
    shape = InsertShape(
        table=name[-1],
        database=name[0] if len(name) == 2 else None,
        columns=columns,
        values_at=values_at,
        settings_at=settings_at,
        head_end=head_end,
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
        )

    @classmethod
    def load(cls, engine: Engine) -> Catalog:
        names = engine.text(
            "SELECT name FROM system.functions WHERE deterministic = 0", "TSV"
        ).split()
        tfs = engine.text("SELECT name FROM system.table_functions", "TSV").split()
        return cls(
            frozenset(n.lower() for n in names) - REPLAY_STABLE,
            frozenset(n.lower() for n in tfs) - PURE_TABLE_FUNCTIONS,
        )


_FIX = "compute the value in the caller and insert it as a literal"
_CATALOG: dict[str, Catalog] = {}


def catalog(engine: Engine) -> Catalog:
    """The catalogue of this engine version, read once per process."""
    found = _CATALOG.get(engine.version)
    if found is None:
        found = _CATALOG[engine.version] = Catalog.load(engine)
    return found


class Pinner:
    """Applies the rule to one statement on one engine."""

    def __init__(self, engine: Engine, *, mode: str, timezone: str) -> None:
        self._engine = engine
        self._known: Catalog | None = None
        self._mode = mode
        self._tz = timezone
        self._columns: dict[tuple[str, str], list[list[str]]] = {}
        self._suspicious: frozenset[str] | None = None

    @property
    def _catalog(self) -> Catalog:
        # Read on first use: a reader that only replays never pays for it.
        if self._known is None:
            self._known = catalog(self._engine)
        return self._known

    def schema_changed(self) -> None:
        """Forget cached column definitions (call after any non-INSERT)."""
        self._columns.clear()

    def prepare(self, sql: str, db: str) -> str:
        """The text to run and log: `sql` itself, or `sql` with values pinned.
        Raises `Nondeterministic` naming the culprit and the fix."""
        if self._suspicious is None:
            self._suspicious = self._catalog.suspicious
        words = code_words(sql)
        if not words & self._suspicious:
            # The common case, in regex scans rather than a full lexing: no
            # word of the statement's code (strings and comments are data)
            # names anything non-deterministic or outside. Only an INSERT's
            # head is lexed, for its defaults and the time zone.
            fast = self._prepare_plain(sql, db, "settings" in words)
            if fast is not None:
                return fast
        return self._prepare_full(sql, db)

    def _prepare_plain(self, sql: str, db: str, has_settings: bool) -> str | None:
        """`sql` with the time zone setting if it is a plain INSERT; None if an
        omitted column's default needs the full path."""
        tokens = tokenize_head(sql)
        shape = insert_shape(tokens)
        if shape is None:
            return sql
        if self._missing_defaults(shape, db):
            return None
        if has_settings or shape.head_end >= len(tokens):
            return sql
        at = tokens[shape.head_end].start
        return f"{sql[:at]}SETTINGS session_timezone = '{self._tz}' {sql[at:]}"

    def _prepare_full(self, sql: str, db: str) -> str:
        tokens = tokenize(sql)
        calls = find_calls(tokens)
        self._refuse_outside_reads(tokens, calls)
        shape = insert_shape(tokens)
        rows = [] if shape is None else [(tokens[a].start, tokens[b].end) for a, b in shape.rows]
        evaluated, pinnable = _evaluated_from(tokens)
        culprits = [
            c for c in calls if c.name in self._catalog.nondeterministic and c.first >= evaluated
        ]
        outermost = _outermost(culprits)
        replacements: list[tuple[int, int, str]] = []
        pin: list[Call] = []
        for call in outermost:
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
            needed = self._explicit_defaults(tokens, shape, db, replacements)
        if replacements:
            sql = _splice(sql, replacements)
        return self._with_settings(sql, needed)

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
            literals = self._values(text, len(group))
            if literals is None:
                raise Nondeterministic(
                    f"{group[0].shown}() could not be evaluated on its own to pin its value "
                    f"(its arguments are not constants); {_FIX}. Nothing was run."
                )
            out += [(c.start, c.end, lit) for c, lit in zip(group, literals, strict=True)]
        return out

    def _values(self, expr: str, count: int) -> list[str] | None:
        """`count` independent evaluations of `expr`, as typed literals."""
        try:
            rows = self._engine.text(
                f"SELECT toTypeName(e), toString(e) FROM (SELECT {expr} AS e "
                f"FROM numbers({count}))",
                "JSONCompactEachRow",
            )
        except DurableError:
            return None
        values = [json.loads(line) for line in rows.splitlines() if line]
        if len(values) != count:
            return None
        return [_literal(type_name, value) for type_name, value in values]

    def _table_columns(self, shape: InsertShape, db: str) -> list[list[str]]:
        """[name, type, default_kind, default_expression] of the INSERT's table."""
        database = shape.database or db
        columns = self._columns.get((database, shape.table))
        if columns is None:
            listing = self._engine.run_params(
                "SELECT name, type, default_kind, default_expression FROM system.columns "
                "WHERE database = {db:String} AND table = {t:String} ORDER BY position "
                "FORMAT JSONCompactEachRow",
                {"db": database, "t": shape.table},
            )
            columns = [json.loads(line) for line in listing.splitlines() if line]
            self._columns[(database, shape.table)] = columns
        return columns

    def _missing_defaults(self, shape: InsertShape, db: str) -> list[tuple[str, str, str, str]]:
        """(name, type, kind, culprit) of each omitted column whose DEFAULT or
        MATERIALIZED expression is non-deterministic."""
        listed = None if shape.columns is None else {c.lower() for c in shape.columns}
        missing = []
        for name, type_name, kind, expr in self._table_columns(shape, db):
            if kind not in ("DEFAULT", "MATERIALIZED"):
                continue
            given = listed is not None and name.lower() in listed
            if given or (kind == "DEFAULT" and listed is None):
                continue  # the row carries it
            bad = sorted(
                c.shown
                for c in find_calls(tokenize(expr))
                if c.name in self._catalog.nondeterministic
            )
            if bad:
                missing.append((name, type_name, kind, bad[0]))
        return missing

    def _explicit_defaults(
        self,
        tokens: list[Token],
        shape: InsertShape,
        db: str,
        replacements: list[tuple[int, int, str]],
    ) -> list[str]:
        """An INSERT that leaves a non-deterministic DEFAULT / MATERIALIZED
        column to the engine: make the value explicit (VALUES), or refuse.
        Returns settings the rewritten INSERT needs."""
        columns = self._table_columns(shape, db)
        missing = self._missing_defaults(shape, db)
        for name, _type, kind, bad in missing:
            if shape.values_at is None or not shape.rows or self._mode == "refuse":
                raise Nondeterministic(
                    f"column {name!r} is {kind} {bad}(...), which the engine would compute "
                    "anew on every replay; list the column and insert its value explicitly. "
                    "Nothing was run."
                )
        if not missing:
            return []
        per_row: list[list[str]] = [[] for _ in shape.rows]
        expressions = {c[0]: c[3] for c in columns}
        for name, type_name, _kind, _bad in missing:
            expr = expressions[name]
            literals = self._values(f"CAST({expr} AS {type_name})", len(shape.rows))
            if literals is None:
                raise Nondeterministic(
                    f"column {name!r} has a non-deterministic default that depends on other "
                    "columns, so it cannot be computed apart from the row; list the column "
                    "and insert its value explicitly. Nothing was run."
                )
            for row, literal in enumerate(literals):
                per_row[row].append(literal)
        for (_, close), literals in zip(shape.rows, per_row, strict=True):
            at = tokens[close].start
            replacements.append((at, at, ", " + ", ".join(literals)))
        names = [m[0] for m in missing]
        if shape.columns is None:
            # VALUES without a list holds every ordinary column: write the list out.
            ordinary = [c[0] for c in columns if c[2] not in ("MATERIALIZED", "ALIAS", "EPHEMERAL")]
            at = tokens[shape.head_end - 1].end
            replacements.append(
                (at, at, " (" + ", ".join(map(_quote_ident, ordinary + names)) + ")")
            )
        else:
            at = tokens[shape.head_end - 1].start  # the list's closing parenthesis
            replacements.append((at, at, ", " + ", ".join(map(_quote_ident, names))))
        if any(m[2] == "MATERIALIZED" for m in missing):
            return ["insert_allow_materialized_columns = 1"]
        return []

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
            if needed:
                raise Nondeterministic(
                    "this INSERT leaves a non-deterministic MATERIALIZED column to the engine "
                    "and carries SETTINGS of its own; list the column and insert its value "
                    "explicitly. Nothing was run."
                )
            return sql
        settings = ", ".join([*needed, f"session_timezone = '{self._tz}'"])
        at = tokens[shape.head_end].start
        return f"{sql[:at]}SETTINGS {settings} {sql[at:]}"


def _evaluated_from(tokens: list[Token]) -> tuple[int, bool]:
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
        if "materialized" in head:
            return 0, False
        if "view" in head or "function" in head or "dictionary" in head:
            return len(tokens), True
        depth = 0
        for i, w in enumerate(words):
            if w in ("(", "["):
                depth += 1
            elif w in (")", "]"):
                depth -= 1
            elif depth == 0 and w == "as" and words[i + 1 : i + 2] in (["select"], ["with"], ["("]):
                return i + 1, True
        return len(tokens), True
    if words[0] == "alter":
        depth = 0
        for w in words:
            if w in ("(", "["):
                depth += 1
            elif w in (")", "]"):
                depth -= 1
            elif depth == 0 and w in ("update", "delete"):
                return 0, True
        return len(tokens), True
    return 0, True


def _outermost(calls: list[Call]) -> list[Call]:
    out: list[Call] = []
    for call in sorted(calls, key=lambda c: (c.start, -c.end)):
        if out and call.start < out[-1].end:
            continue
        out.append(call)
    return out


def _splice(sql: str, replacements: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(replacements, key=lambda r: (r[0], r[1]), reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def _literal(type_name: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    type_lit = type_name.replace("\\", "\\\\").replace("'", "\\'")
    return f"CAST('{escaped}', '{type_lit}')"


def _quote_ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"
