"""The export command: every table of one object as files, or one table of
every object of a namespace as one file with an object-id column.

Both refuse to replace an existing file unless `--overwrite` (checked before
anything is written; not atomic against another writer of the destination).
Built on the public API: `Namespace.open(read_only=True)`, `tables()`,
`query()` and `export()`.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from typing import Any

import click

from durable_obj import DurableObject, Namespace
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure
from durable_obj.cli.keys import key_options
from durable_obj.cli.progress import progress_bar
from durable_obj.cli.session import session, storage_options, to_options
from durable_obj.core import ops
from durable_obj.service.namespace import check_oid

#: namespace export: format -> (engine format of the first object, of the others)
_TEXT_FORMATS = {"csv": ("CSVWithNames", "CSV"), "jsonl": ("JSONEachRow", "JSONEachRow")}


def _ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _destination(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """(fsspec filesystem, path) of a destination URL."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except (ValueError, TypeError, ImportError) as exc:
        raise Failure(
            "invalid_argument", f"cannot write to {url} ({type(exc).__name__}: {exc})", 2
        ) from None
    return fs, path


def _refuse_existing(fs: Any, paths: list[str]) -> None:
    try:
        there = [p for p in paths if fs.exists(p)]
    except OSError as exc:
        raise Failure("backend", f"cannot check the destination: {exc}") from None
    if there:
        names = ", ".join(fs.unstrip_protocol(p) for p in there)
        raise Failure(
            "invalid_argument",
            f"{names} already exist(s); nothing was written. Pass --overwrite to replace.",
            2,
        )


@cli.command("export")
@click.argument("object_url")
@click.argument("dest_url")
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(ops.export_formats(), case_sensitive=False),
    default="parquet",
    show_default=True,
)
@click.option(
    "--all",
    "table",
    metavar="TABLE",
    help="OBJECT_URL is a namespace: write TABLE of every object in it to the one file "
    "DEST_URL, with an object-id column first.",
)
@click.option(
    "--id",
    "ids",
    multiple=True,
    metavar="OID",
    help="With --all: only this object (repeatable; default: every object).",
)
@click.option(
    "--id-column",
    default="object_id",
    show_default=True,
    metavar="NAME",
    help="With --all: the name of the object-id column.",
)
@click.option("--overwrite", is_flag=True, help="Replace files that already exist.")
@to_options("DEST_URL")
@key_options
@storage_options
def export_cmd(
    object_url: str,
    dest_url: str,
    fmt_name: str,
    table: str | None,
    ids: tuple[str, ...],
    id_column: str,
    overwrite: bool,
    to_options: dict[str, Any],
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Write each table to DEST_URL/<table>.<parquet|csv|jsonl>.

    A table name other than plain letters, digits, `_`, `.` and `-` (or one
    starting with `.`) is percent-encoded into one file name (`a/b` ->
    `a%2Fb.parquet`), so every file lands directly in DEST_URL.

    With --all TABLE, OBJECT_URL is a namespace URL and DEST_URL one file:
    TABLE of every object (or of each --id) in one Parquet, CSV or JSON-lines
    file, its first column the object id, for analysing many agents at once.
    Objects without TABLE are skipped (and named on stderr); every exported
    TABLE must have the same columns and types (else: schema_mismatch).

    An existing file is refused unless --overwrite. An encrypted object is
    read with its key (--key-env, --key-file or --kms-key; with --all, every
    encrypted object must be under that key); the files written are plain.
    """
    fmt_name = fmt_name.lower()
    source = object_url if table is not None else parse_object_url(object_url)[0]
    if not to_options and ops.url_protocol(dest_url) == ops.url_protocol(source):
        to_options = storage_options
    if table is None:
        if ids or id_column != "object_id":
            raise Failure("invalid_argument", "--id and --id-column go with --all TABLE", 2)
        _export_object(
            object_url, dest_url, fmt_name, overwrite, to_options, storage_options, encryption
        )
    else:
        _export_namespace(
            object_url,
            table,
            dest_url,
            fmt_name,
            ids=list(ids),
            id_column=id_column,
            overwrite=overwrite,
            to_options=to_options,
            storage_options=storage_options,
            encryption=encryption,
        )


def _export_object(
    object_url: str,
    dest_url: str,
    fmt_name: str,
    overwrite: bool,
    to_options: dict[str, Any],
    storage_options: dict[str, Any],
    encryption: Any,
) -> None:
    namespace, oid = parse_object_url(object_url)
    with progress_bar("export") as bar:
        ns = Namespace(
            namespace, storage_options=storage_options, progress=bar, encryption=encryption
        )
        with ns.open(oid, read_only=True) as obj:
            if not overwrite:
                fs, root = _destination(dest_url, to_options)
                # export()'s own file names (a table's name, percent-encoded
                # unless plain), each checked to lie directly under root.
                targets = [ops.export_path(root, t, fmt_name) for t in obj.tables()]
                _refuse_existing(fs, targets)
            written = obj.export(
                dest_url, format=fmt_name, storage_options=to_options, callback=bar
            )
    sess = session()
    for url in written:
        sess.echo(url)
    sess.echo(f"exported {len(written)} table(s) of {oid}", err=True)


def _export_namespace(
    ns_url: str,
    table: str,
    dest_url: str,
    fmt_name: str,
    *,
    ids: list[str],
    id_column: str,
    overwrite: bool,
    to_options: dict[str, Any],
    storage_options: dict[str, Any],
    encryption: Any,
) -> None:
    for oid in ids:
        check_oid(oid)
    if not id_column:
        raise Failure("invalid_argument", "--id-column must not be empty", 2)
    fs, path = _destination(dest_url, to_options)
    if not overwrite:
        _refuse_existing(fs, [path])
    sess = session()
    with progress_bar("export") as bar:
        ns = Namespace(ns_url, storage_options=storage_options, progress=bar, encryption=encryption)
        missing = ops.missing_namespace(ns.store)
        if missing is not None:
            raise Failure("not_found", f"{missing}: no namespace to export from")
        targets = ids or [info.oid for info in ns.list(stored=False, verify=True)]
        with tempfile.TemporaryDirectory(prefix="durable_obj-export-") as work:
            local = os.path.join(work, f"out.{fmt_name}")
            parts: _Parts = (
                _ParquetParts(local, id_column, work)
                if fmt_name == "parquet"
                else _TextParts(local, id_column, _TEXT_FORMATS[fmt_name])
            )
            exported: list[str] = []
            skipped: list[str] = []
            rows = 0
            schema: list[tuple[str, str]] | None = None
            try:
                for oid in targets:
                    with ns.open(oid, read_only=True) as obj:
                        if table not in obj.tables():
                            skipped.append(oid)
                            continue
                        columns = _columns(obj, table)
                        if id_column in (name for name, _ in columns):
                            raise Failure(
                                "invalid_argument",
                                f"table {table!r} of {oid!r} has a column {id_column!r}; "
                                "name the object-id column with --id-column. "
                                "Nothing was written.",
                                2,
                            )
                        if schema is None:
                            schema = columns
                        elif columns != schema:
                            raise Failure(
                                "schema_mismatch",
                                f"table {table!r} of {oid!r} has columns {_show(columns)}, "
                                f"but that of {exported[0]!r} has {_show(schema)}; export "
                                "them separately (--id). Nothing was written.",
                            )
                        rows += int(obj.query(f"SELECT count() FROM {_ident(table)}", "TSV"))
                        parts.add(obj, oid, table)
                        exported.append(oid)
            finally:
                parts.close()
            if not exported:
                raise Failure(
                    "not_found",
                    f"no object in {ns.url} has a table {table!r}"
                    + (f" (looked in {len(targets)})" if targets else " (it has no objects)")
                    + "; nothing was written",
                )
            try:
                fs.put_file(local, path, callback=bar)
            except OSError as exc:
                raise Failure(
                    "backend",
                    f"writing {dest_url} failed: {exc.strerror or type(exc).__name__}",
                ) from None
    sess.echo(fs.unstrip_protocol(path))
    if skipped:
        sess.echo(
            f"skipped {len(skipped)} object(s) without table {table!r}: " + ", ".join(skipped),
            err=True,
        )
    sess.echo(f"exported table {table!r} of {len(exported)} object(s), {rows} row(s)", err=True)


def _show(columns: list[tuple[str, str]]) -> str:
    return "(" + ", ".join(f"{n} {t}" for n, t in columns) + ")"


def _columns(obj: DurableObject, table: str) -> list[tuple[str, str]]:
    """(name, type) of each column of `table`, in order."""
    out = obj.query(f"DESCRIBE TABLE {_ident(table)}", "TSVRaw")
    return [
        (parts[0], parts[1]) for parts in (line.split("\t") for line in out.splitlines()) if parts
    ]


class _Parts:
    """The output file, one object's table after another."""

    def add(self, obj: DurableObject, oid: str, table: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _TextParts(_Parts):
    """CSV or JSON lines, straight from the engine: the object id as a
    literal first column; CSV's header only from the first object."""

    def __init__(self, path: str, id_column: str, formats: tuple[str, str]) -> None:
        self._out = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._id_column = id_column
        self._formats = formats
        self._first = True

    def add(self, obj: DurableObject, oid: str, table: str) -> None:
        sql = f"SELECT {_literal(oid)} AS {_ident(self._id_column)}, * FROM {_ident(table)}"
        text = obj.query(sql, self._formats[0] if self._first else self._formats[1])
        self._out.write(str(text).encode("utf-8"))
        self._first = False

    def close(self) -> None:
        self._out.close()


class _ParquetParts(_Parts):
    """One Parquet file from each object's table (read back from the
    object's own Parquet export), the object id as the first column."""

    def __init__(self, path: str, id_column: str, work: str) -> None:
        self._path = path
        self._id_column = id_column
        self._work = work
        self._writer: Any = None
        self._n = 0

    def add(self, obj: DurableObject, oid: str, table: str) -> None:
        # pyarrow (a dependency of chdb) ships no type information: used as Any.
        pa = importlib.import_module("pyarrow")
        pq = importlib.import_module("pyarrow.parquet")

        folder = os.path.join(self._work, f"part-{self._n}")
        self._n += 1
        obj.export(folder, format="parquet")
        part = pq.read_table(ops.export_path(folder, table, "parquet"))
        ids = pa.array([oid] * part.num_rows, type=pa.string())
        part = part.add_column(0, pa.field(self._id_column, pa.string(), nullable=False), ids)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._path, part.schema)
        self._writer.write_table(part)
        shutil.rmtree(folder)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
