"""Export: every table of an object's local copy as files on any fsspec
location, for ClickHouse, DuckDB or Spark to read many objects at once.

File names. Table names are chosen by whoever wrote the object's statements
(a table may be named `../../x`), so each becomes exactly one path segment
(`export_file_name`), `<stem>.<ext>`:

* a plain name (only `A-Z a-z 0-9 _ . -`, not starting with `.`) is its own
  stem: table `events` -> `events.parquet`;
* any other name is percent-encoded: its UTF-8 bytes outside
  `A-Z a-z 0-9 _ . -`, and a leading `.`, become `%XX` (upper-case hex):
  `a/b` -> `a%2Fb`, `../x` -> `%2E.%2Fx`, `%41` -> `%2541`, `ü` -> `%C3%BC`.

A plain stem has no `%` and an encoded one has at least one, so two tables
never share a file, and `urllib.parse.unquote(stem)` gives the table back.
(On a case-insensitive filesystem, tables `A` and `a` still share one.)
Every target is also checked, normalized, to be a direct child of the
destination before anything is written.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
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


#: a table name that is its own file stem
_PLAIN = re.compile(r"[A-Za-z0-9_.-]+")
#: the bytes an encoded stem keeps as they are (except a leading ".")
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def export_stem(table: str) -> str:
    """`table` as one safe path segment (see the module docstring): a plain
    name as it is, any other percent-encoded; never two tables the same."""
    if not table:
        raise InvalidArgument("cannot export a table with an empty name")
    if _PLAIN.fullmatch(table) and not table.startswith("."):
        return table
    return "".join(
        chr(b) if b in _KEPT and not (i == 0 and b == ord(".")) else f"%{b:02X}"
        for i, b in enumerate(table.encode("utf-8"))
    )


def export_file_name(table: str, ext: str) -> str:
    """The file name `table` is exported to: `<export_stem(table)>.<ext>`."""
    return f"{export_stem(table)}.{ext}"


def export_target(root: str, table: str, ext: str) -> str:
    """The path under the destination's fsspec path `root` that `table` is
    exported to; refused unless it is, normalized, a direct child of `root`."""
    name = export_file_name(table, ext)
    base = root.rstrip("/")
    target = f"{base}/{name}"
    parent = posixpath.normpath(base) if base else "/"
    normal = posixpath.normpath(target)
    if (
        "/" in name
        or "\\" in name
        or name in (".", "..")
        or posixpath.basename(normal) != name
        or posixpath.dirname(normal) != (parent if parent != "." else "")
    ):
        raise InvalidArgument(f"table {table!r} would be exported outside {root!r}")
    return target


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
    """Write every table of `db` to `to/<stem>.<ext>`; the URLs written.
    The stem is the table's name if plain, else percent-encoded, one path
    segment either way (`export_stem`, the module docstring); every target
    is checked to lie directly under `to` before anything is written. Each
    file is written to `work` first, then streamed."""
    import fsspec

    engine_format, ext = check_format(format)
    written = []
    fs, root = fsspec.core.url_to_fs(to, **(storage_options or {}))
    targets = [(table, export_target(root, table, ext)) for table in list_tables(engine, db)]
    for table, target in targets:
        local = os.path.join(work, f"export-{uuid.uuid4().hex}.{ext}")
        engine.run_params(
            "SELECT * FROM {db:Identifier}.{t:Identifier} INTO OUTFILE "
            f"{quote_string(local)} FORMAT {engine_format}",
            {"db": db, "t": table},
        )
        try:
            fs.makedirs(root, exist_ok=True)
            if callback is not None:
                fs.put_file(local, target, callback=callback)
            else:
                fs.put_file(local, target)
        except OSError as exc:
            raise BackendError(
                f"exporting {table!r} to {to} failed: {exc.strerror or type(exc).__name__}"
            ) from exc
        finally:
            os.unlink(local)
        written.append(fs.unstrip_protocol(target))
    return written
