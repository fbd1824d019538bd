"""50 objects written from 8 threads of one process, the process SIGKILLed
at a random moment, each object reopened in a fresh process (issue 14).

What is checked, per object, from the fresh process: every batch whose
flush() returned (and was acknowledged on the pipe after it returned) is
there; the batches are 0..k-1 with nothing missing in between, so at most
the one batch in flight at the kill is there unacknowledged; and every batch
is whole (each of its statements, each statement's rows once): a segment is
never half applied, nor applied twice. The fresh process opens every object
as its writer without force, once the crashed writer's short lease expired.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import _proc
from tests.integration.multi_crash_child import oid_of

pytestmark = pytest.mark.slow

CHILD = "tests.integration.multi_crash_child"
OBJECTS = 50
THREADS = 8
STATEMENTS = 2
ROWS = 3
TTL = 2.0
#: acknowledgements seen before the kill may come (about four batches an object)
ACKS_BEFORE_KILL = 200


def _argv(program: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", CHILD, program, json.dumps(params)]


def _head(root: Path, oid: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / oid / "head.json").read_bytes())
    return doc


def test_sigkill_of_50_objects_in_8_threads_keeps_exactly_whole_acknowledged_batches(
    tmp_path: Path,
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    params = {
        "url": str(tmp_path),
        "objects": OBJECTS,
        "threads": THREADS,
        "statements": STATEMENTS,
        "rows": ROWS,
        "ttl": TTL,
        "checkpoint_every": 3,
    }
    acked: dict[str, int] = {}  # oid -> highest acknowledged batch
    ready: set[str] = set()
    child = _proc._Child(_argv("write", params))
    try:

        def take(msg: dict[str, Any]) -> None:
            assert "error" not in msg, msg["error"]
            if "ready" in msg:
                ready.add(msg["ready"])
            else:
                oid, batch = msg["ack"]
                assert batch == acked.get(oid, -1) + 1, f"{oid}: acknowledged out of order"
                acked[oid] = batch

        count = 0
        while len(ready) < OBJECTS or count < ACKS_BEFORE_KILL:
            msg = child.next_marked(120)
            take(msg)
            count += "ack" in msg
        time.sleep(rng.uniform(0.0, 0.3))  # a random moment, mid-flight
        child.kill()
        for msg in child.drain():  # what reached the pipe before the kill
            take(msg)
    finally:
        child.cleanup()
    context = f"seed {seed}, {sum(b + 1 for b in acked.values())} batches acknowledged"
    assert len(acked) == OBJECTS, f"{context}: some objects acknowledged nothing"

    # A SIGKILLed writer releases nothing: every lease is still the crasher's,
    # and the fresh process gets in only because they expire.
    heads = {oid_of(i): _head(tmp_path, oid_of(i)) for i in range(OBJECTS)}
    assert {h["lease"]["owner"] for h in heads.values()} == {"crasher"}, context
    expiry = max(h["lease"]["expires_at"] for h in heads.values())
    while time.time() <= expiry + 0.05:
        time.sleep(0.05)

    seen = _proc.run_json(
        "from tests.integration.multi_crash_child import verify\nverify(P)\n",
        {"url": str(tmp_path), "objects": OBJECTS},
        timeout=120,
    )
    assert sorted(seen) == sorted(heads)
    extra = 0
    for oid, got in seen.items():
        assert got["generation"] == heads[oid]["lease"]["generation"] + 1, f"{context}: {oid}"
        batches = [[int(x) for x in row] for row in got["batches"]]
        numbers = [b[0] for b in batches]
        assert numbers == list(range(len(batches))), f"{context}: {oid} has gaps: {numbers}"
        for batch, count, distinct in batches:
            assert (count, distinct) == (STATEMENTS * ROWS, STATEMENTS * ROWS), (
                f"{context}: {oid} batch {batch} is partial or doubled: "
                f"{count} rows, {distinct} distinct"
            )
        # every acknowledged batch, and at most the one in flight at the kill
        assert acked[oid] + 1 <= len(batches) <= acked[oid] + 2, (
            f"{context}: {oid} acknowledged 0..{acked[oid]}, found 0..{len(batches) - 1}"
        )
        extra += len(batches) - acked[oid] - 1
    print(f"{context}; {extra} in-flight batch(es) found committed, none partial")
