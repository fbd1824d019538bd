"""`durable-obj history`, `sql --at`, `fork --at` and `gc --retention`
through click's CliRunner, on a local folder and on an S3 server (moto)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from tests import servers
from tests.integration.test_cli import fails, ok

loopback_only_env = servers.loopback_only_env
moto_s3 = servers.moto_s3

DDL = "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"


def _make(url: str, options: dict[str, Any] | None) -> None:
    """seq 1 DDL, 2 k=1, 3 k=2, 4 a checkpoint, 5 deletes k=1."""
    with durable_obj.open(
        url, owner="maker", storage_options=options, fold_segments=0, close_fold_segments=0
    ) as obj:
        obj.execute(DDL)
        obj.flush()
        obj.execute("INSERT INTO m VALUES (1)")
        obj.flush()
        obj.execute("INSERT INTO m VALUES (2)")
        obj.flush()
        obj.checkpoint()
        obj.execute("ALTER TABLE m DELETE WHERE k = 1")
        obj.flush()


def _exercise(url: str, dst: str, opts: list[str]) -> None:
    doc = json.loads(ok("history", url, "--json", *opts).stdout)
    points = doc["points"]
    assert [p["seq"] for p in points] == [1, 2, 3, 4, 5] and doc["oldest_restorable"] == 1
    assert [p["kind"] for p in points] == ["segment"] * 3 + ["base", "segment"]
    assert all(p["owner"] == "maker" and p["restorable"] for p in points)
    assert datetime.fromisoformat(doc["now"]) >= datetime.fromisoformat(points[-1]["committed_at"])
    table = ok("history", url, *opts).stdout
    assert "5 restorable point(s) of 5 known" in table and "checkpoints/1-4-" in table

    def sql(*extra: str) -> str:
        return ok("sql", url, "SELECT k FROM m ORDER BY k", "--format", "TSV", *extra, *opts).stdout

    assert sql() == "2\n"
    assert sql("--at", "2") == "1\n"
    assert sql("--at", "3") == "1\n2\n"
    assert sql("--at", "4") == "1\n2\n"
    # a time: the last commit at or before it (Z and offsets both read)
    # committed_at is ISO 8601 in UTC, and names its own point given back
    assert all(p["committed_at"].endswith("+00:00") for p in points)
    assert sql("--at", points[2]["committed_at"]) == "1\n2\n"
    t3 = datetime.fromisoformat(points[2]["committed_at"]) + timedelta(microseconds=2)
    iso = t3.isoformat()
    assert sql("--at", iso.replace("+00:00", "Z")) == "1\n2\n"
    tokyo = t3.astimezone(timezone(timedelta(hours=9)))
    assert sql("--at", tokyo.isoformat()) == "1\n2\n"
    before = datetime.fromisoformat(points[2]["committed_at"]) - timedelta(microseconds=1)
    assert sql("--at", before.isoformat()) == "1\n"
    message = fails("invalid_argument", "sql", url, "SELECT 1", "--at", iso[:19], *opts)
    assert "no time zone" in message
    fails("invalid_argument", "sql", url, "SELECT 1", "--at", "yesterday", *opts)
    message = fails("not_found", "sql", url, "SELECT 1", "--at", "99", *opts)
    assert "newest is seq 5" in message and "oldest restorable point is seq 1" in message
    # fork from the past: the undo
    out = ok("fork", url, dst, "--at", "3", *opts).stdout
    assert out.startswith(f"forked o at seq 3 into {dst}")
    forked = ok(
        "sql",
        f"{url.rsplit('/', 1)[0]}/{dst}",
        "SELECT k FROM m ORDER BY k",
        "--format",
        "TSV",
        *opts,
    )
    assert forked.stdout == "1\n2\n"
    # gc keeps the window; with --retention 0 it is gone, and so is the past
    assert ok("gc", url, "--grace", "0", *opts).stdout.startswith("deleted 0 key(s)")
    assert sql("--at", "2") == "1\n"
    out = ok("gc", url, "--grace", "0", "--retention", "0", *opts).stdout
    assert out.startswith("deleted 4 key(s)")  # 3 segments + the archive of their chain
    doc = json.loads(ok("history", url, "--json", *opts).stdout)
    assert [p["seq"] for p in doc["points"]] == [4, 5]
    message = fails("not_found", "sql", url, "SELECT 1", "--at", "2", *opts)
    assert "oldest restorable point is seq 4" in message
    assert sql("--at", "4") == "1\n2\n"


def test_history_sql_fork_at_on_a_folder(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "o")
    _make(url, None)
    _exercise(url, "o2", [])
    fails("not_found", "history", str(tmp_path / "ns" / "nope"))


@pytest.mark.slow
@pytest.mark.moto
def test_history_sql_fork_at_on_s3(request: pytest.FixtureRequest) -> None:
    root, options = request.getfixturevalue("moto_s3")
    url = f"{root}/cli-tt-{uuid.uuid4().hex[:8]}/o"
    _make(url, options)
    region = options.get("client_kwargs", {}).get("region_name", "us-east-1")
    opts = [
        *("-o", f"endpoint_url={options['endpoint_url']}"),
        *("-o", f"key={options['key']}"),
        *("-o", f"secret={options['secret']}"),
        *("-o", f"client_kwargs.region_name={region}"),
    ]
    _exercise(url, "o2", opts)
