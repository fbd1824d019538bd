"""Encryption and the zstd WAL (issue 29): what they cost against a plain object.

    python benchmarks/run.py --only sealing            # folder + SeaweedFS at +0 and +20 ms
    python benchmarks/run.py --only sealing --quick    # 10k rows, fewer repeats
    python benchmarks/run.py --only sealing --smoke    # tiny, 4 children at once: runs only
    python benchmarks/run.py --only sealing --stores s3 --latency-ms 20   # one distant store
    python benchmarks/run.py --only sealing -- --only flush,wal          # some figure groups

durable_obj in three variants, the same `workloads.versus.child` phases as run.py with
only the object's options changed: `plain`, `encrypted`
(`encryption=durable_obj.StaticKey(<32 random bytes>)`) and
`encrypted+zstd` (and `compression="zstd"`); for the WAL bytes also `zstd`
alone. The key is random, made for the run and handed to each child on its
command line. chdb.durable (no encryption, no compression) runs beside them as the
house baseline: its figure is printed next to every ratio.

Figure groups (--only), each in fresh processes, the variants' order rotated
every repetition so that noise from the machine spreads over all of them:

* `flush`: flush latency of 1, 10 and 100 buffered agent-memory INSERTs
  (`harness.workload.row_sql`: ~200 bytes of text, a 256-dim embedding); --repeat
  processes, each with one object per variant, their flushes interleaved
  (3 x --flushes of 1 and of 10, --flushes of 100 per variant): on this
  machine one process's median folder flush differs from the next one's by
  up to a third, more than the differences measured, so the variants are
  compared in the same process, as a service holding many objects runs
  them. chdb.durable in its own process beside each. Median. Goal:
  encrypted / plain <= 1.05.
* `bases`: --rows rows (100,000; run.py's hashed bulk rows) loaded and
  checkpointed --checkpoints times (median), then cold-opened read-only in a
  fresh process (from before the library import to open() returned;
  --opens samples, chdb.durable one at >= 100k rows: it takes ~30 s there).
  Goals: <= 1.10 of plain for both.
* `wal`: the WAL bytes of --statements (1,000) agent-memory INSERTs in
  flushes of 10 (the sizes the head's manifest records for its segments).
  Exact: one run, on the folder and on the first S3 run only (the bytes do
  not depend on the latency). Goal: zstd / plain <= 0.4.

durable_obj runs with folding off, as in run.py. With --latency-ms every S3
request of every variant goes through benchmarks/harness/s3proxy.py, which waits that
long first; by default the S3 figures are taken at +0 and at +20 ms on one
SeaweedFS. Raw samples go to benchmarks/results/sealing-<time>.json.
On a shared 2-core machine the full run took 13-14 min, --quick 6-11 min.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness import flags
from harness.procs import rotated
from harness.report import Col, Report, Row, figure_col, fmt, lead, median, ratio_cols
from harness.servers import s3_env, s3_runs

from workloads.versus.figures import Bench

GROUPS = ("flush", "bases", "wal")
BASELINE = "chdb.durable"
#: The spec each variant adds to a `workloads.versus.child` spec (the key is filled in by main).
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "encrypted": {"key_hex": None},
    "zstd": {"compression": "zstd"},
    "encrypted+zstd": {"key_hex": None, "compression": "zstd"},
}
TIMED = ("plain", "encrypted", "encrypted+zstd", BASELINE)  # flush, checkpoint, open
SIZED = ("plain", "encrypted", "zstd", "encrypted+zstd", BASELINE)  # WAL bytes
GOAL_FLUSH = 1.05  # encrypted flush over plain
GOAL_BASE = 1.10  # encrypted checkpoint and cold open over plain
GOAL_WAL = 0.4  # zstd WAL bytes over plain
GOAL_ROWS = 100_000  # the size the base goals are set at
LARGE = 100_000  # from here chdb.durable's cold open is sampled once
PER_FLUSH = 10  # statements per flush in the WAL-bytes figure


@dataclass
class SealRow(Row):
    """One variant's figure (`ours`) over plain's (`theirs`), beside chdb.durable's."""

    variant: str = ""
    chdb: float = math.nan


class SealReport(Report):
    def columns(self) -> list[Col]:
        return [
            *lead(9, 30, 6),
            Col("variant", 16, lambda r: r.variant, left=True),
            figure_col("figure", 10, "ours"),
            figure_col("plain", 10, "theirs"),
            *ratio_cols((8, 10, 9)),
            Col(BASELINE, 12, lambda r: fmt(r.chdb)),
            Col("", 2, lambda r: ""),
        ]


class SealBench(Bench):
    """The three figure groups on one store; run.py's Bench for the plumbing
    (children, samples, the head), its rows our own."""

    def __init__(self, *pos: Any, keys: dict[str, dict[str, Any]], **kw: Any) -> None:
        super().__init__(*pos, **kw)
        self.variants = keys

    @staticmethod
    def name(oid: str, variant: str) -> str:
        return f"{oid}-{variant.replace('+', '-').replace('.', '-')}"

    def run(self, variant: str, phase: str, oid: str, **params: Any) -> dict[str, Any]:
        impl = BASELINE if variant == BASELINE else "durable_obj"
        extra = {} if variant == BASELINE else self.variants[variant]
        return self.child(impl, phase, self.name(oid, variant), **extra, **params)

    def children(self, calls: list[tuple[str, str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """`run` each (variant, phase, oid, params) in turn; --jobs at once in
        a smoke run (whose figures mean nothing: it only has to run)."""
        if self.args.jobs <= 1:
            return [self.run(v, phase, oid, **params) for v, phase, oid, params in calls]
        with ThreadPoolExecutor(self.args.jobs) as pool:
            return list(pool.map(lambda c: self.run(c[0], c[1], c[2], **c[3]), calls))

    def add(self, metric: str, unit: str, key: str, goals: Mapping[str, float | None]) -> None:
        """A row per variant in `goals` (its goal over plain), plain and chdb.durable beside."""
        figures = {name: median(self.samples[key].get(name, [])) for name in SIZED}
        for variant, goal in goals.items():
            note = f"n={len(self.samples[key][variant])}" if unit != "KiB" else ""
            self.report.add(
                SealRow(
                    self.label,
                    metric,
                    unit,
                    figures[variant],
                    figures["plain"],
                    goal=goal,
                    note=note,
                    variant=variant,
                    chdb=figures[BASELINE],
                )
            )

    def flushes(self) -> None:
        start = time.perf_counter()
        n = {"executes": 0, "flushes": self.args.flushes}
        ours = {name: self.variants[name] for name in TIMED[:3]}
        for rep in range(self.args.repeat):
            # durable_obj's variants side by side in one process (see
            # workloads.versus.child.phase_write_variants); chdb.durable in its own
            spec = {"variants": ours, **n}
            got = [
                self.child("durable_obj", "write_variants", f"flush{rep}", **spec),
                self.run(BASELINE, "write", f"flush{rep}", **n),
            ]
            for size in (1, 10, 100):
                key = f"flush_{size}_ms"
                for variant, times in got[0][key].items():
                    self.keep(key, variant, times)
                self.keep(key, BASELINE, got[1][key])
        self.progress("flushes", start)
        for size in (1, 10, 100):
            key = f"flush_{size}_ms"
            self.add(f"flush, {size} buffered", "ms", key, dict.fromkeys(TIMED[1:3], GOAL_FLUSH))

    def bases(self) -> None:
        rows, ckpts = self.args.rows, self.args.checkpoints
        start = time.perf_counter()
        n = {"rows": rows, "checkpoints": ckpts}
        calls = [(variant, "load", "base", n) for variant in TIMED]
        for (variant, *_), got in zip(calls, self.children(calls), strict=True):
            self.keep("checkpoint_ms", variant, got["checkpoint_ms"])
        self.progress(f"{rows:,} rows: load + checkpoints", start)
        calls = [
            (variant, "open", "base", {})
            for rep in range(self.args.opens)
            for variant in rotated(TIMED, rep)
            if not (variant == BASELINE and rep and rows >= LARGE)  # ~30 s each
        ]
        for (variant, *_), got in zip(calls, self.children(calls), strict=True):
            if got["rows"] != rows + ckpts - 1:  # each later checkpoint adds a row
                raise RuntimeError(f"{variant} opened {got['rows']} rows, not {rows}")
            self.keep("open_s", variant, [got["open_ms"] / 1e3])
        self.progress(f"{rows:,} rows: cold opens", start)
        goals = dict.fromkeys(TIMED[1:3], GOAL_BASE)
        self.add(f"checkpoint, {rows:,} rows", "ms", "checkpoint_ms", goals)
        self.add(f"cold open, {rows:,} rows", "s", "open_s", goals)

    def wal(self) -> None:
        statements = self.args.statements
        start = time.perf_counter()
        segments = statements // PER_FLUSH
        n = {"create": True, "segments": segments, "statements": PER_FLUSH}
        calls = [(variant, "append", "wal", n) for variant in SIZED]
        for (variant, *_), got in zip(calls, self.children(calls), strict=True):
            refs = self.head(self.name("wal", variant))["manifest"]["wal"]
            if len(refs) != segments + 1:  # the CREATE TABLE's segment first
                raise RuntimeError(f"{variant}: {len(refs)} segments, not {segments + 1}")
            self.keep("wal_kib", variant, [sum(ref["size"] for ref in refs[1:]) / 1024])
            self.keep("append_ms", variant, [got["append_ms"] / segments])
        self.progress(f"WAL of {statements:,} statements", start)
        metric = f"WAL bytes, {statements:,} stmts/{PER_FLUSH}"
        goals = {"encrypted": None, "zstd": GOAL_WAL, "encrypted+zstd": GOAL_WAL}
        self.add(metric, "KiB", "wal_kib", goals)

    def all(self, raw: bool = False, *, wal: bool = True) -> None:
        """Every figure group named by --only (`wal`: also the WAL bytes)."""
        for group, figure in (("flush", self.flushes), ("bases", self.bases), ("wal", self.wal)):
            if group in self.args.only and (wal or group != "wal"):
                figure()


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = flags.parser(__doc__, "10k rows, fewer repeats", GROUPS)
    parser.add_argument("--repeat", type=int, help="flush processes per variant (6)")
    parser.add_argument("--flushes", type=int, help="flushes of 100 per process (3x of 1, 10)")
    parser.add_argument("--rows", type=int, help=f"rows of the checkpointed base ({GOAL_ROWS:,})")
    parser.add_argument("--checkpoints", type=int, help="checkpoints per variant (3)")
    parser.add_argument("--opens", type=int, help="cold opens per variant (3)")
    parser.add_argument("--statements", type=int, help="statements in the WAL figure (1,000)")
    parser.add_argument(
        "--jobs", type=int, help="children at once (1; --smoke: 4, as it measures nothing)"
    )
    flags.store_flags(parser, latencies=True)
    args = parser.parse_args(argv)
    flags.only(parser, args, GROUPS)
    flags.sized(
        args,
        [
            ("repeat", 1, 4, 6),
            ("flushes", 1, 2, 3),
            ("rows", 200, 10_000, GOAL_ROWS),
            ("checkpoints", 1, 3, 3),
            ("opens", 1, 3, 3),
            ("statements", 2 * PER_FLUSH, 500, 1000),
            ("jobs", 4, 1, 1),
            ("latency_ms", [0.0], [0.0, 20.0], [0.0, 20.0]),
        ],
    )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    stores = flags.stores(args)
    report = SealReport("sealing", flags.shown(args))
    secret = os.urandom(32).hex()  # one StaticKey for the run, never written anywhere
    keys = {
        name: {k: secret if k == "key_hex" else v for k, v in extra.items()}
        for name, extra in VARIANTS.items()
    }
    report.notes += [
        "ratio = variant / plain durable_obj: below 1 is faster or smaller; "
        f"{BASELINE}: the same figure of chdb.durable (which has neither encryption nor zstd)",
        f"flush: {args.repeat} fresh processes per variant, order rotated; each "
        f"{3 * args.flushes} flushes of 1 and of 10, {args.flushes} of 100; median of all",
        f"bases: {args.rows:,} rows, {args.checkpoints} checkpoint(s) per variant; "
        f"{args.opens} cold open(s) each, fresh process, read-only"
        + (f" ({BASELINE}: 1)" if args.rows >= LARGE else ""),
        f"WAL bytes: {args.statements:,} agent-memory INSERTs in flushes of {PER_FLUSH}, "
        "the segment sizes the head records",
        "durable_obj with folding off; encrypted: StaticKey (AES-256-GCM, a data key per "
        "checkpoint); zstd at level 3",
    ]
    if args.rows != GOAL_ROWS and "bases" in args.only:
        report.notes.append(f"the base goals are set at {GOAL_ROWS:,} rows, not {args.rows:,}")
    started = time.perf_counter()
    if "local" in stores:
        with tempfile.TemporaryDirectory(prefix="bench-seal-") as root:
            store = {"kind": "local", "root": root}
            SealBench("local", store, None, args, report, keys=keys).all()
    if "s3" in stores:
        with s3_runs(
            args.endpoint, args.key, args.secret, args.bucket, args.latency_ms, "seal"
        ) as runs:
            for i, (ms, s3) in enumerate(runs):
                report.notes.append(s3.note)
                label = f"s3+{ms:g}ms" if ms else "s3"
                env = s3_env(s3.target)
                # the WAL's bytes do not depend on the latency: once per server
                bench = SealBench(label, s3.store, env, args, report, s3=s3.server, keys=keys)
                bench.all(wal=i == 0)
    report.finish(started, smoke=args.smoke, folder=args.results)


if __name__ == "__main__":
    main()
