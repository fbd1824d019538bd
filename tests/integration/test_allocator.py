"""An idle object's memory on the Python side (issue 39): starting the engine
pins glibc's malloc thresholds (`replica/allocator.py`), so a large buffer
freed by a worker thread goes back to the system instead of staying
resident at the top of that thread's arena. Nothing here measures memory:
these pin that glibc's dynamic raise is off once the engine runs (a 1 MiB
buffer is its own mapping again after a 4 MiB one was freed), that objects
work as before, and that a process which tunes malloc itself is left alone."""

from __future__ import annotations

import os

import pytest

from durable_obj.replica import allocator
from tests.integration._proc import run_json

pytestmark = pytest.mark.skipif(not allocator.glibc(), reason="glibc's malloc only")

#: In a fresh process: how many mappings of its own a 1 MiB buffer takes
#: after a 4 MiB buffer was freed (glibc's dynamic raise: 0; pinned: 1),
#: before the engine starts and after, with an object written and read.
CHURN = """
import ctypes, tempfile
import durable_obj
from durable_obj.replica import allocator

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info

def own_mappings():
    big = bytearray(4 << 20)
    del big
    before = libc.mallinfo2().hblks
    buf = bytearray(1 << 20)
    taken = libc.mallinfo2().hblks - before
    del buf
    return taken

raised = own_mappings()
root = tempfile.mkdtemp()
with durable_obj.open(root + "/a", owner="t") as a:
    a.execute("CREATE TABLE t (k UInt32, s String) ENGINE = MergeTree ORDER BY k")
    a.execute("INSERT INTO t SELECT number, repeat('x', 1000) FROM numbers(2000)")
    a.flush()
with durable_obj.open(root + "/a", owner="t") as a:
    rows = a.rows("SELECT count(), sum(length(s)) FROM t")
emit({"raised": raised, "pinned": own_mappings(), "state": allocator.STATE.get("done"),
      "rows": [list(r) for r in rows]})
"""


@pytest.mark.skipif(
    allocator.chosen({k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}),
    reason="this environment tunes malloc itself (a MALLOC_*_ variable)",
)
def test_the_engine_pins_the_thresholds_and_objects_work() -> None:
    got = run_json(CHURN, env={"GLIBC_TUNABLES": ""})
    assert got["raised"] == 0  # glibc's own behaviour: the 4 MiB free raised the threshold
    assert got["state"] == "pinned"
    assert got["pinned"] == 1  # a buffer over 128 KiB is its own mapping again
    assert got["rows"] == [[2000, 2_000_000]]


def test_a_process_that_tunes_malloc_itself_is_left_alone() -> None:
    got = run_json(CHURN, env={"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4194304"})
    assert got["state"] == "chosen"
    assert got["rows"] == [[2000, 2_000_000]]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=1024"}, False),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, True),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
    ],
)
def test_what_counts_as_the_process_own_choice(environ: dict[str, str], expected: bool) -> None:
    assert allocator.chosen(environ) is expected


def test_pin_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "STATE", {"done": "pinned"})
    monkeypatch.setattr(allocator, "chosen", lambda: pytest.fail("asked again"))
    assert allocator.pin() == "pinned"
