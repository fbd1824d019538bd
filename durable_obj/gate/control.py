"""Statements chDB calls CONTROL that an object can replay the same.

chdb-core's `classify_query` puts DETACH, ATTACH and SET in CONTROL, which
execute() refuses whole (V1 does the same). Some of them only change the
object's own database, and replay the same from the WAL:

* `DETACH TABLE|VIEW|DICTIONARY [IF EXISTS] name [SYNC]` and
  `ATTACH TABLE|DICTIONARY [IF NOT EXISTS] name` (the short form, which
  re-attaches what this database detached) of the object's own table:
  every open replays into a fresh database, so a detach replays to a
  detached table and an attach to the same table again. PERMANENTLY is
  refused: it only decides what a server restart does (an object's
  database never outlives its open), and chdb.durable's database
  (DatabaseOverlay) cannot run it, so a shared object would not open there.
  `classify_query` proves the name is the object's
  (`writes_only_target_database`). A checkpoint cannot carry a detached
  table (BACKUP DATABASE skips it), so `Engine.backup` refuses while one is.
* Any other ATTACH (`FROM '/path'`, a full definition, `UUID '...'`) can
  point the engine at files outside the object: refused, saying so.
* SET changes the connection's session, not the database: a checkpoint does
  not carry it, so a later statement that needed it would fail or mean
  something else when replayed from the base. The settings that only
  decide what DDL the engine accepts work in the statement's own SETTINGS
  (a CREATE TABLE's SETTINGS takes query settings too), where they are
  logged with it and every replay (chdb.durable's too) applies them: the
  refusal says so. `allow_deprecated_syntax_for_merge_tree` is refused
  anywhere: an old-syntax table with rows does not RESTORE from a base.

What a statement is comes from the engine: its class from `classify_query`,
its form from the engine's own canonical text (`formatQuerySingleLine`) and
parse (`EXPLAIN AST`), never from the caller's spelling.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused
from durable_obj.gate.defaults import alter_target
from durable_obj.gate.reading import code_of
from durable_obj.gate.sql import Token, code_words, depth_zero, tokenize, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Analysis, Engine

#: Settings that only change which DDL the engine accepts (types, codecs,
#: keys, old syntax) or how it spells a Nested column: in a statement's own
#: SETTINGS they are logged with it and replay the same.
DDL_SETTINGS = (
    "allow_suspicious_low_cardinality_types",
    "allow_suspicious_fixed_string_types",
    "allow_suspicious_codecs",
    "allow_suspicious_variant_types",
    "allow_suspicious_types_in_order_by",
    "allow_suspicious_types_in_group_by",
    "allow_nullable_key",
    "allow_floating_point_partition_key",
    "allow_experimental_*_type",
    "enable_time_time64_type",
    "flatten_nested",
    "data_type_default_nullable",
)
DDL_SETTING = re.compile(
    "|".join(re.escape(s).replace(r"\*", r"\w+") for s in DDL_SETTINGS), re.IGNORECASE
)

_NAME = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`\\]|``)+`)"
_QUALIFIED = rf"{_NAME}(?:\.{_NAME})?"
#: The engine's canonical text of the DETACH and ATTACH forms accepted.
_DETACH = re.compile(rf"DETACH (?:TABLE|VIEW|DICTIONARY) (?:IF EXISTS )?{_QUALIFIED}(?: SYNC)?")
_ATTACH = re.compile(rf"ATTACH (?:TABLE|DICTIONARY) (?:IF NOT EXISTS )?{_QUALIFIED}")
#: `EXPLAIN AST` of those forms: the query node and its name, nothing else.
_BARE_AST = re.compile(r"(?:Detach|Attach)Query [^\n]*\n(?: Identifier [^\n]*\n?){1,2}")


def admitted(engine: Engine, text: str, analysis: Analysis) -> Analysis:
    """`analysis` of the (localized) statement `text`, as MUTATING when it
    is a CONTROL statement the object can replay the same (the rest of the
    gate then judges it as any write); `ClassificationRefused` saying why
    and what to write instead for an ATTACH that names files or a SET;
    `analysis` unchanged otherwise (but for the deprecated MergeTree syntax,
    refused: a base holding such a table with rows does not RESTORE)."""
    if analysis.query_class != "CONTROL" or analysis.has_secrets:
        if "allow_deprecated_syntax_for_merge_tree" in code_words(code_of(text)):
            raise ClassificationRefused(
                "the deprecated MergeTree syntax (ENGINE = MergeTree(date, key, 8192), "
                "allow_deprecated_syntax_for_merge_tree) writes parts that a checkpoint's "
                "RESTORE cannot read back (BAD_DATA_PART_NAME), so the object would not open "
                "after one; write ENGINE = MergeTree PARTITION BY toYYYYMM(date) ORDER BY key. "
                "Nothing was run or logged."
            )
        return analysis
    canonical = engine.canonical(text)
    word = canonical.split(" ", 1)[0]
    if word in ("DETACH", "ATTACH"):
        form = _DETACH if word == "DETACH" else _ATTACH
        if form.fullmatch(canonical) and _BARE_AST.fullmatch(engine.ast(text).strip() + "\n"):
            return dataclasses.replace(analysis, query_class="MUTATING")
        if word == "ATTACH":
            raise ClassificationRefused(
                "only the short ATTACH TABLE name / ATTACH DICTIONARY name (re-attaching what "
                "this object detached) is accepted: an ATTACH with FROM '<path>', a UUID or "
                "its own definition points the engine at files outside the object, which no "
                "checkpoint or replay carries. Use CREATE TABLE and INSERT the rows. Nothing "
                "was run or logged."
            )
        raise ClassificationRefused(
            "only DETACH TABLE|VIEW|DICTIONARY name [SYNC] of the object's own table is "
            "accepted: no ON CLUSTER, no DATABASE, and no PERMANENTLY (it only decides what a "
            "server restart does, which an object's database never sees, and chdb.durable "
            "cannot replay it: write DETACH TABLE name). Nothing was run or logged."
        )
    if word == "SET":
        raise _set_refused(canonical)
    return analysis


def _set_refused(canonical: str) -> ClassificationRefused:
    names = _set_names(canonical)
    other = [n for n in names if not DDL_SETTING.fullmatch(n)]
    allowed = ", ".join(DDL_SETTINGS)
    if other:
        return ClassificationRefused(
            f"SET {other[0][:60]} is not accepted: an object's session settings are its own "
            "(time zone, bounds, synchronous writes). Only settings that decide what DDL the "
            f"engine accepts may be given, in the statement's own SETTINGS clause: {allowed}. "
            "Nothing was run or logged."
        )
    return ClassificationRefused(
        "SET changes this connection's session, which a checkpoint does not carry: a "
        "statement that needed it would fail or mean something else when replayed from the "
        "base. Put the setting in the statement itself, where it is logged with it and every "
        f"replay applies it: CREATE TABLE ... SETTINGS {names[0] if names else 'name'} = ..., "
        "ALTER TABLE ... SETTINGS ..., INSERT INTO t SETTINGS ... VALUES/SELECT (a CREATE "
        f"TABLE's SETTINGS takes query settings too). Settings accepted there: {allowed}. "
        "Nothing was run or logged."
    )


def _set_names(canonical: str) -> list[str]:
    """The setting names of the engine's canonical `SET a = 1, b = 'x'`."""
    tokens = tokenize(canonical)
    names: list[str] = []
    depth = 0
    for i, tok in enumerate(tokens):
        depth += {"(": 1, ")": -1}.get(tok.text, 0)
        after = tokens[i - 1].text if i else ""
        named = tok.kind == "ident" and i + 1 < len(tokens) and tokens[i + 1].text == "="
        if depth == 0 and named and after in ("SET", ","):
            names.append(tok.word)
    return names


def check_kept(canonical: str) -> None:
    """`ClassificationRefused` for a write whose effect a checkpoint cannot
    carry (`canonical`: the gate's text of it, `reading.engine_text`): an
    UNDROP, or an ALTER that detaches a partition or a part. A live write
    only: a committed line that does it still replays, as it did (an object
    written before, or by chdb.durable).

    * UNDROP TABLE brings back a table from the engine's dropped tables,
      which no checkpoint carries (BACKUP takes the live tables): after a
      checkpoint between the DROP and the UNDROP, replaying the UNDROP from
      that base fails, and the object would never open again.
    * DETACH PARTITION|PART moves rows to the table's `detached` folder,
      which no checkpoint carries (BACKUP takes a table's active parts):
      after a checkpoint a replica would not have them, and a later ATTACH
      would fail there."""
    head = tokenize_head(canonical)
    first = head[0].word if head else ""
    # an INSERT's names are in its head (what it reads, `writes.check` has
    # resolved); its rows are never lexed here
    tokens = head if first == "insert" else tokenize(canonical)
    _check_names(tokens, defining=first in ("create", "attach", "replace"))
    if first == "undrop":
        raise ClassificationRefused(
            "UNDROP TABLE brings a table back from the engine's dropped tables, which no "
            "checkpoint carries (a BACKUP takes the live tables): replayed from a base taken "
            "after the DROP, it would fail, and the object would not open again. To keep a "
            "table's rows, RENAME it aside (or EXCHANGE TABLES) instead of dropping it; a "
            "table dropped is gone. Nothing was run or logged."
        )
    if first != "alter":
        return
    target = alter_target(tokens)
    if target is None or _glued(tokens, target[2]):
        # a shape not known here, or a name our lexer splits where the
        # engine reads one (`1t`, `0xAt`: a number glued to letters): the
        # words side by side anywhere
        _refuse_detaching(tokens, range(len(tokens)))
        return
    # Where each command begins: after the table's name, and after each
    # comma between commands; a command may stand in parentheses (the
    # engine prints them so when a comment came before it). Only there are
    # DETACH PARTITION|PART the command: elsewhere the words may be names
    # (an index `detach` on a column `part`, an alias in a subquery).
    command = target[2]
    begins = [command, *(i + 1 for i, tok in depth_zero(tokens, command) if tok.text == ",")]
    for n, begin in enumerate(begins):
        while begin < len(tokens) and tokens[begin].text == "(":
            begin += 1
        begins[n] = begin
    _refuse_detaching(tokens, begins)


def _check_names(tokens: list[Token], *, defining: bool) -> None:
    """`ClassificationRefused` for a name no checkpoint carries, or none
    that replays: one holding a backtick, a backslash or a control character
    (the engine writes it escaped in the definition a base carries, which a
    restored base's check refuses: after a checkpoint the object would not
    open); a materialized view's inner table by name (`.inner_id.<uuid>`: a
    replay makes another uuid); a definition's own UUID (the process's
    engine shares UUIDs: a replica in the same process could not make it)."""
    for i, tok in enumerate(tokens):
        uuid = defining and tok.kind == "ident" and tok.word == "uuid"
        if uuid and i + 1 < len(tokens) and tokens[i + 1].kind == "string":
            raise ClassificationRefused(
                "a definition's own UUID '...' names its files in the process's engine, "
                "which every object and replica in the process shares: a replica here "
                "could not make it again. Leave it out (the engine picks one). Nothing "
                "was run or logged."
            )
        if tok.kind != "quoted":
            continue
        if "\\" in tok.text or _ESCAPED.search(tok.name):
            raise ClassificationRefused(
                f"the name {tok.text[:60]!r} holds a backtick, a backslash or a control "
                "character, which the engine writes escaped in the definition a checkpoint "
                "carries, and a restored base with an escaped name is refused: the object "
                "would not open after a checkpoint. Choose a name without them. Nothing was "
                "run or logged."
            )
        if tok.name.startswith(INNER):
            raise ClassificationRefused(inner_refused(tok.name))


#: The object's definitions holding a backslash anywhere (rare: an escape
#: in a string, or a name the engine printed escaped).
_WITH_BACKSLASH = (
    "SELECT name, create_table_query FROM system.tables WHERE database = {db:String} "
    "AND position(create_table_query, '\\\\') > 0 "
    "SETTINGS max_result_rows = 0, max_result_bytes = 0, result_overflow_mode = 'throw'"
)
#: First words of a statement that may name a table or a column.
DEFINING = frozenset({"create", "attach", "replace", "alter", "rename", "exchange"})


def escaped_names(engine: Engine) -> ClassificationRefused | None:
    """After a statement that defines (`DEFINING`) ran: the refusal to give
    when a definition now holds a quoted name with a backslash, which a
    restored base's check refuses (`isolation.Scope.localize`): a name the
    engine printed escaped that no token of the statement showed (a view's
    column named by its expression, `concat(s, '\\n')`; a tuple's element
    named in a CAST's type string). The next open of its base would fail."""
    for table, create in engine.json_rows(_WITH_BACKSLASH, {"db": engine.database}):
        if any(t.kind == "quoted" and "\\" in t.text for t in tokenize(str(create))):
            return ClassificationRefused(
                f"the statement leaves table {str(table)[:60]!r} with a name holding a "
                "backtick, a backslash or a control character (a column named by its "
                "expression takes the expression's text; a type names its elements), "
                "which the engine writes escaped in the definition a checkpoint carries, "
                "and a restored base with an escaped name is refused: the object would "
                "not open after a checkpoint. Name it with AS and a plain name"
            )
    return None


#: What the engine writes escaped in a name (`a\`b`, `a\tb`).
_ESCAPED = re.compile(r"[`\\\x00-\x1f\x7f]")
#: The start of a materialized view's inner table's name.
INNER = ".inner_id."


def inner_refused(name: str) -> str:
    """Why a write may not name `name`, a materialized view's inner table."""
    return (
        f"{name[:60]} is a materialized view's inner table, whose name holds a UUID "
        "the engine picks anew on every replay, so a logged statement naming it would "
        "fail there and the object would not open. Name the materialized view instead "
        "(INSERT INTO mv, SELECT ... FROM mv). Nothing was run or logged."
    )


def _glued(tokens: list[Token], end: int) -> bool:
    """Does the ALTER's head, up to its first command (`end`), hold a number,
    or a token that starts where the one before it ended with no space (our
    lexer split what the engine may read as one name)?"""
    head = tokens[: min(end + 1, len(tokens))]
    return any(t.kind == "number" for t in head) or any(
        b.start == a.end and a.kind in ("ident", "number") and b.kind in ("ident", "number")
        for a, b in itertools.pairwise(head)
    )


def _refuse_detaching(tokens: list[Token], begins: Iterable[int]) -> None:
    """`ClassificationRefused` if DETACH PARTITION|PART begins at one of `begins`."""
    for begin in begins:
        if begin + 1 >= len(tokens):
            continue
        tok, nxt = tokens[begin], tokens[begin + 1]
        detaching = tok.word == "detach" and nxt.word in ("partition", "part")
        if tok.kind == nxt.kind == "ident" and detaching:
            raise ClassificationRefused(
                f"ALTER ... DETACH {nxt.word.upper()} moves rows into the table's detached "
                "folder, which no checkpoint carries (a BACKUP takes a table's active "
                "parts): after the next checkpoint a replica would not have them. Use "
                "ALTER TABLE ... DROP PARTITION to remove rows, or MOVE PARTITION ... TO "
                "TABLE another of the object's tables to set them aside. Nothing was run "
                "or logged."
            )
