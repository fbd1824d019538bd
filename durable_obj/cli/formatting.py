"""Human-readable sizes, durations, times, leases and object summaries.

Pure: nothing here prints. Everything relative to "now" reads `clock()`
once per call unless given `now`, so a test can freeze the clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from durable_obj.core.ops import GcWaiting, ObjectInfo


def clock() -> float:
    """The wall clock every relative time is measured against."""
    return time.time()


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        size /= 1024
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def grace_text(waiting: GcWaiting, grace: float, now: float | None = None) -> str | None:
    """What `gc` kept only because of the grace period, and when it becomes
    collectable; None when nothing waits."""
    if not waiting.keys:
        return None
    now = clock() if now is None else now
    when = "once the current base is that old"
    if waiting.collectable_at is not None:
        left = waiting.collectable_at - now
        when = f"from {utc(waiting.collectable_at)} (in {human_duration(left)})"
    return (
        f"{len(waiting.keys)} of the kept key(s) ({human_size(waiting.bytes)}) are superseded "
        f"and wait out the {grace:g} s grace period (--grace): collectable {when}. A reader "
        "that read an older head may still need them until then."
    )


def lease_expiry(expires_at: float | None, now: float | None = None) -> str:
    """'in 25s', 'expired', or '-' for a released lease."""
    if expires_at is None:
        return "-"
    remaining = expires_at - (clock() if now is None else now)
    return f"in {human_duration(remaining)}" if remaining > 0 else "expired"


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    delta = (clock() if now is None else now) - ts
    if delta < 0:
        return f"in {human_duration(delta)}"
    return f"{human_duration(delta)} ago"


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def timestamp(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return f"{utc(ts)} ({ago(ts, now)})"


def lease_text(info: ObjectInfo, now: float | None = None) -> str:
    if info.owner is None:
        return f"released (generation {info.generation})"
    held = f"held by {info.owner!r}, generation {info.generation}"
    if info.expires_at is None:
        return held
    expiry = lease_expiry(info.expires_at, now)
    if expiry == "expired":
        return f"{held}, expired at {utc(info.expires_at)}"
    return f"{held}, expires {expiry} ({utc(info.expires_at)})"


def pairs_text(pairs: list[tuple[str, str]]) -> str:
    """`name  value` lines, the values aligned."""
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


def info_text(info: ObjectInfo, namespace_url: str, now: float | None = None) -> str:
    """`info`'s summary of one object's head."""
    now = clock() if now is None else now
    head = info.head
    assert head is not None  # info() and fork() read the head
    manifest = head.manifest
    proto = head.protocol
    engine = head.engine
    base = manifest.base
    pairs = [
        ("object", info.oid),
        ("namespace", namespace_url),
        (
            "protocol",
            f"v{proto.version} (reader features: {', '.join(proto.reader_features) or '-'}; "
            f"writer features: {', '.join(proto.writer_features) or '-'})",
        ),
        (
            "engine",
            f"{engine.name} {engine.version} (backup format {engine.backup_format}, "
            f"min reader {engine.min_reader})",
        ),
        ("lease", lease_text(info, now)),
        ("database", manifest.db),
        ("base", "none" if base is None else f"{base.key} ({human_size(base.size)})"),
        (
            "wal",
            f"{len(manifest.wal)} segment(s), {human_size(sum(r.size for r in manifest.wal))}",
        ),
        ("seq", str(manifest.seq)),
        ("timezone", info.timezone),
        ("encryption", encryption_text(info)),
        ("compression", "zstd (WAL segments)" if info.compressed else "none"),
        ("live size", human_size(info.live_bytes)),
        ("stored size", "-" if info.stored_bytes is None else human_size(info.stored_bytes)),
        ("last write", timestamp(info.last_write, now)),
    ]
    if info.description is not None:
        pairs.insert(1, ("description", info.description))
    forked = head.extension().get("forked_from")
    if isinstance(forked, dict):
        pairs.append(("forked from", f"{forked.get('oid')} at seq {forked.get('seq')}"))
    return pairs_text(pairs)


def encryption_text(info: ObjectInfo) -> str:
    """How `info`'s object is sealed: the key id its data keys need, or none."""
    if info.encrypted_with is None:
        return "none"
    return f"AES-256-GCM, data keys wrapped under key {info.encrypted_with}"


def object_json(info: ObjectInfo) -> dict[str, Any]:
    """`ls --json`'s entry for one object: the fields of `ls`, unformatted
    (sizes in bytes, times as Unix seconds, None as null)."""
    return {
        "id": info.oid,
        "seq": info.seq,
        "generation": info.generation,
        "owner": info.owner,
        "expires_at": info.expires_at,
        "segments": info.segments,
        "live_bytes": info.live_bytes,
        "stored_bytes": info.stored_bytes,
        "last_write": info.last_write,
        "db": info.db,
        "timezone": info.timezone,
        "description": info.description,
        "encrypted_with": info.encrypted_with,
        "compressed": info.compressed,
        "from_catalog": info.from_catalog,
    }


def objects_table(infos: Iterable[ObjectInfo], now: float | None = None) -> Table:
    """`ls`'s table: one row per object; an encryption (key id) and a
    compression column when any object is encrypted or compressed, and a
    description column last when any object has a description."""
    now = clock() if now is None else now
    infos = list(infos)
    described = any(info.description is not None for info in infos)
    encrypted = any(info.encrypted_with is not None for info in infos)
    compressed = any(info.compressed for info in infos)
    table = Table()
    for name, justify in (
        ("id", "left"),
        ("seq", "right"),
        ("generation", "right"),
        ("lease holder", "left"),
        ("lease expiry", "left"),
        ("segments", "right"),
        ("live size", "right"),
        ("stored size", "right"),
        ("last write", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    if encrypted:
        table.add_column("encryption", overflow="fold")
    if compressed:
        table.add_column("compression")
    if described:
        table.add_column("description", overflow="fold")
    for info in infos:
        extra = [info.encrypted_with or "-"] if encrypted else []
        extra += ["zstd" if info.compressed else "-"] if compressed else []
        extra += [info.description or "-"] if described else []
        table.add_row(
            info.oid,
            str(info.seq),
            str(info.generation),
            info.owner or "-",
            lease_expiry(info.expires_at, now),
            str(info.segments),
            human_size(info.live_bytes),
            "-" if info.stored_bytes is None else human_size(info.stored_bytes),
            ago(info.last_write, now),
            *extra,
        )
    return table


def cell(value: Any) -> str:
    """A value of a JSONCompact row as a table cell."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def rows_table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A query result (or any rows) as a table, every cell folded, not cut."""
    table = Table()
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    return table
