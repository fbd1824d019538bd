"""Starting the programs of tests/integration/children.py, from a test.

chDB allows one engine per process, so durable_obj and chdb.durable side
by side, a crash (SIGKILL), or a party in another process (a reader
following a writer elsewhere) run in fresh interpreters (many durable_obj
objects in one process need none: see test_multi.py):

* `run(name, params)` / `run_value(name, params)`: run a program to its end;
  its completed process, or the value of its last `emit()` (`ChildFailed`
  if it exited non-zero).
* `Script(name, params)`: a program whose emits are read while it runs, and
  who can be sent lines on stdin (the events it waits for), or SIGKILLed.
* `Worker`: the `serve` program: one object (durable_obj or chdb.durable),
  driven command by command, so a test can interleave two writers step by
  step, move one's clock, or SIGKILL one mid-flight.

`run_py(code)` and friends run a snippet of source instead, for the tests
that still keep their child programs as strings.

A `Script` or `Worker` that drives durable_obj, with no environment of its
own, is forked from a server that has done its imports once (`_forked`: it
sees what a fresh interpreter would, `test_forked_children.py`); the others
start fresh, as every child does with `DURABLE_TEST_FRESH_CHILDREN=1`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from tests.integration import _forked, children

REPO = Path(__file__).resolve().parents[2]
MARK = children.MARK
CHILDREN = "tests.integration.children"

#: Put in front of every snippet run by `run_py`: the parameters, `emit()`
#: and `attempt()`.
PRELUDE = """\
import json, sys, time, warnings
from tests.integration.children import attempt, emit
P = json.loads(sys.argv[1])
"""


class ChildFailed(RuntimeError):
    """A child exited non-zero, timed out, or answered out of protocol."""


class OpFailed(RuntimeError):
    """A worker operation raised in the child; `category` is the error's."""

    def __init__(self, op: str, reply: dict[str, Any]) -> None:
        self.op = op
        self.category: str | None = reply.get("category")
        self.type: str | None = reply.get("type")
        self.reply = reply
        super().__init__(f"{op}: {self.type} [{self.category}]: {reply.get('message')}")


_scratch: str | None = None


def scratch_dir() -> str:
    """TMPDIR for every child: a SIGKILLed child cannot remove its scratch
    copy, so they all go in one folder that this process removes at exit."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.mkdtemp(prefix="durable_obj-it-children-")
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = scratch_dir()
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def program_argv(name: str, params: dict[str, Any] | None = None) -> list[str]:
    """The command line of program `name` of tests/integration/children.py."""
    if name not in children.PROGRAMS:
        raise ValueError(f"no child program {name!r} in {CHILDREN}")
    return [sys.executable, "-m", CHILDREN, name, json.dumps(params or {})]


def _snippet_argv(code: str, params: dict[str, Any] | None) -> list[str]:
    source = PRELUDE + textwrap.dedent(code)
    return [sys.executable, "-c", source, json.dumps(params or {})]


def _marked(stdout: str) -> list[Any]:
    return [json.loads(line[len(MARK) :]) for line in stdout.splitlines() if line.startswith(MARK)]


def _complete(
    argv: list[str], timeout: float, env: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(env),
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise ChildFailed(
            f"child did not exit within {timeout} s\n--- stdout ---\n{out}\n--- stderr ---\n{err}"
        ) from None


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    if proc.returncode != 0:
        raise ChildFailed(
            f"child exited {proc.returncode}\n--- stdout ---\n{proc.stdout}"
            f"\n--- stderr ---\n{proc.stderr}"
        )
    return proc.stdout


def _last_value(out: str) -> Any:
    values = _marked(out)
    if not values:
        raise ChildFailed(f"child emitted nothing; stdout:\n{out}")
    return values[-1]


def run(
    name: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run program `name` in a fresh interpreter, whatever its exit status;
    `ChildFailed` only if it does not exit within `timeout`. `env` adds to
    (or overrides) this process's environment."""
    return _complete(program_argv(name, params), timeout, env)


def run_value(
    name: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> Any:
    """Run program `name`; the value of its last `emit()` (`ChildFailed` if
    it exited non-zero or emitted nothing)."""
    return _last_value(_ok(run(name, params, timeout=timeout, env=env)))


def run_raw(
    code: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a snippet `code` (after PRELUDE), whatever its exit status."""
    return _complete(_snippet_argv(code, params), timeout, env)


def run_py(
    code: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> str:
    """Run a snippet `code` (after PRELUDE); its stdout."""
    return _ok(run_raw(code, params, timeout=timeout, env=env))


def run_json(
    code: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> Any:
    """Run a snippet `code`; the value of its last `emit()`."""
    return _last_value(run_py(code, params, timeout=timeout, env=env))


class _Child:
    """A child process with stdout lines delivered through a queue."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        # Closed by cleanup(): it outlives this call.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc: subprocess.Popen[str] | _forked.ForkedProcess
        if env is None and _forked.forkable(argv):
            # Forked from a server that paid the imports once (`_forked`).
            self.proc = _forked.ForkedProcess(argv, child_env(), str(REPO), self._stderr)
        else:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                bufsize=1,
                env=child_env(env),
                cwd=REPO,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def next_marked(self, timeout: float) -> Any:
        """The next `@@` value the child printed; ChildFailed on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise ChildFailed(
                    f"child {self.pid} said nothing for {timeout} s; stderr:\n{self.stderr()}"
                ) from None
            if line is None:
                self.proc.wait()
                raise ChildFailed(
                    f"child {self.pid} exited {self.proc.returncode}; stderr:\n{self.stderr()}"
                )
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])

    def drain(self, timeout: float = 10) -> list[Any]:
        """After the child is gone: every `@@` value it printed and we did not take."""
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                break
            if line is None:
                break
            if line.startswith(MARK):
                out.append(json.loads(line[len(MARK) :]))
        return out

    def send(self, line: str = "go") -> None:
        """Send one line to the child's stdin: the event it waits for."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL, as a crash: no close(), no atexit, no flush."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ChildFailed(f"child {self.pid} did not exit in {timeout} s") from None

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


class Script(_Child):
    """Run program `name` with its emits readable while it runs."""

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(program_argv(name, params))

    def __enter__(self) -> Script:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class Worker(_Child):
    """A long-lived child holding one object, driven command by command.

    `impl` is "durable_obj" or "chdb.durable". Every call returns the value
    or raises `OpFailed` with the child's error category; `warnings` holds
    the warnings the last call emitted in the child (all are recorded).
    """

    def __init__(
        self, impl: str = "durable_obj", *, timeout: float = 90, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(program_argv("serve", {"impl": impl}), env)
        self.impl = impl
        self.timeout = timeout
        self.warnings: list[dict[str, str]] = []
        hello = self.next_marked(timeout)
        if hello != {"ready": impl}:
            raise ChildFailed(f"unexpected greeting {hello!r}")

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        """Send one command; the raw reply ({"ok": ..., "warnings": [...], ...})."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = self.next_marked(self.timeout)
        self.warnings = reply.get("warnings", [])
        return reply

    def call(self, op: str, **args: Any) -> Any:
        reply = self.request(op, **args)
        if not reply["ok"]:
            raise OpFailed(op, reply)
        return reply.get("value")

    def open(
        self,
        url: str,
        oid: str,
        *,
        owner: str | None = None,
        read_only: bool = False,
        force: bool = False,
        at: int | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """`at`: a past seq (durable_obj only: time travel)."""
        extra = {} if at is None else {"at": at}
        info: dict[str, Any] = self.call(
            "open",
            url=url,
            oid=oid,
            owner=owner,
            read_only=read_only,
            force=force,
            options=options,
            **extra,
        )
        return info

    def execute(self, sql: str) -> None:
        self.call("execute", sql=sql)

    def flush(self) -> str | None:
        key: str | None = self.call("flush")
        return key

    def checkpoint(self) -> str:
        key: str = self.call("checkpoint")
        return key

    def query(self, sql: str, fmt: str = "CSV") -> str:
        out: str = self.call("query", sql=sql, fmt=fmt)
        return out

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.call("info")
        return info

    def close(self) -> None:
        self.call("close")

    def clock(self, at: float | None) -> None:
        """Freeze the child's wall clock at `at` (None: the real one again)."""
        self.call("clock", at=at)

    def exit(self, timeout: float = 30) -> int:
        """Ask the child to leave (without closing the object) and wait for it."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        return self.wait(timeout)
