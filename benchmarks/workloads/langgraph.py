"""DurableSaver against langgraph-checkpoint-sqlite's SqliteSaver on a
50-step graph (stored bytes per checkpoint, put / get_tuple latency), and
DurableStore against InMemoryStore and SqliteStore on 10,000 items (put,
then search by filter, by namespace and by vector: p50 / p99).

    python benchmarks/run.py --only langgraph            # 50 steps, 10k items, a local folder
    python benchmarks/run.py --only langgraph -- --steps 200 --doc-kb 64
    python benchmarks/run.py --only langgraph -- --s3      # + the saver on S3 at +0 and +20 ms
    python benchmarks/run.py --only langgraph -- --only saver --latency-ms 20  # S3, +20 ms
    python benchmarks/run.py --only langgraph --smoke   # tiny: proves it runs, measures nothing
    python benchmarks/run.py --only langgraph -- --only store --items 10000

With --s3 or --latency-ms the saver also runs on SeaweedFS on 127.0.0.1
(started as benchmarks/run.py does), once per latency (--s3: with no added
latency, then through benchmarks/harness/s3proxy.py adding 20 ms to every request),
with the default per-put flush and with flush="batch" (every 10 puts);
SqliteSaver stays on a local file.

The graph's state has a large document that is written once and never
changes, a counter and a short log that change every step: the case where
a blob table keyed by (channel, version) stores the document once, where a
saver that writes every channel value into every checkpoint would store it
per step. Stored bytes are, for durable_obj, everything under the object's
folder after close (head, WAL segments, and a base if one was folded), and
after a checkpoint() (one compressed base); for SQLite, the database file
(+ -wal) after close. Latencies are of the saver's own put / get_tuple
calls (the graph's put_writes included in the run), p50 / p99 in ms.

The store: --items items in 100 namespaces, each with a JSON value and a
deterministic 32-dimension embedding of its text (hash-based, the same
Python function for all three stores, so the model's cost is equal). The
first --timed-puts are single put() calls, timed (DurableStore's are
flushed, i.e. durable, before they return; SqliteStore commits to a local
file); the rest are loaded by batch() of 500 puts. Each search form then runs
--searches times, limit 10. SqliteStore's vector search is sqlite-vec.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import operator
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from durable_obj.langgraph import DurableSaver, DurableStore


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
    out: list[str] = []
    h = b"seed"
    while sum(map(len, out)) < kb * 1024:
        h = hashlib.sha256(h).digest()
        out.append(h.hex())
    return "".join(out)[: kb * 1024]


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else xs[0]


def durable_saver(
    url: str, storage: dict[str, Any] | None, steps: int, doc_kb: int, **kw: Any
) -> dict[str, Any]:
    """The graph on a DurableSaver at `url`: latencies and checkpoint count."""
    start = {"doc": doc(doc_kb), "n": 0, "log": []}
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": steps * 2 + 10}
    samples: dict[str, list[float]] = {"put": [], "get_tuple": []}
    saver = DurableSaver(url, storage_options=storage, fold_segments=0, close_fold_segments=0, **kw)
    timed(saver, samples)
    graph(saver, steps).invoke(start, config)
    saver.flush()
    for _ in range(20):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    n = int(saver.obj.query("SELECT count() FROM lg_checkpoints FINAL").strip())
    saver.close()
    return {"checkpoints": n, **latencies(samples)}


def latencies(samples: dict[str, list[float]]) -> dict[str, float]:
    return {f"{k}_p{q}_ms": pct(v, q) for k, v in samples.items() for q in (50, 99)}


def run(steps: int, doc_kb: int, root: Path) -> dict[str, Any]:
    start = {"doc": doc(doc_kb), "n": 0, "log": []}
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": steps * 2 + 10}
    out: dict[str, Any] = {}

    url = root / "durable" / "agent"
    got = durable_saver(str(url), None, steps, doc_kb)
    n = got["checkpoints"]
    wal_bytes = folder_bytes(url)
    saver = DurableSaver(str(url))
    saver.obj.checkpoint()
    saver.close()
    base_bytes = sum(p.stat().st_size for p in (url / "checkpoints").iterdir())
    out["durable_obj"] = {
        **got,
        "stored_bytes_wal": wal_bytes,
        "per_checkpoint_wal": wal_bytes / n,
        "base_bytes_after_checkpoint": base_bytes,
        "per_checkpoint_base": base_bytes / n,
    }

    db = root / "sqlite" / "checkpoints.sqlite"
    db.parent.mkdir(parents=True)
    samples: dict[str, list[float]] = {"put": [], "get_tuple": []}
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
        **latencies(samples),
    }
    return out


def run_s3(steps: int, doc_kb: int, latencies_ms: list[float]) -> dict[str, Any]:
    """The saver on one SeaweedFS, at each added latency in turn (through the
    latency proxy when > 0), flushed per put and batched."""
    from harness.s3proxy import LatencyProxy
    from harness.servers import seaweed

    out: dict[str, Any] = {}
    with seaweed() as server:
        for latency_ms in latencies_ms:
            proxy = LatencyProxy(server.endpoint, latency_ms / 1e3).start() if latency_ms else None
            endpoint = proxy.endpoint if proxy is not None else server.endpoint
            storage = {
                "key": server.key,
                "secret": server.secret,
                "endpoint_url": endpoint,
                "client_kwargs": {"region_name": "us-east-1"},
            }
            at: dict[str, Any] = {}
            try:
                for name, kw in (
                    ("every", {}),
                    ("batch", {"flush": "batch", "batch_puts": 10, "batch_seconds": None}),
                ):
                    url = f"s3://{server.bucket}/bench-lg-{uuid.uuid4().hex[:8]}/agent"
                    at[name] = durable_saver(url, storage, steps, doc_kb, **kw)
            finally:
                if proxy is not None:
                    proxy.stop()
            out[f"{latency_ms:g}"] = at
    return out


# -- the store ---------------------------------------------------------------------
DIMS = 32
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: the SHA-256 bytes of the text, scaled."""
    out = []
    for t in texts:
        h = hashlib.sha256(t.encode()).digest()
        out.append([(b - 127.5) / 127.5 for b in h[:DIMS]])
    return out


def item(i: int) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7))
    value = {"kind": f"k{i % 10}", "n": i, "text": f"{words} {i}", "meta": {"team": i % 4}}
    return ("users", f"u{i % 100}"), f"item-{i}", value


SEARCHES: dict[str, dict[str, Any]] = {
    "filter $eq": {"namespace_prefix": ("users",), "filter": {"kind": "k3"}},
    "filter $gte": {"namespace_prefix": ("users",), "filter": {"n": {"$gte": 9000}}},
    "nested filter": {"namespace_prefix": ("users",), "filter": {"meta": {"team": 2}}},
    "namespace prefix": {"namespace_prefix": ("users", "u42")},
    "vector": {"namespace_prefix": ("users",), "query": "delta echo 17"},
    "vector + filter": {
        "namespace_prefix": ("users",),
        "query": "delta echo 17",
        "filter": {"kind": "k3"},
    },
}


def bench_store(
    store: BaseStore, items: int, timed_puts: int, searches: int, *, vector: bool = True
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"put": []}
    for i in range(min(timed_puts, items)):
        ns, key, value = item(i)
        t0 = time.perf_counter()
        store.put(ns, key, value)
        samples["put"].append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    for start in range(timed_puts, items, 500):
        store.batch([PutOp(*item(i)) for i in range(start, min(items, start + 500))])
    load_s = time.perf_counter() - t0
    hits: dict[str, int] = {}
    for name, kw in SEARCHES.items():
        if "query" in kw and not vector:
            continue
        prefix = kw["namespace_prefix"]
        rest = {k: v for k, v in kw.items() if k != "namespace_prefix"}
        try:
            store.search(prefix, limit=10, **rest)
        except ValueError:  # a form this store does not support (SqliteStore: nested)
            continue
        samples[name] = []
        for _ in range(searches):
            t0 = time.perf_counter()
            found = store.search(prefix, limit=10, **rest)
            samples[name].append((time.perf_counter() - t0) * 1000)
        hits[name] = len(found)
    return {"load_rest_s": load_s, "hits": hits, **latencies(samples)}


def run_store(root: Path, items: int, timed_puts: int, searches: int) -> dict[str, Any]:
    index: Any = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    out: dict[str, Any] = {}
    durable = DurableStore(str(root / "store" / "mem"), index=index)
    out["durable_obj"] = bench_store(durable, items, timed_puts, searches)
    durable.close()
    out["InMemoryStore"] = bench_store(InMemoryStore(index=index), items, timed_puts, searches)
    conn = sqlite3.connect(str(root / "store.sqlite"), check_same_thread=False)
    conn.isolation_level = None  # SqliteStore manages its own transactions
    # SqliteStore's vector search needs sqlite-vec, i.e. a Python whose sqlite3
    # can load extensions; without one it runs without an index. It refuses
    # nested-equality filters (a dict value is read as operators).
    vector = hasattr(conn, "enable_load_extension")
    lite = SqliteStore(conn, index=index if vector else None)
    lite.setup()
    out["SqliteStore"] = bench_store(lite, items, timed_puts, searches, vector=vector)
    conn.close()
    return out


# -- output ------------------------------------------------------------------------
def print_saver(res: dict[str, Any], args: argparse.Namespace) -> None:
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
    for latency, at in res.get("s3", {}).items():
        lat = f", +{latency} ms per request" if float(latency) else ""
        print(f"\nDurableSaver on SeaweedFS (127.0.0.1{lat}), ms; sqlite: the local file above")
        e, b = at["every"], at["batch"]
        print(f"{'':34}{'flush=every':>14}{'flush=batch/10':>16}{'sqlite':>10}")
        for k in ("put_p50_ms", "put_p99_ms", "get_tuple_p50_ms", "get_tuple_p99_ms"):
            print(f"{k:34}{e[k]:>14.2f}{b[k]:>16.2f}{s[k]:>10.2f}")


def print_store(res: dict[str, Any], args: argparse.Namespace) -> None:
    names = ("durable_obj", "InMemoryStore", "SqliteStore")
    print(
        f"\nstore: {args.items:,} items, {DIMS}-dim embeddings, {args.timed_puts} timed puts, "
        f"{args.searches} searches per form (limit 10), local folder; ms"
    )
    print(f"{'':30}" + "".join(f"{n:>16}" for n in names))
    keys = ["put", *SEARCHES]
    for k in keys:
        for q in (50, 99):
            row = "".join(f"{res[n].get(f'{k}_p{q}_ms', math.nan):>16.2f}" for n in names)
            print(f"{f'{k} p{q}':30}{row}")
    print(
        f"{'load the rest by batch(500), s':30}"
        + "".join(f"{res[n]['load_rest_s']:>16.2f}" for n in names)
    )
    print(
        f"{'hits (filter $eq)':30}" + "".join(f"{res[n]['hits']['filter $eq']:>16}" for n in names)
    )
    print("durable_obj puts are flushed before they return; SqliteStore commits to a local file;")
    for n in names:
        missing = [k for k in SEARCHES if k not in res[n]["hits"]]
        if missing:
            print(f"{n} does not run: {', '.join(missing)} (nan above)")
    print("InMemoryStore keeps nothing.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="saver,store", help="comma list: saver, store")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--doc-kb", type=int, default=16, help="size of the unchanging channel")
    parser.add_argument(
        "--s3", action="store_true", help="also run the saver on SeaweedFS, at +0 and +20 ms"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        action="append",
        help="added per S3 request, repeatable (implies --s3; default with --s3: 0 and 20)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: runs, measures nothing")
    parser.add_argument("--results", help="also write the raw figures to this folder as JSON")
    parser.add_argument("--items", type=int, default=10_000, help="store items")
    parser.add_argument("--timed-puts", type=int, default=200, help="single puts timed")
    parser.add_argument("--searches", type=int, default=50, help="searches per form")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument(
        "--root",
        help="folder for the stores' files (default: a temporary folder). The engine's own "
        "working copy follows TMPDIR, so TMPDIR=/dev/shm --root /var/tmp/x puts only the "
        "engine on tmpfs",
    )
    args = parser.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if args.smoke:
        args.steps, args.doc_kb, args.items = 3, 1, 60
        args.timed_puts, args.searches = 5, 2
    latencies = args.latency_ms or ([0.0, 20.0] if args.s3 else [])
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-", dir=args.root) as tmp:
        if "saver" in only:
            res["saver"] = run(args.steps, args.doc_kb, Path(tmp))
            if latencies:
                res["saver"]["s3"] = run_s3(args.steps, args.doc_kb, latencies)
        if "store" in only:
            res["store"] = run_store(Path(tmp), args.items, args.timed_puts, args.searches)
    if args.results:
        folder = Path(args.results)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"langgraph-{int(time.time())}.json"
        path.write_text(json.dumps({"args": vars(args), "results": res}, indent=1, default=str))
        print(f"wrote {path}")
    if args.json:
        print(json.dumps(res, indent=2))
        return
    if "saver" in res:
        print_saver(res["saver"], args)
    if "store" in res:
        print_store(res["store"], args)


if __name__ == "__main__":
    main()
