"""Where the engine keeps its files, in fresh processes (one engine each).

By default the part files live in a RAM-backed folder within a budget
(`replica/placement.py`); past the budget new parts go to disk and nothing
fails; the archive a checkpoint writes does not depend on where the parts
were, so an object written with its parts in memory opens with them on disk
and back; a process killed with SIGKILL leaves its folder, and the next
engine's sweep removes it, never a live process's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from durable_obj.replica import placement
from tests.integration._proc import child_env, run_json

pytestmark = pytest.mark.skipif(
    placement.ram_folder() is None, reason="needs a RAM-backed /dev/shm (Linux)"
)


def _script(body: str) -> str:
    return (
        "import durable_obj\n"
        "from durable_obj.replica import server\n"
        "from tests.integration.children import emit\n" + body
    )


WRITE = """
obj = durable_obj.open(P["url"], owner="w")
obj.execute("CREATE TABLE t (k UInt64, s String) ENGINE = MergeTree ORDER BY k")
obj.execute(f"INSERT INTO t SELECT number, repeat('x', 100) FROM numbers({P['rows']})")
obj.execute("INSERT INTO t VALUES (999999999, 'last')")
obj.flush()
placed = server.placement()
anchor = server._SERVER["anchor"]
disks = server.decoded(anchor.query(
    "SELECT p.disk_name, count() FROM system.parts AS p WHERE p.active "
    f"AND p.database = '{obj._local.engine.database}' GROUP BY p.disk_name ORDER BY 1", "TSV"))
method = server.decoded(obj._local.engine._conn.query(
    "SELECT getSetting('local_filesystem_read_method')", "TSV")).strip()
if P.get("checkpoint"):
    obj.checkpoint()
total = obj.rows("SELECT count(), sum(length(s)) FROM t")[0]
obj.close()
emit({"kind": placed.kind, "data": placed.data, "budget": placed.budget,
      "disks": dict(line.split("\\t") for line in disks.splitlines()),
      "total": list(total), "data_exists_while_open": os.path.isdir(placed.data),
      "read_method": method})
"""


def _write(tmp_path: Path, env: dict[str, str], rows: int = 1000, **extra: object) -> dict:
    url = str(tmp_path / "store" / "obj")
    code = "import os\n" + _script(WRITE)
    return run_json(code, {"url": url, "rows": rows, **extra}, env=env)  # type: ignore[no-any-return]


def test_by_default_the_parts_are_in_memory_and_gone_at_exit(tmp_path: Path) -> None:
    got = _write(tmp_path, {"DURABLE_OBJ_ENGINE_FILES": "", "DURABLE_OBJ_RAM_BUDGET": ""})
    assert got["kind"] == "ram"
    assert got["data"].startswith(placement.RAM_FOLDER + os.sep)
    assert got["budget"] >= placement.MIN_BUDGET
    assert set(got["disks"]) == {"default"}  # the data path's disk: in memory
    assert got["total"] == [1001, 1000 * 100 + 4]
    assert got["data_exists_while_open"]
    assert not os.path.exists(os.path.dirname(got["data"]))
    # a tmpfs refuses the default read's RWF_NOWAIT: parts are read by pread
    assert got["read_method"] == "pread"


def test_disk_keeps_the_parts_in_the_temporary_folder(tmp_path: Path) -> None:
    got = _write(tmp_path, {"DURABLE_OBJ_ENGINE_FILES": "disk"})
    assert got["kind"] == "disk"
    assert not got["data"].startswith(placement.RAM_FOLDER + os.sep)
    assert got["total"] == [1001, 1000 * 100 + 4]
    assert got["read_method"] == "pread_threadpool"  # the engine's own default


def test_a_folder_of_the_callers_is_read_with_pread_only_on_a_tmpfs(tmp_path: Path) -> None:
    shm = tempfile.mkdtemp(prefix="durable-obj-test-", dir=placement.RAM_FOLDER)
    try:
        got = _write(tmp_path / "a", {"DURABLE_OBJ_ENGINE_FILES": os.path.join(shm, "engine")})
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    assert got["kind"] == "folder" and got["data"].startswith(shm + os.sep)
    assert got["read_method"] == "pread"
    got = _write(tmp_path / "b", {"DURABLE_OBJ_ENGINE_FILES": str(tmp_path / "engine")})
    assert got["kind"] == "folder" and got["total"] == [1001, 1000 * 100 + 4]
    default = "pread" if placement.ram_backed(str(tmp_path)) else "pread_threadpool"
    assert got["read_method"] == default


def test_a_budget_below_the_minimum_puts_auto_on_disk(tmp_path: Path) -> None:
    got = _write(tmp_path, {"DURABLE_OBJ_ENGINE_FILES": "auto", "DURABLE_OBJ_RAM_BUDGET": "1MiB"})
    assert got["kind"] == "disk"


def test_past_the_budget_parts_go_to_disk_and_the_object_moves_between_placements(
    tmp_path: Path,
) -> None:
    """200k rows of 100 bytes (about 20 MB) against a 1 MiB budget: the big
    part is written to the disk volume; every row is there. The base it
    checkpoints opens on disk, and a base written on disk opens in memory."""
    small = {"DURABLE_OBJ_ENGINE_FILES": "ram", "DURABLE_OBJ_RAM_BUDGET": "1MiB"}
    got = _write(tmp_path, small, rows=200_000, checkpoint=True)
    assert got["kind"] == "ram" and got["budget"] == 1024**2
    assert "spill" in got["disks"]
    expected = [200_001, 200_000 * 100 + 4]
    assert got["total"] == expected
    read = _script(
        """
obj = durable_obj.open(P["url"], owner="r")
total = obj.rows("SELECT count(), sum(length(s)) FROM t")[0]
emit({"kind": server.placement().kind, "total": list(total)})
obj.execute("INSERT INTO t VALUES (1000000000, 'more')")
obj.flush()
obj.checkpoint()
obj.close()
"""
    )
    url = str(tmp_path / "store" / "obj")
    on_disk = run_json(read, {"url": url}, env={"DURABLE_OBJ_ENGINE_FILES": "disk"})
    assert on_disk == {"kind": "disk", "total": expected}
    in_memory = run_json(read, {"url": url}, env={"DURABLE_OBJ_ENGINE_FILES": "ram"})
    assert in_memory == {"kind": "ram", "total": [expected[0] + 1, expected[1] + 4]}


def test_configuring_after_the_engine_started_is_refused_unless_unchanged(tmp_path: Path) -> None:
    code = _script(
        """
from tests.integration.children import attempt
durable_obj.configure_engine("disk")
obj = durable_obj.open(P["url"], owner="w")
same = attempt(durable_obj.configure_engine, "disk")
other = attempt(durable_obj.configure_engine, "ram")
obj.close()
emit({"same": same, "other": other, "kind": server.placement().kind})
"""
    )
    got = run_json(code, {"url": str(tmp_path / "o")})
    assert got["same"]["ok"] and got["kind"] == "disk"
    assert not got["other"]["ok"] and got["other"]["category"] == "invalid_argument"
    assert "before the first open" in got["other"]["message"]


def test_a_killed_process_leaves_its_folder_and_the_sweep_removes_only_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _script(
        """
import time
obj = durable_obj.open(P["url"], owner="w")
obj.execute("CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k")
emit({"data": server.placement().data, "root": server.placement().root})
time.sleep(120)
"""
    )
    from tests.integration._proc import PRELUDE, _marked

    def start(name: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", PRELUDE + code, json.dumps({"url": str(tmp_path / name)})]
        env = child_env({"DURABLE_OBJ_ENGINE_FILES": "ram"})
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)

    victim, live = start("victim"), start("live")
    try:
        assert victim.stdout is not None and live.stdout is not None
        dead = _marked(victim.stdout.readline())[0]
        alive = _marked(live.stdout.readline())[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        left = os.path.dirname(dead["data"])
        assert os.path.isdir(left)  # SIGKILL: nothing of it ran at exit
        # The children's temporary folder is the test session's scratch.
        monkeypatch.setattr(placement.tempfile, "gettempdir", lambda: os.path.dirname(dead["root"]))
        removed = placement.sweep(min_age=0)
        assert left in removed and dead["root"] in removed
        assert not os.path.exists(left)
        assert os.path.isdir(os.path.dirname(alive["data"])) and os.path.isdir(alive["root"])
        assert os.path.dirname(alive["data"]) not in removed
    finally:
        for proc in (victim, live):
            proc.kill()
            proc.communicate()
