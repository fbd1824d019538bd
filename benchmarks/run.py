"""durable_obj against chdb.durable 4.4, side by side, on the same stores in one run.

    python benchmarks/run.py                 # local folder + SeaweedFS it starts; <= 10 min
    python benchmarks/run.py --quick         # smaller sizes, fewer repeats; ~2 min
    python benchmarks/run.py --smoke         # every figure group once at tiny sizes: a test
    python benchmarks/run.py --latency-ms 20 # every S3 request of both waits 20 ms first
    python benchmarks/run.py --endpoint http://127.0.0.1:9000 --key K --secret S --bucket B
    python benchmarks/run.py --stores local  # skip S3
    python benchmarks/run.py --stores s3 --only wal   # one figure group
    python benchmarks/run.py --only bases --million   # + the 1M-row scale point (slow)
    python benchmarks/run.py --only list --latency-ms 20   # Namespace.list() of 1,000 objects
    python benchmarks/run.py --only async    # the event loop's tick gap (bench_async.py)
    python benchmarks/run.py --only multi    # many objects in one process (bench_multi.py)
    python benchmarks/run.py --only langgraph   # saver and store vs SQLite (bench_langgraph.py)
    python benchmarks/run.py --only sealing  # encrypted and zstd vs plain (bench_sealing.py)
    python benchmarks/run.py --only chains   # incremental vs full checkpoints (bench_chains.py)

Workload: `memories(id, version, content ZSTD, embedding Array(Float32),
edited_at DateTime64)`; single-row INSERTs carry a 256-dim random embedding
and ~200 bytes of text; bulk rows come from a hash (deterministic,
incompressible). Each figure is taken in fresh processes, the two
implementations alternating; the table shows medians (p99 for execute), the
ratio durable_obj / chdb.durable (below 1: durable_obj is faster or smaller,
except for statements/s), and each goal. Raw samples go to
benchmarks/results/run-<time>.json.

The `list` group times `Namespace.list()` of --list-objects objects (1,000;
each a head, a base and 9 WAL segments: one object written through the
library, the others copies of its keys written straight to the store, not
through the latency proxy) in a fresh process. chdb.durable's Namespace has
no listing (open, destroy and scan only), so that figure is durable_obj's
alone, against its goal: under 1.5 s for 1,000 objects at --latency-ms 20.

Both are pointed at the same S3 endpoint: durable_obj through
storage_options, chdb.durable through CHDB_DURABLE_S3_ENDPOINT and AWS_*.
With --latency-ms both go through one reverse proxy (benchmarks/s3proxy.py)
that delays every request. durable_obj is run with folding off
(fold_segments=0, close_fold_segments=0) so the WAL shapes measured are the
ones written, as chdb.durable never folds by itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import RESULTS, Report, s3_bench, s3_env
from _run_figures import GOAL_LIST_OBJECTS, LARGE, MILLION, Bench


def stores_args(args: argparse.Namespace) -> list[str]:
    """The stores, S3 server, latency and results folder, for an own group's script."""
    out = ["--stores", args.stores, "--results", args.results]
    out += ["--latency-ms", str(args.latency_ms)] if args.latency_ms else []
    if args.endpoint:
        out += ["--endpoint", args.endpoint, "--key", args.key, "--secret", args.secret]
        out += ["--bucket", args.bucket]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1k/10k rows, 16 + 101 segments, 2 repeats"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every figure group once at the smallest sizes, both stores; proves the "
        "benchmark runs (the test suite does this), measures nothing",
    )
    parser.add_argument("--stores", default="local,s3", help="comma list: local, s3")
    parser.add_argument("--repeat", type=int, help="fresh processes per figure and implementation")
    parser.add_argument(
        "--rows", type=lambda s: [int(x) for x in s.split(",")], help="e.g. 1000,10000"
    )
    parser.add_argument(
        "--million",
        action="store_true",
        help=f"add the {MILLION:,}-row scale point to --rows (chdb.durable: minutes per sample)",
    )
    parser.add_argument(
        "--large-repeat", type=int, default=1, help=f"repeats at >= {LARGE:,} rows (default 1)"
    )
    parser.add_argument("--segments", type=int, help="segments on a base (default 64)")
    parser.add_argument("--wal-segments", type=int, help="segments in the long WAL (default 1001)")
    parser.add_argument(
        "--list-objects", type=int, help="objects in the listing figure (default 1000)"
    )
    parser.add_argument("--executes", type=int, help="timed INSERTs per process (default 200)")
    parser.add_argument("--flushes", type=int, help="timed flushes per size and process (3)")
    parser.add_argument(
        "--only",
        default="writes,bases,segments,wal,list",
        help="comma list of figure groups: writes, bases, segments, wal, list (default: all); "
        "async (benchmarks/bench_async.py, durable_obj alone, local folder), multi "
        "(benchmarks/bench_multi.py, many objects in one process), langgraph "
        "(benchmarks/bench_langgraph.py, against the SQLite saver and store) and sealing "
        "(benchmarks/bench_sealing.py, encrypted and zstd objects against plain) and chains "
        "(benchmarks/bench_chains.py, incremental checkpoints against full) only when named",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added per S3 request")
    parser.add_argument("--endpoint", help="an S3-compatible server; default: start SeaweedFS")
    parser.add_argument("--key", default="")
    parser.add_argument("--secret", default="")
    parser.add_argument("--bucket", default="")
    parser.add_argument("--results", default=RESULTS, help=f"folder for the JSON ({RESULTS})")
    args = parser.parse_args()
    args.only = {g.strip() for g in args.only.split(",") if g.strip()}
    own = {"async", "multi", "langgraph", "sealing", "chains"}  # each its own script and table
    unknown = args.only - {"writes", "bases", "segments", "wal", "list", *own}
    if unknown:
        parser.error(f"--only: unknown figure group(s) {', '.join(sorted(unknown))}")
    if args.smoke:
        # One process per figure and implementation at the smallest sizes
        # that still give every row of the table a value.
        args.repeat = args.repeat or 1
        args.rows = args.rows or [200]
        args.segments = args.segments or 2
        args.wal_segments = args.wal_segments or 3
        args.executes = args.executes or 3
        args.flushes = args.flushes or 1
        args.list_objects = args.list_objects or 5
    args.repeat = args.repeat or (2 if args.quick else 3)
    args.rows = args.rows or ([1000, 10_000] if args.quick else [1000, 10_000, 100_000])
    if args.million and MILLION not in args.rows:
        args.rows.append(MILLION)
    args.segments = args.segments or (16 if args.quick else 64)
    args.wal_segments = args.wal_segments or (101 if args.quick else 1001)
    args.executes = args.executes or (100 if args.quick else 200)
    args.flushes = args.flushes or (2 if args.quick else 3)
    args.list_objects = args.list_objects or (100 if args.quick else GOAL_LIST_OBJECTS)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    report = Report("run", {k: v for k, v in vars(args).items() if k != "secret"})
    report.notes += [
        "ratio = durable_obj / chdb.durable: below 1 is faster or smaller (statements/s: above 1)",
        "local folder: durable_obj fsyncs each published file and its directory; chdb.durable "
        "fsyncs nothing (the 'no fsync in either' rows run durable_obj with fsync off)",
        "cold open: fresh process, read-only, from before the library import to open() returned",
        f"{args.repeat} fresh processes per figure and implementation, alternating; "
        f"execute: {args.executes} INSERTs per process (after 20 warm-up); "
        f"flush: {3 * args.flushes} of 1 and of 10, {args.flushes} of 100 per process; "
        f"bases of {LARGE:,}+ rows: {args.large_repeat} checkpoint(s) and open(s) each",
    ]
    started = time.perf_counter()
    # async, multi, langgraph, sealing: each its own table, from its own script in a fresh process
    size = ["--smoke"] if args.smoke else ["--quick"] if args.quick else []
    here = os.path.dirname(os.path.abspath(__file__))
    if "async" in args.only:
        bench_async = os.path.join(here, "bench_async.py")
        subprocess.run([sys.executable, bench_async, *size, "--results", args.results], check=True)
    if "multi" in args.only:
        bench_multi = os.path.join(here, "bench_multi.py")
        subprocess.run([sys.executable, bench_multi, *size, *stores_args(args)], check=True)
    if "langgraph" in args.only:
        graph = ["--smoke"] if args.smoke else []
        if "s3" in stores and not args.endpoint:  # SeaweedFS at +0 ms, then +20 (or +N)
            graph += ["--latency-ms", "0", "--latency-ms", str(args.latency_ms or 20.0)]
        bench_graph = os.path.join(here, "bench_langgraph.py")
        subprocess.run([sys.executable, bench_graph, *graph, "--results", args.results], check=True)
    if "sealing" in args.only:  # SeaweedFS at +0 ms, then +20 (or at --latency-ms alone)
        bench_seal = os.path.join(here, "bench_sealing.py")
        subprocess.run([sys.executable, bench_seal, *size, *stores_args(args)], check=True)
    if "chains" in args.only:  # SeaweedFS at +0 ms, then +20 (or at --latency-ms alone)
        bench_chains = os.path.join(here, "bench_chains.py")
        subprocess.run([sys.executable, bench_chains, *size, *stores_args(args)], check=True)
    if not args.only - own:
        return
    raw = True
    if "local" in stores:
        with tempfile.TemporaryDirectory(prefix="bench-local-") as root:
            Bench("local", {"kind": "local", "root": root}, None, args, report).all(raw)
        raw = False
    if "s3" in stores:
        with s3_bench(
            args.endpoint, args.key, args.secret, args.bucket, args.latency_ms, "bench"
        ) as s3:
            report.notes.append(s3.note)
            Bench("s3", s3.store, s3_env(s3.target), args, report, s3=s3.server).all(raw)
    report.notes.append(f"total wall time {time.perf_counter() - started:.0f} s")
    if args.smoke:
        report.notes.append("--smoke: a check that every figure group runs; not a measurement")
    report.print()
    print(f"\nwrote {report.write(args.results)}")


if __name__ == "__main__":
    main()
