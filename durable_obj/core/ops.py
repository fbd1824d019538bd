"""Operations over stored objects, on a store and an id, with no object
open: list, inspect (`describe`), verify, collect garbage, release a lease,
check an id is free. `Namespace` and the CLI use them; forking and export
open the object and live in `Namespace` and `object.py`.

Garbage collection deletes only what no head can still need:

* only keys under the object's `wal/` and `checkpoints/`, never head.json or
  anything else a user put there;
* never a key the current head references;
* only keys whose sequence number is below the current base's: the commit
  that made that base current retired every older key, and a key at or
  above it may be an upload a live writer is about to commit;
* only when that base was uploaded more than `grace` seconds ago, so a
  reader that read an older head (and still needs the older base or
  segments) has had `grace` seconds to finish. The default, one hour, is far
  above any lease TTL or open;
* never a base or segment that a point restorable inside the retention
  window needs, nor the history file that names it (`durable_obj.core.history`).
  The window gc keeps is `retention + grace` wide, so a point that just left
  the window stays for `grace` seconds, for a reader already opening it. A
  history file whose chain lies wholly before that window is collected. With
  retention 0 this keeps exactly what the two rules above keep.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable_obj.core import history as histories
from durable_obj.core import observed
from durable_obj.core.commit import HeadWriter
from durable_obj.errors import (
    BackendError,
    InvalidArgument,
    KeyRefused,
    NotFound,
    StoreAmbiguous,
)
from durable_obj.wire import keyring
from durable_obj.wire.head import Head, ObjectRef
from durable_obj.wire.keyring import Keys
from durable_obj.wire.protocol import (
    CHECKPOINT_DIR,
    DEFAULT_COMMIT_DEADLINE,
    DEFAULT_RETENTION,
    HISTORY_DIR,
    WAL_DIR,
    head_key,
    object_key,
    seq_of,
    valid_oid,
)
from durable_obj.wire.untrusted import parse_json

if TYPE_CHECKING:
    from durable_obj.stores.base import Blob, Entry, Store
    from durable_obj.wire.keys import KeyProvider
    from durable_obj.wire.sealing import Codec

log = logging.getLogger("durable_obj")

DEFAULT_GC_GRACE = 3600.0


@dataclass(frozen=True)
class ObjectInfo:
    """What `Namespace.list()` and `info()` report about one object."""

    oid: str
    seq: int
    generation: int
    owner: str | None
    expires_at: float | None
    segments: int
    live_bytes: int  # head + base + WAL the head references
    #: Everything under the object's prefix (None: not listed, `list(stored=False)`).
    stored_bytes: int | None
    last_write: float | None  # head.json's modification time (None: not listed)
    db: str
    timezone: str
    #: The head read (None: a row of the namespace catalog, `from_catalog`).
    head: Head | None = field(repr=False)
    #: The short description set when the object was created (None: none set).
    description: str | None = None
    #: The key id (of the key provider) its data keys are wrapped under; None: plain.
    encrypted_with: str | None = None
    #: Whether its WAL segments are zstd-compressed.
    compressed: bool = False
    #: Listed from the catalog, a hint (`core/catalog.py`): as of the row's last
    #: write; no head (None), stored_bytes None, last_write the row's time.
    from_catalog: bool = False


@dataclass
class GcReport:
    oid: str
    dry_run: bool
    deleted: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0


def read_head(store: Store, oid: str) -> Head:
    return _parse_head(store, oid, store.get(head_key(oid)))


def _parse_head(store: Store, oid: str, blob: Blob | None) -> Head:
    if blob is None:
        raise NotFound(f"no durable object {oid!r} in {store.url}")
    return Head.parse(blob.data, f"{store.url.rstrip('/')}/{oid}")


def live_refs(head: Head) -> list[ObjectRef]:
    """Every key the head names: its base's links, its base, its segments."""
    return head.manifest.all_bases() + list(head.manifest.wal)


def describe(store: Store, oid: str, entries: list[Entry] | None = None) -> ObjectInfo:
    blob = store.get(head_key(oid))
    head = _parse_head(store, oid, blob)
    assert blob is not None
    if entries is None:
        entries = store.list_keys(oid)
    return _info(oid, head, len(blob.data), entries)


def _info(oid: str, head: Head, head_size: int, entries: list[Entry] | None) -> ObjectInfo:
    """The `ObjectInfo` of `oid` from its head (read as `head_size` bytes)
    and the listing of every key below it (None: not listed)."""
    found = entries or []
    head_entry = next((e for e in found if e.key == head_key(oid)), None)
    return ObjectInfo(
        oid=oid,
        seq=head.manifest.seq,
        generation=head.lease.generation,
        owner=head.lease.owner,
        expires_at=head.lease.expires_at,
        segments=len(head.manifest.wal),
        live_bytes=sum(r.size for r in live_refs(head)) + head_size,
        stored_bytes=None if entries is None else sum(e.size for e in entries),
        last_write=head_entry.modified if head_entry else None,
        db=head.manifest.db,
        timezone=head.timezone,
        head=head,
        description=head.description,
        encrypted_with=keyring.kek_of(head),
        compressed=keyring.is_compressed(head),
    )


#: Heads read, and object folders listed, at once by `list_objects`.
LIST_CONCURRENCY = 64
#: Stores read in this process, with nothing to gain from concurrent reads.
_IN_PROCESS = ("file", "memory")


def list_objects(
    store: Store, *, stored: bool = True, concurrency: int = LIST_CONCURRENCY
) -> list[ObjectInfo]:
    """Every object in the namespace (a folder with a head.json), by id.

    Made to stay fast at a thousand objects behind a slow store: the object
    folders come from one delimiter listing (`Store.list_folders`), not a
    listing of every key; then every head is read (`get_many`, batched on
    S3) while every folder is listed (`list_keys_many`, batched on S3),
    `concurrency` requests at once in each. The folder listings give what
    only they can: `stored_bytes` (orphans and superseded keys included)
    and `last_write` (head.json's modification time). `stored=False` skips
    them, one request per object instead of two: those two fields are then
    None; everything else is the same. A folder without a head.json is not
    an object and is skipped, as is a folder whose name cannot be an object id.
    """
    oids = [name for name in store.list_folders() if valid_oid(name)]
    if not oids:
        return []
    if store.protocol in _IN_PROCESS:
        # No network to wait on: threads only contend for the GIL (a
        # thousand objects of a local folder list 3-5x faster one by one).
        concurrency = 1
    heads = [head_key(oid) for oid in oids]
    listings: list[list[Entry] | None] = [None] * len(oids)
    if stored:
        with ThreadPoolExecutor(1) as pool:
            listed = pool.submit(store.list_keys_many, oids, concurrency)
            try:
                blobs = store.get_many(heads, concurrency)
            finally:
                listings = list(listed.result())
    else:
        blobs = store.get_many(heads, concurrency)
    return [
        _info(oid, Head.parse(blob.data, f"{store.url.rstrip('/')}/{oid}"), len(blob.data), found)
        for oid, blob, found in zip(oids, blobs, listings, strict=True)
        if blob is not None
    ]


def history(
    store: Store,
    oid: str,
    *,
    retention: float | None = None,
    default: float = DEFAULT_RETENTION,
    now: float | None = None,
    encryption: KeyProvider | None = None,
) -> histories.History:
    """The restorable points of `oid` (`durable_obj.core.history`): the window is
    `retention`, else the one the head records, else `default`. Reads only.
    An encrypted object's history files are sealed: `encryption` opens them."""
    if retention is not None and retention < 0:
        raise InvalidArgument("retention must be >= 0 seconds")
    head = read_head(store, oid)
    return histories.read(
        store,
        oid,
        now=time.time() if now is None else now,
        retention=retention,
        default=default,
        head=head,
        codec=history_codec(store, oid, head, encryption, "reading its history"),
    )


def history_codec(
    store: Store, oid: str, head: Head, encryption: KeyProvider | None, what: str
) -> Codec | None:
    """How `oid`'s history files are read: None for a plain object; for an
    encrypted one, its codec (`KeyRefused` without the key: a sealed history
    file cannot be read, and gc must not guess what it needs)."""
    kek = keyring.kek_of(head)
    if kek is None:
        return None
    if encryption is None:
        raise KeyRefused(
            f"{oid} is encrypted under key {kek}; {what} needs that key (its history files "
            "are sealed): pass encryption=. Nothing was changed."
        )
    keys = Keys(oid, f"{store.url.rstrip('/')}/{oid}", encryption)
    keys.check(head)
    return keys.codec(head)


@observed.gc
def gc(
    store: Store,
    oid: str,
    *,
    grace: float = DEFAULT_GC_GRACE,
    dry_run: bool = False,
    retention: float | None = None,
    default: float = DEFAULT_RETENTION,
    now: float | None = None,
    encryption: KeyProvider | None = None,
) -> GcReport:
    """Delete what no current or recent head references, and what no point
    restorable in the window needs (module docstring). The window is
    `retention`, else the one the head records, else `default`."""
    if grace < 0:
        raise InvalidArgument("grace must be >= 0 seconds; nothing was deleted")
    if retention is not None and retention < 0:
        raise InvalidArgument("retention must be >= 0 seconds; nothing was deleted")
    head = read_head(store, oid)
    now = time.time() if now is None else now
    if retention is None:
        retention = head.retention if head.retention is not None else default
    # Read after the head: a history file written since is of a chain the
    # head still names (kept below), and is not in this listing anyway.
    codec = history_codec(store, oid, head, encryption, "gc")
    past = histories.read(store, oid, now=now, retention=retention + grace, head=head, codec=codec)
    entries = store.list_keys(oid)
    needed = {object_key(oid, key) for key in past.needed_keys()}
    needed_files = past.needed_files()
    referenced = {object_key(oid, r.key) for r in live_refs(head)} | needed
    base = head.manifest.base
    base_key = None if base is None else object_key(oid, base.key)
    base_entry = next((e for e in entries if e.key == base_key), None)
    base_seq = None if base is None else seq_of(base.key.rsplit("/", 1)[-1])
    settled = (
        base_entry is not None
        and base_entry.modified is not None
        and now - base_entry.modified >= grace
    )
    report = GcReport(oid, dry_run)
    for entry in entries:
        rel = entry.key[len(oid) + 1 :]
        folder, _, name = rel.partition("/")
        seq = seq_of(name)
        if folder == HISTORY_DIR and seq is not None:
            # An archive: collectable once its chain lies wholly before the window.
            deletable = (
                entry.key not in needed_files
                and (entry.modified is None or now - entry.modified >= grace)
                and any(entry.key == key for key, _ in past.files)
            )
        else:
            deletable = (
                folder in (WAL_DIR, CHECKPOINT_DIR)
                and entry.key not in referenced
                and seq is not None
                and base_seq is not None
                and seq < base_seq
                and settled
            )
        if not deletable:
            report.kept += 1
            report.kept_bytes += entry.size
            continue
        report.deleted.append(entry.key)
        report.deleted_bytes += entry.size
        if not dry_run:
            _delete(store, entry.key)
    log.info(
        "gc %s/%s: %s %d key(s), %d bytes; kept %d key(s), %d bytes",
        store.url,
        oid,
        "would delete" if dry_run else "deleted",
        len(report.deleted),
        report.deleted_bytes,
        report.kept,
        report.kept_bytes,
    )
    return report


def _delete(store: Store, key: str) -> None:
    """Delete `key`; a lost answer is settled by deleting again (a missing
    key is not an error)."""
    try:
        store.delete(key)
    except StoreAmbiguous:
        try:
            store.delete(key)
        except StoreAmbiguous as exc:
            raise BackendError(
                f"deleting {key} got no answer twice; gc stopped there and is safe to run again"
            ) from exc


def release(store: Store, oid: str, *, commit_deadline: float = DEFAULT_COMMIT_DEADLINE) -> Head:
    """Release whoever holds the lease (an administrative act: that writer, if
    alive, is fenced at its next commit, and its unflushed writes are lost).
    A lost answer is settled by reading back, within `commit_deadline`."""
    # Owner and instance go: the old holder's next commit sees another
    # instance and is fenced; the next writer moves the generation.
    head = HeadWriter(store, oid, commit_deadline=commit_deadline).release_any()
    log.warning("%s/%s: lease released by an administrator", store.url, oid)
    return head


def ensure_absent(store: Store, oid: str) -> None:
    """`InvalidArgument` naming `oid` and its store if it has a head (a fork's
    destination must not exist)."""
    if store.get(head_key(oid)) is not None:
        raise InvalidArgument(
            f"{oid!r} already exists in {store.url}; it was left unchanged and nothing was written"
        )


def head_document(store: Store, oid: str) -> object:
    """The stored head.json of `oid` as parsed JSON, NOT validated: it also
    shows a head that `read_head` refuses. `NotFound` if there is none,
    `Corrupt` if it is not UTF-8 JSON (or nests deeper than a stored
    document may)."""
    key = head_key(oid)
    blob = store.get(key)
    if blob is None:
        raise NotFound(f"no durable object {oid!r} in {store.url}")
    doc: object = parse_json(blob.data, key, safe="nothing was changed")
    return doc


def export_formats() -> list[str]:
    """The `format` names `DurableObject.export()` / `Namespace.export()`
    accept, sorted."""
    from durable_obj.replica.export import EXPORT_FORMATS

    return sorted(EXPORT_FORMATS)


def export_path(root: str, table: str, format: str) -> str:
    """The path under a destination's fsspec path `root` where `export()`
    writes `table` in `format`: `<root>/<stem>.<ext>`, the stem the table's
    name if plain, else percent-encoded (`durable_obj.replica.export`)."""
    from durable_obj.replica.export import check_format, export_target

    return export_target(root, table, check_format(format)[1])


def url_protocol(url: str) -> str:
    """The store protocol `url` names, as `open_store` reads it: "file" for a
    bare path, `file:` and `local:`; otherwise the lower-cased scheme. Never
    raises: a `file:` URL that names no store (another host, a query) is
    still of the file protocol (fsspec may well read it)."""
    from durable_obj.stores import split_url

    try:
        return split_url(url)[0]
    except InvalidArgument:  # only a file: URL is refused there
        return "file"


@dataclass(frozen=True)
class GcWaiting:
    """What only the grace period keeps from `gc` (see `gc_waiting`)."""

    oid: str
    keys: list[str]
    bytes: int
    #: When the current base is `grace` seconds old and those keys become
    #: collectable (None: no base, or the store reports no modification time).
    collectable_at: float | None


def gc_waiting(
    store: Store,
    oid: str,
    *,
    grace: float = DEFAULT_GC_GRACE,
    retention: float | None = None,
    default: float = DEFAULT_RETENTION,
    encryption: KeyProvider | None = None,
) -> GcWaiting:
    """The keys `gc(grace=0)` would delete that `gc(grace=grace)` keeps (both
    with the same window), and when the current base is `grace` seconds old.
    Reads only; the same rules as `gc`: computed as the difference of the two
    dry runs, so keys the window's `grace` margin keeps are among them (they
    become collectable as their points age out of it, which may be later).
    `encryption`: an encrypted object's key provider, as `gc` needs it."""
    if grace < 0:
        raise InvalidArgument("grace must be >= 0 seconds; nothing was deleted")
    now = time.time()
    head = read_head(store, oid)
    base = head.manifest.base
    if base is None:
        return GcWaiting(oid, [], 0, None)
    entries = store.list_keys(oid)
    base_entry = next((e for e in entries if e.key == object_key(oid, base.key)), None)
    modified = None if base_entry is None else base_entry.modified
    collectable_at = None if modified is None else modified + grace
    if base_entry is None:
        return GcWaiting(oid, [], 0, collectable_at)
    runs = [
        gc(
            store,
            oid,
            grace=g,
            dry_run=True,
            retention=retention,
            default=default,
            now=now,
            encryption=encryption,
        )
        for g in (grace, 0.0)
    ]
    kept, ungraced = set(runs[0].deleted), runs[1]
    sizes = {e.key: e.size for e in entries}
    waiting = [k for k in ungraced.deleted if k not in kept]
    return GcWaiting(oid, waiting, sum(sizes.get(k, 0) for k in waiting), collectable_at)


def missing_namespace(store: Store) -> str | None:
    """Why the namespace `store` is rooted at does not exist, or None.

    A local folder that does not exist (or is not a folder) is missing. A
    memory namespace always exists (an unused one is empty). For a cloud
    store this answers None: an empty prefix in a bucket is an empty
    namespace, and a missing bucket fails the store's own calls (`BackendError`
    naming the bucket)."""
    if store.protocol != "file":
        return None
    from durable_obj.stores import split_url

    path = split_url(store.url)[1]
    if os.path.isdir(path):
        return None
    if os.path.lexists(path):
        return f"{store.url} is not a folder"
    return f"folder {path} does not exist"
