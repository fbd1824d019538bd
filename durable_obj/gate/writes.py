"""What a write reads, as the engine resolves it: the queries inside a write.

A read is held to an allow-list on the engine's own resolution of it
(`EXPLAIN QUERY TREE`: every table the object's, every function on the
catalogue's allow-list). A write holds queries too, and the engine runs
them just the same: the SELECT of `INSERT ... SELECT` and of `CREATE ...
AS SELECT` (tables, views, materialized views), a subquery inside an
`ALTER ... UPDATE/DELETE` or a lightweight `DELETE`, and the expressions
of `VALUES` rows, which the engine evaluates as SQL (in any spelling of
the format name: `VALUES`, `FORMAT values`, `FORMAT "Values"`). Each is
given to the engine's analyser and its tree checked exactly as a read's
(`isolation.Scope.check_tree`, `reach.check_resolved`).

The text here is the gate's own (`reading.engine_text` made it plain and
`isolation` localized it), so the lexer reads it token for token as the
engine does. `reach.check` has refused every call it knows to reach
outside before anything here asks the engine to resolve (analysis folds
constants: it may evaluate what it resolves).

Cost: a `VALUES` row of literals holds no code word and costs nothing; a
row whose only code is calls on the allow-list (`toDate('...')`, `[..]`,
`map(...)`) cannot name a table either (a table needs a bare name, a
subquery needs SELECT) and is checked by name without the engine; the
rest are resolved in one `EXPLAIN QUERY TREE` per statement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused
from durable_obj.gate import aggregates, params, reach
from durable_obj.gate.control import INNER, inner_refused
from durable_obj.gate.isolation import PURE_TABLE_FUNCTIONS, TABLE_FUNCTION
from durable_obj.gate.quoting import quote_string, splice
from durable_obj.gate.reading import TO_SEMICOLON, TO_SEMICOLON_OUTSIDE_STRINGS, unread
from durable_obj.gate.sql import (
    Token,
    code_shapes,
    code_words,
    depth_zero,
    match_parens,
    split_rows,
    tokenize,
    tokenize_head,
)

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Words of a VALUES row that are literals, not code.
LITERAL_WORDS = frozenset({"null", "true", "false", "inf", "nan", "infinity"})
#: Words of a VALUES row that read nothing: literals, and a column's DEFAULT.
_VALUE_WORDS = LITERAL_WORDS | {"default"}
#: Words that start a query.
_QUERY_START = frozenset({"select", "with"})
#: Rows resolved per EXPLAIN: the engine's parser has a limit on one query's size.
_ROWS_PER_CHECK = 2_000


def check(engine: Engine, local: str) -> None:
    """`ClassificationRefused` if a query inside the (localized, plain)
    write `local` resolves a table outside the object or a function off the
    allow-list; nothing runs (only the engine's analyser)."""
    for query, whole in queries(engine, local):
        tree = engine.query_tree(query)
        if tree is None and whole:
            # A parameterized view's query is checked with each placeholder
            # as its type's default value; any other, the engine's error is
            # raised (nothing runs what could not be checked; before, it ran
            # to fail, and a query that analyses only as it runs ran unchecked).
            found = params.placeholders(query)
            if not found:
                engine.query_tree(query, strict=True)
            tree = engine.query_tree(_defaults(query, found))
            if tree is None:
                raise ClassificationRefused(
                    "could not check what this parameterized view reads: its query does not "
                    "analyse with each {name:Type} placeholder as its type's default value "
                    "(a placeholder may not name a table, a column or a type). Nothing was run "
                    "or logged."
                )
        if tree is None:
            raise ClassificationRefused(
                "could not check what a subquery of this write reads (the engine does not "
                "analyse it on its own); write it as INSERT ... SELECT or a read first. "
                "Nothing was run or logged."
            )
        if INNER in tree:  # a materialized view's inner table: another name on replay
            raise ClassificationRefused(inner_refused(tree[tree.index(INNER) :].split()[0]))
        resolved(engine, tree)


def _defaults(query: str, found: list[params.Placeholder]) -> str:
    """`query` with each placeholder as its type's default value."""
    return splice(
        query,
        [(p.start, p.end, f"defaultValueOfTypeName({quote_string(p.type_name)})") for p in found],
    )


def resolved(engine: Engine, tree: str, external: frozenset[str] = frozenset()) -> None:
    """What the engine resolved (`EXPLAIN QUERY TREE`), for a read, a write
    or a restored view: every table the object's own (or an allowed system
    table); every table function pure, one of `external` (a read's opt-in),
    or a parameterized view of the object's own database (called like a
    table function, `v(p = 1)`: its query passed the gate when it was
    made); every function on the allow-list."""
    called = {
        name.rsplit(".", 1)[-1]
        for name in TABLE_FUNCTION.findall(tree)
        if name.lower() not in PURE_TABLE_FUNCTIONS
    }
    views: frozenset[str] = frozenset()
    if called:
        rows = engine.json_rows(
            "SELECT name FROM system.tables WHERE database = {db:String} AND engine = 'View' "
            "AND has(splitByChar(',', {names:String}), name)",
            {"db": engine.database, "names": ",".join(sorted(called))},
        )
        # never a name the engine would take for one of its table functions
        refused = reach.catalog(engine).table_functions
        views = frozenset(row[0] for row in rows if row[0].lower() not in refused)
    engine.scope.check_tree(tree, external, views)
    reach.check_resolved(engine, tree)


def queries(engine: Engine, local: str) -> list[tuple[str, bool]]:
    """The queries the engine would resolve inside the write `local`, each
    with whether it is the write's whole query (its failure to analyse is
    the write's own failure)."""
    head = tokenize_head(local)
    if not head:
        return []
    first = head[0].word
    if first == "insert":
        return _insert(engine, local, head)
    words = code_words(local)
    if not (words & _QUERY_START):
        return []
    tokens = tokenize(local)
    if first in ("create", "attach", "replace"):
        found = _as_select(tokens)
        if found is not None:
            return [(local[tokens[found].start :], True)]
    return [(q, False) for q in _subqueries(local, tokens)]


def _insert(engine: Engine, local: str, head: list[Token]) -> list[tuple[str, bool]]:
    last = head[-1]
    if last.kind != "ident":
        return []
    if last.word in _QUERY_START:
        query = local[last.start :]
        for i, tok in enumerate(head[:-1]):
            if tok.kind == "ident" and tok.word == "settings" and i + 1 < len(head) - 1:
                # `INSERT INTO t SETTINGS a = 1 SELECT ...`: the query runs
                # under them (a second SETTINGS clause, after a line break
                # that ends any comment, is the engine's too)
                tail = tokenize(query)
                while tail and tail[-1].text == ";":  # the statement's end, not the query's
                    query = query[: tail.pop().start]
                query += "\nSETTINGS " + local[head[i + 1].start : last.start]
                break
        return [(query, True)]
    if last.word == "values":
        if unread(local) is not None:
            return []  # the engine reads the rows as literals only: nothing is evaluated
        data = local[last.end :]
    elif last.word == "format":
        rest = tokenize(local[last.end : last.end + 200])
        if not rest or rest[0].kind not in ("ident", "quoted") or rest[0].word != "values":
            return []  # no other format evaluates its data as SQL
        data = local[last.end + rest[0].end :]
    else:
        return []
    _one_statement(data)
    return _rows(engine, data)


def _one_statement(data: str) -> None:
    """Refuse VALUES rows (plain text) with anything after a `;` outside a
    quoted token. chDB runs every statement of a text, and chdb-core's
    statement count skips rows by parentheses and single quotes, where the
    engine's reader ends them where it stops: a `Dynamic` value `["x("]`
    made the count 1 for two statements (found by attack on the unread
    path). The rows' check below refused such text too, by failing to
    resolve it; this refusal does not depend on that.

    Read twice: as our lexer reads the rows (every quoted token whole), and
    with only single-quoted strings whole, since a value the engine's
    reader takes as a JSON string (`"..."` in a `Dynamic` field) may end
    elsewhere than our quoted name does. Text after a `;` in either reading
    is refused (a rare false refusal: a `;` in a double-quoted value)."""
    if ";" not in data:
        return
    for reading in (TO_SEMICOLON, TO_SEMICOLON_OUTSIDE_STRINGS):
        found = reading.match(data)
        stop = found.end() if found is not None else 0
        if data[stop:].strip("; \t\n\r\x0b\x0c"):
            raise ClassificationRefused(
                "execute() takes exactly one statement, and text follows a `;` among "
                "or after these VALUES rows. Nothing was run or logged; call execute() "
                "once per statement."
            )


def _rows(engine: Engine, data: str) -> list[tuple[str, bool]]:
    """The VALUES rows of `data` that hold code, as SELECTs to resolve."""
    quoted, shapes = code_shapes(data)  # one scan of the rows
    if not quoted and all(ident.lower() in _VALUE_WORDS for ident, _, _ in shapes):
        return []  # literals only: nothing is evaluated
    known = reach.catalog(engine)
    named = known.refused_aggregate(data) is not None  # maybe in a string: resolve it
    if not quoted and not named and _all_literal_calls(shapes, known):
        return []  # every row's code is allowed calls: no row lexed
    rows = split_rows(data)
    if rows is None:
        # Not a list of rows the splitter reads: resolve the data as one
        # SELECT list, which the engine parses the way it parses the rows.
        rows = [data.strip().rstrip(";")]
    coded = [_without_default(row) for row in rows if not _literal_calls(row, known)]
    return [
        ("SELECT " + ", ".join(coded[i : i + _ROWS_PER_CHECK]), False)
        for i in range(0, len(coded), _ROWS_PER_CHECK)
    ]


def _default(tokens: list[Token], i: int) -> bool:
    """Whether token `i` is a row's `DEFAULT` (the column's default), not a
    name: a bare word, not called and not qualifying a name."""
    tok = tokens[i]
    nxt = tokens[i + 1].text if i + 1 < len(tokens) else ""
    prev = tokens[i - 1].text if i > 0 else ""
    return tok.kind == "ident" and tok.word == "default" and nxt not in ("(", ".") and prev != "."


def _without_default(row: str) -> str:
    """The row with each `DEFAULT` as NULL: it reads nothing, and a SELECT
    list cannot hold the word."""
    if "default" not in code_words(row):
        return row
    tokens = tokenize(row)
    return splice(
        row, [(t.start, t.end, "NULL") for i, t in enumerate(tokens) if _default(tokens, i)]
    )


def _all_literal_calls(shapes: frozenset[tuple[str, bool, bool]], known: reach.Catalog) -> bool:
    """`_literal_calls` of every row at once, from the distinct shapes of
    their code (`sql.code_shapes`, the rows holding no quoted name): each
    word a literal, a row's DEFAULT, or a call of an allowed function
    (never qualified), none taking a type or an aggregate function by a
    string (`aggregates.NAMES_BY_STRING`). False sends the rows one by one."""
    for ident, called, dotted in shapes:
        word = ident.lower()
        if word in LITERAL_WORDS or (word == "default" and not called and not dotted):
            continue
        if dotted or not called or not known.allowed_in_tree(ident):
            return False
        if aggregates.NAMES_BY_STRING.search(word):
            return False  # a name it takes may be folded from an expression
    return True


def _literal_calls(row: str, known: reach.Catalog) -> bool:
    """Whether the row's only code is calls of functions on the allow-list
    (no bare name, no subquery, no lambda): it cannot reach a table."""
    quoted, shapes = code_shapes(row)
    return (
        not quoted
        and known.refused_aggregate(row) is None  # arrayReduce('...'), CAST(x, '...')
        and _all_literal_calls(shapes, known)
    )


def _as_select(tokens: list[Token]) -> int | None:
    """Where the query of `CREATE ... AS SELECT` starts (a table, a view, a
    materialized view), or None."""
    for i, tok in depth_zero(tokens):
        if tok.kind != "ident" or tok.word != "as" or i + 1 >= len(tokens):
            continue
        nxt = tokens[i + 1]
        if nxt.word in _QUERY_START and nxt.kind == "ident":
            return i + 1
        if nxt.text == "(":
            j = i + 2
            while j < len(tokens) and tokens[j].text == "(":
                j += 1
            if j < len(tokens) and tokens[j].kind == "ident" and tokens[j].word in _QUERY_START:
                return i + 1
    return None


def _subqueries(local: str, tokens: list[Token]) -> list[str]:
    """The outermost `(SELECT ...)` / `(WITH ...)` of a write."""
    closing = match_parens(tokens)
    out: list[str] = []
    i = 0
    while i < len(tokens) - 1:
        tok, nxt = tokens[i], tokens[i + 1]
        if tok.text == "(" and nxt.kind == "ident" and nxt.word in _QUERY_START and i in closing:
            end = closing[i]
            if i >= 2 and tokens[i - 2].word == "projection":
                i = end + 1  # a projection's query reads its own table only, by definition
                continue
            out.append(local[nxt.start : tokens[end].start])
            i = end + 1
            continue
        i += 1
    return out
