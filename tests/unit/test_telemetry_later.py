"""Records completed off the caller's thread (`durable_obj/telemetry/later.py`):
in the order handed over, on one thread of their own, on the caller's past
`MAX` waiting, never raising, and in a fork's child as in its parent."""

from __future__ import annotations

import os
import threading

import pytest

from durable_obj.telemetry import later


def test_records_run_in_order_on_the_telemetry_thread() -> None:
    seen: list[tuple[int, str]] = []
    for n in range(200):
        later.submit(lambda n: seen.append((n, threading.current_thread().name)), n)
    assert later.drain()
    assert [n for n, _ in seen] == list(range(200))
    assert {name for _, name in seen} == {"durable_obj-telemetry"}


def test_past_max_waiting_the_caller_completes_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(later, "MAX", 0)
    where: list[str] = []
    later.submit(lambda: where.append(threading.current_thread().name))
    assert where == [threading.current_thread().name]


def test_a_failing_record_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []

    def fail() -> None:
        raise RuntimeError("exporter down")

    with caplog.at_level("DEBUG", logger="durable_obj"):
        later.submit(fail)
        later.submit(seen.append, 1)
        assert later.drain()
    assert seen == [1]
    assert "could not complete a telemetry record" in caplog.text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_records_on_a_thread_of_its_own() -> None:
    later.submit(lambda: None)
    assert later.drain()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here
        ok = False
        try:
            seen: list[int] = []
            later.submit(seen.append, 7)
            ok = later.drain(10) and seen == [7]
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"
