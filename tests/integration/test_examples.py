"""The examples run as a user runs them: a fresh interpreter, their default
local folder (in a temporary working directory), exit status 0, and the
outcome they promise printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_langgraph_agent_pauses_in_one_process_and_finishes_in_another(tmp_path: Path) -> None:
    out = _run(tmp_path, "langgraph_agent.py")
    assert "paused, waiting for a human" in out
    assert 'resumed and finished: ["triaged:high (high before: 0)", "human said yes", "filed"]' in (
        out
    )
    # the state lives in the object both processes opened, under ./durable-data
    (head,) = (tmp_path / "durable-data").glob("triage-*/head.json")
    assert head.stat().st_size > 0


@pytest.mark.slow
def test_ray_agents_write_through_actors_and_the_fleet_is_read_from_parquet(
    tmp_path: Path,
) -> None:
    """examples/ray_agents.py: a local Ray node on 127.0.0.1 (started and
    stopped by the example), six agents on two actors, the export read by chDB."""
    out = _run(tmp_path, "ray_agents.py")
    for i in range(6):
        assert f"agent-{i} on fleet-" in out and f": {i + 1} memories" in out
    assert "exported 6 Parquet file(s)" in out
    assert "fleet total: 21 memories" in out
    assert len(list((tmp_path / "durable-data" / "fleet").glob("agent-*/head.json"))) == 6


@pytest.mark.slow
def test_agent_memory_writes_with_parameters_and_the_second_run_starts_from_the_first(
    tmp_path: Path,
) -> None:
    """The README's first command runs this example: every value goes in as a
    parameter (its WAL holds the values as literals), and a second run opens
    what the first flushed."""
    import json

    first = _run(tmp_path, "agent_memory.py")
    assert "flushed: seq 1" in first and "eu-west-1" in first
    second = _run(tmp_path, "agent_memory.py")
    assert second.count("eu-west-1") >= 3  # both runs' revisions, and the history
    wal = tmp_path / "durable-data" / "agents" / "checkout-api" / "wal"
    logged = [
        json.loads(line)["sql"]
        for segment in sorted(wal.iterdir())
        for line in segment.read_text().splitlines()
    ]
    assert any("deploy region is eu-central-1" in sql for sql in logged)
    assert not any("{content:String}" in sql for sql in logged)  # bound, not placeholders
