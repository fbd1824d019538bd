"""Time travel: opening at a point 500 segments back, beside opening the head.

    python benchmarks/run.py --only history                 # local folder, 500 back
    python benchmarks/run.py --only history -- --url memory://bench-history
    python benchmarks/run.py --only history --smoke         # a check that it runs

One writer makes `back + 2 * fold + 20` flushes of `rows` rows each with the default
growth policy (fold the WAL into a checkpoint every `fold` segments), so the
point `back` segments before the head lies in a chain that a checkpoint
superseded long ago and only a history archive names. Then, read-only in
this process, `reps` times each, alternating: open the head; open at that
seq (`at=`); and `Namespace.history()` alone (the part of an at= open that a
head open does not do: one listing, every archive read and parsed). Each
open is checked: the past one counts exactly the rows committed by then.
Prints medians, the ratio, and what the history costs in storage.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

import durable_obj
from durable_obj.core import ops

DDL = "CREATE TABLE m (id UInt64, v String) ENGINE = MergeTree ORDER BY id"


def build(ns: durable_obj.Namespace, oid: str, flushes: int, rows: int) -> dict[int, int]:
    """The object; the row count after each seq."""
    counts: dict[int, int] = {}
    with ns.open(oid) as obj:
        obj.execute(DDL)
        obj.flush()
        counts[obj.seq] = 0
        n = 0
        for i in range(flushes):
            values = ", ".join(f"({n + j}, 'row {n + j} of flush {i}')" for j in range(rows))
            obj.execute(f"INSERT INTO m VALUES {values}")
            n += rows
            obj.flush()
            counts[obj.seq] = n  # a fold after the flush moves seq on: same rows
            counts[obj.seq - 1] = counts.get(obj.seq - 1, n)
    # close() may fold a long WAL: one more base, the same rows
    counts.setdefault(ops.read_head(ns.store, oid).manifest.seq, n)
    return counts


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="namespace URL (default: a temporary local folder)")
    parser.add_argument("--back", type=int, default=500, help="segments back from the head")
    parser.add_argument("--rows", type=int, default=10, help="rows per flush")
    parser.add_argument("--fold", type=int, default=64, help="fold_segments of the writer")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.smoke:
        args.back, args.rows, args.fold, args.reps = 20, 2, 8, 1
    tmp = None
    url = args.url
    if url is None:
        tmp = tempfile.mkdtemp(prefix="bench-history-")
        url = os.path.join(tmp, "ns")
    try:
        ns = durable_obj.Namespace(
            url, owner="bench", fold_segments=args.fold, close_fold_segments=0
        )
        oid = f"h-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        # enough before the target that its chain has a base, as a real one would
        counts = build(ns, oid, args.back + 2 * args.fold + 20, args.rows)
        build_s = time.perf_counter() - started
        past = ns.history(oid)
        head_seq = past.head_seq
        # `back` segments before the head: count commits that are segments
        segs = [p for p in past.points if p.kind == "segment"]
        target = segs[-1 - args.back].seq if len(segs) > args.back else segs[0].seq
        point = next(p for p in past.points if p.seq == target)
        chain_replay = point.index + 1
        head_open: list[float] = []
        at_open: list[float] = []
        hist: list[float] = []

        def open_head() -> None:
            with ns.open(oid, read_only=True) as obj:
                assert int(obj.query("SELECT count() FROM m", "TSV")) == counts[head_seq]

        def open_at() -> None:
            with ns.open(oid, read_only=True, at=target) as obj:
                assert obj.seq == target
                assert int(obj.query("SELECT count() FROM m", "TSV")) == counts[target]

        open_head()  # warm the engine and the page cache alike for both
        for rep in range(args.reps):
            order = (open_head, open_at) if rep % 2 == 0 else (open_at, open_head)
            for fn in order:
                (head_open if fn is open_head else at_open).append(timed(fn))
            hist.append(timed(lambda: ns.history(oid)))
        entries = ns.store.list_keys(oid)
        hist_files = [e for e in entries if "/history/" in e.key]
        info = ops.describe(ns.store, oid, entries)
        doc = {
            "url": url if tmp is None else "local folder (temporary)",
            "smoke": args.smoke,
            "head_seq": head_seq,
            "at_seq": target,
            "segments_back": sum(1 for p in segs if p.seq > target),
            "at_replays_segments": chain_replay,
            "head_replays_segments": info.segments,
            "reps": args.reps,
            "open_head_s": statistics.median(head_open),
            "open_at_s": statistics.median(at_open),
            "history_s": statistics.median(hist),
            "ratio": statistics.median(at_open) / statistics.median(head_open),
            "history_files": len(hist_files),
            "history_bytes": sum(e.size for e in hist_files),
            "stored_bytes": info.stored_bytes,
            "live_bytes": info.live_bytes,
            "build_s": build_s,
        }
        if args.json:
            print(json.dumps(doc))
            return 0
        print(f"bench_history: {doc['url']}, {head_seq} commits, fold every {args.fold}")
        if args.smoke:
            print("--smoke: a check that it runs, not a measurement")
        print(
            f"  open the head (seq {head_seq}, replays {info.segments} segment(s)): "
            f"{doc['open_head_s'] * 1000:8.1f} ms"
        )
        print(
            f"  open at seq {target} ({doc['segments_back']} segments back, replays "
            f"{chain_replay}): {doc['open_at_s'] * 1000:8.1f} ms"
        )
        print(
            f"  ratio at/head: {doc['ratio']:.2f}x; history() alone: "
            f"{doc['history_s'] * 1000:.1f} ms"
        )
        print(
            f"  history: {len(hist_files)} archive file(s), {doc['history_bytes']} bytes; "
            f"stored {info.stored_bytes} bytes, live {info.live_bytes} bytes "
            f"(medians of {args.reps})"
        )
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
