"""The command that changes an object's data: exec."""

from __future__ import annotations

import logging
import socket
from typing import Any

import click

from durable_obj import DurableObject, Namespace
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure, cli_words, exit_code
from durable_obj.cli.keys import key_options
from durable_obj.cli.session import query_params, session, storage_options, writer_options
from durable_obj.errors import DurableError, NotFound
from durable_obj.gate.params import placeholders

log = logging.getLogger("durable_obj")


def default_owner() -> str:
    """The lease owner of a CLI writer: durable-obj-cli@HOST."""
    return f"durable-obj-cli@{socket.gethostname() or 'localhost'}"


def _discard(obj: DurableObject) -> None:
    """Close without flushing; a failure to release the lease is reported,
    never raised over the error that brought us here (the lease expires)."""
    try:
        obj.close(discard=True)
    except DurableError as exc:
        log.warning("%s: the lease was not released (%s); it expires on its own", obj.url, exc)


@cli.command("exec")
@click.argument("object_url")
@click.argument("statements", metavar="STATEMENT...", nargs=-1, required=True)
@writer_options
@click.option("--create", is_flag=True, help="Create the object if it does not exist.")
@click.option(
    "--full-checkpoints",
    is_flag=True,
    help="A checkpoint this takes (folding the WAL) is a full base, never an increment: "
    "for an object chdb.durable also reads.",
)
@click.option(
    "--allow-nondeterministic",
    is_flag=True,
    help="Log a statement that would replay differently as written (replicas may diverge).",
)
@query_params
@key_options
@storage_options
def exec_cmd(
    object_url: str,
    statements: tuple[str, ...],
    owner: str | None,
    force: bool,
    reclaim: bool,
    create: bool,
    full_checkpoints: bool,
    allow_nondeterministic: bool,
    params: dict[str, str],
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Run changes (INSERT, ALTER, CREATE, ...) and commit them durably.

    Opens the object as its writer, runs each STATEMENT in order (one
    statement per argument), commits them together as one WAL segment, and
    closes. All or nothing: if a statement fails, nothing of this run is
    committed. For a read-only query use `durable-obj sql`. `-p name=value`
    gives a value to the placeholder `{name:Type}` of every statement that
    has one (a statement without it is run as written).

    An encrypted object needs its key (--key-env, --key-file or --kms-key);
    with --create and a key, a new object is created encrypted under it.
    """
    used = {p.name for statement in statements for p in placeholders(statement)}
    if set(params) - used:
        unused = ", ".join(sorted(set(params) - used))
        raise Failure("invalid_argument", f"--param {unused}: no statement has that placeholder", 2)
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(
        namespace,
        owner=owner or default_owner(),
        storage_options=storage_options,
        encryption=encryption,
        incremental_checkpoints=not full_checkpoints,
    )
    if not create:
        try:
            ns.info(oid)  # a writer open would create a missing object: refuse instead
        except NotFound as exc:
            raise Failure(
                "not_found", f"{exc}; nothing was run. Pass --create to create it."
            ) from None
    obj = ns.open(oid, force=force, reclaim=reclaim)
    total = len(statements)
    try:
        for n, statement in enumerate(statements, start=1):
            try:
                names = {p.name for p in placeholders(statement)}
                mine = {k: v for k, v in params.items() if k in names}
                obj.execute(
                    statement,
                    params=mine or None,
                    allow_nondeterministic=allow_nondeterministic,
                )
            except DurableError as exc:
                where = f"statement {n} of {total}: " if total > 1 else ""
                raise Failure(
                    exc.category,
                    f"{where}{cli_words(str(exc))} Nothing of this run was committed.",
                    exit_code(exc.category),
                ) from None
        logged = obj.pending
        key = obj.flush()
        seq = obj.seq
    except BaseException:
        _discard(obj)
        raise
    obj.close()
    sess = session()
    if key is None:
        sess.echo(f"nothing to commit: the statement(s) changed nothing; {oid} stays at seq {seq}")
        return
    unlogged = f" ({total - logged} changed nothing and were not logged)" if logged < total else ""
    sess.echo(f"committed {logged} statement(s) to {oid} as {key}, seq {seq}{unlogged}")
