"""The namespace catalog from the namespace's side: list from it, rebuild it.

The catalog itself (format, rows, how a writer updates its row) is
`core/catalog.py`. Here: `listing` reads it in one GET and turns its rows into
`ObjectInfo` (marked `from_catalog`, with no head and no stored size);
`rebuild` writes it anew from a LIST and every head, the repair of a catalog
that is behind, missing, or not one this version reads; `note` writes the
row of an object changed without a writer (a fork, an administrative release).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from durable_obj.core import catalog
from durable_obj.core.ops import ObjectInfo, list_objects
from durable_obj.errors import DurableError

if TYPE_CHECKING:
    from durable_obj.stores.base import Store
    from durable_obj.wire.head import Head

log = logging.getLogger("durable_obj.catalog")

#: Tries of a rebuild's compare-and-swap (each one merges what writers wrote meanwhile).
REBUILD_ATTEMPTS = 5


def listing(store: Store) -> list[ObjectInfo] | None:
    """Every object the catalog names, by id, from one GET; None when there is
    no catalog this version reads (the caller lists instead). A row that does
    not fit the format is left out, with a warning."""
    where = f"{store.url.rstrip('/')}/{catalog.CATALOG_KEY}"
    catalog.settle()  # the rows this process queued are in it first
    blob = store.get(catalog.CATALOG_KEY)
    if blob is None:
        return None
    with _no_collection():
        try:
            doc = catalog.load(blob.data, where)
        except DurableError as exc:
            log.warning("%s; listing the namespace instead", exc)
            return None
        if doc is None:
            log.warning("%s is not a catalog this version reads; listing instead", where)
            return None
        rows = doc["rows"]
        infos = [info for info in map(catalog.info_of, rows) if info is not None]
    if len(infos) < len(rows):
        log.warning("%s: %d malformed row(s) left out", where, len(rows) - len(infos))
    infos.sort(key=_oid)  # rows are stored in id order: a pass that finds it so
    return infos


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic garbage collector paused: parsing 10,000 rows allocates
    some 200,000 containers, none of them garbage, and each collection the
    allocations trigger walks every object of the process (a client library
    holds hundreds of thousands): one noisy pair of listings took 0.31 s
    with it running and 0.15 s paused (not measured apart in quiet)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _oid(info: ObjectInfo) -> str:
    return info.oid


def note(store: Store, oid: str, head: Head | None) -> None:
    """Write the row of `oid` as `head` shows it (a fork's new head, a released
    lease); a failure is logged and dropped (`core/catalog.py`)."""
    if head is None:
        return
    row = catalog.row_of(oid, head, head_bytes=len(head.to_bytes()), now=time.time())
    catalog.put(store, row, wait=True)


def rebuild(store: Store) -> int:
    """Write the catalog anew from a LIST and every head: one row per object
    (a row with no head is dropped), each as its head shows it now. Rows a
    writer wrote while this ran are kept where newer (generation, seq).
    Returns the number of rows. Store errors are raised, as a LIST's are."""
    where = f"{store.url.rstrip('/')}/{catalog.CATALOG_KEY}"
    catalog.settle()
    before = store.get(catalog.CATALOG_KEY)
    seen = _rows(before, where)
    rows = []
    for info in list_objects(store, stored=True):
        assert info.head is not None
        row = catalog.row_of(info.oid, info.head, head_bytes=0, now=info.last_write or 0.0)
        row["live_bytes"] = info.live_bytes  # the head's size as stored included
        rows.append(row)
    for _ in range(REBUILD_ATTEMPTS):
        current = store.get(catalog.CATALOG_KEY)
        doc = catalog.new_doc(rows)
        if current is not None:
            loaded = _load(current.data, where)
            if loaded is not None:
                # keep the document's unknown fields, and the rows writers wrote meanwhile
                doc = {**loaded, "rows": doc["rows"]}
                fresh = [
                    r for r in loaded["rows"] if catalog.valid_row(r) and seen.get(r["id"]) != r
                ]
                catalog.merge(doc, fresh)
        body = catalog.dump(doc)
        if current is None:
            done = store.create(catalog.CATALOG_KEY, body)
        else:
            done = store.replace(catalog.CATALOG_KEY, body, current.version)
        if done is not None:
            log.info("%s rebuilt: %d row(s)", where, len(doc["rows"]))
            return len(doc["rows"])
    raise DurableError(
        f"{where}: the catalog changed at every one of {REBUILD_ATTEMPTS} attempts to rebuild "
        "it; nothing was changed. Run the rebuild again."
    )


def _load(data: bytes, where: str) -> dict[str, Any] | None:
    try:
        return catalog.load(data, where)
    except DurableError:
        return None  # not JSON: replaced whole


def _rows(blob: Any, where: str) -> dict[str, Any]:
    """The rows of the catalog as first read, by id."""
    doc = None if blob is None else _load(blob.data, where)
    if doc is None:
        return {}
    return {r["id"]: r for r in doc["rows"] if catalog.valid_row(r)}
