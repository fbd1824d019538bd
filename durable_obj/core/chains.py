"""When a checkpoint is an increment, and what it is an increment over.

A full base costs what the object holds; an increment (`replica/links.py`)
costs what changed since the base before it. Each increment adds a link
that every open downloads and RESTORE reads, and merges and mutations
rewrite parts an increment then carries again, so the policy takes a full
base when:

* asked to (`checkpoint(full=True)`), or increments are off
  (`incremental_checkpoints=False`: bases chdb.durable reads);
* the chain has `chain_links` links (the full base included);
* its increments hold more than `chain_ratio` of the full base's bytes, or
  would with this one: the parts it would carry are estimated first
  (`_new_bytes`), so a merge that rewrote most of the object since the
  base makes a full base at once, not a large increment first;
* there is nothing to be an increment over: no base, a base this writer
  holds no listing of (`LocalCopy.base_link`), a base that is not ours (a
  chdb.durable `.tar.gz`), or a table whose files change in place (a Log
  or Memory table: the engine cannot pack a grown file into an increment,
  and a Memory table restores only from an unpacked base).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import Corrupt
from durable_obj.replica import links
from durable_obj.replica.archive import escaped

if TYPE_CHECKING:
    from durable_obj.core.options import Options
    from durable_obj.replica.engine import Engine
    from durable_obj.replica.local import LocalCopy
    from durable_obj.wire.head import Head, ObjectRef

#: A part's folder in a listing: data/<database>/<table>/<part>/<file>.
_PART = re.compile(rb"<name>data/[^/<]+/([^/<]+)/([^/<]+)/")


@dataclass(frozen=True)
class Increment:
    """The base a checkpoint is an increment over: its relative path and
    listing stub (`Engine.backup`), and the links the new head names."""

    base: tuple[str, str]
    chain: list[ObjectRef]


def plan(
    head: Head, local: LocalCopy, opts: Options, *, full: bool, engine: Engine
) -> Increment | None:
    """The increment the next checkpoint may be; None: a full base."""
    if full or not opts.incremental_checkpoints or local.base_link is None:
        return None
    base = head.manifest.base
    key, stub = local.base_link
    rel = None if base is None else links.link_path(base.key)
    if base is None or base.key != key or rel is None or not os.path.exists(stub):
        return None
    chain = [*head.manifest.chain, base]
    if len(chain) >= opts.chain_links:
        return None
    budget = opts.chain_ratio * chain[0].size - sum(r.size for r in chain[1:])
    if budget < 0 or _in_place(engine):
        return None
    if _new_bytes(engine, stub) > budget:
        return None  # a merge rewrote parts: the increment would carry them again
    return Increment((rel, stub), chain)


def cheap(head: Head, local: LocalCopy, opts: Options) -> bool:
    """Would a checkpoint now likely be an increment (the growth policy)?"""
    base = head.manifest.base
    return (
        opts.incremental_checkpoints
        and base is not None
        and local.base_link is not None
        and local.base_link[0] == base.key
        and len(head.manifest.chain) + 1 < opts.chain_links
    )


def _in_place(engine: Engine) -> bool:
    """Does a table of the object keep files the engine changes in place
    (anything but MergeTree's family and the engines without rows)?"""
    return engine.known.checkpointing(engine).in_place  # `gate.known`


def _new_bytes(engine: Engine, stub: str) -> int:
    """What an increment would carry, estimated before it is taken: the
    bytes of the active parts the base does not hold. A wide part a
    mutation made of a base part (same blocks and level, another version:
    a DELETE or UPDATE, a TTL sweep) shares most files with it, which the
    increment takes from the base, so it counts as nothing; a part an
    INSERT or a merge wrote counts whole, and so does a compact part's
    mutation (all its columns are one file). -1 (take the increment) if the listing does
    not read: the BACKUP then judges it."""
    try:
        listing = links.listing(stub)
    except Corrupt:
        return -1
    names = _PART.findall(listing)
    parts = set(names)
    held = {(table, _blocks(part)) for table, part in names}
    rows = engine.json_rows(
        "SELECT table, name, bytes_on_disk, part_type FROM system.parts "
        "WHERE database = {db:String} AND active",
        {"db": engine.database},
    )
    new = 0
    for table, name, size, kind in rows:
        key = (escaped(str(table)).encode(), str(name).encode())
        if key in parts:
            continue  # the base holds it
        if (key[0], _blocks(key[1])) not in held or kind == "Compact":
            new += int(size)  # written anew (a compact part's mutation rewrites its one file)
    return new


def _blocks(part: bytes) -> bytes:
    """A part's name without its mutation version: partition, blocks, level."""
    fields = part.split(b"_")
    return b"_".join(fields[:4]) if len(fields) > 4 else part
