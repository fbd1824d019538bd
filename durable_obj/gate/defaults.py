"""Column expressions that the engine computes by itself: make them exact, or refuse.

A column's DEFAULT / MATERIALIZED / ALIAS expression is stored, not run, so
`CREATE TABLE t (ts DateTime DEFAULT now())` replays exactly. It runs later,
and then it matters:

* an INSERT that omits such a column has the engine compute it. When the
  expression is non-deterministic the value is made explicit: one literal
  per row in `INSERT ... VALUES`, and one literal for all rows in
  `INSERT ... SELECT` when the expression is constant within a statement
  (`now64(3)`); per-row randomness there is refused;
* a part written before a column existed has no data for it, and the engine
  computes the column when the part is read (and freezes a value at some
  later merge). A DDL statement that gives existing rows a non-deterministic
  column expression (`ADD COLUMN` / `MODIFY COLUMN` ... `DEFAULT now()`,
  `MATERIALIZE COLUMN` or `CLEAR COLUMN` of such a column, a `CREATE TABLE
  ... AS SELECT` whose columns compute one) is refused, as is every `TTL`,
  which deletes or rewrites rows whenever a merge finds them expired.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import Nondeterministic
from durable_obj.gate.literals import Literals
from durable_obj.gate.quoting import quote_ident
from durable_obj.gate.shapes import InsertShape, evaluated_from
from durable_obj.gate.sql import Call, Token, depth_zero, find_calls, tokenize

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

_KINDS = ("DEFAULT", "MATERIALIZED", "ALIAS")


@dataclass(frozen=True, slots=True)
class Missing:
    """An omitted column whose expression the engine would compute."""

    name: str
    type_name: str
    kind: str  # DEFAULT or MATERIALIZED
    culprit: str  # the first non-deterministic call, as written
    per_row: bool  # a call other than a query-constant one


class ColumnRules:
    """The rules above, for one object's engine (with a cache of table columns)."""

    def __init__(
        self,
        engine: Engine,
        literals: Literals,
        *,
        nondeterministic: Callable[[], frozenset[str]],
        query_constant: frozenset[str],
        mode: str,
    ) -> None:
        self._engine = engine
        self._literals = literals
        self._nondeterministic = nondeterministic
        self._query_constant = query_constant
        self._mode = mode
        self._columns: dict[tuple[str, str], list[list[str]]] = {}
        #: Per table: its DEFAULT columns that compute non-deterministically.
        self._volatile: dict[tuple[str, str], list[tuple[str, str]]] = {}

    def forget(self) -> None:
        """Forget cached column definitions (call after any non-INSERT)."""
        self._columns.clear()
        self._volatile.clear()

    # -- INSERT ---------------------------------------------------------------

    def missing(self, shape: InsertShape, db: str) -> list[Missing]:
        """Each column the INSERT omits whose DEFAULT or MATERIALIZED
        expression is non-deterministic."""
        listed = None if shape.columns is None else {c.lower() for c in shape.columns}
        out = []
        for name, type_name, kind, expr in self._table_columns(shape.database or db, shape.table):
            if kind not in ("DEFAULT", "MATERIALIZED"):
                continue
            given = listed is not None and name.lower() in listed
            if given or (kind == "DEFAULT" and listed is None):
                continue  # the row carries it
            bad = self._culprits(find_calls(tokenize(expr)))
            if bad:
                per_row = any(c.name not in self._query_constant for c in bad)
                out.append(Missing(name, type_name, kind, bad[0].shown, per_row))
        return out

    def leaves_rows(self, shape: InsertShape, db: str) -> bool:
        """Whether the INSERT's rows may go unread by the gate: its table has
        no column whose non-deterministic DEFAULT a row could fall back to,
        and it omits none the pinner would write into each row."""
        return not self.missing(shape, db) and not self._carried(shape, db)

    def _carried(self, shape: InsertShape, db: str) -> list[tuple[str, str]]:
        """(name, culprit) of each DEFAULT column the INSERT carries whose
        expression is non-deterministic."""
        listed = None if shape.columns is None else {c.lower() for c in shape.columns}
        key = (shape.database or db, shape.table)
        volatile = self._volatile.get(key)
        if volatile is None:
            volatile = self._volatile[key] = [
                (name, bad[0].shown)
                for name, _, kind, expr in self._table_columns(*key)
                if kind == "DEFAULT" and (bad := self._culprits(find_calls(tokenize(expr))))
            ]
        return [(n, c) for n, c in volatile if listed is None or n.lower() in listed]

    def carried(
        self, shape: InsertShape, db: str, words: Callable[[], frozenset[str]] | None
    ) -> list[str]:
        """The settings an INSERT needs so that no column it carries falls
        back to a non-deterministic DEFAULT: the engine computes a DEFAULT
        for a row that gives the keyword `DEFAULT` or NULL (into a column
        that is not Nullable), or whose data leaves the field out (FORMAT
        JSONEachRow, CSVWithNames, ...), and a replay computes it again.
        NULL is refused by the engine under these settings; DEFAULT in the
        rows and FORMAT data are refused here (`words`: the rows' code
        words, read only then; None for rows the engine reads as literals
        only, `reading.unread`, which the gate's lexer cannot read: such an
        INSERT is refused). [] when the table has no such column."""
        carried = self._carried(shape, db)
        if not carried:
            return []
        name, culprit = carried[0]
        why = (
            f"column {name!r} of {shape.table} is DEFAULT {culprit}(...), which the engine "
            "computes again on every replay for a row that"
        )
        if shape.values_at is None and shape.select_at is None:
            raise Nondeterministic(
                f"{why} leaves it out or gives it NULL, and this INSERT's FORMAT data may; "
                "insert the rows with VALUES instead, giving the value, or leaving the "
                "column out of the column list (durable_obj then pins it). Nothing was run."
            )
        if shape.values_at is not None and words is None:
            raise Nondeterministic(
                f"{why} gives the keyword DEFAULT, and this INSERT's own SETTINGS "
                "(input_format_values_interpret_expressions = 0, ...) have the engine read "
                "its rows unseen by durable_obj; drop those settings. Nothing was run."
            )
        if shape.values_at is not None and words is not None and "default" in words():
            raise Nondeterministic(
                f"{why} gives the keyword DEFAULT; write the value, or leave the column out "
                "of the column list (durable_obj then pins it). Nothing was run."
            )
        # NULL into a column that is not Nullable: an error, not the DEFAULT
        return ["insert_null_as_default = 0", "input_format_null_as_default = 0"]

    def make_explicit(
        self,
        tokens: list[Token],
        shape: InsertShape,
        db: str,
        replacements: list[tuple[int, int, str]],
    ) -> list[str]:
        """Add to `replacements` what makes every omitted non-deterministic
        column explicit, or refuse. Returns settings the rewritten INSERT needs."""
        missing = self.missing(shape, db)
        if not missing:
            return []
        for m in missing:
            if self._mode == "refuse" or not (
                (shape.values_at is not None and shape.rows)
                or (shape.select_at is not None and not m.per_row)
            ):
                raise Nondeterministic(
                    f"column {m.name!r} is {m.kind} {m.culprit}(...), which the engine would "
                    "compute anew on every replay; list the column and insert its value "
                    "explicitly. Nothing was run."
                )
        columns = self._table_columns(shape.database or db, shape.table)
        expressions = {c[0]: c[3] for c in columns}
        count = len(shape.rows) if shape.values_at is not None else 1
        per_row: list[list[str]] = [[] for _ in range(count)]
        for m in missing:
            literals = self._literals.values(f"CAST({expressions[m.name]} AS {m.type_name})", count)
            if literals is None:
                raise Nondeterministic(
                    f"column {m.name!r} has a non-deterministic default that depends on other "
                    "columns, so it cannot be computed apart from the row; list the column "
                    "and insert its value explicitly. Nothing was run."
                )
            for row, literal in enumerate(literals):
                per_row[row].append(literal)
        if shape.values_at is not None:
            for (_, close), literals in zip(shape.rows, per_row, strict=True):
                at = tokens[close].start
                replacements.append((at, at, ", " + ", ".join(literals)))
        else:
            # The SELECT's rows, each with the statement's one value appended.
            assert shape.select_at is not None
            start = tokens[shape.select_at].start
            last = max(i for i, t in enumerate(tokens) if t.text != ";")
            replacements.append((start, start, f"SELECT *, {', '.join(per_row[0])} FROM ("))
            replacements.append((tokens[last].end, tokens[last].end, ")"))
        names = [m.name for m in missing]
        if shape.columns is None:
            # No list: the rows hold every ordinary column. Write the list out.
            ordinary = [c[0] for c in columns if c[2] not in ("MATERIALIZED", "ALIAS", "EPHEMERAL")]
            at = tokens[shape.head_end - 1].end
            replacements.append(
                (at, at, " (" + ", ".join(map(quote_ident, ordinary + names)) + ")")
            )
        else:
            at = tokens[shape.head_end - 1].start  # the list's closing parenthesis
            replacements.append((at, at, ", " + ", ".join(map(quote_ident, names))))
        if any(m.kind == "MATERIALIZED" for m in missing):
            return ["insert_allow_materialized_columns = 1"]
        return []

    # -- DDL ------------------------------------------------------------------

    def check_ddl(self, tokens: list[Token], calls: list[Call], db: str) -> None:
        """Refuse a CREATE / ALTER TABLE that gives existing rows a value
        computed when they are read or merged."""
        words = [_keyword(tokens, i) for i in range(min(8, len(tokens)))]
        if not words or words[0] not in ("create", "attach", "alter"):
            return
        if words[0] != "alter" and {"view", "function", "dictionary"} & set(words):
            return  # a definition that holds no rows (a MATERIALIZED VIEW is refused earlier)
        if (at := ttl_clause(tokens)) is not None:
            raise Nondeterministic(
                f"a TTL (at position {tokens[at].start}) deletes or rewrites rows when a "
                "background merge finds them expired, at a different time on the writer and on "
                "every replay, so replicas would hold different rows. Use the object's TTL "
                "instead: obj.set_ttl(table, column, seconds) expires rows by a logged DELETE "
                "with a literal cutoff that every replica applies alike (docs/guides/ttl.md). "
                "Nothing was run."
            )
        self._check_aliases(tokens, calls)
        self._check_constraints(tokens, calls)
        if words[0] == "alter":
            self._check_alter(tokens, calls, db)
            return
        select_at, _ = evaluated_from(tokens)
        if select_at < len(tokens):
            bad = self._culprits([c for c in calls if c.first < select_at])
            if bad:
                raise Nondeterministic(
                    f"CREATE TABLE ... AS SELECT fills the table at once, and its column "
                    f"expression {bad[0].shown}() would be computed for those rows anew on "
                    "every replay; create the table first, then INSERT ... SELECT (which pins "
                    "a default that is constant within the statement). Nothing was run."
                )

    def _check_aliases(self, tokens: list[Token], calls: list[Call]) -> None:
        """Refuse an ALIAS column whose expression is non-deterministic, in a
        CREATE or an ADD / MODIFY COLUMN, with rows or without: the engine
        computes it whenever the column is read, so a write that reads it
        (`DELETE ... WHERE ts < ...`, `INSERT ... SELECT ts`, a TTL sweep)
        would change other rows on every replay. An EPHEMERAL column's
        expression likewise: a DEFAULT that names it computes it when an
        INSERT omits it, unseen by the pinning of omitted columns. From the
        keyword to the end of its column (a `,` or the closing parenthesis
        at its depth)."""
        for i, end in _elements(tokens, ("alias", "ephemeral")):
            if i == 0 or tokens[i - 1].text in (",", "("):
                continue  # a column named `alias` starts its definition
            tok = tokens[i]
            bad = self._culprits([c for c in calls if i < c.first < end])
            if bad:
                raise Nondeterministic(
                    f"the {tok.text.upper()} column expression {bad[0].shown}() (at position "
                    f"{tok.start}) is computed whenever the column is read or omitted, so a "
                    "write that reads it (a DELETE "
                    "or UPDATE filtering on it, an INSERT ... SELECT of it, a TTL sweep) would "
                    "change different rows on every replay; store the value instead (a column "
                    "with DEFAULT, which an INSERT pins). Nothing was run."
                )

    def _check_constraints(self, tokens: list[Token], calls: list[Call]) -> None:
        """Refuse a CHECK (or ASSUME) constraint whose expression is
        non-deterministic, in a CREATE or an ALTER ... ADD CONSTRAINT: the
        engine evaluates it on every INSERT, on the writer and again on
        every replay, so `CHECK now() < '2027-01-01'` accepts an INSERT that
        replay after that day refuses, and the object never opens again.
        From the keyword to the end of the constraint (a `,` or the closing
        parenthesis at its depth)."""
        for i, end in _elements(tokens, ("check", "assume")):
            if not _names_constraint(tokens, i):
                continue
            tok = tokens[i]
            bad = self._culprits([c for c in calls if i < c.first < end])
            if bad:
                raise Nondeterministic(
                    f"the constraint's expression {bad[0].shown}() (at position {tok.start}) "
                    "is evaluated on every INSERT, on the writer and again on every replay, "
                    "so an INSERT accepted now could be refused on replay and the object "
                    "would not open; use a deterministic expression (compare a column with "
                    "a literal). Nothing was run."
                )

    def _check_alter(self, tokens: list[Token], calls: list[Call], db: str) -> None:
        target = alter_target(tokens)
        if target is None:
            return
        database, table, start = target
        database = database or db
        bounds = [start] + [i for i, t in depth_zero(tokens, start) if t.text == ","]
        bounds.append(len(tokens))
        for a, b in itertools.pairwise(bounds):
            a = a if a == start else a + 1
            verb = _keyword(tokens, a)
            if _keyword(tokens, a + 1) != "column" or verb not in _COLUMN_VERBS:
                continue
            i = a + 2
            while i < b - 1 and _keyword(tokens, i) in ("if", "not", "exists"):
                i += 1
            if i >= b:
                continue
            column = tokens[i].name
            if verb in ("add", "modify"):
                kind = next(
                    (w.upper() for j in range(i, b) if (w := _keyword(tokens, j)) in _KINDS_LOWER),
                    "",
                )
                bad = self._culprits([c for c in calls if a <= c.first < b])
                if bad and self._rows_compute(database, table, column, verb, kind):
                    raise _existing_rows(f"{verb.upper()} COLUMN {column} {kind} {bad[0].shown}()")
            else:
                expr = next(
                    (c[3] for c in self._table_columns(database, table) if c[0] == column), ""
                )
                bad = self._culprits(find_calls(tokenize(expr)))
                if bad and self._has_rows(database, table):
                    raise _existing_rows(
                        f"{verb.upper()} COLUMN {column} (whose expression is {bad[0].shown}())"
                    )

    def _rows_compute(self, db: str, table: str, column: str, verb: str, kind: str) -> bool:
        """Would rows already in the table get this column's new expression
        computed for them (at read time, or frozen by a later merge)?"""
        if not self._has_rows(db, table):
            return False
        if verb == "add" or kind == "ALIAS":
            return True
        engine = self._engine.run_params(
            "SELECT engine FROM system.tables WHERE database = {db:String} AND name = {t:String}",
            {"db": db, "t": table},
        ).strip()
        if not engine.endswith("MergeTree"):
            return True
        lacking = self._engine.run_params(
            "SELECT count() FROM system.parts WHERE database = {db:String} AND table = "
            "{t:String} AND active AND name NOT IN (SELECT name FROM system.parts_columns "
            "WHERE database = {db:String} AND table = {t:String} AND active AND column = "
            "{c:String})",
            {"db": db, "t": table, "c": column},
        ).strip()
        return lacking != "0"

    def _has_rows(self, db: str, table: str) -> bool:
        out = self._engine.run_params(
            "SELECT count() FROM {db:Identifier}.{t:Identifier}", {"db": db, "t": table}
        )
        return out.strip() != "0"

    def _culprits(self, calls: list[Call]) -> list[Call]:
        nondeterministic = self._nondeterministic()
        return sorted((c for c in calls if c.name in nondeterministic), key=lambda c: c.start)

    def _table_columns(self, db: str, table: str) -> list[list[str]]:
        """[name, type, default_kind, default_expression] of a table's columns."""
        columns = self._columns.get((db, table))
        if columns is None:
            known = self._engine.known.kept(self._engine, db)
            if known is not None:
                columns = known.columns.get(table, [])
            else:
                columns = self._engine.json_rows(
                    "SELECT name, type, default_kind, default_expression FROM system.columns "
                    "WHERE database = {db:String} AND table = {t:String} ORDER BY position",
                    {"db": db, "t": table},
                )
            self._columns[(db, table)] = columns
        return columns


_KINDS_LOWER = frozenset(k.lower() for k in _KINDS)
_COLUMN_VERBS = frozenset({"add", "modify", "materialize", "clear"})


def _keyword(tokens: list[Token], i: int) -> str:
    """The lower-cased word at `i` if it is an unquoted identifier, else ''."""
    return tokens[i].text.lower() if i < len(tokens) and tokens[i].kind == "ident" else ""


def _elements(tokens: list[Token], keywords: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """(i, end) for each unquoted keyword of `keywords` at `i`: `end` is
    where its element ends (the `,` or the closing parenthesis at its depth,
    or the statement's end)."""
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        if _keyword(tokens, i) not in keywords:
            continue
        end, level = len(tokens), depth
        for j in range(i + 1, len(tokens)):
            text = tokens[j].text
            level += (text == "(") - (text == ")")
            if level < depth or (level == depth and text == ","):
                end = j
                break
        yield i, end


def _names_constraint(tokens: list[Token], i: int) -> bool:
    """Is the keyword at `i` the CHECK / ASSUME of `CONSTRAINT [IF NOT
    EXISTS] name`, not a column or table of that name?"""
    if i < 2 or tokens[i - 1].kind not in ("ident", "quoted"):
        return False
    before = i - 2
    if _keyword(tokens, before) == "exists" and before >= 3:
        if (_keyword(tokens, before - 2), _keyword(tokens, before - 1)) != ("if", "not"):
            return False
        before -= 3
    return _keyword(tokens, before) == "constraint"


def _existing_rows(what: str) -> Nondeterministic:
    return Nondeterministic(
        f"{what} gives the table's existing rows a non-deterministic value that the engine "
        "computes when they are read (and freezes at some later merge), so it differs on "
        "every read and on every replica. Add the column with a constant default and fill it "
        "with ALTER TABLE ... UPDATE col = <value> WHERE 1 (values from the caller), then "
        "MODIFY COLUMN to the non-deterministic default for future rows. Nothing was run."
    )


def alter_target(tokens: list[Token]) -> tuple[str | None, str, int] | None:
    """(database, table, index of the first command) of `ALTER [TEMPORARY]
    TABLE [db.]t [ON CLUSTER c]`."""
    i = 2 if len(tokens) > 2 and tokens[1].word == "temporary" else 1
    if len(tokens) < i + 3 or tokens[i].word != "table":
        return None
    i += 1
    database: str | None = None
    table = tokens[i].name
    if i + 2 < len(tokens) and tokens[i + 1].text == ".":
        database, table = table, tokens[i + 2].name
        i += 2
    i += 1
    if i + 2 < len(tokens) and tokens[i].word == "on" and tokens[i + 1].word == "cluster":
        i += 3
    return database, table, i


#: Words after which `ttl` is a name (of a column, a table, an alias), not a
#: TTL clause: they expect a name or an expression next.
_BEFORE_A_NAME = frozenset(
    {"by", "select", "where", "prewhere", "having", "and", "or", "not", "as", "on", "using"}
    | {"set", "column", "exists", "distinct", "then", "else", "when", "case", "in", "like"}
    | {"ilike", "between", "is", "with", "from", "join", "table", "into", "to", "after"}
    | {"update", "delete", "order", "group", "limit", "values", "key", "primary", "partition"}
    | {"sample", "index", "projection", "default", "materialized", "alias", "ephemeral"}
    | {"codec", "comment", "remove", "drop", "clear", "rename", "database", "dictionary"}
    | {"view", "create", "alter", "final", "if", "first", "interval", "array", "global"}
    | {"any", "all", "offset", "over", "filter", "cluster", "return", "describe", "exchange"}
)


def ttl_clause(tokens: list[Token]) -> int | None:
    """Index of the first TTL keyword (a table or column TTL, `MODIFY TTL`,
    `MATERIALIZE TTL`; `REMOVE TTL` excluded) of a CREATE / ALTER TABLE, or
    None. A column or alias named `ttl` is told apart by its neighbours: a
    TTL keyword follows the end of a type or expression and starts one."""
    for i, tok in enumerate(tokens):
        if tok.kind != "ident" or tok.text.lower() != "ttl" or i == 0:
            continue
        before = tokens[i - 1]
        if before.kind == "ident" and before.text.lower() in ("modify", "materialize"):
            return i
        if i + 1 >= len(tokens) or tokens[i + 1].text in (",", ")", "]", "=", ".", ";"):
            continue
        if before.kind == "ident" and before.text.lower() in _BEFORE_A_NAME:
            continue
        if before.kind == "punct" and before.text not in (")", "]"):
            continue
        return i
    return None
