"""Units of work under SIGKILL (issue 27): a unit is whole or absent.

The pattern of the issue's trial, written with units of work: about ten
asyncio tasks of one process write numbered units to one object, each a
memory row and its log row, alternately with `awrite(memory, log)` and with
an `abatch()` block of two `aexecute()` calls; beside them a task calls
`aflush()` at random moments and one `aexecute()`s single rows of a third
table (`children.unit_writer`). The writer is SIGKILLed at random moments
and restarted under the same owner with reclaim=True, which takes the
killed process's lease at once (no force, no waiting for it to expire).

After each kill a fresh read-only open in a reader process (a long-lived
child, one open per check), and at the end one in a new process, reads what
is stored, and the test checks: every acknowledged unit is in both tables,
no unit is in one table and not the other, no row is there twice.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import _proc

#: SIGKILLs per store.
KILLS = int(os.environ.get("DURABLE_UNIT_KILLS", "10"))
#: Concurrent tasks writing units in each writer process.
TASKS = 10

#: Each unit id (child, task, n) with its rows in memories and in log.
UNITS = (
    "SELECT child, task, n, countIf(src = 0), countIf(src = 1) FROM ("
    "SELECT child, task, n, 0 AS src FROM memories "
    "UNION ALL SELECT child, task, n, 1 AS src FROM log) "
    "GROUP BY child, task, n ORDER BY child, task, n"
)
NOISE = "SELECT count(), uniqExact(child, i) FROM noise"

Unit = tuple[int, int, int]


def check_units(csv: str, acked: set[Unit], context: str) -> set[Unit]:
    """The unit ids stored, after checking that each is whole (one memory
    row, one log row) and that every acknowledged one is there."""
    found: set[Unit] = set()
    for line in csv.splitlines():
        child, task, n, memories, logs = (int(x) for x in line.split(","))
        unit = (child, task, n)
        assert (memories, logs) == (1, 1), (
            f"{context}: unit {unit} has {memories} memory row(s) and {logs} log row(s)"
        )
        found.add(unit)
    lost = sorted(acked - found)
    assert not lost, f"{context}: {len(lost)} acknowledged unit(s) missing, e.g. {lost[:5]}"
    return found


def check_noise(csv: str, context: str) -> int:
    """The number of noise rows, after checking none is there twice."""
    rows, distinct = (int(x) for x in csv.strip().split(","))
    assert rows == distinct, f"{context}: {rows - distinct} noise row(s) stored twice"
    return rows


def test_check_units_refuses_a_half_unit_a_duplicate_and_a_lost_unit() -> None:
    whole = "0,1,0,1,1\n0,1,1,1,1\n"
    assert check_units(whole, {(0, 1, 0)}, "ok") == {(0, 1, 0), (0, 1, 1)}
    with pytest.raises(AssertionError, match="1 memory row"):
        check_units(whole + "1,2,0,1,0\n", set(), "half")
    with pytest.raises(AssertionError, match="2 memory row"):
        check_units("1,2,0,2,2\n", set(), "twice")
    with pytest.raises(AssertionError, match="1 acknowledged unit"):
        check_units(whole, {(0, 1, 0), (3, 0, 0)}, "lost")
    with pytest.raises(AssertionError, match="stored twice"):
        check_noise("5,4\n", "noise")


def read_stored(reader: _proc.Worker, url: str, oid: str, options: dict[str, Any]) -> list[str]:
    """UNITS and NOISE, read by a fresh read-only open in the reader process."""
    reader.open(url, oid, read_only=True, storage_options=options)
    try:
        return [reader.query(UNITS), reader.query(NOISE)]
    finally:
        reader.close()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["file", "moto_s3"])
def test_random_sigkills_leave_every_acknowledged_unit_whole_and_no_unit_half_there(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    oid = "units"
    if store == "file":
        url, options = str(tmp_path), {}
    else:
        root, options = request.getfixturevalue(store)
        url = f"{root}/units-{random.randrange(2**32):x}"
    seed = random.randrange(2**32)
    print(f"{store}: seed {seed}")
    rng = random.Random(seed)
    params: dict[str, Any] = {
        "url": url,
        "options": options,
        "oid": oid,
        "owner": "unit-service",
        "tasks": TASKS,
    }
    acked: set[Unit] = set()
    found: set[Unit] = set()
    with _proc.Worker("durable_obj") as reader:
        for child_no in range(KILLS):
            context = f"seed {seed}, child {child_no}"
            with _proc.Script(
                "unit_writer", {**params, "child": child_no, "seed": rng.randrange(2**32)}
            ) as child:
                opened = child.next_marked(60)["opened"]
                # The first child creates the object; every later one takes
                # its killed predecessor's live lease at once, by reclaim.
                assert opened["warnings"] == [], context
                if child_no == 0:
                    assert opened["takeovers"] == [], context
                else:
                    assert len(opened["takeovers"]) == 1, (context, opened["takeovers"])
                    assert "reclaim" in opened["takeovers"][0], context
                time.sleep(rng.uniform(0.0, 1.0))
                if child.proc.poll() is not None:
                    raise _proc.ChildFailed(
                        f"{context}: the writer died on its own:\n{child.stderr()}"
                    )
                child.kill()
                marks = child.drain()
            acks = {(c, t, n) for t, n, c in (m["ack"] for m in marks if "ack" in m)}
            assert all(c == child_no for c, _, _ in acks), context
            acked |= acks
            units, noise = read_stored(reader, url, oid, options)
            found = check_units(units, acked, context)
            check_noise(noise, context)
    # At the end, from a process that never opened the object before.
    final = _proc.run_value(
        "read_query", {"url": url, "options": options, "oid": oid, "query": UNITS}
    )
    found = check_units(final, acked, f"seed {seed}, final")
    noise_rows = check_noise(
        _proc.run_value("read_query", {"url": url, "options": options, "oid": oid, "query": NOISE}),
        f"seed {seed}, final",
    )
    print(
        f"{store}: {KILLS} SIGKILLs, {len(acked)} units acknowledged, {len(found)} units "
        f"found, every one whole; {noise_rows} noise rows (seed {seed})"
    )
    assert acked, "no child ever acknowledged a unit: the kills came too early to test"
