"""Many objects in one engine: what an object's statement may name, and how
its logical database is mapped onto its internal one.

Every open object lives in a database of its own inside the process's one
chDB engine, named `__durable_obj_<128 random bits>`, and reached through a
connection of its own whose current database is that one. Users, the WAL
and checkpoints only ever see the object's logical database (`manifest.db`,
`default` by default). `Scope.localize` turns a statement as the caller
wrote it (and as the WAL logs it) into the text that runs here:

* a name qualified by the logical database (`default.t`, `` `default`.t ``)
  is qualified by the internal one instead;
* `currentDatabase()` (`database()`, `schema()`, `current_database()`) is
  the logical name, as on every replay and in chdb.durable;
* `system.tables`, `system.columns`, `system.parts`, ... are views of this
  object's own database only, with its logical name in their `database`
  column and in the definitions they show;
* a dictionary named by a string (`dictGet('default.d', ...)`) or a
  dictionary source's `DB 'default'` names the internal database.

And it refuses, with `ClassificationRefused` naming what, anything that
could reach past the object: a name qualified by any other database (the
engine's `default`, `information_schema`, another object's internal name,
which is reserved even for this object's own), any other system table, and
every table function, engine or function that finds data by a name it
computes or reads outside the object (`merge`, `remote`, `cluster`, `file`,
`dictionary`, `loop`, `executable`, `Merge`/`Buffer`/`Distributed`/
`Dictionary`/`Alias` tables, a dictionary source naming another database or
carrying its own query, ...). A quoted name holding a backslash escape is
refused rather than decoded. `check_tree` is the exact second check of a
read: every table `EXPLAIN QUERY TREE` resolves must be this object's, or a
system table allowed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from durable_obj.errors import ClassificationRefused
from durable_obj.gate.quoting import quote_ident, quote_string, splice
from durable_obj.gate.reading import code_of
from durable_obj.gate.sql import Token, code_words, find_calls, tokenize

#: The prefix of every internal database name; no statement may name one.
RESERVED_PREFIX = "__durable_obj_"
#: The engine's database of temporary tables (a recursive CTE's working
#: table among them): no statement may name it.
TEMPORARY = "_temporary_and_external_tables"

#: system tables holding no object's data or names: engine catalogues and generators.
ENGINE_TABLES = frozenset(
    {"one", "numbers", "numbers_mt", "zeros", "zeros_mt", "functions", "table_functions"}
    | {"time_zones", "data_type_families", "formats", "settings", "table_engines"}
    | {"build_options", "contributors", "licenses", "collations", "keywords"}
    | {"aggregate_function_combinators", "merge_tree_settings"}
)
#: system tables shown as views of the object's own database: their
#: `database` column is filtered to it and shows the logical name.
SCOPED_TABLES = frozenset(
    {"tables", "columns", "parts", "parts_columns", "dictionaries", "data_skipping_indices"}
    | {"projections", "projection_parts", "mutations", "detached_parts", "merges"}
)
#: Columns of scoped system tables that show the engine's folders: shown empty.
_NO_PATH = "''"
_NO_PATHS = "CAST([], 'Array(String)')"
_PATHS = {
    "tables": (("data_paths", _NO_PATHS), ("metadata_path", _NO_PATH)),
    "parts": (("path", _NO_PATH),),
    "parts_columns": (("path", _NO_PATH),),
    "projection_parts": (("path", _NO_PATH),),
    "detached_parts": (("path", _NO_PATH),),
    "merges": (("source_part_paths", _NO_PATHS), ("result_part_path", _NO_PATH)),
}
#: Columns of system.databases that show the engine's folders or the database's
#: identity in the engine: shown empty (a path and a UUID are the engine's, not
#: the object's, and a determinism opt-in could log them).
_DATABASE_HIDDEN = (
    ("data_path", _NO_PATH),
    ("metadata_path", _NO_PATH),
    ("uuid", "toUUID('00000000-0000-0000-0000-000000000000')"),
)
#: Columns of system.tables that show a definition naming the database.
_DEFINITIONS = ("create_table_query", "as_select", "engine_full")
#: Table functions that compute their rows from their arguments alone.
PURE_TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries"}
    | {"values", "null", "view", "generaterandom"}
)
#: Calls that reach data through a name or a path they are given: never allowed.
REFUSED_CALLS = frozenset(
    {"merge", "remote", "remotesecure", "cluster", "clusterallreplicas", "file"}
    | {"filecluster", "loop", "executable", "executablepool", "dictionary"}
    | {"mergetreeindex", "mergetreeprojection", "mergetreepartinfo"}
    | {"mergetreeanalyzeindexes", "iceberglocal", "deltalakelocal", "hudilocal"}
    | {"timeseriesdata", "timeseriesmetrics", "timeseriestags", "timeseriesselector"}
    | {"input", "hascolumnintable", "filelog"}
)
#: Table engines that read another table, a dictionary or a file by name.
REFUSED_ENGINES = frozenset({"merge", "buffer", "distributed", "dictionary", "alias", "file"})
#: SHOW statements allowed: they describe only the current database.
SHOWN = frozenset(
    {"tables", "create", "columns", "fields", "dictionaries", "index", "indexes", "indices"}
    | {"keys", "full", "extended", "functions", "engines", "settings", "setting"}
)
#: Functions whose first argument names a dictionary or a Join table.
NAMED_CALLS = re.compile(r"dict(get|has|isin)\w*|joinget(ornull)?")
#: Function calls that answer the current database.
DATABASE_CALLS = frozenset({"currentdatabase", "current_database", "database", "schema"})

_NAMED = ("ident", "quoted")
#: The keys a CLICKHOUSE dictionary source may have: a table of the object's.
_SOURCE_KEYS = frozenset({"table", "db", "update_field", "update_lag"})
_TABLE_NAME = re.compile(r"table_name: (.+)$", re.MULTILINE)
#: A table function in a query tree, as the engine names it (`db.view` for
#: a parameterized view named with its database).
TABLE_FUNCTION = re.compile(r"table_function_name: ([^,\n]+)", re.MULTILINE)


def refuse(what: str, instead: str = "") -> ClassificationRefused:
    advice = f" Instead, {instead}." if instead else ""
    return ClassificationRefused(
        f"{what}: an object's statements reach only its own database (another object's "
        "data, the engine's other databases and the process's files are out of reach)."
        f"{advice} Nothing was run or logged."
    )


@dataclass(frozen=True, slots=True)
class Scope:
    """An object's logical database name and the internal one it runs in."""

    logical: str
    internal: str

    def localize(self, sql: str, vouched: frozenset[str] = frozenset()) -> str:
        """The text of `sql` to run in this object's internal database, or
        `ClassificationRefused` if it could reach past the object. Rows the
        engine reads as literals only (`reading.unread`) are no code: the
        head is localized and they follow as they are."""
        code = code_of(sql)
        if code is not sql:
            return self.localize(code, vouched) + sql[len(code) :]
        lowered = sql.lower()
        if not _suspicious(lowered, self.logical.lower()):
            return sql  # no word that could name a database, a system table or a call of note
        words = code_words(sql)  # outside strings and comments: a data row's text is no code
        if not (words & (_CODE_WORDS | {self.logical.lower()})) and not any(
            w.startswith(RESERVED_PREFIX) or "\\" in w or NAMED_CALLS.fullmatch(w) for w in words
        ):
            return sql
        tokens = tokenize(sql)
        replacements: list[tuple[int, int, str]] = []
        self._names(tokens, replacements)
        if tokens and tokens[0].word == "show":
            self._show(tokens, replacements)
        self._calls(tokens, replacements, vouched)
        return splice(sql, replacements) if replacements else sql

    def shown(self, text: str) -> str:
        """An answer's `text` with the internal database named as the logical
        one (`SHOW CREATE` prints the definition under the name it runs in)."""
        return text.replace(self.internal, _shown_name(self.logical))

    def _names(self, tokens: list[Token], out: list[tuple[int, int, str]]) -> None:
        for i, tok in enumerate(tokens):
            if tok.kind == "quoted" and "\\" in tok.text:
                raise refuse(f"the quoted name {tok.text[:40]} holds an escape")
            if tok.kind in _NAMED and tok.word == TEMPORARY:
                raise refuse(f"{TEMPORARY} holds the engine's sessions' temporary tables")
            if tok.kind in _NAMED and tok.word.startswith(RESERVED_PREFIX):
                raise refuse(f"{tok.name[:60]} is a reserved internal database name")
            if tok.kind == "string" and RESERVED_PREFIX in tok.text.lower():
                raise refuse("a string naming a reserved internal database")
            qualified = (
                tok.kind in _NAMED
                and i + 2 < len(tokens)
                and tokens[i + 1].text == "."
                and tokens[i + 2].kind in _NAMED
                and (i == 0 or tokens[i - 1].text != ".")
            )
            if not qualified:
                continue
            if tok.name == self.logical:
                out.append((tok.start, tok.end, quote_ident(self.internal)))
            elif tok.word == "system":
                out.extend(self._system(tokens, i))
            elif tok.word in ("information_schema", "default"):
                raise refuse(f"{tok.name}.{tokens[i + 2].name} is outside this object")
            # Anything else qualifies a column by its table or alias: no
            # database of that name exists in the engine.

    def _system(self, tokens: list[Token], i: int) -> list[tuple[int, int, str]]:
        table = tokens[i + 2].word
        if table in ENGINE_TABLES:
            return []
        end = tokens[i + 2].end
        if table in SCOPED_TABLES:
            shown = [f"{quote_string(self.logical)} AS database"]
            shown += [f"{expr} AS {c}" for c, expr in _PATHS.get(table, ())]
            if table == "tables":
                shown += [
                    f"replaceAll({c}, {quote_string(self.internal + '.')}, "
                    f"{quote_string(_shown_name(self.logical) + '.')}) AS {c}"
                    for c in _DEFINITIONS
                ]
            return [(tokens[i].start, end, self._view(table, "database", shown))]
        if table == "databases":
            shown = [f"{quote_string(self.logical)} AS name"]
            shown += [f"{expr} AS {c}" for c, expr in _DATABASE_HIDDEN]
            return [(tokens[i].start, end, self._view(table, "name", shown))]
        raise refuse(f"system.{tokens[i + 2].name} describes the whole engine")

    def _show(self, tokens: list[Token], out: list[tuple[int, int, str]]) -> None:
        """SHOW describes the current database only; SHOW DATABASES,
        PROCESSLIST, GRANTS, ... describe the engine."""
        if len(tokens) < 2 or tokens[1].word not in SHOWN:
            shown = tokens[1].text if len(tokens) > 1 else ""
            raise refuse(f"SHOW {shown.upper()} describes the whole engine")
        for i in range(1, len(tokens) - 1):
            if tokens[i].word not in ("from", "in") or tokens[i + 1].kind not in _NAMED:
                continue
            name = tokens[i + 1]
            if name.name == self.logical:
                out.append((name.start, name.end, quote_ident(self.internal)))
            elif name.word in ("system", "information_schema", "default"):
                raise refuse(f"SHOW ... FROM {name.name}")

    def _view(self, table: str, column: str, shown: list[str]) -> str:
        """system.`table` filtered to this object's rows first (an alias in the
        outer SELECT would shadow the column in its own WHERE), then shown
        under the logical name."""
        return (
            f"(SELECT * REPLACE ({', '.join(shown)}) FROM (SELECT * FROM system.{table} "
            f"WHERE {column} = {quote_string(self.internal)}))"
        )

    def _calls(
        self,
        tokens: list[Token],
        out: list[tuple[int, int, str]],
        vouched: frozenset[str] = frozenset(),
    ) -> None:
        """`vouched`: calls a read's opt-in let through, their arguments checked
        by the gate (`reach.external_call`)."""
        for call in find_calls(tokens):
            name = call.name
            after_engine = call.first >= 1 and "engine" in (
                tokens[call.first - 1].word,
                tokens[call.first - 2].word if call.first >= 2 else "",
            )
            if after_engine and name in REFUSED_ENGINES:
                raise refuse(
                    f"a table with ENGINE = {call.shown} reads other data by name",
                    "use a MergeTree-family, Memory or Log table of the object's own and "
                    "insert into it directly",
                )
            if name in REFUSED_CALLS and name not in vouched:
                raise refuse(
                    f"{call.shown}() reaches data by a name or path it is given",
                    "read the object's own tables (a view, or UNION ALL of them)",
                )
            if name in DATABASE_CALLS and call.last == call.first + 2:
                if call.first > 0 and tokens[call.first - 1].text == ".":
                    continue  # a.database(): not the function
                out.append((call.start, call.end, quote_string(self.logical)))
            elif NAMED_CALLS.fullmatch(name):
                self._named_argument(tokens, call.first + 2, call.shown, out)
            elif name == "clickhouse":  # a dictionary SOURCE(CLICKHOUSE(...))
                self._source(tokens, call.first + 2, call.last, out)

    def _named_argument(
        self, tokens: list[Token], at: int, shown: str, out: list[tuple[int, int, str]]
    ) -> None:
        arg = tokens[at] if at < len(tokens) else None
        if (
            arg is None
            or arg.kind != "string"
            or "\\" in arg.text
            or at + 1 >= len(tokens)
            or tokens[at + 1].text not in (",", ")")
        ):
            raise refuse(f"{shown}() must name its dictionary or table by a plain string")
        value = arg.text[1:-1].replace("''", "'")
        if "." not in value:
            return  # the current database: this object's
        db, rest = value.split(".", 1)
        if db.strip('`"') != self.logical:
            raise refuse(f"{shown}() names {value!r}, outside this object")
        out.append((arg.start, arg.end, quote_string(f"{self.internal}.{rest}")))

    def _source(
        self, tokens: list[Token], start: int, end: int, out: list[tuple[int, int, str]]
    ) -> None:
        # key value pairs, keys on an allow-list: a QUERY, INVALIDATE_QUERY or
        # WHERE is SQL the gate never reads, HOST/PORT/USER reach elsewhere
        for j in range(start, end, 2):
            key = tokens[j]
            word = key.word if key.kind == "ident" else ""
            if word not in _SOURCE_KEYS or j + 1 >= end or tokens[j + 1].text in "(),":
                shown = word.upper() or key.text[:20]
                raise refuse(
                    f"a CLICKHOUSE dictionary source with {shown}",
                    "name a table of the object's own with TABLE 'name' (a view of it, "
                    "for a query)",
                )
            if word == "db":
                value = tokens[j + 1]
                if value.kind != "string" or value.text[1:-1] != self.logical:
                    raise refuse("a CLICKHOUSE dictionary source naming another database")
                out.append((value.start, value.end, quote_string(self.internal)))

    def check_tree(
        self,
        tree: str,
        external: frozenset[str] = frozenset(),
        views: frozenset[str] = frozenset(),
    ) -> None:
        """Every table an `EXPLAIN QUERY TREE` resolved is this object's, or an
        allowed system table; every table function is a pure generator, one
        of `external` (a read's opt-in, its arguments checked before), or one
        of `views`, parameterized views of this object's database (bare, or
        named with its internal database)."""
        recursive = "is_recursive_with: 1" in tree
        for found in _TABLE_NAME.findall(tree):
            name, _, rest = found.partition(",")
            db, _, table = name.strip().partition(".")
            if (
                recursive
                and db == TEMPORARY
                and table.startswith("_tmp_")
                and "temporary_table_name:" in rest
            ):
                continue  # a recursive CTE's working table, made for this query (no text names it)
            if db == self.internal:
                continue
            if db == "system" and (table in ENGINE_TABLES or table in SCOPED_TABLES):
                continue
            if db == "system" and table == "databases":
                continue
            raise refuse(f"the query reads {db if db.startswith('__') else name}")
        for fn in TABLE_FUNCTION.findall(tree):
            db, _, name = fn.rpartition(".")
            if db in ("", self.internal) and name in views:
                continue
            if fn.lower() not in PURE_TABLE_FUNCTIONS and fn.lower() not in external:
                shown = name if db == self.internal else fn
                raise refuse(f"the table function {shown[:60]}()")


def _shown_name(name: str) -> str:
    """A database name as the engine prints it in a definition: bare when it
    is a plain identifier, else back-quoted."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else quote_ident(name)


#: Words whose presence sends a statement through the full lexing above.
_WORDS = re.compile(
    r"\.\s*[a-z_`\"]|__durable_obj_|_temporary_and_external|system|show|information_schema|database|schema|dict|joinget"
    r"|clickhouse|merge|remote|cluster|file|loop|executable|dictionary|alias|buffer"
    r"|distributed|iceberg|deltalake|hudi|timeseries|input|hascolumn|engine"
)


#: Code words any statement `localize` maps or refuses holds (besides the
#: logical name and reserved names): a qualifier it checks, SHOW, a call.
_CODE_WORDS = (
    {"system", "information_schema", "default", "show", "clickhouse", "engine", TEMPORARY}
    | REFUSED_CALLS
    | REFUSED_ENGINES
    | DATABASE_CALLS
)


def _suspicious(lowered: str, logical: str) -> bool:
    """Whether `lowered` could name anything `localize` maps or refuses. A
    '.' anywhere (a qualified name, a decimal) is enough to take the full
    path; the common INSERT of plain literals has none of these words."""
    return bool(_WORDS.search(lowered)) or (logical + ".") in lowered
