"""Fresh interpreters: every figure is taken in processes of its own, as
chDB holds one engine per process and a cold open must pay for its imports.

A child is `python -m <module> ...` with the benchmarks folder and the
repository first on its PYTHONPATH, so a family module is found by its
package name (`workloads.multi`) and never shadows the library it measures
(`workloads/ray.py` beside `import ray`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
IMPLS = ("durable_obj", "chdb.durable")


_COMPILED: list[bool] = []


def precompile() -> None:
    """Byte-compile the repository's package once per run, as an install
    does (pip compiles what it installs: chdb and every other dependency
    already has its .pyc). A child then imports durable_obj as a user's
    process would, not compiled from source each time: an editable install
    has no .pyc, and with PYTHONDONTWRITEBYTECODE set (this machine) none is
    ever written, which added about 105 ms to every cold open measured."""
    if not _COMPILED:
        import compileall

        compileall.compile_dir(os.path.join(REPO, "durable_obj"), quiet=1)
        _COMPILED.append(True)


def environ(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the benchmarks folder and the
    repository first on PYTHONPATH (the package byte-compiled: `precompile`)."""
    precompile()
    out = dict(os.environ if env is None else env)
    paths = [BENCH, REPO, *filter(None, out.get("PYTHONPATH", "").split(os.pathsep))]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return out


def command(module: str, *args: str) -> list[str]:
    """The argv that runs `module` (a dotted name below benchmarks/) in a fresh interpreter."""
    return [sys.executable, "-m", module, *args]


def run_json(
    module: str,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    what: str = "",
    timeout: float = 3600,
    tail: int = 4000,
    wall: bool = False,
) -> dict[str, Any]:
    """Run `module` with `args`; its last stdout line is the JSON result (with
    `wall`, plus `wall_s`: spawn to exit). A failure raises with the end of
    its stderr."""
    start = time.perf_counter()
    proc = subprocess.run(
        command(module, *args),
        capture_output=True,
        text=True,
        env=environ(env),
        timeout=timeout,
        check=False,
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{what or module} failed:\n{proc.stderr[-tail:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if wall:
        result["wall_s"] = took
    return result


def run_child(spec: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """One measurement of run.py's side-by-side figures (workloads.versus.child)."""
    what = f"{spec.get('impl')} {spec.get('phase')} {spec.get('oid', '')}"
    return run_json("workloads.versus.child", [json.dumps(spec)], env, what=what, timeout=1800)


def alternating(rep: int, impls: Sequence[str] = IMPLS) -> Sequence[str]:
    """Both implementations each repetition, the first one swapped every time."""
    return impls if rep % 2 == 0 else impls[::-1]


def rotated(names: Sequence[str], rep: int) -> list[str]:
    """`names`, starting at a different one each repetition."""
    k = rep % len(names)
    return [*names[k:], *names[:k]]
