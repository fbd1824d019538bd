"""Many durable objects in one process (issue 14), against one process per object.

    python benchmarks/run.py --only multi            # local folder + SeaweedFS it starts
    python benchmarks/run.py --only multi --quick    # 30 / 200 objects, shorter runs
    python benchmarks/run.py --only multi --smoke    # tiny: proves it runs, measures nothing
    python benchmarks/run.py --only multi --stores s3 --latency-ms 20   # a distant store
    python benchmarks/run.py --only multi -- --only threads,pool        # some figure groups

Every object starts as a copy of one seed object of --rows rows (1,000: a
`memories` table like run.py's, 256-dim embeddings and ~200 bytes of text,
in a checkpointed base and an empty WAL). The copies are written straight
to the store (not through the latency proxy) before anything is timed.

Figure groups (--only), each in fresh processes:

* `fleet`: --objects (100) objects, each opened as a writer, given one
  single-row INSERT, flushed and closed. durable_obj in one process (all
  opened one after another and kept open until the last flush, then all
  closed) against one fresh process per object, one after another, for
  chdb.durable (which holds one object per process: its second open fails
  with "EmbeddedServer already initialized") and for durable_obj. Total:
  the wall time from spawning the first process to the exit of the last,
  interpreter start and imports included on both sides. RSS per object:
  the one process's RSS with every object open and flushed, over the
  objects; against the summed RSS of the per-object processes (each read
  after its flush, object still open), over the objects. Also durable_obj's
  marginal RSS per object (growth after the first object's open, which
  starts the engine), against the issue's goal of at most 1 MiB.
* `many`: --many (1,000) objects opened as writers at once in one process
  by --open-threads (8) threads: time to open all, RSS growth per object.
  durable_obj alone: chdb.durable would need 1,000 processes.
* `threads`: --threads (16) threads, each looping execute (one single-row
  INSERT) + flush over its own --per-thread objects, for --seconds; and
  16 threads x 1 object, and 1 thread x 1 object as the baseline: flushes/s
  (= statements/s) and p50/p99 flush latency. durable_obj alone:
  chdb.durable cannot hold two objects in one process, so it has no
  threads-over-objects figure to compare.
* `pool`: `durable_obj.Pool.object(id)`: a miss (opens a 1,000-row object
  as a writer) and a hit (the cached object), p50/p99 of entering the
  `with` block.

durable_obj runs with folding off (fold_segments=0, close_fold_segments=0),
as in run.py, so a flush is a flush and never a checkpoint. With
--latency-ms every S3 request of both implementations goes through
benchmarks/harness/s3proxy.py, which waits that long first. With --encrypted
durable_obj's objects are sealed under a StaticKey made for the run, and each
is written through the library rather than copied (a sealed blob opens only
under the object it was sealed for). Raw samples go to
benchmarks/results/multi-<time>.json.
"""

import time

T0 = time.perf_counter()  # a child's cold start counts from here

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from harness import flags  # noqa: E402
from harness.report import Report  # noqa: E402
from harness.servers import s3_bench, s3_env  # noqa: E402

from workloads.multi.children import child_main  # noqa: E402
from workloads.multi.figures import GROUPS, Bench  # noqa: E402


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = flags.parser(__doc__, "30 / 200 objects, 4 s loops", GROUPS)
    parser.add_argument("--objects", type=int, help="the fleet figure's objects (100)")
    parser.add_argument("--many", type=int, help="objects open at once in one process (1,000)")
    parser.add_argument("--open-threads", type=int, default=8, help="threads opening --many")
    parser.add_argument("--rows", type=int, help="rows of every object (1,000)")
    parser.add_argument("--threads", type=int, help="writer threads (16)")
    parser.add_argument("--per-thread", type=int, help="objects per writer thread (16)")
    parser.add_argument("--seconds", type=float, help="each execute+flush loop's length (10)")
    parser.add_argument(
        "--pool-misses", type=int, help="pool misses, one object each, the first apart (101)"
    )
    parser.add_argument("--pool-hits", type=int, help="pool hits (5,000)")
    parser.add_argument(
        "--encrypted",
        action="store_true",
        help="durable_obj's objects encrypted (a StaticKey made for the run), each written "
        "through the library rather than copied",
    )
    flags.store_flags(parser)
    args = parser.parse_args(argv)
    flags.only(parser, args, GROUPS)
    flags.sized(
        args,
        [
            ("objects", 3, 30, 100),
            ("many", 5, 200, 1000),
            ("rows", 50, 1000, 1000),
            ("threads", 2, 16, 16),
            ("per_thread", 2, 16, 16),
            ("seconds", 0.5, 4.0, 10.0),
            ("pool_misses", 3, 31, 101),
            ("pool_hits", 5, 1000, 5000),
        ],
    )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    stores = flags.stores(args)
    report = Report("multi", flags.shown(args))
    report.notes += [
        "ratio = durable_obj / chdb.durable: below 1 is faster or smaller",
        f"every object a copy of one of {args.rows:,} rows (checkpointed base, empty WAL); "
        "durable_obj with folding off",
        f"fleet: durable_obj opens the {args.objects} objects one after another in one "
        "process; each 'proc' is a fresh interpreter, run one after another; totals from "
        "the first spawn to the last exit; RSS read after the flush, object open",
        "chdb.durable holds one object per process: it has no many-objects or threads figure",
    ]
    if args.encrypted:
        report.notes.append(
            "durable_obj's objects encrypted (StaticKey, AES-256-GCM), each written through "
            "the library (a sealed blob opens only under its own object), not copied"
        )
    started = time.perf_counter()
    if "local" in stores:
        with tempfile.TemporaryDirectory(prefix="bench-multi-") as root:
            store = {"kind": "local", "root": root}
            Bench("local", store, store, None, None, args, report).all()
    if "s3" in stores:
        with s3_bench(
            args.endpoint, args.key, args.secret, args.bucket, args.latency_ms, "multi"
        ) as s3:
            report.notes.append(s3.note)
            direct = {**s3.store, "endpoint": s3.server.endpoint}
            env, direct_env = s3_env(s3.target), s3_env(s3.server)
            Bench("s3", s3.store, direct, env, direct_env, args, report).all()
    report.finish(started, smoke=args.smoke, folder=args.results)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(json.loads(sys.argv[2]), T0)
    else:
        main()
