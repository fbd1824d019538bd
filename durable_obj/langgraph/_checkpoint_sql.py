"""The SQL of `DurableSaver` (durable_obj.langgraph.checkpoint): the three
tables' DDL, the statements that read and copy them, and the encoding of a
checkpoint, a channel value and a pending write as a row of literals.

Everything here is a pure function of its arguments: table names come from
the saver (checked there), values are already serialized by its serde, and
every literal goes through `durable_obj.langgraph._common`'s `lit_*`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from durable_obj.errors import InvalidArgument
from durable_obj.langgraph._common import lit_bytes, lit_int, lit_opt_str, lit_str


def vkey(version: Any) -> str:
    """A channel version as the blob table's key: the type is part of it, so
    1, 1.0 and "1" never meet."""
    if isinstance(version, bool):
        raise InvalidArgument("a channel version cannot be a bool")
    if isinstance(version, str):
        return "s:" + version
    if isinstance(version, int):
        return f"i:{version}"
    if isinstance(version, float):
        return "f:" + repr(version)
    raise InvalidArgument(f"a channel version must be str, int or float, not {type(version)}")


def lit_in(values: Sequence[str]) -> str:
    """`(v1, v2, ...)`: string literals for an IN list."""
    return "(" + ", ".join(lit_str(v) for v in values) + ")"


# -- DDL ---------------------------------------------------------------------------
def create_tables(ck: str, wr: str, bl: str) -> list[str]:
    """CREATE TABLE IF NOT EXISTS for the checkpoints, writes and blobs tables."""
    return [
        f"CREATE TABLE IF NOT EXISTS {ck} (thread_id String, checkpoint_ns String, "
        "checkpoint_id String, parent_checkpoint_id Nullable(String), type String, "
        "checkpoint String, metadata_type String, metadata String, run_id String) "
        "ENGINE = ReplacingMergeTree ORDER BY (thread_id, checkpoint_ns, checkpoint_id)",
        f"CREATE TABLE IF NOT EXISTS {wr} (thread_id String, checkpoint_ns String, "
        "checkpoint_id String, task_id String, idx Int64, task_path String, "
        "channel String, type String, value String) ENGINE = ReplacingMergeTree "
        "ORDER BY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)",
        f"CREATE TABLE IF NOT EXISTS {bl} (thread_id String, checkpoint_ns String, "
        "channel String, version String, type String, blob String) "
        "ENGINE = ReplacingMergeTree ORDER BY (thread_id, checkpoint_ns, channel, version)",
    ]


# -- reads -------------------------------------------------------------------------
def where_get(config: RunnableConfig) -> tuple[list[str], str | None]:
    """get_tuple's WHERE terms for `config`, and the checkpoint id it names."""
    conf = config["configurable"]
    where = [
        f"thread_id = {lit_str(str(conf['thread_id']))}",
        f"checkpoint_ns = {lit_str(conf.get('checkpoint_ns', ''))}",
    ]
    if cid := get_checkpoint_id(config):
        where.append(f"checkpoint_id = {lit_str(cid)}")
    return where, cid


def where_list(config: RunnableConfig | None, before: RunnableConfig | None) -> list[str]:
    """list's WHERE terms for `config` and `before` (metadata filters are
    applied by the saver, after decoding)."""
    where: list[str] = []
    if config is not None:
        conf = config["configurable"]
        if conf.get("thread_id") is not None:
            where.append(f"thread_id = {lit_str(str(conf['thread_id']))}")
        if conf.get("checkpoint_ns") is not None:
            where.append(f"checkpoint_ns = {lit_str(conf['checkpoint_ns'])}")
        if cid := get_checkpoint_id(config):
            where.append(f"checkpoint_id = {lit_str(cid)}")
    if before is not None and (bid := get_checkpoint_id(before)):
        where.append(f"checkpoint_id < {lit_str(bid)}")
    return where


def select_checkpoints(ck: str, where: list[str], limit: int | None) -> str:
    """Checkpoint rows newest first: thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, base64 checkpoint, metadata_type, base64 metadata."""
    sql = (
        "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
        "base64Encode(checkpoint), metadata_type, base64Encode(metadata) "
        f"FROM {ck} FINAL"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY checkpoint_id DESC, thread_id, checkpoint_ns"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def select_blobs(bl: str, keys: Sequence[tuple[str, str, str, str]]) -> str:
    """The channel values at these (thread_id, checkpoint_ns, channel, version keys)."""
    tuples = ", ".join(
        f"({lit_str(t)}, {lit_str(n)}, {lit_str(c)}, {lit_str(v)})" for t, n, c, v in keys
    )
    return (
        f"SELECT thread_id, checkpoint_ns, channel, version, type, base64Encode(blob) "
        f"FROM {bl} FINAL WHERE (thread_id, checkpoint_ns, channel, version) "
        f"IN ({tuples})"
    )


def select_writes(wr: str, rows: Sequence[Sequence[Any]]) -> str:
    """The pending writes of these checkpoint rows (thread_id, ns, id first)."""
    tuples = ", ".join(f"({lit_str(r[0])}, {lit_str(r[1])}, {lit_str(r[2])})" for r in rows)
    return (
        "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, "
        f"type, base64Encode(value) FROM {wr} FINAL "
        f"WHERE (thread_id, checkpoint_ns, checkpoint_id) IN ({tuples})"
    )


def select_taken_idx(wr: str, key: str, task_id: str) -> str:
    """The regular (idx >= 0) writes a task already has at a checkpoint;
    `key` is `write_key(...)`."""
    return (
        f"SELECT idx FROM {wr} FINAL WHERE (thread_id, checkpoint_ns, "
        f"checkpoint_id, task_id) = ({key}, {lit_str(task_id)}) AND idx >= 0"
    )


def select_run_checkpoints(ck: str, run_ids: Sequence[str]) -> str:
    """The (thread_id, checkpoint_ns, checkpoint_id) written by these runs."""
    return (
        f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM {ck} FINAL "
        f"WHERE run_id IN {lit_in(run_ids)} ORDER BY thread_id, checkpoint_ns, checkpoint_id"
    )


def select_latest(ck: str, thread_ids: Sequence[str]) -> str:
    """Per (thread, namespace): the newest checkpoint's id, type and base64 body."""
    return (
        f"SELECT thread_id, checkpoint_ns, argMax(checkpoint_id, checkpoint_id), "
        f"argMax(type, checkpoint_id), base64Encode(argMax(checkpoint, checkpoint_id)) "
        f"FROM {ck} FINAL WHERE thread_id IN {lit_in(thread_ids)} "
        "GROUP BY thread_id, checkpoint_ns ORDER BY thread_id, checkpoint_ns"
    )


# -- rows of literals --------------------------------------------------------------
def blob_row(thread_id: str, ns: str, channel: str, version: Any, typ: str, data: bytes) -> str:
    """One blobs-table row."""
    return (
        f"({lit_str(thread_id)}, {lit_str(ns)}, {lit_str(channel)}, {lit_str(vkey(version))}, "
        f"{lit_str(typ)}, {lit_bytes(data)})"
    )


def checkpoint_row(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    parent: str | None,
    ck: tuple[str, bytes],
    md: tuple[str, bytes],
    run_id: Any,
) -> str:
    """One checkpoints-table row; `ck` and `md` are (type, bytes) from the serde."""
    return (
        f"({lit_str(thread_id)}, {lit_str(ns)}, {lit_str(checkpoint_id)}, "
        f"{lit_opt_str(parent)}, {lit_str(ck[0])}, {lit_bytes(ck[1])}, "
        f"{lit_str(md[0])}, {lit_bytes(md[1])}, "
        f"{lit_str('' if run_id is None else str(run_id))})"
    )


def write_key(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """The checkpoint part of a writes-table key, as literals."""
    return f"{lit_str(thread_id)}, {lit_str(ns)}, {lit_str(checkpoint_id)}"


def write_row(
    key: str, task_id: str, idx: int, task_path: str, channel: str, typ: str, data: bytes
) -> str:
    """One writes-table row; `key` is `write_key(...)`."""
    return (
        f"({key}, {lit_str(task_id)}, {lit_int(idx)}, {lit_str(task_path)}, "
        f"{lit_str(channel)}, {lit_str(typ)}, {lit_bytes(data)})"
    )


def checkpoint_keys_in(hit: Sequence[Sequence[str]]) -> str:
    """`(thread_id, checkpoint_ns, checkpoint_id) IN (...)` for these keys."""
    keys = ", ".join(f"({lit_str(t)}, {lit_str(n)}, {lit_str(c)})" for t, n, c in hit)
    return f"(thread_id, checkpoint_ns, checkpoint_id) IN ({keys})"


# -- maintenance -------------------------------------------------------------------
def copy_thread(ck: str, wr: str, bl: str, source: str, target: str) -> list[str]:
    """INSERT ... SELECT statements copying one thread's blobs, checkpoints
    and writes to another (in that order)."""
    src, dst = lit_str(source), lit_str(target)
    return [
        f"INSERT INTO {bl} SELECT {dst}, checkpoint_ns, channel, version, type, "
        f"blob FROM {bl} FINAL WHERE thread_id = {src}",
        f"INSERT INTO {ck} SELECT {dst}, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, type, checkpoint, metadata_type, metadata, run_id "
        f"FROM {ck} FINAL WHERE thread_id = {src} ORDER BY checkpoint_id",
        f"INSERT INTO {wr} SELECT {dst}, checkpoint_ns, checkpoint_id, task_id, "
        f"idx, task_path, channel, type, value FROM {wr} FINAL "
        f"WHERE thread_id = {src}",
    ]


def prune_keep_latest(
    thread_id: str, ns: str, checkpoint_id: str, versions: dict[str, Any]
) -> tuple[str, str]:
    """WHERE clauses for pruning one namespace down to its newest checkpoint:
    (checkpoints and writes to delete, blobs to delete); `versions` is that
    checkpoint's channel_versions, whose blobs are kept."""
    scope = f"thread_id = {lit_str(thread_id)} AND checkpoint_ns = {lit_str(ns)}"
    others = f"{scope} AND checkpoint_id != {lit_str(checkpoint_id)}"
    keep = sorted(f"({lit_str(ch)}, {lit_str(vkey(v))})" for ch, v in versions.items())
    blobs = scope + (f" AND (channel, version) NOT IN ({', '.join(keep)})" if keep else "")
    return others, blobs
