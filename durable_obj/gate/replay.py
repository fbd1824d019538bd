"""Replay a verified WAL onto the engine: strictly in order, batched where exact.

Statements are applied in manifest order, one segment after another. A run
of consecutive plain `INSERT INTO t [(cols)] [SETTINGS ...] VALUES (...)`
statements with the same text up to VALUES (text the engine reads as our
lexer does), whose rows hold literals (and the gate's pinned
`CAST('...', 'type')` literals) only, becomes one INSERT with all their
rows, when the target provably cannot tell the difference: a plain
MergeTree/Log/Memory table with no dependent views, no insert
deduplication, no partitions (one INSERT may reach only so many), no
Memory caps, no constraints and no stored block numbers. Everything else
runs one by one. (chdb.durable runs each
statement on its own: ~90 statements/s.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable_obj.errors import ClassificationRefused, Corrupt, EngineError, SecretRefused
from durable_obj.gate.pipeline import committed
from durable_obj.gate.reading import is_plain, unread
from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import code_words, is_insert, split_rows, tokenize_head
from durable_obj.gate.writes import LITERAL_WORDS

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Engines where one INSERT of rows A+B equals INSERT A then INSERT B.
BATCHABLE_ENGINES = frozenset({"MergeTree", "Log", "TinyLog", "StripeLog", "Memory"})
MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_BATCH_STATEMENTS = 10_000


def gated(engine: Engine, sql: str, db: str) -> str:
    """A committed statement through the same gate as a new one
    (`pipeline.committed`): `Refused` if `execute()` would refuse it, which
    replay reports as `Corrupt`, naming the segment and the line."""
    try:
        return committed(engine, sql, db)
    except (ClassificationRefused, SecretRefused) as exc:
        raise Refused(str(exc)) from None


class Refused(Exception):
    """A committed line the gate refuses: it is never run."""


@dataclass
class _Batch:
    prefix: str = ""
    rows: list[str] = field(default_factory=list)
    size: int = 0
    first: str = ""  # where the batch starts, for messages


class Replayer:
    """Feeds statements to the engine, merging batchable INSERT runs."""

    def __init__(self, engine: Engine, db: str) -> None:
        self._engine = engine
        self._db = db
        self._batch = _Batch()
        self._eligible: dict[tuple[str, str], bool] = {}
        self.statements = 0
        self.engine_calls = 0

    def apply(self, sql: str, where: str) -> None:
        self.statements += 1
        split = self._split(sql)
        if split is None:
            self.finish()
            self._run(sql, where)
            return
        prefix, rows = split
        batch = self._batch
        if batch.rows and (
            prefix != batch.prefix
            or batch.size > MAX_BATCH_BYTES
            or len(batch.rows) > MAX_BATCH_STATEMENTS
        ):
            self.finish()
            batch = self._batch
        if not batch.rows:
            batch.prefix, batch.first = prefix, where
        batch.rows.extend(rows)
        batch.size += sum(len(r) for r in rows)

    def finish(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if batch.rows:
            self._run(f"{batch.prefix} {', '.join(batch.rows)}", batch.first)

    def _run(self, sql: str, where: str) -> None:
        self.engine_calls += 1
        try:
            text = gated(self._engine, sql, self._db)
        except Refused as exc:
            # Valid bytes (the digest matched), but a statement execute()
            # refuses: written by hand, by a writer with a looser gate, or by
            # anyone with store access. Never run, not even in part.
            raise Corrupt(
                f"{where} is a statement the gate refuses, so it was not run; the object was "
                f"not opened, nothing was changed and no other object was touched. {exc}"
            ) from None
        # What a table is may change (`gate.known`): judged on the gated text,
        # which the engine reads as we do, never on the line as written (the
        # engine nests comments, our lexer does not). Forgotten before and
        # after, as a statement that fails may have changed it too.
        changes = not is_insert(text)
        if changes:
            self._forget()
        try:
            self._engine.replay(text)
        except EngineError as exc:
            # The segment passed its size and SHA-256 check, so these are the
            # committed bytes: a statement in them that no longer runs means
            # the committed state cannot be rebuilt (a corrupt writer, or an
            # engine that stopped accepting it). Never skipped.
            raise Corrupt(
                f"replaying {where} failed, so the committed state cannot be rebuilt by this "
                f"engine; the object was not opened and nothing was changed. {exc}"
            ) from exc
        finally:
            if changes:
                self._forget()

    def _forget(self) -> None:
        self._eligible.clear()
        self._engine.known.forget()

    def split(self, sql: str) -> tuple[str, list[str]] | None:
        """(text up to VALUES, [row texts]) of a batchable INSERT, else None,
        for a writer merging statements that have not run on their own:
        never rows the engine reads as literals only, which are joined
        unread (an open string in one would swallow the next one's rows:
        found by attack)."""
        return None if unread(sql) is not None else self._split(sql)

    def _split(self, sql: str) -> tuple[str, list[str]] | None:
        """(text up to and including VALUES, [row texts]) of a batchable INSERT.
        Only the head is lexed; the rows are delimited by `split_rows`."""
        if not is_insert(sql):
            return None
        head = tokenize_head(sql)
        shape = insert_shape(head)
        if shape is None or shape.values_at is None:
            return None
        literal = unread(sql)
        if literal is not None:
            # Rows the engine reads as literals only (no template, no code):
            # the rows of each line, whole, as one item; a list the engine
            # read on its own ends in `)`, and two such lists joined by a
            # comma are their rows.
            rows_text = literal[1].strip()
            if not rows_text.endswith(")"):
                return None
            if not self._batchable(shape.database or self._db, shape.table):
                return None
            return literal[0], [rows_text]
        prefix = sql[: head[shape.values_at].end]
        if not is_plain(prefix):
            return None  # the engine may read another table in it (nested comments)
        data = sql[len(prefix) :]
        code = code_words(data) - LITERAL_WORDS
        if code and (code != {"cast"} or "{" in data):
            # Rows with code (calls, DEFAULT, a subquery) are read through a
            # template the engine deduces from the first such row, and a row
            # the template does not fit is parsed as SQL: rows of two
            # statements merged may then no longer parse (`map(...)` then a
            # `{...}` literal, `toUUID(...)` then DEFAULT: the object would
            # not open). Rows of literals merge, and so do the pinned
            # `CAST('...', 'type')` rows the gate writes (measured: every
            # order of four such row shapes, CAST and literal, of DateTime64,
            # arrays, Nullable and map() columns, parses), but never beside
            # a `{` (a Map literal only the streaming parser reads).
            return None
        rows = split_rows(sql[len(prefix) :])
        if rows is None or not self._batchable(shape.database or self._db, shape.table):
            return None
        return prefix, rows

    def _batchable(self, db: str, table: str) -> bool:
        key = (db, table)
        if key not in self._eligible:
            known = self._engine.known.kept(self._engine, db)
            if known is not None:
                t = known.tables.get(table)
                rows: list[list[Any]] = (
                    [] if t is None else [[t.engine, t.engine_full, t.dependents, t.constrained]]
                )
            else:
                rows = self._engine.json_rows(
                    "SELECT engine, engine_full, length(dependencies_table), "
                    "position(create_table_query, 'CONSTRAINT') > 0 FROM system.tables "
                    "WHERE database = {db:String} AND name = {t:String}",
                    {"db": db, "t": table},
                )
            ok = False
            if rows:
                engine, engine_full, dependents, constrained = rows[0]
                ok = (
                    engine in BATCHABLE_ENGINES
                    and int(dependents) == 0
                    and "deduplication" not in engine_full
                    # one INSERT of many rows may reach more partitions than
                    # the engine allows in one (100: the object would not
                    # open), and a Memory table's caps (max_rows_to_keep, ...)
                    # keep the last rows of each INSERT
                    and "PARTITION BY" not in engine_full
                    and (engine != "Memory" or engine_full == "Memory")
                    # a CHECK may read the block (blockSize(), rowNumberInBlock()),
                    # and the block number and offset columns store it
                    and not constrained
                    and "enable_block_" not in engine_full
                )
            self._eligible[key] = ok
        return self._eligible[key]
