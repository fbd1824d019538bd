"""The statement gate, in one straight line.

Every statement an object is given passes here before the engine runs it,
in this order, each step reading the text the previous one vouched for:

read (`Gate.read`), for query() and every read:
  1. `reading.engine_text`: the engine's reading (plain text, or the engine's
     canonical text; anything else refused); this text is what runs;
  2. `reach.check`: allow-lists of engines, sources, settings; functions and
     table functions that reach outside refused (a read's opt-in aside);
  3. `isolation.Scope.localize`: names mapped to the object's database,
     anything qualified by another refused;
  4. `classify.check_read` on chdb-core's analysis: one read-only statement;
  5. `Engine.query_tree`: what the engine resolved (`EXPLAIN QUERY TREE`):
     every table the object's, every function on the allow-list.

mutation (`Gate.mutation`), for execute() and every write:
  1. the engine's reading, as above; this text is what runs and is logged;
  2. isolation (`localize`); a refusal there still reports V1's category
     first (a secret, a control statement), as chdb.durable would;
  3. `classify.check_mutation` in V1's order (the CONTROL forms that replay
     the same, `control.admitted`, judged as writes); then `reach.check`,
     whatever flag is set;
  4. `writes.check`: every query inside the write (INSERT ... SELECT,
     CREATE ... AS SELECT, subqueries, VALUES expressions) resolved by the
     engine and held to the read's allow-list;
  5. `determinism.Pinner.prepare`: pinned or refused
     (`allow_nondeterministic` lifts this step only).
  A long INSERT ... VALUES first gets the settings under which the engine
  reads its rows as literals only (`reading.with_literal_rows`): every step
  then reads its head, and the rows are data (`reading.unread`). A row the
  engine will not read so fails the run, and it runs again the usual way
  (`unread_rows=False`).

committed (`committed`), for every WAL line on replay: steps 1-4 of a
mutation. A line `execute()` would refuse is refused (replay reports it as
`Corrupt`); determinism is not judged again (a V1 writer logs unpinned
lines, and `allow_nondeterministic` lines replay as logged).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused
from durable_obj.gate import reach, writes
from durable_obj.gate.bounds import unstoppable
from durable_obj.gate.classify import check_mutation, check_read
from durable_obj.gate.control import admitted, check_kept
from durable_obj.gate.determinism import Pinner
from durable_obj.gate.known import fires_views
from durable_obj.gate.reading import engine_text, unread, with_literal_rows
from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import tokenize, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: First words of a statement that defines what later statements run.
_DEFINING = frozenset({"create", "alter", "attach", "replace"})


def inner_query(local: str) -> str | None:
    """The query a read resolves: the read itself (a SELECT, a WITH, a
    parenthesized query), or the query inside another kind of read, to its
    end (`EXPLAIN [kind] [settings] SELECT ...`, `DESCRIBE (SELECT ...)`);
    None if it holds none (`SHOW TABLES`, `DESCRIBE t`)."""
    if local.lstrip().startswith("("):
        return local
    tokens = tokenize(local)
    depth = 0
    for i, tok in enumerate(tokens):
        if depth == 0:
            at = i
            while at < len(tokens) and tokens[at].text == "(":
                at += 1  # `(SELECT ...)`, `((SELECT ...))`
            named = tokens[at] if at < len(tokens) else None
            if named is not None and named.kind == "ident" and named.word in ("select", "with"):
                return local if i == 0 else local[tok.start :]
        if tok.text in ("(", "["):
            depth += 1
        elif tok.text in (")", "]"):
            depth -= 1
    return None


def first_word(text: str) -> str:
    head = tokenize_head(text)
    return head[0].word if head else ""


#: How many reads that passed an object keeps, and the longest text kept,
#: as given and as it runs (an agent's recalls are a few short texts; a
#: long one is checked again).
READS_KEPT = 32
READ_KEPT_CHARS = 4096

#: First words of a statement meant as a query.
_QUERY_WORDS = frozenset({"select", "with", "show", "describe", "desc", "exists", "explain"})


@dataclass
class Gate:
    """The gate of one object: its URL (for warnings) and what its reads
    may reach outside (`Options.external_reads`)."""

    url: str
    external: tuple[str, ...] = ()
    #: Whether the object runs statements under a time bound (its
    #: `query_bounds` or `write_bounds`): then no definition may call a
    #: function a bound cannot stop (a view, a DEFAULT or a materialized
    #: view would run it under the bound later).
    bounded: bool = False

    def read(self, engine: Engine, sql: str, db: str) -> tuple[str, bool]:
        """`sql` as it runs, once it is proved one read-only statement that
        reads only this object's database (anything else is refused unrun),
        and whether the engine's messages about it must be withheld (it
        carries a credential). A text that passed is kept
        (`known.Known.reads`) until the catalog may change."""
        key = (sql, db, self.external)
        kept = engine.known.reads.get(key)
        if kept is not None:
            return kept
        local, secret, resolved = self._read(engine, sql, db)
        # Never with an opt-in to outside reads: whether file() stays in its
        # folder depends on the files (a link made since), not the catalog.
        # Never a text carrying a credential: nothing keeps it past its call.
        kept_ok = not self.external and not secret
        if resolved and kept_ok and max(len(sql), len(local)) <= READ_KEPT_CHARS:
            reads = engine.known.reads
            if len(reads) >= READS_KEPT:
                del reads[next(iter(reads))]  # the oldest
            reads[key] = (local, secret)
        return local, secret

    def _read(self, engine: Engine, sql: str, db: str) -> tuple[str, bool, bool]:
        """`read`'s checks, and whether all of them ran. A query whose tree
        the engine does not print is not run: the engine's error is raised
        (before, such a read was let through to fail as it ran; a query that
        analyses as it runs but not under EXPLAIN, found by attack, then ran
        unchecked). So is the query inside an EXPLAIN or a DESCRIBE: the
        engine folds its constants as it plans, and prints them."""
        text = engine_text(engine, sql)
        reach.check(engine, text, self.external)  # before anything resolves a table function
        files = any(w.startswith("/") for w in self.external)
        local = engine.localize(text, frozenset({"file"}) if files else frozenset())
        analysis = engine.analyze(local, db)
        syntax = engine.syntax_error(text) if analysis.query_class == "UNKNOWN" else ""
        check_read(analysis, syntax)
        query = inner_query(local)
        if query is not None:
            tree = engine.query_tree(query, strict=True, redact=analysis.has_secrets)
            assert tree is not None
            self._check_resolved(engine, tree)
        return local, analysis.has_secrets, True

    def _check_resolved(self, engine: Engine, tree: str) -> None:
        """What the engine resolved: every table the object's own (or an
        allowed system table), every table function pure or opted in, every
        function on the allow-list."""
        allowed = {reach.EXTERNAL_FUNCTIONS[w] for w in ("url", "s3") if w in self.external}
        if any(w.startswith("/") for w in self.external):
            allowed.add("file")
        writes.resolved(engine, tree, frozenset(allowed))

    def mutation(
        self,
        engine: Engine,
        sql: str,
        db: str,
        pinner: Pinner | None,
        *,
        allow_nondeterministic: bool,
        unread_rows: bool = True,
    ) -> str:
        """The text of a mutation to run and log (naming the logical
        database, as logged; `LocalCopy.run_logged` localizes it)."""
        literal = None
        if unread_rows and pinner is not None and not allow_nondeterministic:
            literal = with_literal_rows(sql, pinner.timezone)
        if literal is not None and _keeps_rows(engine, pinner, literal, db):
            literal = None
        if literal is not None:
            text = self.mutation(
                engine, literal, db, pinner, allow_nondeterministic=False, unread_rows=False
            )
            found = unread(text)
            if found is not None and found[1] == literal[len(literal) - len(found[1]) :]:
                return text
            # the pinner wrote into the rows (an omitted column's values): the usual way
        text = engine_text(engine, sql)
        try:
            local = engine.localize(text)
        except ClassificationRefused:
            # What the statement is, and whether it reads outside, are judged
            # first (and keep their categories); then it is refused here.
            self._check_alone(engine, text, db, pinner if not allow_nondeterministic else None)
            raise
        analysis = admitted(engine, local, engine.analyze(local, db))  # DETACH, ATTACH: control.py
        syntax = engine.syntax_error(text) if analysis.query_class == "UNKNOWN" else ""
        if analysis.query_class == "READ_ONLY" and not analysis.has_secrets:
            first = next((t.word for t in tokenize_head(local) if t.kind == "ident"), "")
            if first not in _QUERY_WORDS and not local.lstrip().startswith("("):
                # An implicit SELECT, most likely a mistyped mutation: `DELETE
                # t WHERE ...` (no FROM) reads as `SELECT DELETE AS t WHERE
                # ...`. When it would not run either, the engine's own error
                # says more than "use query()".
                reach.check(engine, text)  # before the engine resolves it
                engine.check_implicit_select(local)
        check_mutation(analysis, db, syntax)  # V1's categories first (a secret, ...)
        reach.check(engine, text)
        check_kept(text)  # a live write only: a committed line replays as it did
        if self.bounded and first_word(text) in _DEFINING and (name := unstoppable(text)):
            raise ClassificationRefused(
                f"{name}() in a definition of an object that runs under a time bound: a view, "
                "a column DEFAULT or a materialized view calling it would spend one call past "
                "the bound when read or inserted into (the engine cannot stop it midway). "
                "Instead, compute it in the caller. Nothing was run or logged."
            )
        writes.check(engine, local)
        if allow_nondeterministic:
            warnings.warn(
                f"{self.url}: logging a statement unchecked for determinism; replicas "
                "may replay it to other values",
                RuntimeWarning,
                stacklevel=4,
            )
            return text
        assert pinner is not None
        return pinner.prepare(text, db)

    @staticmethod
    def _check_alone(engine: Engine, sql: str, db: str, pinner: Pinner | None) -> None:
        analysis = engine.analyze(sql, db)
        syntax = engine.syntax_error(sql) if analysis.query_class == "UNKNOWN" else ""
        check_mutation(analysis, db, syntax)
        reach.check(engine, sql)
        if pinner is not None:
            pinner.refuse_outside_reads(sql)


def _keeps_rows(engine: Engine, pinner: Pinner | None, sql: str, db: str) -> bool:
    """Whether the long INSERT `sql` must have its rows read by the gate:
    its table runs a view (whose failure would leave the rows in, so a
    refused expression could not be run again), or leaves a column to a
    non-deterministic DEFAULT (the keyword DEFAULT in a row, a column the
    pinner writes into each row)."""
    shape = insert_shape(tokenize_head(sql))
    if shape is None or pinner is None or fires_views(engine, shape.database, shape.table):
        return True
    return not pinner.leaves_rows(shape, db)


def committed(engine: Engine, sql: str, db: str) -> str:
    """The text of a committed WAL line to replay (naming the logical
    database, as logged), once it passes the mutation gate but determinism:
    the engine's reading, isolation, classification (one statement that
    changes only the object's database: never SET, SYSTEM, KILL, CREATE
    FUNCTION, a named collection or a grant), reach and the queries inside
    it. Anyone who can write to the store can write a segment with a valid
    digest, so a line is untrusted input like any statement."""
    text = engine_text(engine, sql)
    local = engine.localize(text)
    analysis = admitted(engine, local, engine.analyze(local, db))  # DETACH, ATTACH
    syntax = engine.syntax_error(text) if analysis.query_class == "UNKNOWN" else ""
    check_mutation(analysis, db, syntax)
    reach.check(engine, text)
    writes.check(engine, local)
    return text
