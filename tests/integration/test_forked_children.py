"""The test harness's forked children (`_forked`) see what a fresh
interpreter running the same program sees, and exit the same way."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.integration import _forked, _proc


def described(monkeypatch: pytest.MonkeyPatch, *, fresh: bool, code: int) -> dict[str, Any]:
    monkeypatch.setattr(_forked, "ENABLED", not fresh)
    # a value of this call's own: not one the forkserver could have inherited
    monkeypatch.setenv("DURABLE_TEST_PROBE", f"probe-{fresh}-{code}")
    monkeypatch.setenv("TZ", "Asia/Kathmandu")
    params = {"variable": "DURABLE_TEST_PROBE", "code": code}
    argv = _proc.program_argv("describe", params)
    assert _forked.forkable(argv) is not fresh
    with _proc.Script("describe", params) as child:
        seen: dict[str, Any] = child.next_marked(60)
        assert child.wait(60) == code, child.stderr()
        assert [set(value) for value in child.drain()] == [{"exited"}], child.stderr()
        seen["forked"] = isinstance(child.proc, _forked.ForkedProcess)
    return seen


@pytest.mark.parametrize("code", [0, 3])
def test_a_forked_child_sees_and_exits_as_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    forked = described(monkeypatch, fresh=False, code=code)
    fresh = described(monkeypatch, fresh=True, code=code)
    assert (forked.pop("forked"), fresh.pop("forked")) == (True, False)
    assert (forked["env"], fresh["env"]) == (f"probe-False-{code}", f"probe-True-{code}")
    assert forked["tz"] == fresh["tz"] == "+0545"
    assert forked["tmp"] == fresh["tmp"] == _proc.scratch_dir()
    assert forked["cwd"] == fresh["cwd"] == str(_proc.REPO)
    assert forked["argv"] == fresh["argv"]
    assert forked["chdb"] is fresh["chdb"] is False
    # the exit handlers durable_obj's import registers are there in both (a
    # forked child has multiprocessing's too), and the exit runs them: the
    # program's own handler emitted "exited" in both
    assert forked["handlers"] >= fresh["handlers"] >= 3


def test_chdb_durable_and_extra_environments_start_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_forked, "ENABLED", True)
    assert _forked.forkable(_proc.program_argv("serve", {"impl": "durable_obj"}))
    assert not _forked.forkable(_proc.program_argv("serve", {"impl": "chdb.durable"}))
    assert not _forked.forkable(_proc.program_argv("leave_open", {}))
    # a child given an environment of its own starts fresh: a module may read
    # it at import, which the forkserver did before the child existed
    with _proc.Worker("durable_obj", env={"DURABLE_TEST_PROBE": "own"}) as worker:
        assert isinstance(worker.proc, subprocess.Popen)
    with _proc.Worker("durable_obj") as worker:
        assert isinstance(worker.proc, _forked.ForkedProcess)
