"""DurableSaver against langgraph-checkpoint-sqlite's SqliteSaver on a
50-step graph: stored bytes per checkpoint, and put / get_tuple latency.

    python benchmarks/bench_langgraph.py            # 50 steps, a local folder
    python benchmarks/bench_langgraph.py --steps 200 --doc-kb 64

The graph's state has a large document that is written once and never
changes, a counter and a short log that change every step: the case where
a blob table keyed by (channel, version) stores the document once, where a
saver that writes every channel value into every checkpoint would store it
per step. Stored bytes are, for durable_obj, everything under the object's
folder after close (head, WAL segments, and a base if one was folded), and
after a checkpoint() (one compressed base); for SQLite, the database file
(+ -wal) after close. Latencies are of the saver's own put / get_tuple
calls (the graph's put_writes included in the run), p50 / p99 in ms.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import operator
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from durable_obj.langgraph import DurableSaver


class State(TypedDict):
    doc: str
    n: int
    log: Annotated[list[str], operator.add]


def graph(saver: Any, steps: int) -> Any:
    g = StateGraph(State)
    g.add_node("work", lambda s: {"n": s["n"] + 1, "log": [f"step {s['n']}"]})
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "work" if s["n"] < steps else END)
    return g.compile(checkpointer=saver)


def timed(saver: Any, samples: dict[str, list[float]]) -> None:
    """Wrap put / get_tuple of `saver` to record their latencies."""
    for name in ("put", "get_tuple"):
        fn: Callable[..., Any] = getattr(saver, name)

        def wrapper(*a: Any, _fn: Callable[..., Any] = fn, _n: str = name, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                samples[_n].append((time.perf_counter() - t0) * 1000)

        setattr(saver, name, wrapper)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def doc(kb: int) -> str:
    out, h = [], b"seed"
    while sum(map(len, out)) < kb * 1024:
        h = hashlib.sha256(h).digest()
        out.append(h.hex())
    return "".join(out)[: kb * 1024]


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else xs[0]


def run(steps: int, doc_kb: int, root: Path) -> dict[str, Any]:
    start = {"doc": doc(doc_kb), "n": 0, "log": []}
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": steps * 2 + 10}
    out: dict[str, Any] = {}

    url = root / "durable" / "agent"
    samples: dict[str, list[float]] = {"put": [], "get_tuple": []}
    saver = DurableSaver(str(url), fold_segments=0, close_fold_segments=0)
    timed(saver, samples)
    g = graph(saver, steps)
    g.invoke(start, config)
    for _ in range(20):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    n = int(saver.obj.query("SELECT count() FROM lg_checkpoints FINAL").strip())
    saver.close()
    wal_bytes = folder_bytes(url)
    saver = DurableSaver(str(url))
    saver.obj.checkpoint()
    saver.close()
    base_bytes = sum(p.stat().st_size for p in (url / "checkpoints").iterdir())
    out["durable_obj"] = {
        "checkpoints": n,
        "stored_bytes_wal": wal_bytes,
        "per_checkpoint_wal": wal_bytes / n,
        "base_bytes_after_checkpoint": base_bytes,
        "per_checkpoint_base": base_bytes / n,
        "put_p50_ms": pct(samples["put"], 50),
        "put_p99_ms": pct(samples["put"], 99),
        "get_tuple_p50_ms": pct(samples["get_tuple"], 50),
        "get_tuple_p99_ms": pct(samples["get_tuple"], 99),
    }

    db = root / "sqlite" / "checkpoints.sqlite"
    db.parent.mkdir(parents=True)
    samples = {"put": [], "get_tuple": []}
    conn = sqlite3.connect(str(db), check_same_thread=False)
    lite = SqliteSaver(conn)
    timed(lite, samples)
    graph(lite, steps).invoke(start, config)
    for _ in range(20):
        lite.get_tuple({"configurable": {"thread_id": "t"}})
    n = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    conn.close()
    size = folder_bytes(db.parent)
    out["sqlite"] = {
        "checkpoints": n,
        "stored_bytes": size,
        "per_checkpoint": size / n,
        "put_p50_ms": pct(samples["put"], 50),
        "put_p99_ms": pct(samples["put"], 99),
        "get_tuple_p50_ms": pct(samples["get_tuple"], 50),
        "get_tuple_p99_ms": pct(samples["get_tuple"], 99),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--doc-kb", type=int, default=16, help="size of the unchanging channel")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-") as tmp:
        res = run(args.steps, args.doc_kb, Path(tmp))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    d, s = res["durable_obj"], res["sqlite"]
    print(f"{args.steps}-step graph, {args.doc_kb} KiB unchanging channel, local folder")
    print(f"{'':34}{'durable_obj':>14}{'sqlite':>14}")
    print(f"{'checkpoints':34}{d['checkpoints']:>14}{s['checkpoints']:>14}")
    print(
        f"{'stored bytes / checkpoint (WAL)':34}{d['per_checkpoint_wal']:>14.0f}"
        f"{s['per_checkpoint']:>14.0f}"
    )
    print(f"{'stored bytes / checkpoint (base)':34}{d['per_checkpoint_base']:>14.0f}{'':>14}")
    for k in ("put_p50_ms", "put_p99_ms", "get_tuple_p50_ms", "get_tuple_p99_ms"):
        print(f"{k:34}{d[k]:>14.2f}{s[k]:>14.2f}")
    print("durable_obj puts are flushed (durable in the store) before they return;")
    print("sqlite commits to a local file.")


if __name__ == "__main__":
    main()
