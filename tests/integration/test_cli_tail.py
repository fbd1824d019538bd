"""`durable-obj tail`: an object's commits as they land, through click's
CliRunner, and once as a real subprocess stopped by Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import durable_obj
from durable_obj.core import ops
from tests.integration.test_cli import REPO, fails, ok

DDL = "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"


def _writer(path: Path, *, retention: float | None = None) -> durable_obj.DurableObject:
    options = {} if retention is None else {"retention": retention}
    obj = durable_obj.open(str(path / "o"), owner="w", fold_segments=0, **options)
    obj.execute(DDL)
    obj.flush()
    obj.execute("INSERT INTO m VALUES (1)")
    obj.flush()
    obj.checkpoint()
    obj.execute("INSERT INTO m VALUES (2)")
    obj.flush()
    return obj


def test_tail_prints_each_commit_and_checkpoint(tmp_path: Path) -> None:
    _writer(tmp_path).close()
    url = str(tmp_path / "o")
    out = ok("tail", url, "--since", "0", "--no-follow").stdout.splitlines()
    heads = [line for line in out if not line.startswith("    ")]
    assert [h.split("  ")[0] for h in heads] == ["1", "2", "3", "4"]
    assert [h.split("  ")[2] for h in heads] == ["commit", "commit", "checkpoint", "commit"]
    assert all(h.endswith("(gen 1, w)") for h in heads)
    assert out[1] == f"    {DDL}" and "VALUES (2)" in out[-1]
    lines = ok("tail", url, "--since", "2", "--json", "--no-follow").stdout.splitlines()
    docs = [json.loads(line) for line in lines]
    assert [(d["seq"], d["kind"]) for d in docs] == [(3, "checkpoint"), (4, "commit")]
    assert docs[1]["statements"][0].endswith("VALUES (2)") and docs[1]["generation"] == 1
    assert docs[0]["committed_at"].endswith("+00:00")
    # default --since: only what lands from now on
    assert ok("tail", url, "--no-follow").stdout == ""


def test_tail_from_a_collected_seq_fails_naming_the_oldest(tmp_path: Path) -> None:
    _writer(tmp_path, retention=0).close()
    ops.gc(durable_obj.Namespace(str(tmp_path)).store, "o", grace=0)
    message = fails("not_found", "tail", str(tmp_path / "o"), "--since", "0", "--no-follow")
    assert "oldest commit it can serve is seq 3" in message
    fails("invalid_argument", "tail", str(tmp_path / "o"), "--since", "-1")


def test_tail_follows_in_a_subprocess_until_ctrl_c(tmp_path: Path) -> None:
    obj = _writer(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["tail", str(tmp_path / "o"), "--json", "--since", str(obj.seq), "--poll", "0.02"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_obj.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        for value in (3, 4):
            obj.execute(f"INSERT INTO m VALUES ({value})")
            obj.flush()
            doc = json.loads(proc.stdout.readline())  # blocks until it is printed
            assert doc["seq"] == obj.seq and doc["statements"][0].endswith(f"({value})")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "error:" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        obj.close()


def test_tail_of_an_encrypted_object_takes_its_key_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = secrets.token_hex(32)
    monkeypatch.setenv("DO_TAIL_KEY", key)
    obj = durable_obj.open(str(tmp_path / "o"), owner="w", encryption=durable_obj.StaticKey(key))
    with obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (7)")
    url = str(tmp_path / "o")
    out = ok("tail", url, "--since", "0", "--no-follow", "--key-env", "DO_TAIL_KEY").stdout
    assert DDL in out and "VALUES (7)" in out and key not in out
    message = fails("key_refused", "tail", url, "--since", "0", "--no-follow")
    assert durable_obj.StaticKey(key).key_id in message


def test_tail_into_a_reader_that_stops_early_exits_quietly(tmp_path: Path) -> None:
    """`durable-obj tail URL | head -1`: the reader goes away after one
    line; tail stops with status 0 and says nothing (it said "error:
    internal: BrokenPipeError" and exited 1)."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        obj.write(*[f"INSERT INTO t VALUES ('{'x' * 60}{i}')" for i in range(3000)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_obj.cli", "tail", url, "--since", "0", "--no-follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0, err
    assert first.startswith(b"1  ") and err == b""
