"""Commands that change nothing: ls, info, verify, sql."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from durable_obj import Namespace
from durable_obj.cli import formatting as fmt
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure
from durable_obj.cli.history import at_option, parse_at
from durable_obj.cli.keys import key_options
from durable_obj.cli.progress import progress_bar
from durable_obj.cli.session import query_params, session, storage_options
from durable_obj.core import ops


@cli.command("ls")
@click.argument("ns_url")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object each.")
@click.option(
    "--heads-only",
    is_flag=True,
    help="Read each object's head only (half the requests): no stored size or last write.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="List the folders and read every head instead of the catalog (the truth, not a hint).",
)
@storage_options
def ls_cmd(
    ns_url: str, as_json: bool, heads_only: bool, verify: bool, storage_options: dict[str, Any]
) -> None:
    """List the objects of a namespace: from its catalog in one read (each row as
    of its writer's last open, close or checkpoint: no stored size, and a lease
    expiry as last written), or, with --verify or no catalog, from a listing and
    every head.

    A local folder that is not there is an error, not_found. A bucket or
    container that does not exist is an error of the store, backend, as
    `open()` reports it (the message names the bucket and the endpoint). An
    existing folder, or a prefix in an existing bucket, with no objects is an
    empty namespace: nothing listed, exit 0.
    """
    ns = Namespace(ns_url, storage_options=storage_options)
    missing = ops.missing_namespace(ns.store)
    if missing is not None:
        raise Failure("not_found", f"{missing}: no namespace to list; nothing was read")
    infos = ns.list(stored=not heads_only, verify=verify or heads_only)
    sess = session()
    if as_json:
        sess.echo(json.dumps([fmt.object_json(info) for info in infos], indent=2))
        return
    if not infos:
        sess.echo(f"no durable objects in {ns.url}", err=True)
        return
    sess.stdout().print(fmt.objects_table(infos))


@cli.command("info")
@click.argument("object_url")
@click.option("--json", "as_json", is_flag=True, help="Print the stored head.json instead.")
@storage_options
def info_cmd(object_url: str, as_json: bool, storage_options: dict[str, Any]) -> None:
    """Show an object's head: protocol, engine, lease, manifest, sizes."""
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(namespace, storage_options=storage_options)
    if as_json:
        # The stored document as is, not validated: it also shows a corrupt head.
        doc = ops.head_document(ns.store, oid)
        session().echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    session().echo(fmt.info_text(ns.info(oid), ns.url))


@cli.command("verify")
@click.argument("object_url")
@click.option("--restore", is_flag=True, help="Also restore and replay it; count rows per table.")
@key_options
@storage_options
def verify_cmd(
    object_url: str, restore: bool, encryption: Any, storage_options: dict[str, Any]
) -> None:
    """Download every key the head references and check its size and SHA-256.

    An encrypted object's --restore needs its key (--key-env, --key-file or --kms-key)."""
    namespace, oid = parse_object_url(object_url)
    with progress_bar("verify") as bar:
        ns = Namespace(
            namespace, storage_options=storage_options, progress=bar, encryption=encryption
        )
        report = ns.verify(oid, restore=restore)
    sess = session()
    tags = {True: "; every sealed chunk's tag checks", None: ""}.get(
        report.tags_checked,
        "; encrypted: its tags were not checked (give its key with --key-env, --key-file or "
        "--kms-key to check them)",
    )
    sess.echo(
        f"ok: {oid}: {len(report.checked)} key(s), {fmt.human_size(report.checked_bytes)}, "
        f"every size and SHA-256 matches the head{tags}"
    )
    if report.rows is not None:
        if not report.rows:
            sess.echo("restored and replayed: the object has no tables")
            return
        sess.echo("restored and replayed; rows per table:")
        table = Table()
        table.add_column("table", overflow="fold")
        table.add_column("rows", justify="right")
        for name, rows in report.rows.items():
            table.add_row(name, str(rows))
        sess.stdout().print(table)


@cli.command("sql")
@click.argument("object_url")
@click.argument("query")
@click.option(
    "--format",
    "fmt_name",
    metavar="FMT",
    help="Print the engine's raw output in this format (CSV, TSV, JSONEachRow, ...).",
)
@query_params
@at_option
@key_options
@storage_options
def sql_cmd(
    object_url: str,
    query: str,
    fmt_name: str | None,
    params: dict[str, str],
    at: str | None,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Run one read-only query on the last flushed state (or, with --at, on a
    past one: see `durable-obj history`).

    Takes no lease. To change data use `durable-obj exec`. Values for
    `{name:Type}` placeholders go in with `-p name=value`. An encrypted
    object needs its key: --key-env, --key-file or --kms-key."""
    namespace, oid = parse_object_url(object_url)
    past = parse_at(at)
    ns = Namespace(namespace, storage_options=storage_options, encryption=encryption)
    with ns.open(oid, read_only=True, at=past) as obj:
        result = obj.query(query, fmt_name or "JSONCompact", params=params or None)
    sess = session()
    if fmt_name:
        sess.echo(str(result), nl=False)
        return
    try:
        doc = json.loads(str(result))
        columns = [str(c["name"]) for c in doc["meta"]]
        rows: list[list[Any]] = list(doc["data"])
    except (ValueError, KeyError, TypeError) as exc:
        raise Failure("engine", f"unexpected JSONCompact output from the engine ({exc})") from None
    sess.stdout().print(fmt.rows_table(columns, rows))
    sess.echo(f"{len(rows)} row(s)")
