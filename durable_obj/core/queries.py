"""The reads of a durable object: one read-only statement, run locally (no
network, nothing logged), answered in the shape the caller wants.

    obj.query(sql, fmt="CSV")        text in any ClickHouse text format
    obj.query_bytes(sql, "Parquet")  bytes of a binary format (Arrow, Parquet, Native, ...)
    obj.rows(sql)                    [(1, 'a'), ...]: Python values by type (`replica.results`)
    obj.dicts(sql)                   [{'k': 1, 'v': 'a'}, ...]
    obj.arrow(sql)                   a pyarrow.Table
    obj.df(sql)                      a pandas.DataFrame

Each takes `bounds=` (else `Options.query_bounds`: the engine stops the
read past a time, a result size, a memory use; the gate's own EXPLAIN
calls for it count) and `params=`, values for the statement's `{name:Type}` placeholders
(`durable_obj.gate.params`): bound by the engine, never pasted as SQL. Every one
passes the same gates (`LocalCopy.checked_read`): a statement that is not a
single read, or reads anything outside the object, is refused unrun. All
are allowed on a fenced writer: the local copy is still exactly what this
instance restored and wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from durable_obj.core import observed
from durable_obj.core.surface import Result, Surface
from durable_obj.gate.bounds import Bounds
from durable_obj.replica.export import list_tables
from durable_obj.replica.results import ROWS_FORMAT, binary_format, decode_rows, text_format

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

Params = Mapping[str, Any] | None


class Queries(Surface):
    """The read methods of `DurableObject`."""

    @observed.refused("query")
    def query(
        self, sql: str, fmt: str = "CSV", *, params: Params = None, bounds: Bounds | None = None
    ) -> Result:
        """Run one read-only statement locally; its output as text in `fmt`
        (any ClickHouse text format: CSV, TSV, JSONEachRow, Pretty, ...).
        `params` binds `{name:Type}` placeholders. For a binary format use
        `query_bytes`, for Python values `rows`/`dicts`, for frames
        `arrow`/`df`. No network, nothing logged. `bounds` (`durable_obj.Bounds`)
        has the engine stop it past a time, a result size or a memory use; the
        statement cannot raise them. Every read method takes `bounds`, and
        runs under `Options.query_bounds` without it."""
        text_format(fmt)
        with self._lock:
            engine = self._require_open()
            with engine.bounded(self._bounds(bounds)):
                sql = self._local.bind(sql, params)
                return Result(self._local.read(engine, sql, fmt, self.db))

    @observed.refused("query")
    def query_bytes(
        self,
        sql: str,
        fmt: str = "Parquet",
        *,
        params: Params = None,
        bounds: Bounds | None = None,
    ) -> bytes:
        """`query` for a binary format (Parquet, Arrow, ArrowStream, ORC,
        Native, RowBinary, Avro, ...): the output's bytes."""
        binary_format(fmt)
        with self._lock:
            engine = self._require_open()
            with engine.bounded(self._bounds(bounds)):
                local, redact = self._checked(engine, sql, params)
                return engine.output(local, fmt, redact=redact)

    def rows(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement as tuples of Python values
        (int, float, Decimal, str, date, aware datetime, UUID, list, tuple,
        dict, None; see `durable_obj.replica.results`)."""
        return self._rows(sql, params, bounds)[1]

    def dicts(
        self, sql: str, *, params: Params = None, bounds: Bounds | None = None
    ) -> list[dict[str, Any]]:
        """`rows`, each as a dict of column name -> value."""
        names, rows = self._rows(sql, params, bounds)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def arrow(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """The answer as a `pyarrow.Table` (types as ClickHouse's Arrow output
        maps them: a DateTime is a uint32 of seconds, a DateTime64 a
        timestamp)."""
        data = self.query_bytes(sql, "Arrow", params=params, bounds=bounds)
        import pyarrow as pa  # type: ignore[import-untyped]  # on use: ~0.1 s only this needs

        return pa.ipc.open_file(pa.py_buffer(data)).read_all()

    @observed.refused("query")
    def df(self, sql: str, *, params: Params = None, bounds: Bounds | None = None) -> Any:
        """The answer as a `pandas.DataFrame`."""
        with self._lock:
            engine = self._require_open()
            with engine.bounded(self._bounds(bounds)):
                local, redact = self._checked(engine, sql, params)
                return engine.frame(local, redact=redact)

    def tables(self) -> list[str]:
        """The object's tables and dictionaries by name (views and the inner
        tables of materialized views excluded)."""
        with self._lock:
            return list_tables(self._require_open(), self.db)

    def _bounds(self, bounds: Bounds | None) -> Bounds | None:
        """A read's bounds: its own, else the object's `query_bounds`."""
        return bounds if bounds is not None else self._opts.query_bounds

    def _checked(self, engine: Engine, sql: str, params: Params) -> tuple[str, bool]:
        """`sql` bound and through the read gate (inside the read's bound:
        the gate's EXPLAIN calls plan the statement, and planning computes)."""
        return self._local.checked_read(engine, self._local.bind(sql, params), self.db)

    @observed.refused("query")
    def _rows(
        self, sql: str, params: Params, bounds: Bounds | None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        with self._lock:
            engine = self._require_open()
            with engine.bounded(self._bounds(bounds)):
                local, redact = self._checked(engine, sql, params)
                text = engine.rows_text(local, ROWS_FORMAT, redact=redact)
            if engine.database in text:  # SHOW CREATE: under the logical name
                names, rows = decode_rows(text, self._local.timezone)
                return names, [
                    tuple(engine.scope.shown(v) if isinstance(v, str) else v for v in r)
                    for r in rows
                ]
            zone = self._local.timezone
        return decode_rows(text, zone)
