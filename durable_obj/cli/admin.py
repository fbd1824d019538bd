"""Commands that change stored state: checkpoint, gc, fork, rotate-key, release,
catalog rebuild."""

from __future__ import annotations

from typing import Any

import click

from durable_obj import Namespace
from durable_obj.cli import formatting as fmt
from durable_obj.cli.app import cli, parse_object_url
from durable_obj.cli.failures import Failure
from durable_obj.cli.history import at_option, parse_at
from durable_obj.cli.keys import SAME_KEY, key_options, new_key_options, to_key_options
from durable_obj.cli.progress import progress_bar
from durable_obj.cli.session import session, storage_options, to_options, writer_options
from durable_obj.cli.write import default_owner
from durable_obj.core import ops
from durable_obj.service.namespace import split_destination


@cli.command("checkpoint")
@click.argument("object_url")
@writer_options
@click.option(
    "--full",
    is_flag=True,
    help="Take a full base, not an increment over the one before (chdb.durable reads it).",
)
@key_options
@storage_options
def checkpoint_cmd(
    object_url: str,
    owner: str | None,
    force: bool,
    reclaim: bool,
    full: bool,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Fold the WAL into a new base snapshot (open as writer, checkpoint, close).

    The base is an increment over the one before it when the policy allows; --full takes a
    full one, which chdb.durable (V1) can read again. An encrypted object needs its key; a
    full base is sealed under a new data key."""
    namespace, oid = parse_object_url(object_url)
    with progress_bar("checkpoint") as bar:
        ns = Namespace(
            namespace,
            owner=owner or default_owner(),
            storage_options=storage_options,
            progress=bar,
            encryption=encryption,
        )
        ns.info(oid)  # a writer open would create a missing object: refuse instead
        with ns.open(oid, force=force, reclaim=reclaim) as obj:
            key = obj.checkpoint(full=full)
            head = obj.head
    assert head is not None and head.manifest.base is not None
    base = head.manifest.base
    session().echo(
        f"checkpoint of {oid}: {key} ({fmt.human_size(base.size)}, {base.size} bytes), "
        f"seq {head.manifest.seq}"
    )


@cli.command("gc")
@click.argument("object_url")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=ops.DEFAULT_GC_GRACE,
    show_default=True,
    metavar="SECONDS",
    help="Keep everything until the current base is this old.",
)
@click.option("--list", "list_keys", is_flag=True, help="Also print each (would-be) deleted key.")
@click.option(
    "--retention",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="The time-travel window to keep (default: the one the head records, else 7 days; "
    "0: keep no past states).",
)
@key_options
@storage_options
def gc_cmd(
    object_url: str,
    dry_run: bool,
    grace: float,
    list_keys: bool,
    retention: float | None,
    encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Delete superseded bases, folded segments, orphans and history that no
    head and no point restorable in the retention window can need.

    Says how many superseded keys only the grace period still keeps (a
    reader of an older head may need them), and when they become collectable.

    An encrypted object with history files needs its key (--key-env, ...):
    they say what a past point still needs."""
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(namespace, storage_options=storage_options, encryption=encryption)
    report = ns.gc(oid, grace=grace, dry_run=dry_run, retention=retention)
    sess = session()
    if list_keys:
        for key in report.deleted:
            sess.echo(key)
    verb = "would delete" if dry_run else "deleted"
    sess.echo(
        f"{verb} {len(report.deleted)} key(s), {fmt.human_size(report.deleted_bytes)}; "
        f"kept {report.kept} key(s), {fmt.human_size(report.kept_bytes)}"
    )
    waiting = fmt.grace_text(
        ops.gc_waiting(ns.store, oid, grace=grace, retention=retention, encryption=encryption),
        grace,
    )
    if waiting is not None:
        sess.echo(waiting)


@cli.command("fork")
@click.argument("src_url")
@click.argument("dst")
@to_options("DST")
@at_option
@key_options
@to_key_options
@storage_options
def fork_cmd(
    src_url: str,
    dst: str,
    to_options: dict[str, Any],
    at: str | None,
    encryption: Any,
    dst_encryption: Any,
    storage_options: dict[str, Any],
) -> None:
    """Create DST, starting from SRC_URL's current state, or with --at from a
    past one: the undo (SRC is only read).

    DST is an id beside SRC_URL, or an object URL on any store (s3://bucket/ns/id,
    /abs/path/ns/id, ./ns/id for a relative path). An existing DST is refused and
    left unchanged.

    An encrypted SRC is read with its key (--key-env, --key-file, --kms-key).
    DST is sealed under the source's key by default, under another with
    --to-key-env, --to-key-file or --to-kms-key, or not at all with --to-plain."""
    namespace, oid = parse_object_url(src_url)
    past = parse_at(at)
    dst_namespace = split_destination(dst)[0]
    if dst_namespace is None and to_options:
        raise Failure(
            "invalid_argument",
            f"--to-option goes with a DST URL; {dst!r} is an id beside SRC_URL, on its store. "
            "Nothing was written.",
            2,
        )
    with progress_bar("fork") as bar:
        ns = Namespace(
            namespace, storage_options=storage_options, progress=bar, encryption=encryption
        )
        keyed = _destination_key(dst_encryption)
        info = ns.fork(oid, dst, dst_storage_options=to_options or None, at=past, **keyed)
    where = ns.url if dst_namespace is None else dst_namespace
    sess = session()
    forked = {} if info.head is None else info.head.extension()["forked_from"]
    whence = "" if past is None else f" at seq {forked['seq']}"
    sess.echo(f"forked {oid}{whence} into {info.oid if dst_namespace is None else dst}")
    sess.echo(fmt.info_text(info, where))


def _destination_key(dst_encryption: Any) -> dict[str, Any]:
    """The fork's `dst_encryption` argument: none when no --to-key flag was
    given (the copy keeps the source's key), else the provider (None for
    --to-plain)."""
    return {} if dst_encryption is SAME_KEY else {"dst_encryption": dst_encryption}


@cli.command("rotate-key")
@click.argument("object_url")
@writer_options
@key_options
@new_key_options
@storage_options
def rotate_key_cmd(
    object_url: str,
    owner: str | None,
    force: bool,
    reclaim: bool,
    encryption: Any,
    new_key: Any,
    storage_options: dict[str, Any],
) -> None:
    """Wrap every data key of an encrypted object under a new key.

    The current key (--key-env, --key-file or --kms-key) unwraps them, the new
    one (--new-key-env, --new-key-file or --new-kms-key) wraps them: one head
    write as the object's writer, no data rewritten. From then on the object
    opens with the new key only. Its next checkpoint also makes a new data key."""
    if encryption is None or new_key is None:
        raise Failure(
            "invalid_argument",
            "rotate-key needs the current key (--key-env, --key-file or --kms-key) and the "
            "new one (--new-key-env, --new-key-file or --new-kms-key). Nothing was changed.",
            2,
        )
    namespace, oid = parse_object_url(object_url)
    ns = Namespace(
        namespace,
        owner=owner or default_owner(),
        storage_options=storage_options,
        encryption=encryption,
    )
    if ns.info(oid).encrypted_with is None:  # also: a writer open would create a missing one
        raise Failure(
            "invalid_argument",
            f"{oid} is not encrypted: there is no key to rotate. Fork it into an encrypted "
            f"copy instead ('durable-obj fork {object_url} DST --to-key-env VAR'). "
            "Nothing was changed.",
            2,
        )
    with ns.open(oid, force=force, reclaim=reclaim) as obj:
        count = obj.rotate_key(new_key)
    session().echo(
        f"rewrapped {count} data key(s) of {oid} under key {new_key.key_id} "
        f"(was {encryption.key_id}); it opens with the new key only from now on"
    )


@cli.command("release")
@click.argument("object_url")
@click.option("--force", is_flag=True, help="Required: releasing fences the current holder.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@storage_options
def release_cmd(object_url: str, force: bool, yes: bool, storage_options: dict[str, Any]) -> None:
    """Release the lease whoever holds it (administrative)."""
    namespace, oid = parse_object_url(object_url)
    if not force:
        raise Failure(
            "invalid_argument",
            "release takes the lease from whoever holds it: a live holder is fenced at its "
            "next commit and loses every statement it has not flushed. Use it only for a "
            "writer that is gone, and pass --force to do it. Nothing was read or changed.",
            2,
        )
    ns = Namespace(namespace, storage_options=storage_options)
    info = ns.info(oid)
    sess = session()
    if info.owner is None:
        sess.echo(f"the lease of {oid} is not held (generation {info.generation}); nothing to do")
        return
    if not yes:
        click.confirm(
            sess.redact(
                f"Release the lease of {oid} held by {info.owner!r} "
                f"({fmt.lease_expiry(info.expires_at)})? If that writer is alive it is fenced "
                "and loses what it has not flushed"
            ),
            abort=True,
            err=True,
        )
    ns.release(oid)
    sess.echo(
        f"released the lease of {oid} (was held by {info.owner!r}, generation {info.generation})"
    )


@cli.group("catalog")
def catalog_group() -> None:
    """The namespace's catalog: one key listing every object (`ls` reads it)."""


@catalog_group.command("rebuild")
@click.argument("ns_url")
@storage_options
def catalog_rebuild_cmd(ns_url: str, storage_options: dict[str, Any]) -> None:
    """Write the catalog anew from a listing of the namespace and every head.

    Repairs a catalog that is behind (an update dropped, objects written by
    chdb.durable or copied in) and starts one in a namespace that has objects."""
    ns = Namespace(ns_url, storage_options=storage_options)
    missing = ops.missing_namespace(ns.store)
    if missing is not None:
        raise Failure("not_found", f"{missing}: no namespace; nothing was written")
    rows = ns.rebuild_catalog()
    session().echo(f"catalog of {ns.url} rebuilt: {rows} object(s)")
