"""The telemetry hooks of one object (`durable_obj.telemetry`), each a
decorator on the one method every path of its operation runs through:

    open        DurableObject._open
    flush       Units._commit_payload       (one WAL segment, whoever flushed)
    ack         Units._write_queued         (write() and batch(): call to durable)
    checkpoint  Durability._checkpoint_locked
    refresh     DurableObject._refresh_locked   (refresh() and a follower's poll)
    gc          ops.gc

What each records is read from the object after the call (its head is the
truth of what was committed), so the methods themselves are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import durable_obj.telemetry as t

if TYPE_CHECKING:
    from durable_obj.core.surface import Surface
    from durable_obj.wire.head import Head


def stored_bytes(head: Head | None) -> int:
    """The bytes a head names: its base's chain, its base, its segments."""
    if head is None:
        return 0
    return sum(ref.size for ref in head.manifest.all_bases()) + sum(
        ref.size for ref in head.manifest.wal
    )


def _object(obj: Surface) -> t.Attrs:
    return {
        t.OBJECT_ID: obj.oid,
        t.STORE: t.store_of(obj.url),
        t.SEQ: obj.seq,
        t.MODE: "reader" if obj.read_only else "writer",
    }


def _open(args: tuple[Any, ...], kwargs: Mapping[str, Any], result: Any) -> t.Attrs:
    obj: Surface = args[0]
    return {
        **_object(obj),
        t.GENERATION: obj.generation,
        t.BYTES: stored_bytes(obj._w.head),
    }


def _flush(args: tuple[Any, ...], kwargs: Mapping[str, Any], key: Any) -> t.Attrs:
    obj: Surface = args[0]
    attrs = {**_object(obj), t.STATEMENTS: len(args[1].lines)}
    head = obj._w.head
    if key is not None and head is not None:
        for ref in reversed(head.manifest.wal):
            if ref.key == key:
                attrs[t.BYTES] = ref.size
                break
    return attrs


def _ack(args: tuple[Any, ...], kwargs: Mapping[str, Any], key: Any) -> t.Attrs:
    return _object(args[0])


def _checkpoint(args: tuple[Any, ...], kwargs: Mapping[str, Any], key: Any) -> t.Attrs:
    obj: Surface = args[0]
    attrs = _object(obj)
    head = obj._w.head
    base = None if head is None else head.manifest.base
    if head is not None and base is not None and base.key == key:
        links = len(head.manifest.chain)
        attrs.update({t.BYTES: base.size, t.INCREMENTAL: links > 0, t.LINKS: links})
    return attrs


def _refresh(args: tuple[Any, ...], kwargs: Mapping[str, Any], moved: Any) -> t.Attrs:
    return {**_object(args[0]), t.MOVED: bool(moved)}


def _gc(args: tuple[Any, ...], kwargs: Mapping[str, Any], report: Any) -> t.Attrs:
    store = args[0] if args else kwargs["store"]
    oid = args[1] if len(args) > 1 else kwargs["oid"]
    attrs: t.Attrs = {t.OBJECT_ID: oid, t.STORE: t.store_of(store.url)}
    if report is not None:
        attrs.update(
            {
                t.BYTES: report.deleted_bytes,
                t.DELETED: len(report.deleted),
                t.DRY_RUN: report.dry_run,
            }
        )
    return attrs


open = t.operation("open", _open)
flush = t.operation("flush", _flush)
ack = t.operation("ack", _ack)
checkpoint = t.operation("checkpoint", _checkpoint)
refresh = t.operation("refresh", _refresh)
gc = t.operation("gc", _gc)
#: Count the `DurableError`s a public write or read raises, by category.
refused = t.refusals
