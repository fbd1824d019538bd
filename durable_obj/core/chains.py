"""When a checkpoint is an increment, and what it is an increment over.

A full base costs what the object holds; an increment (`replica/links.py`)
costs what changed since the base before it. Each increment adds a link
that every open downloads and RESTORE reads, and merges and mutations
rewrite parts an increment then carries again, so the policy takes a full
base when:

* asked to (`checkpoint(full=True)`), or increments are off
  (`incremental_checkpoints=False`: bases chdb.durable reads);
* the chain has `chain_links` links (the full base included);
* its increments hold more than `chain_ratio` of the full base's bytes;
* there is nothing to be an increment over: no base, a base this writer
  holds no listing of (`LocalCopy.base_link`), a base that is not ours (a
  chdb.durable `.tar.gz`), or a table whose files change in place (a Log
  or Memory table: the engine cannot pack a grown file into an increment,
  and a Memory table restores only from an unpacked base).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.replica import links

if TYPE_CHECKING:
    from durable_obj.core.options import Options
    from durable_obj.replica.engine import Engine
    from durable_obj.replica.local import LocalCopy
    from durable_obj.wire.head import Head, ObjectRef

#: Table engines whose parts never change once written: an increment
#: carries only the new ones.
_IMMUTABLE_PARTS = "%MergeTree"


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
    if sum(r.size for r in chain[1:]) > opts.chain_ratio * chain[0].size:
        return None
    if _in_place(engine):
        return None
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
    """Does a table of the object keep files the engine changes in place?"""
    rows = engine.json_rows(
        "SELECT count() FROM system.tables WHERE database = {db:String} "
        "AND has_own_data AND engine NOT LIKE {mt:String}",
        {"db": engine.database, "mt": _IMMUTABLE_PARTS},
    )
    return bool(rows and int(rows[0][0]))
