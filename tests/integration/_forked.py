"""Child programs forked from a server that has paid their imports once.

A fresh interpreter that opens a durable_obj object on S3 spends about 1 s of
CPU before its first statement (measured, `/usr/bin/time`): durable_obj and
pydantic, chdb's 0.5 GiB library mapped and relocated, s3fs with aiohttp and
botocore. The SIGKILL trials start hundreds of such children, one per kill,
and CI runs on two cores. So the children of `_proc.Script` and
`_proc.Worker` that drive durable_obj are forked from one multiprocessing
forkserver per test process, which has imported all that (`_preloaded`)
and no more: chdb's own module, which starts the engine's threads at import,
is imported by each child, as a fresh interpreter would.

What a child sees is what a fresh `python -m tests.integration.children ...`
sees: its own pid, its stdin/stdout/stderr (pipes and a file, passed as file
descriptors), the environment and working directory it was given, the
program's argv; when it returns or exits, the interpreter's exit work
(threads joined, atexit handlers, streams flushed) runs before `os._exit`. A
SIGKILL is a SIGKILL of that process. `DURABLE_TEST_FRESH_CHILDREN=1` starts
every child as a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection
from typing import IO, Any

#: The module the forkserver imports before it forks anything.
PRELOAD = "tests.integration._preloaded"
ENABLED = os.environ.get("DURABLE_TEST_FRESH_CHILDREN", "").strip() not in ("1", "true")


class _Popen(popen_forkserver.Popen):  # type: ignore[misc]
    """multiprocessing's forkserver launch (the same code, CPython 3.11 to
    3.13), but the child is not told to import the parent's `__main__`
    again: it runs one of our programs, never the pytest worker's main."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = {
            key: value
            for key, value in spawn.get_preparation_data(process_obj._name).items()
            if key not in ("init_main_from_path", "init_main_from_name")
        }
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        # the parent's sentinel for the child, as multiprocessing keeps it
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(context.ForkServerProcess):  # type: ignore[misc]
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:
        # read when the forkserver starts (the first child); later, a no-op
        forkserver.set_forkserver_preload([PRELOAD])
        return _Popen(process_obj)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(argv: list[str], env: dict[str, str], cwd: str, fds: list[Connection]) -> None:
    """In the forked child: become `python -m tests.integration.children ...`."""
    for conn, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(conn.fileno(), target)
        conn.close()
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    tempfile.tempdir = None
    os.chdir(cwd)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
    from tests.integration import _preloaded, children

    if atexit._ncallbacks() != _preloaded.HANDLERS:
        # cleared by multiprocessing (3.13 on): the handlers the preloaded
        # imports registered, again, in their order
        for func, args, kwargs in _preloaded.REGISTERED:
            atexit.register(func, *args, **kwargs)

    # `python -m tests.integration.children NAME JSON`: argv[0] is the file
    sys.argv = [str(children.__file__), *argv[3:]]
    code = 0
    try:
        children.main(sys.argv)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    # What the interpreter's exit would do: join the non-daemon threads,
    # run the atexit handlers, flush.
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class ForkedProcess:
    """The part of `subprocess.Popen` that `_proc._Child` uses, for a child
    forked from the forkserver: text stdin and stdout pipes, stderr into
    `stderr`, `pid`, `poll`, `wait`, `returncode`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, stderr: IO[str]) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        theirs = [
            Connection(in_r, writable=False),
            Connection(out_w, readable=False),
            Connection(os.dup(stderr.fileno()), readable=False),
        ]
        try:
            self._process = _Process(target=_run, args=(argv, env, cwd, theirs), daemon=False)
            self._process.start()
        finally:
            for conn in theirs:
                conn.close()
        self.stdin: IO[str] | None = open(in_w, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.stdout: IO[str] | None = open(out_r, encoding="utf-8")  # noqa: SIM115
        self.pid: int = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(["forked child", str(self.pid)], timeout or 0)
        return code


def forkable(argv: list[str]) -> bool:
    """Whether `argv` is a children.py program that may be forked: one that
    drives durable_obj (chdb.durable's stay fresh: they never import it)."""
    if not ENABLED or argv[1:3] != ["-m", "tests.integration.children"] or len(argv) < 4:
        return False
    return argv[3] in FORKABLE and not any("chdb.durable" in arg for arg in argv[4:])


#: The programs forked: durable_obj writers and readers. `leave_open` (which
#: proves what the interpreter's exit does) and chdb.durable's stay fresh.
FORKABLE = frozenset(
    {"loop_writer", "crash_writer", "unit_writer", "race_open", "serve", "describe"}
)
