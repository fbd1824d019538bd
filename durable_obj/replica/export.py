"""Export: every table of an object's local copy as files on any fsspec
location, for ClickHouse, DuckDB or Spark to read many objects at once."""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from durable_obj.errors import BackendError, InvalidArgument
from durable_obj.gate.quoting import quote_string

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.replica.engine import Engine

log = logging.getLogger("durable_obj")

#: export format -> (engine output format, file extension)
EXPORT_FORMATS = {
    "parquet": ("Parquet", "parquet"),
    "csv": ("CSVWithNames", "csv"),
    "jsonl": ("JSONEachRow", "jsonl"),
}


def list_tables(engine: Engine, db: str) -> list[str]:
    """The tables and dictionaries of `db` by name (views and the inner
    tables of materialized views excluded)."""
    rows = engine.json_rows(
        "SELECT name FROM system.tables WHERE database = {db:String} AND "
        "engine NOT IN ('View', 'MaterializedView') AND NOT startsWith(name, '.inner') "
        "ORDER BY name",
        {"db": db},
    )
    return [str(row[0]) for row in rows]


def check_format(format: str) -> tuple[str, str]:
    """(engine output format, file extension) of an export format name."""
    kind = EXPORT_FORMATS.get(format.lower())
    if kind is None:
        raise InvalidArgument(
            f"unknown export format {format!r}; use one of {sorted(EXPORT_FORMATS)}"
        )
    return kind


def export_tables(
    engine: Engine,
    db: str,
    *,
    to: str,
    format: str,
    work: str,
    storage_options: dict[str, Any] | None = None,
    callback: Callback | None = None,
) -> list[str]:
    """Write every table of `db` to `to/<table>.<ext>`; the URLs written.
    Each file is written to `work` first, then streamed."""
    import fsspec

    engine_format, ext = check_format(format)
    written = []
    fs, root = fsspec.core.url_to_fs(to, **(storage_options or {}))
    for table in list_tables(engine, db):
        local = os.path.join(work, f"export-{uuid.uuid4().hex}.{ext}")
        engine.run_params(
            "SELECT * FROM {db:Identifier}.{t:Identifier} INTO OUTFILE "
            f"{quote_string(local)} FORMAT {engine_format}",
            {"db": db, "t": table},
        )
        target = f"{root.rstrip('/')}/{table}.{ext}"
        try:
            fs.makedirs(root, exist_ok=True)
            if callback is not None:
                fs.put_file(local, target, callback=callback)
            else:
                fs.put_file(local, target)
        except OSError as exc:
            raise BackendError(
                f"exporting {table} to {to} failed: {exc.strerror or type(exc).__name__}"
            ) from exc
        finally:
            os.unlink(local)
        written.append(fs.unstrip_protocol(target))
    return written
