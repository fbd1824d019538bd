"""durable_obj against chdb.durable 4.4 and the floor, side by side, on the same stores in one run.

    python benchmarks/run.py                 # local folder + SeaweedFS it starts; <= 10 min
    python benchmarks/run.py --quick         # smaller sizes, fewer repeats; ~2 min
    python benchmarks/run.py --smoke         # every figure group once at tiny sizes: a test
    python benchmarks/run.py --latency-ms 20 # every S3 request of both waits 20 ms first
    python benchmarks/run.py --endpoint http://127.0.0.1:9000 --key K --secret S --bucket B
    python benchmarks/run.py --stores local  # skip S3
    python benchmarks/run.py --stores s3 --only wal   # one figure group
    python benchmarks/run.py --only bases --million   # + the 1M-row scale point (slow)
    python benchmarks/run.py --only list --latency-ms 20   # Namespace.list() of 1,000 objects
    python benchmarks/run.py --only multi --latency-ms 20  # a workload family, its own table
    python benchmarks/run.py --only restart -- --only pool --reps 5   # a family's own flags
    python benchmarks/run.py --list          # every group and the module that measures it

The one runner. Its own groups (writes, bases, segments, wal, list) are the
`workloads.versus` family; every other group is a family of its own
(`benchmarks/workloads/`, listed by --list), run in a fresh interpreter as
`python -m workloads.<family>` with the flags of this command it takes
(--quick, --smoke, --stores, --latency-ms, the S3 server, --results: only
those given, so each family keeps its own defaults) and whatever follows
`--` (that family's own flags; one family at a time).

Workload: `memories(id, version, content ZSTD, embedding Array(Float32),
edited_at DateTime64)`; single-row INSERTs carry a 256-dim random embedding
and ~200 bytes of text; bulk rows come from a hash (deterministic,
incompressible). Each figure is taken in fresh processes, the two
implementations and the floor alternating; the table shows medians (p99
for execute), the ratio durable_obj / chdb.durable (below 1: durable_obj is
faster or smaller, except for statements/s), each goal, and where measured
the floor: the same bytes with nothing of durable_obj in the way (plain
Python, chdb, boto3, obstore), durable_obj / floor and the goal on that
(issue 39: <= 1.2, the folder flush <= 1.3). Raw samples go to
benchmarks/results/run-<time>.json.

The `list` group times `Namespace.list()` of --list-objects objects (1,000;
each a head, a base and 9 WAL segments: one object written through the
library, the others copies of its keys written straight to the store, not
through the latency proxy) in a fresh process: from the namespace's catalog
(one GET; the process's first call, which sets up the store's client, and
the next), and with verify=True (a LIST and every head, and with stored
bytes every folder). chdb.durable's Namespace has no listing (open, destroy
and scan only), so those figures are durable_obj's alone, against their
goals at --latency-ms 20: the catalog of 10,000 objects (--list-objects
10000) under 0.1 s with the client warm; verify=True of 1,000 under 1.5 s.

Both are pointed at the same S3 endpoint: durable_obj through
storage_options, chdb.durable through CHDB_DURABLE_S3_ENDPOINT and AWS_*.
With --latency-ms both go through one reverse proxy
(benchmarks/harness/s3proxy.py) that delays every request. durable_obj is
run with folding off (fold_segments=0, close_fold_segments=0) so the WAL
shapes measured are the ones written, as chdb.durable never folds by itself.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from harness.procs import RESULTS, command, environ
from harness.report import Report
from harness.servers import s3_bench, s3_env
from workloads.versus.figures import LARGE, MILLION, Bench
from workloads.versus.listing import GOAL_LIST_OBJECTS

#: run.py's own groups: the versus family, in this process's children.
VERSUS = ("writes", "bases", "segments", "wal", "list")


@dataclass(frozen=True)
class Family:
    """A workload family run in a fresh interpreter: its module below
    benchmarks/, what it measures, and which of run.py's flags it takes
    (run.py's name -> the family's, the same unless it spells it otherwise)."""

    module: str
    what: str
    takes: dict[str, str] = field(default_factory=dict)


def taking(*names: str, **renamed: str) -> dict[str, str]:
    """The flags a family takes: each by its name, or run.py's name -> the family's."""
    return {**{name: name for name in names}, **renamed}


S3 = ("--stores", "--latency-ms", "--endpoint", "--key", "--secret", "--bucket")
FAMILIES = {
    "async": Family(
        "workloads.aio",
        "the event loop's tick gap, agents on the async face",
        taking("--quick", "--smoke", "--results"),
    ),
    "multi": Family(
        "workloads.multi",
        "many objects in one process against one process each",
        taking("--quick", "--smoke", "--results", *S3),
    ),
    "langgraph": Family(
        "workloads.langgraph",
        "the saver and store against SQLite and InMemoryStore",
        taking("--smoke", "--results"),
    ),
    "sealing": Family(
        "workloads.sealing",
        "encrypted and zstd objects against plain",
        taking("--quick", "--smoke", "--results", *S3),
    ),
    "chains": Family(
        "workloads.chains",
        "incremental checkpoints against full",
        taking("--quick", "--smoke", "--results", *S3),
    ),
    "service": Family(
        "workloads.service",
        "a service under load: units of work, ack latency",
        taking("--quick", "--smoke", "--stores", **{"--endpoint": "--s3-endpoint"}),
    ),
    "restart": Family(
        "workloads.restart",
        "a service, the MCP server and a pool restarted after kill -9",
        taking("--smoke", "--stores"),
    ),
    "cpu": Family(
        "workloads.cpu",
        "CPU per unit of work against chdb.durable",
        taking("--quick", "--stores", **{"--endpoint": "--s3-endpoint"}),
    ),
    "ray": Family(
        "workloads.ray",
        "objects behind Ray actors against one process",
        taking("--smoke", "--results"),
    ),
    "follow": Family(
        "workloads.follow",
        "a follower's lag and idle requests",
        taking("--smoke", "--latency-ms", "--endpoint", "--key", "--secret", "--bucket"),
    ),
    "history": Family(
        "workloads.history",
        "opening a past point against opening the head",
        taking("--smoke"),
    ),
    "telemetry": Family(
        "workloads.telemetry",
        "a flush with telemetry hooks against without",
        taking("--smoke"),
    ),
    "obstore": Family(
        "workloads.obstore",
        "the S3 store's requests against bare obstore",
        taking("--smoke", "--latency-ms"),
    ),
    "clouds": Family(
        "workloads.obstore_clouds",
        "the GCS and Azure stores against obstore",
        taking("--smoke"),
    ),
}


def family_argv(name: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The flags of this command that family `name` takes and that were
    given (each family keeps its own defaults), then `extra`."""
    family, out = FAMILIES[name], []
    for ours, theirs in family.takes.items():
        value = getattr(args, ours[2:].replace("-", "_"))
        if value is None or value is False:
            continue
        out += [theirs] if value is True else [theirs, str(value)]
    if name == "langgraph" and "s3" in (args.stores or "local,s3") and not args.endpoint:
        # the saver on a SeaweedFS of its own, at +0 ms, then +20 (or +N)
        out += ["--latency-ms", "0", "--latency-ms", str(args.latency_ms or 20.0)]
    return out + extra


def parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str]]:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1k/10k rows, 16 + 101 segments, 2 repeats"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every figure group once at the smallest sizes, both stores; proves the "
        "benchmark runs (the test suite does this), measures nothing",
    )
    parser.add_argument("--stores", help="comma list: local, s3 (default: both)")
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
        default=",".join(VERSUS),
        help=f"comma list of figure groups: {', '.join(VERSUS)} (default: these), and the "
        f"families, each its own table, only when named: {', '.join(FAMILIES)} (--list)",
    )
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    parser.add_argument("--latency-ms", type=float, help="added per S3 request (default 0)")
    parser.add_argument("--endpoint", help="an S3-compatible server; default: start SeaweedFS")
    parser.add_argument("--key")
    parser.add_argument("--secret")
    parser.add_argument("--bucket")
    parser.add_argument("--results", default=RESULTS, help=f"folder for the JSON ({RESULTS})")
    args = parser.parse_args(argv)
    args.only = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = set(args.only) - {*VERSUS, *FAMILIES}
    if unknown:
        parser.error(f"--only: unknown figure group(s) {', '.join(sorted(unknown))}")
    if extra and len([g for g in args.only if g in FAMILIES]) != 1:
        parser.error("flags after -- go to one family: name exactly one in --only")
    return parser, args, extra


def sizes(args: argparse.Namespace) -> None:
    """The versus family's sizes: given, or --smoke's, --quick's, the full run's."""
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


def versus(args: argparse.Namespace) -> None:
    """run.py's own groups: durable_obj, chdb.durable and the floor, one table."""
    sizes(args)
    stores = [s.strip() for s in (args.stores or "local,s3").split(",") if s.strip()]
    args.latency_ms = args.latency_ms or 0.0
    shown = {k: v for k, v in vars(args).items() if k != "secret"}
    report = Report("run", {**shown, "only": sorted(set(args.only) & set(VERSUS))})
    report.notes += [
        "ratio = durable_obj / chdb.durable: below 1 is faster or smaller (statements/s: above 1)",
        "floor = the same bytes with nothing of durable_obj in the way, measured in the same "
        "run between the two implementations; obj/floor = durable_obj / floor",
        "local folder: durable_obj fsyncs each published file and its directory; chdb.durable "
        "fsyncs nothing (the 'no fsync in either' rows run durable_obj with fsync off)",
        "cold open: fresh process, read-only, from before the library import to open() returned",
        f"{args.repeat} fresh processes per figure and implementation, alternating; "
        f"execute: {args.executes} INSERTs per process (after 20 warm-up); "
        f"flush: {3 * args.flushes} of 1 and of 10, {args.flushes} of 100 per process; "
        f"bases of {LARGE:,}+ rows: {args.large_repeat} checkpoint(s) and open(s) each",
    ]
    started = time.perf_counter()
    raw = True
    if "local" in stores:
        with tempfile.TemporaryDirectory(prefix="bench-local-") as root:
            Bench("local", {"kind": "local", "root": root}, None, args, report).all(raw)
        raw = False
    if "s3" in stores:
        with s3_bench(
            args.endpoint, args.key or "", args.secret or "", args.bucket or "",
            args.latency_ms, "bench",
        ) as s3:  # fmt: skip
            report.notes.append(s3.note)
            Bench("s3", s3.store, s3_env(s3.target), args, report, s3=s3.server).all(raw)
    report.finish(started, smoke=args.smoke, folder=args.results)


def main(argv: list[str] | None = None) -> None:
    _, args, extra = parse(sys.argv[1:] if argv is None else argv)
    if args.list:
        for group in VERSUS:
            print(f"{group:<11}workloads.versus: durable_obj, chdb.durable and the floor")
        for name, family in FAMILIES.items():
            print(f"{name:<11}{family.module}: {family.what}")
        return
    # the families first, each its own table from a fresh interpreter
    for name in [g for g in FAMILIES if g in args.only]:
        argv = family_argv(name, args, extra)
        shown = [
            "***" if prev == "--secret" else a
            for prev, a in zip(["", *argv[:-1]], argv, strict=True)
        ]
        print(f"== {name}: python -m {FAMILIES[name].module} {' '.join(shown)}", flush=True)
        subprocess.run(command(FAMILIES[name].module, *argv), env=environ(), check=True)
    if set(args.only) & set(VERSUS):
        versus(args)


if __name__ == "__main__":
    main()
