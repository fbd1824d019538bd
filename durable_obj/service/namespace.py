"""Addressing: a namespace URL holds objects, one folder each.

    Namespace("s3://bucket/agents").open("checkout-api")
    durable_obj.open("s3://bucket/agents/checkout-api")      # the same object

The last path segment of an object URL is its id; the rest is the namespace
(the checks of URLs, ids and `at=` are in `addressing.py`; re-exported here).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durable_obj.core import history, keyed, ops
from durable_obj.core.feed import Change, Feed, changes
from durable_obj.core.object import DurableObject
from durable_obj.core.opening import reclaim_rule
from durable_obj.core.options import Options, make_options
from durable_obj.core.queries import Params
from durable_obj.errors import DurableError, InvalidArgument, NotFound
from durable_obj.service import catalog, forking
from durable_obj.service.addressing import check_at, check_oid, split_destination, split_object_url
from durable_obj.service.forking import SAME_KEY
from durable_obj.stores import open_store
from durable_obj.stores.base import Store

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

__all__ = [
    "Namespace",
    "check_at",
    "check_oid",
    "export",
    "fork",
    "open",
    "split_destination",
    "split_object_url",
]


class Namespace:
    """A folder of durable objects on one store.

    `url` is a namespace URL, or a `Store` instance (a custom store, or one
    wrapped in `durable_obj.testing.FaultyStore`). `owner` names this
    process's writers in their leases (default: a random name);
    `reclaim` is the default of every `open()` here (see `open`: True takes
    back at once a live lease held under `owner` by an earlier process);
    `storage_options` go to the store as-is (endpoint_url, key, secret, ...);
    `progress` is an fsspec callback for large transfers.

    Options for every object opened here (`Options` documents each): lease_ttl,
    heartbeat_interval, clock_skew, commit_deadline, fetch_concurrency; db, timezone,
    description (of a new object); fold_segments, fold_bytes, close_fold_segments,
    cheap_fold_segments (WAL folding); incremental_checkpoints, chain_links, chain_ratio (when
    a base is an increment; False: all full, for chdb.durable); auto_flush, auto_flush_bytes,
    auto_flush_age; nondeterminism ("pin"/"refuse"); retention (time-travel window, s);
    external_reads ("url", "s3", folders for file(); off); query_bounds, write_bounds (`Bounds`
    of reads, writes); encryption (a key provider), compression ("zstd"); follow, on_change
    (followers); max_units_in_flight (writes in flight at once); ttl_sweep_interval (seconds
    between a writer's TTL sweeps; 0: none).
    """

    def __init__(
        self,
        url: str | Store,
        *,
        owner: str | None = None,
        reclaim: bool | Callable[[str], bool] = False,
        storage_options: dict[str, Any] | None = None,
        progress: Callback | None = None,
        **options: Any,
    ) -> None:
        self._options: Options = make_options(options)
        self._owner = owner
        reclaim_rule(reclaim, owner)  # refused here, before any open
        self._reclaim = reclaim
        self._progress = progress
        self._storage_options = storage_options
        self.store: Store = url if isinstance(url, Store) else open_store(url, storage_options)

    @property
    def url(self) -> str:
        return self.store.url

    def open(
        self,
        oid: str,
        *,
        read_only: bool = False,
        force: bool = False,
        create: bool = True,
        description: str | None = None,
        at: int | datetime | None = None,
        reclaim: bool | Callable[[str], bool] | None = None,
    ) -> DurableObject:
        """Open the object `oid`; a writer open creates it if absent, unless
        `create=False` (then a missing object is `NotFound`, nothing written).
        `description`: a short text for the object if this open creates it
        (this namespace's `description` option otherwise), shown by `list()`.
        See `durable_obj.open` for every argument, `at` and `reclaim=True`
        included; `reclaim` None is this namespace's `reclaim`.

        `reclaim` may also be a callable, for a host that is restarted by a
        supervisor (a Ray actor, a systemd unit) under a fresh owner name
        per incarnation. Called with the owner of a live lease held by
        someone else under another name; an answer True takes it at once, as
        `force` does, without waiting for it to expire: only answer True for an earlier
        incarnation of this same host, which the supervisor has declared
        dead. That holder is fenced at its next commit (the owner changes,
        so the generation moves). A callable never takes a lease held under
        this writer's own name (that may be a live namesake: reclaim=True
        is how to say it is not). Every other holder keeps the normal
        `LeaseHeld` rule."""
        check_oid(oid)
        check_at(at, read_only=read_only)
        rule = reclaim_rule(self._reclaim if reclaim is None else reclaim, self._owner)
        options = self._options
        if description is not None:
            options = make_options({**options.given(), "description": description})
        obj = DurableObject(
            self.store,
            oid,
            owner=self._owner,
            read_only=read_only,
            options=options,
            progress=self._progress,
            at=at,
        )
        obj._open(force, create, rule)
        return obj

    def changes(
        self, oid: str, since: int | None = None, *, follow: bool = True, poll: float = 1.0
    ) -> Iterator[Change]:
        """`DurableObject.changes` of `oid` without opening it; since None: from now on."""
        return changes(Feed.of(self.store, check_oid(oid), since, self._options), poll, follow)

    def history(self, oid: str, *, now: float | None = None) -> history.History:
        """Every known point of `oid` (seq, kind, key, generation, owner,
        `committed_at`: an aware UTC datetime) and which are restorable in its
        retention window (the one its head records; else this namespace's
        `retention`). Reads only: the head, one listing, the history files."""
        check_oid(oid)
        return ops.history(
            self.store,
            oid,
            default=self._options.retention,
            now=now,
            encryption=self._options.encryption,
        )

    # -- operations ------------------------------------------------------------
    def list(self, *, stored: bool = True, verify: bool = False) -> builtins.list[ops.ObjectInfo]:
        """Every object here: from the catalog in one GET (rows `from_catalog`,
        a hint as of each writer's last open, close or checkpoint). With
        `verify`, or no catalog: a folder listing, then every head (and with
        `stored`, folder) read in parallel (`ops.list_objects`)."""
        listed = None if verify else catalog.listing(self.store)
        return ops.list_objects(self.store, stored=stored) if listed is None else listed

    def rebuild_catalog(self) -> int:
        return catalog.rebuild(self.store)  # anew from a LIST and every head; the row count

    def info(self, oid: str) -> ops.ObjectInfo:
        return ops.describe(self.store, check_oid(oid))

    def gc(
        self,
        oid: str,
        *,
        grace: float = ops.DEFAULT_GC_GRACE,
        dry_run: bool = False,
        retention: float | None = None,
    ) -> ops.GcReport:
        """Delete superseded bases, folded segments, orphans of failed
        commits and history that no head and no restorable point inside the
        retention window can still need; safe beside a live writer.
        `retention` None: the window the head records, else this namespace's
        `retention` option. See `durable_obj.core.ops` for the exact rule."""
        return ops.gc(
            self.store,
            check_oid(oid),
            grace=grace,
            dry_run=dry_run,
            retention=retention,
            default=self._options.retention,
            encryption=self._options.encryption,
        )

    def verify(self, oid: str, *, restore: bool = False) -> keyed.VerifyReport:
        """Download and check every key the head references; with `restore`,
        also restore and replay it and count each table's rows."""
        report = keyed.verify_object(
            self.store,
            check_oid(oid),
            callback=self._progress,
            encryption=self._options.encryption,
        )
        if restore:
            with self.open(oid, read_only=True) as obj:
                report.rows = {
                    t: int(obj.query(f"SELECT count() FROM `{t}`", "TSV").strip())
                    for t in obj.tables()
                }
        return report

    def release(self, oid: str) -> None:
        """Release the lease whoever holds it (administrative: a live holder is
        fenced at its next commit and loses what it did not flush)."""
        d = self._options.commit_deadline
        catalog.note(self.store, oid, ops.release(self.store, check_oid(oid), commit_deadline=d))

    def scan(
        self,
        sql: str,
        ids: Iterable[str] | None = None,
        *,
        params: Params = None,
        missing_ok: bool = False,
    ) -> builtins.list[tuple[str, builtins.list[tuple[Any, ...]]]]:
        """Run one read-only query on each object (all of them by default),
        one after another, each opened read-only and closed before the next:
        `[(id, rows)]`, the rows as `DurableObject.rows()` gives them (tuples
        of Python values by column type: int, Decimal, aware datetime, ...).
        `params` binds the `{name:Type}` placeholders, the same for each.

        `missing_ok=True` skips ids with no object, as chdb.durable does (a
        fan-out over a tenant list); otherwise a missing one is `NotFound`.
        An error names the object it came from, and keeps its class.
        """
        targets = list(ids) if ids is not None else [i.oid for i in self.list(verify=True)]
        out = []
        for oid in targets:
            try:
                with self.open(oid, read_only=True) as obj:
                    out.append((oid, obj.rows(sql, params=params)))
            except NotFound:
                if missing_ok:
                    continue
                raise
            except DurableError as exc:
                raise type(exc)(f"scan of {oid!r} failed: {exc}") from exc
        return out

    def fork(
        self,
        src: str,
        dst: str,
        *,
        dst_storage_options: dict[str, Any] | None = None,
        at: int | datetime | None = None,
        dst_encryption: Any = SAME_KEY,
    ) -> ops.ObjectInfo:
        """A new object `dst` whose base is the current state of `src` (its
        base with the WAL folded in), or its state at a past point `at` (a
        seq, or an aware datetime: see `durable_obj.open`): the undo. `src`
        is only read.

        `dst` is an object id beside `src` in this namespace, or an object
        URL on any store (`s3://bucket/ns/copy`, `/abs/path/ns/copy`,
        `./ns/copy`, ...; a relative path starts with `./`), reached with
        `dst_storage_options` (default: this namespace's store options when
        the URL has the same protocol, else none). The namespace's progress
        callback sees the download of `src` and the upload of the copy.

        `dst_encryption`: the key provider of the copy (default: this
        namespace's `encryption`, under a new data key; None: a plain copy).
        So a plain object forks into an encrypted one, and an encrypted one
        into another key.

        An existing `dst` is refused (`InvalidArgument`) before anything is
        read or written; a writer that creates `dst` meanwhile wins (the fork's
        base is deleted). An unproven head is `CommitAmbiguous`.
        """
        check_oid(src)
        check_at(at, read_only=True)
        store, oid = self._destination(dst, dst_storage_options)
        ops.ensure_absent(store, oid)
        provider = self._options.encryption if dst_encryption is SAME_KEY else dst_encryption
        with self.open(src, read_only=True, at=at) as obj:
            forking.fork_into(
                obj,
                store,
                oid,
                provider=provider,
                zstd=self._options.compression == "zstd",
                options=self._options,
                progress=self._progress,
            )
        info = ops.describe(store, oid)
        catalog.note(store, oid, info.head)
        return info

    def _destination(self, dst: str, options: dict[str, Any] | None) -> tuple[Store, str]:
        """(store, id) of a fork's destination: an id beside the source, or an
        object URL on a store of its own."""
        namespace, oid = split_destination(dst)
        if namespace is None:
            if options is not None:
                raise InvalidArgument(
                    f"destination storage options go with a destination URL; {dst!r} is an "
                    "id beside the source, on the source's store. Nothing was written."
                )
            return self.store, oid
        if options is None and self.store.protocol == ops.url_protocol(namespace):
            options = self._storage_options
        return open_store(namespace, options), oid

    def export(
        self,
        oid: str,
        to: str,
        *,
        format: str = "parquet",
        storage_options: dict[str, Any] | None = None,
    ) -> builtins.list[str]:
        """Write each table of `oid` as `to/<table>.parquet` (or csv, jsonl; `a/b` -> `a%2Fb`)."""
        with self.open(oid, read_only=True) as obj:
            return obj.export(
                to, format=format, storage_options=storage_options, callback=self._progress
            )

    def __repr__(self) -> str:
        return f"Namespace({self.url!r})"


def export(
    obj_or_url: DurableObject | str,
    to: str,
    *,
    format: str = "parquet",
    storage_options: dict[str, Any] | None = None,
    to_storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """Export every table of an object (an open one, or a URL opened
    read-only) to Parquet files under `to` (any fsspec URL)."""
    if isinstance(obj_or_url, DurableObject):
        return obj_or_url.export(to, format=format, storage_options=to_storage_options)
    namespace, oid = split_object_url(obj_or_url)
    ns = Namespace(namespace, storage_options=storage_options)
    with ns.open(check_oid(oid), read_only=True) as obj:
        return obj.export(to, format=format, storage_options=to_storage_options)


def fork(
    src_url: str,
    dst_url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    dst_storage_options: dict[str, Any] | None = None,
    progress: Callback | None = None,
    at: int | datetime | None = None,
    dst_encryption: Any = SAME_KEY,
    **options: Any,
) -> ops.ObjectInfo:
    """Fork the object at `src_url` into a new object at `dst_url`, on the
    same store or any other; its base is the source's current state (the
    source is only read).

    `dst_url` is an object URL, or a bare id beside the source (a relative
    path starts with `./`). `storage_options` reach the source's store,
    `dst_storage_options` the destination's (default: `storage_options` when
    both URLs have the same protocol, else none). `progress`: an fsspec
    Callback that sees the source's download and the copy's upload.
    `at`: fork the state at a past point (a seq, or an aware datetime)
    instead of the current one, as `durable_obj.open(..., at=)` reads it.
    Options: those of `Namespace` (commit_deadline, fetch_concurrency, ...;
    `encryption`: the source's key). `dst_encryption`: the copy's key
    provider (default: the same as the source's; None: a plain copy).

    An existing destination is refused (`InvalidArgument`, naming it) and
    left untouched; see `Namespace.fork` for a destination created meanwhile.
    Returns the new object's `ObjectInfo`.
    """
    namespace, oid = split_object_url(src_url)
    ns = Namespace(namespace, storage_options=storage_options, progress=progress, **options)
    return ns.fork(
        check_oid(oid),
        dst_url,
        dst_storage_options=dst_storage_options,
        at=at,
        dst_encryption=dst_encryption,
    )


def open(
    url: str,
    *,
    owner: str | None = None,
    read_only: bool = False,
    force: bool = False,
    reclaim: bool | Callable[[str], bool] = False,
    create: bool = True,
    storage_options: dict[str, Any] | None = None,
    progress: Callback | None = None,
    at: int | datetime | None = None,
    **options: Any,
) -> DurableObject:
    """Open the durable object at `url` (its last path segment is the id).

    Use it as a context manager, so that it is always flushed and closed::

        with durable_obj.open("s3://bucket/agents/alice", owner="svc-1") as obj:
            obj.execute("INSERT INTO memories VALUES (...)")

    An object dropped or left at interpreter exit without close() loses
    its unflushed statements and keeps its lease until it expires; that is
    reported as a ResourceWarning and a log record.

    owner: the name this writer shows in the lease (default: random).
    read_only: take no lease, never create; the view moves only on refresh().
    force: take a lease another writer holds (it is fenced, and loses what
        it did not flush); only when that writer is known to be gone.
    reclaim: True says `owner` is this writer's identity (a service
        replica, an MCP server, a saver: one live process per name): a live
        lease held under the same owner name by another instance, i.e. an
        earlier process of this writer (killed, crashed, restarted), is taken
        at once instead of waiting lease_ttl + clock_skew for it to expire.
        The generation moves, so that process, if it still runs, fails its
        next commit with lease_fenced and loses what it did not flush. A
        lease held by any other owner is still LeaseHeld. Needs an explicit
        owner= (InvalidArgument otherwise: a random name is never the same
        twice). A callable is the form for hosts renamed on each restart:
        see `Namespace.open`.
    create: a writer open of a missing object creates it (default True, as
        chdb.durable V1 does and "open or create" per agent id needs); pass
        create=False when the id must already exist (a mistyped id is then
        NotFound instead of a new empty object).
    at: time travel (read_only=True only): the state exactly as a reader saw
        it right after a past commit: an int is that commit's seq, a
        timezone-aware datetime the last commit at or before it (a naive
        datetime is refused: it names a different instant on each machine).
        `Namespace.history()` / `durable-obj history` list the points. A
        point outside the retention window, or already collected, is
        NotFound naming the oldest restorable point; the view never moves
        (refresh() is refused). Verified like every open (size + SHA-256).
    storage_options: for the store's fsspec filesystem (endpoint_url, key,
        secret, token, connection_string, ...); an unknown key is refused.
    progress: an fsspec Callback for large uploads and downloads.

    Options (`durable_obj.core.options.Options`), each with its default:
    lease_ttl=30.0: seconds a writer's lease lasts without renewal.
    heartbeat_interval=None: seconds between renewals (None: lease_ttl / 3,
        the most allowed).
    clock_skew=5.0: seconds added to another writer's expiry before a normal
        takeover: a crashed writer's object opens lease_ttl + clock_skew
        after its last renewal.
    commit_deadline=30.0: seconds a commit retries before it reports
        commit_ambiguous or backend.
    db="default": database name of a new object (an existing head decides).
    timezone="UTC": session time zone of a new object (an existing head decides).
    description=None: a short one-line description of a new object, shown by
        Namespace.list() and `durable-obj ls` (an existing head keeps its own).
    nondeterminism="pin": pin now(), rand(), ... to literals; "refuse": refuse.
    fetch_concurrency=32: parallel downloads of WAL segments during open.
    fold_segments=64: after a flush, fold the WAL into a checkpoint at this many segments
        (0: never); cheap_fold_segments=16 when it would be an increment; fold_bytes=32
        MiB: ... or at this many WAL bytes (0: never); close_fold_segments=8: close()
        folds instead of flushing above this many. incremental_checkpoints=True: a
        checkpoint is an increment over the base before it while the chain has fewer
        than chain_links=8 links and chain_ratio=0.5 of the full base's bytes (False:
        every base full, as chdb.durable reads them; docs/concepts/checkpoint.md).
    ttl_sweep_interval=60.0: seconds between a writer's TTL sweeps (0: none).
    auto_flush=False: flush without a flush() call when a limit below is hit.
    auto_flush_bytes=1 MiB: ... when the buffer holds this many bytes (on execute).
    auto_flush_age=None: ... when the oldest buffered statement is this many
        seconds old (checked on execute and by a timer on the heartbeat
        thread, so an idle writer flushes too).
    retention=604800.0 (7 days): seconds of past states kept restorable with at=; a
        writer records it in the head, each checkpoint first archives the manifest it
        supersedes (history/), and gc keeps every base and segment a point inside the
        window needs. 0: no history (V1's gc).
    max_units_in_flight=64: the object's writes in flight at once; more wait, in order.
    external_reads=(): what a read-only query() may reach outside: "url", "s3", absolute
        folders for file(); off by default, never a mutation (docs/security.md).
    query_bounds=None, write_bounds=None: `durable_obj.Bounds` (seconds,
        result rows/bytes, memory) every read (unless it passes its own), and
        every statement of execute()/write()/batch(), runs under; a statement
        cannot raise them; a write past them is Timeout, nothing logged.
    encryption=None: a key provider (`durable_obj.StaticKey`, `EnvKey`, `KeyFile`,
        `AwsKms`, or your own `KeyProvider`). A new object is created encrypted: every
        segment, base and history file is sealed (AES-256-GCM) under a data key this
        provider wraps; an encrypted object needs the key that wrapped it (`KeyRefused`
        names its id). chdb.durable refuses encrypted objects (docs/concepts/encryption.md).
    compression=None: "zstd" compresses a new object's WAL segments; chdb.durable refuses it.
    follow=None, on_change=None: a follower (read_only=True only) refreshes
        every `follow` s, calls on_change(Update) (docs/guides/followers.md).
    """
    namespace, oid = split_object_url(url)
    check_oid(oid)
    ns = Namespace(
        namespace, owner=owner, storage_options=storage_options, progress=progress, **options
    )
    return ns.open(oid, read_only=read_only, force=force, create=create, at=at, reclaim=reclaim)
