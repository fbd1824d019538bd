"""Mutations read a DateTime without a zone in the engine's default zone
(ClickHouse ignores the session's there), which durable_obj pins to UTC in
every process: a writer in Tokyo and a reader in New York hold the same
instants after `ALTER ... UPDATE` and `DELETE` of zone-less DateTimes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WRITER = """
import sys, durable_obj
with durable_obj.open(sys.argv[1], owner="w") as o:
    o.execute("CREATE TABLE t (id UInt8, at DateTime) ENGINE = MergeTree ORDER BY id")
    o.execute("INSERT INTO t VALUES (1, 0), (2, 0), (3, '2024-01-01 00:00:00')")
    o.execute("ALTER TABLE t UPDATE at = toDateTime('2024-06-01 00:00:00') WHERE id = 1")
    o.execute("ALTER TABLE t UPDATE at = at + toIntervalDay(1) "
              "WHERE at < '2024-01-01 09:00:00' AND id = 2")
    o.execute("ALTER TABLE t DELETE WHERE at = '2024-01-01 00:00:00'")
    o.flush()
    print(o.query("SELECT id, toUnixTimestamp(at) FROM t ORDER BY id", "JSONCompact"))
"""
READER = """
import sys, durable_obj
with durable_obj.open(sys.argv[1], read_only=True) as o:
    print(o.query("SELECT id, toUnixTimestamp(at) FROM t ORDER BY id", "JSONCompact"))
"""


def _run(code: str, url: str, tz: str) -> list[list[int]]:
    env = {**os.environ, "TZ": tz}
    out = subprocess.run(
        [sys.executable, "-c", code, url], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data: list[list[int]] = json.loads(out.stdout)["data"]
    return data


def test_mutations_replay_the_same_instants_in_every_zone(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    written = _run(WRITER, url, "Asia/Tokyo")
    assert written == [[1, 1717200000], [2, 86400]]  # UTC: 2024-06-01 00:00; row 3 deleted
    assert _run(READER, url, "America/New_York") == written
    assert _run(READER, url, "Asia/Kathmandu") == written


def test_chdb_loaded_first_in_another_zone_is_warned_about(tmp_path: Path) -> None:
    code = (
        "import sys, chdb._chdb, durable_obj\n"
        "with durable_obj.open(sys.argv[1], owner='w') as o:\n"
        "    pass\n"
    )
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "engine's zone is this process's (Asia/Tokyo)" in out.stderr
