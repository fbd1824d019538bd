"""Human-readable formatting of the CLI (pure: a fixed `now`, no clock)."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from durable_obj.cli import formatting as fmt
from durable_obj.core.ops import GcWaiting, ObjectInfo
from durable_obj.wire.head import Head

NOW = 1_000_000.0
SHA = "0" * 64


def test_human_formats() -> None:
    now = NOW
    assert fmt.lease_expiry(None, now) == "-"
    assert fmt.lease_expiry(now + 25, now) == "in 25s"
    assert fmt.lease_expiry(now - 1, now) == "expired"
    assert fmt.ago(now - 190, now) == "3m 10s ago"
    assert fmt.ago(None, now) == "-"
    assert fmt.human_duration(2 * 86400 + 3 * 3600) == "2d 3h"
    assert fmt.human_size(512) == "512 B"
    assert fmt.human_size(1536) == "1.5 KiB"
    assert fmt.human_size(5 * 1024**3) == "5.0 GiB"


def test_durations_and_sizes_at_their_edges() -> None:
    assert fmt.human_duration(59.4) == "59s"
    assert fmt.human_duration(60) == "1m 0s"
    assert fmt.human_duration(599) == "9m 59s"
    assert fmt.human_duration(600) == "10m"
    assert fmt.human_duration(3600 + 120) == "1h 2m"
    assert fmt.human_duration(-90) == "1m 30s"
    assert fmt.human_size(None) == "-"
    assert fmt.human_size(1023) == "1023 B"
    assert fmt.human_size(1024**6) == "1024.0 PiB"
    assert fmt.ago(NOW + 30, NOW) == "in 30s"
    assert fmt.timestamp(None, NOW) == "-"
    assert fmt.timestamp(0.0, 60.0) == "1970-01-01 00:00:00 UTC (1m 0s ago)"


def test_the_clock_is_read_when_no_now_is_given(monkeypatch: Any) -> None:
    monkeypatch.setattr(fmt, "clock", lambda: NOW)
    assert fmt.lease_expiry(NOW + 5) == "in 5s"
    assert fmt.ago(NOW - 5) == "5s ago"


def _info(owner: str | None, expires_at: float | None, *, forked: bool = False) -> ObjectInfo:
    doc: dict[str, Any] = {
        "protocol": {"version": 1, "reader_features": [], "writer_features": ["x"]},
        "engine": {"name": "chdb", "version": "25.1", "backup_format": 1, "min_reader": "25.1"},
        "lease": {
            "generation": 3,
            "owner": owner,
            "instance": None if owner is None else "i-1",
            "expires_at": expires_at,
        },
        "manifest": {
            "db": "default",
            "base": {"key": "checkpoints/1-4-ab.tar", "size": 2048, "sha256": SHA},
            "wal": [{"key": "wal/1-5-cd.jsonl", "size": 100, "sha256": SHA}],
            "seq": 5,
        },
    }
    head = Head.parse(json.dumps(doc).encode())
    if forked:
        head.set_extension("forked_from", {"oid": "src", "seq": 4})
    return ObjectInfo(
        oid="o",
        seq=5,
        generation=3,
        owner=owner,
        expires_at=expires_at,
        segments=1,
        live_bytes=3000,
        stored_bytes=5000,
        last_write=NOW - 10,
        db="default",
        timezone="UTC",
        head=head,
    )


def test_lease_text() -> None:
    assert fmt.lease_text(_info(None, None), NOW) == "released (generation 3)"
    held = fmt.lease_text(_info("w", NOW + 25), NOW)
    assert held == "held by 'w', generation 3, expires in 25s (1970-01-12 13:47:05 UTC)"
    gone = fmt.lease_text(_info("w", NOW - 1), NOW)
    assert gone == "held by 'w', generation 3, expired at 1970-01-12 13:46:39 UTC"


def test_info_text() -> None:
    lines = fmt.info_text(_info("w", NOW + 25, forked=True), "file:///ns", NOW).splitlines()
    fields = dict(line.split("  ", 1) for line in lines)
    assert {k.strip(): v.strip() for k, v in fields.items()} == {
        "object": "o",
        "namespace": "file:///ns",
        "protocol": "v1 (reader features: -; writer features: x)",
        "engine": "chdb 25.1 (backup format 1, min reader 25.1)",
        "lease": "held by 'w', generation 3, expires in 25s (1970-01-12 13:47:05 UTC)",
        "database": "default",
        "base": "checkpoints/1-4-ab.tar (2.0 KiB)",
        "wal": "1 segment(s), 100 B",
        "seq": "5",
        "timezone": "UTC",
        "live size": "2.9 KiB",
        "stored size": "4.9 KiB",
        "last write": "1970-01-12 13:46:30 UTC (10s ago)",
        "forked from": "src at seq 4",
        "encryption": "none",
        "compression": "none",
    }
    # every value starts two blanks after the longest name ("stored size", 11)
    assert all(line[11:13] == "  " and line[13] != " " for line in lines)


def _render(table: Any) -> list[list[str]]:
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(table)
    return [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in buffer.getvalue().splitlines()
        if "│" in line
    ]


def test_objects_table() -> None:
    rows = _render(fmt.objects_table([_info("w", NOW + 25), _info(None, None)], NOW))
    assert rows == [
        ["o", "5", "3", "w", "in 25s", "1", "2.9 KiB", "4.9 KiB", "10s ago"],
        ["o", "5", "3", "-", "-", "1", "2.9 KiB", "4.9 KiB", "10s ago"],
    ]


def test_rows_table_cells() -> None:
    rows = _render(fmt.rows_table(["a", "b", "c", "d"], [["x", 1, None, [1, "é"]]]))
    assert rows == [["x", "1", "NULL", '[1, "é"]']]


def test_grace_text() -> None:
    assert fmt.grace_text(GcWaiting("o", [], 0, NOW + 10), 3600, NOW) is None
    text = fmt.grace_text(GcWaiting("o", ["o/wal/a", "o/wal/b"], 2048, NOW + 3590), 3600, NOW)
    assert text is not None
    assert text.startswith("2 of the kept key(s) (2.0 KiB) are superseded and wait out the 3600 s ")
    assert f"collectable from {fmt.utc(NOW + 3590)} (in 59m)." in text
    text = fmt.grace_text(GcWaiting("o", ["o/wal/a"], 1, None), 1.5, NOW)
    assert (
        text is not None and "1.5 s grace" in text and "once the current base is that old" in text
    )
