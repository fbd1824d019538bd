"""Transactions under SIGKILL (issue 37): each is whole or absent, and the
ones stored ran as if one at a time.

A writer process runs transfer transactions between four accounts from
four workers (threads of the sync API in even children, asyncio tasks of
the async one in odd ones; `txn_child.py`): each reads its turn and its
source's balance, moves money as two ledger rows (or 0 if the balance does
not cover it), and takes its turn; some raise after writing. Beside them
a worker writes and flushes rows outside any transaction. The writer is
SIGKILLed at random moments and restarted under the same owner with
reclaim=True.

After each kill a fresh read-only open in a reader process, and at the
end one in a new process, reads what is stored, and the test checks:
every acknowledged transaction is there; every transaction stored is
whole (both ledger rows and its turn, never one without the others); the
turns are 1..M, each taken once; and replaying the stored transactions one
at a time in turn order, on four integers, gives exactly the amounts each
one moved (so none read a balance or a turn another was changing).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import _proc

#: SIGKILLs per store.
KILLS = int(os.environ.get("DURABLE_TXN_KILLS", "10"))
WORKERS = 4
CHILD = "tests.integration.txn_child"

TURNS = "SELECT n, child, worker, k, src, dst, want FROM turns ORDER BY n"
LEDGER = "SELECT child, worker, k, acct, delta FROM ledger ORDER BY child, worker, k, acct"

Txn = tuple[int, int, int]


def check_history(turns_csv: str, ledger_csv: str, acked: set[Txn], context: str) -> set[Txn]:
    """The transactions stored, after checking that each is whole, that the
    turns are 1..M, that a serial replay in turn order moves exactly what
    each moved, and that every acknowledged one is there."""
    turns = [tuple(int(x) for x in line.split(",")) for line in turns_csv.splitlines()]
    assert [t[0] for t in turns] == list(range(1, len(turns) + 1)), (
        f"{context}: the turns are not 1..{len(turns)}: {[t[0] for t in turns][:20]}"
    )
    ids: list[Txn] = [(t[1], t[2], t[3]) for t in turns]
    assert len(set(ids)) == len(ids), f"{context}: a transaction took two turns"
    moves: dict[Txn, list[tuple[int, int]]] = {}
    for line in ledger_csv.splitlines():
        child, worker, k, acct, delta = (int(x) for x in line.split(","))
        moves.setdefault((child, worker, k), []).append((acct, delta))
    half = sorted(set(moves) ^ set(ids) | {i for i, rows in moves.items() if len(rows) != 2})
    assert not half, f"{context}: {len(half)} transaction(s) half there, e.g. {half[:5]}"
    balances = [100] * 4
    for n, child, worker, k, src, dst, want in turns:
        amount = want if balances[src] >= want else 0
        moved = sorted(moves[(child, worker, k)])
        assert moved == sorted([(src, -amount), (dst, amount)]), (
            f"{context}: transaction {(child, worker, k)} (turn {n}) moved {moved}; one at a "
            f"time in turn order it moves {amount} from {src} (balance {balances[src]}) to {dst}"
        )
        balances[src] -= amount
        balances[dst] += amount
    lost = sorted(acked - set(ids))
    assert not lost, f"{context}: {len(lost)} acknowledged transaction(s) missing, e.g. {lost[:5]}"
    return set(ids)


def test_check_history_refuses_a_half_transaction_an_interleaving_and_a_lost_one() -> None:
    turns = "1,0,0,1,0,1,30\n2,0,1,1,0,2,80\n"
    ledger = "0,0,1,0,-30\n0,0,1,1,30\n0,1,1,0,-0\n0,1,1,2,0\n"
    # the second wanted 80 of the 70 left: it moved 0
    assert check_history(turns, ledger, {(0, 0, 1)}, "ok") == {(0, 0, 1), (0, 1, 1)}
    with pytest.raises(AssertionError, match="half there"):
        check_history(
            turns, ledger.replace("0,1,1,2,0\n", "").replace("0,1,1,0,-0\n", ""), set(), ""
        )
    with pytest.raises(AssertionError, match="half there"):
        check_history(turns + "3,0,2,1,1,0,5\n", ledger, set(), "a turn alone")
    with pytest.raises(AssertionError, match="half there"):
        check_history(turns, ledger.replace("0,1,1,2,0\n", ""), set(), "one row of two")
    with pytest.raises(AssertionError, match="one at a time"):  # it read 100, not 70
        check_history(turns, ledger.replace("-0", "-80").replace("2,0", "2,80"), set(), "")
    with pytest.raises(AssertionError, match=r"not 1\.\.2"):  # both took turn 1
        check_history(turns.replace("2,0,1", "1,0,1"), ledger, set(), "")
    with pytest.raises(AssertionError, match="1 acknowledged"):
        check_history(turns, ledger, {(0, 0, 1), (3, 0, 1)}, "lost")


def read_stored(reader: _proc.Worker, url: str, oid: str, options: dict[str, Any]) -> list[str]:
    """TURNS and LEDGER, read by a fresh read-only open in the reader process."""
    reader.open(url, oid, read_only=True, storage_options=options)
    try:
        return [reader.query(TURNS), reader.query(LEDGER)]
    finally:
        reader.close()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["file", "moto_s3"])
def test_random_sigkills_leave_every_acknowledged_transaction_whole_and_serial(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    oid = "bank"
    if store == "file":
        url, options = str(tmp_path), {}
    else:
        root, options = request.getfixturevalue(store)
        url = f"{root}/txn-{random.randrange(2**32):x}"
    seed = random.randrange(2**32)
    print(f"{store}: seed {seed}")
    rng = random.Random(seed)
    acked: set[Txn] = set()
    found: set[Txn] = set()
    with _proc.Worker("durable_obj") as reader:
        for child_no in range(KILLS):
            context = f"seed {seed}, child {child_no}"
            params = {
                "url": f"{url}/{oid}",
                "options": options,
                "owner": "txn-service",
                "child": child_no,
                "workers": WORKERS,
                "tasks": child_no % 2 == 1,
                "seed": rng.randrange(2**32),
            }
            child = _proc._Child([sys.executable, "-m", CHILD, json.dumps(params)])
            try:
                assert child.next_marked(60) == {"opened": True}, context
                time.sleep(rng.uniform(0.0, 2.0))
                if child.proc.poll() is not None:
                    raise _proc.ChildFailed(
                        f"{context}: the writer died on its own:\n{child.stderr()}"
                    )
                child.kill()
                marks = child.drain()
            finally:
                child.cleanup()
            acks = {(c, w, k) for c, w, k in (m["ack"] for m in marks if "ack" in m)}
            assert all(c == child_no for c, _, _ in acks), context
            acked |= acks
            turns, ledger = read_stored(reader, url, oid, options)
            found = check_history(turns, ledger, acked, context)
    final = [
        _proc.run_value("read_query", {"url": url, "options": options, "oid": oid, "query": q})
        for q in (TURNS, LEDGER)
    ]
    found = check_history(*final, acked, f"seed {seed}, final")
    print(
        f"{store}: {KILLS} SIGKILLs, {len(acked)} transactions acknowledged, {len(found)} "
        f"stored, every one whole and in a serial order (seed {seed})"
    )
    assert acked, "no child ever acknowledged a transaction: the kills came too early to test"
