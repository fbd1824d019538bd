"""Incremental checkpoints (issue 38): increments and chains beside full bases, in one run.

    python benchmarks/run.py --only chains           # 1M rows; folder + SeaweedFS at +0, +20 ms
    python benchmarks/run.py --only chains --quick   # 100k rows, 2 repetitions
    python benchmarks/run.py --only chains --smoke   # tiny: runs, measures nothing
    python benchmarks/run.py --only chains --stores s3 --latency-ms 20   # one distant store

run.py's bulk rows (`harness.workload.BULK`, ~1 KB each, incompressible), --new-rows
(1,000) more before each checkpoint. Each writer is a fresh process
(`--child`), durable_obj with folding off as in run.py. Figure groups:

* checkpoint (every store): --rows rows and a full base, then --reps times:
  new rows, flush, `checkpoint()` (an increment over the base before it)
  and at once `checkpoint(full=True)` of the same rows. Bytes: what each
  added to the store's listing. Goals: bytes <= 1%, time <= 5% of full.
* cold open (the folder, and the S3 run of the highest --latency-ms): that
  writer takes --increments (8) more increments (`chain_links` 9,
  `chain_ratio` 100: the chain has exactly that shape), then the object is
  forked (a fork is a full base of the same state). Each is cold-opened
  read-only in a fresh process (`workloads.versus.child` phase `open`, as run.py), --reps
  times, alternating. Goal: chain <= 1.2x full.
* stored (folder): --rows rows, --checkpoints (100) checkpoints of new rows
  under the default policy (`chain_links` 8, `chain_ratio` 0.5), then
  `Namespace.gc(oid, grace=0, retention=0)`. Goal: bytes stored <= 1.2x what
  the head needs (its full base and increments). For scale: one full base of
  that state, and `incremental_checkpoints=False` (--full-checkpoints, fewer:
  each writes the whole base).

`--chdb-durable` adds chdb.durable's checkpoint of one new row (`workloads.versus.child`
phase `load`) as a reference row; --quick includes it, the full run not
(minutes per checkpoint at 1M rows).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from harness import flags
from harness.procs import run_child, run_json
from harness.report import Col, Report, Row, figure_col, lead, median, ratio_cols
from harness.servers import s3_bench, s3_env
from harness.workload import BULK, DDL

GOAL_ROWS = 1_000_000
MB = 1e6
Env = dict[str, str] | None  # a child's environment (None: this one's)


class ChainReport(Report):
    def columns(self) -> list[Col]:
        return [
            *lead(9, 48, 5),
            figure_col("measured", 11, "ours"),
            figure_col("against", 11, "theirs"),
            *ratio_cols(digits=4),
        ]


# ---- the writers, each in a fresh process (`--child SPEC`) -----------------


def _namespace(spec: dict[str, Any]) -> Any:
    import durable_obj

    store = spec["store"]
    url, storage = store.get("root", ""), {}
    if store["kind"] == "s3":
        url = f"s3://{store['bucket']}/{store['prefix']}"
        storage = {"key": store["key"], "secret": store["secret"]}
        storage |= {
            "endpoint_url": store["endpoint"],
            "client_kwargs": {"region_name": "us-east-1"},
        }
    folds: dict[str, Any] = {"fold_segments": 0, "close_fold_segments": 0, "cheap_fold_segments": 0}
    return durable_obj.Namespace(
        url, owner="bench", storage_options=storage, **folds, **spec.get("options", {})
    )


def _rows(obj: Any, start: int, count: int) -> int:
    """Add `count` bulk rows numbered from `start`, flushed; the next number."""
    for at in range(start, start + count, 100_000):
        obj.execute(BULK.format(start=at, count=min(100_000, start + count - at)))
    obj.flush()
    return start + count


def _stored(ns: Any, oid: str) -> int:
    return sum(entry.size for entry in ns.store.list_keys(oid))


def _ms(fn: Callable[..., object], **kw: Any) -> float:
    started = time.perf_counter()
    fn(**kw)
    return (time.perf_counter() - started) * 1e3


def phase_checkpoint(spec: dict[str, Any]) -> dict[str, Any]:
    from durable_obj.core.ops import read_head

    ns, oid, new = _namespace(spec), spec["oid"], spec["new_rows"]
    out: dict[str, Any] = {f"{k}_{u}": [] for k in ("incr", "full") for u in ("ms", "bytes")}
    with ns.open(oid) as obj:
        obj.execute(DDL)
        n = _rows(obj, 0, spec["rows"])
        obj.checkpoint(full=True)
        for _ in range(spec["reps"]):
            n = _rows(obj, n, new)
            for kind in ("incr", "full"):
                before = _stored(ns, oid)
                out[f"{kind}_ms"].append(_ms(obj.checkpoint, full=kind == "full"))
                out[f"{kind}_bytes"].append(_stored(ns, oid) - before)
                links = len(read_head(ns.store, oid).manifest.chain)
                if (links > 0) != (kind == "incr"):
                    raise RuntimeError(f"checkpoint(full={kind == 'full'}): {links} links below")
        for _ in range(spec["increments"]):
            n = _rows(obj, n, new)
            obj.checkpoint()
        chain = read_head(ns.store, oid).manifest.chain
        if spec["increments"] and len(chain) != spec["increments"]:
            raise RuntimeError(f"wanted a chain of {spec['increments']}, got {len(chain)}")
        out["chain_bytes"] = [ref.size for ref in chain]
    if spec["twin"]:
        ns.fork(oid, spec["twin"])
        if read_head(ns.store, spec["twin"]).manifest.chain:
            raise RuntimeError("the fork's base is not a full base")
    out["rows"] = n
    return out


def phase_stored(spec: dict[str, Any]) -> dict[str, Any]:
    from durable_obj.core.ops import live_refs, read_head

    ns, oid, new = _namespace(spec), spec["oid"], spec["new_rows"]
    fulls = 0
    with ns.open(oid) as obj:
        obj.execute(DDL)
        n = _rows(obj, 0, spec["rows"])
        obj.checkpoint()
        first, started = _stored(ns, oid), time.perf_counter()
        for _ in range(spec["checkpoints"]):
            n = _rows(obj, n, new)
            obj.checkpoint()
            fulls += not read_head(ns.store, oid).manifest.chain
        took = time.perf_counter() - started
        written = _stored(ns, oid) - first
    gc = ns.gc(oid, grace=0, retention=0)
    head = read_head(ns.store, oid)
    assert head.manifest.base is not None
    out = {
        "stored": _stored(ns, oid),
        "needed": sum(ref.size for ref in live_refs(head)),
        "links": len(head.manifest.all_bases()),
        "fulls": fulls,
        "written_per_ckpt": written / spec["checkpoints"],
        "ms_per_ckpt": 1e3 * took / spec["checkpoints"],
        "gc_deleted": len(gc.deleted),
        "full_base": head.manifest.base.size,
    }
    if head.manifest.chain:  # for scale: one full base of this state (after the figures)
        with ns.open(oid) as obj:
            obj.checkpoint(full=True)
        full = read_head(ns.store, oid).manifest.base
        out["full_base"] = 0 if full is None else full.size
    return out


# ---- the parent -------------------------------------------------------------


def child(spec: dict[str, Any], env: Env) -> dict[str, Any]:
    what = f"{spec['phase']} {spec['oid']}"
    return run_json(__spec__.name, ["--child", json.dumps(spec)], env, what=what, tail=6000)


def measure(label: str, store: dict[str, Any], env: Env, args: Any, report: Report) -> None:
    """Every figure group on one store; cold opens on the folder and the most distant S3."""
    opens = label in ("local", f"s3+{max(args.latency_ms):g}ms") or max(args.latency_ms) == 0
    oid, k = f"ck-{uuid.uuid4().hex[:8]}", args.increments if opens else 0
    twin = f"{oid}-full" if opens else None
    options = {"chain_links": args.increments + 1, "chain_ratio": 100.0}
    spec = {"phase": "checkpoint", "oid": oid, "increments": k, "twin": twin, "options": options}
    r = child({**vars(args), **spec, "store": store}, env)
    samples: dict[str, Any] = {"checkpoint": r}
    report.samples[label] = samples

    def add(metric: str, unit: str, a: float, b: float, goal: Any = None, note: str = "") -> None:
        report.add(Row(label, metric, unit, a, b, goal, note=note))

    rows = f"{args.rows // 1000:,}k + {args.new_rows:,}"
    spread = f"incr max {max(r['incr_bytes']) / MB:.3f} MB"
    incr, full = median(r["incr_bytes"]) / MB, median(r["full_bytes"]) / MB
    add(f"checkpoint bytes, {rows}: incr vs full", "MB", incr, full, 0.01, spread)
    incr, full = median(r["incr_ms"]), median(r["full_ms"])
    add(f"checkpoint time, {rows}: incr vs full", "ms", incr, full, 0.05)
    if args.chdb_durable:
        cd = {"impl": "chdb.durable", "phase": "load", "oid": f"{oid}-cd", "checkpoints": 2}
        samples["chdb.durable"] = got = run_child({**cd, "store": store, "rows": args.rows}, env)
        add("checkpoint time: incr vs chdb.durable (+1 row)", "ms", incr, got["checkpoint_ms"][-1])
    if opens:
        times: dict[str, list[float]] = {"chain": [], "full": []}
        for rep in range(args.reps):
            for which in ("chain", "full")[:: 1 if rep % 2 == 0 else -1]:
                one = {"impl": "durable_obj", "phase": "open", "store": store}
                got = run_child({**one, "oid": twin if which == "full" else oid}, env)
                if got["rows"] != r["rows"]:
                    raise RuntimeError(f"{which} opened {got['rows']} rows, not {r['rows']}")
                times[which].append(got["open_ms"])
        samples["open_ms"] = times
        links = f"{len(r['chain_bytes']) + 1} links over {r['chain_bytes'][0] / MB:.0f} MB"
        chain, full = median(times["chain"]), median(times["full"])
        add(f"cold open: chain of {k} increments vs full", "ms", chain, full, 1.2, links)
    if label == "local" and args.checkpoints:
        stored(store, args, add, samples)


def stored(store: dict[str, Any], args: Any, add: Callable[..., None], samples: Any) -> None:
    """The `stored` group: the default policy, then full only, each gc'd."""
    runs = samples["stored"] = {}
    for policy, n in (("incr", args.checkpoints), ("full", args.full_checkpoints)):
        spec = {"phase": "stored", "oid": f"st-{policy}-{uuid.uuid4().hex[:8]}", "checkpoints": n}
        options = {"incremental_checkpoints": policy == "incr"}
        runs[policy] = child({**vars(args), **spec, "store": store, "options": options}, None)
    i, f, n, nf = runs["incr"], runs["full"], args.checkpoints, args.full_checkpoints
    note = f"{i['links']} links; {i['fulls']} of {n} full; gc deleted {i['gc_deleted']} keys"
    add(f"stored, {n} ckpts + gc: vs what the head needs", "MB", i["stored"] / MB,
        i["needed"] / MB, 1.2, note)  # fmt: skip
    add("  the same: vs one full base of that state", "MB", i["stored"] / MB, i["full_base"] / MB)
    add(f"  full only, {nf} ckpts + gc: vs the head needs", "MB", f["stored"] / MB,
        f["needed"] / MB)  # fmt: skip
    add(f"written per ckpt: policy ({n}) vs full only ({nf})", "MB", i["written_per_ckpt"] / MB,
        f["written_per_ckpt"] / MB)  # fmt: skip
    add("time per ckpt: policy vs full only", "ms", i["ms_per_ckpt"], f["ms_per_ckpt"])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = flags.parser(__doc__, "100k rows, 2 repetitions")
    p.add_argument("--rows", type=int, help=f"rows before the new ones ({GOAL_ROWS:,})")
    p.add_argument("--new-rows", type=int, default=1000, help="rows before each checkpoint")
    p.add_argument("--reps", type=int, help="checkpoint pairs and cold opens of each (3)")
    p.add_argument("--increments", type=int, help="increments in the opened chain (8)")
    p.add_argument("--checkpoints", type=int, help="before the gc (100; 0: no stored group)")
    p.add_argument("--full-checkpoints", type=int, help="the same, full only (5)")
    p.add_argument("--chdb-durable", action="store_true", help="chdb.durable's checkpoint too")
    flags.store_flags(p, latencies=True)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    flags.sized(
        args,
        [
            ("rows", 2000, 100_000, GOAL_ROWS),
            ("reps", 1, 2, 3),
            ("increments", 2, 8, 8),
            ("checkpoints", 3, 100, 100),
            ("full_checkpoints", 2, 5, 5),
            ("latency_ms", [0.0], [0.0, 20.0], [0.0, 20.0]),
        ],
    )
    args.chdb_durable = args.chdb_durable or args.quick
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.child:
        spec = json.loads(args.child)
        phase = phase_checkpoint if spec["phase"] == "checkpoint" else phase_stored
        print(json.dumps(phase(spec)))
        return
    stores = flags.stores(args)
    report = ChainReport("chains", flags.shown(args))
    report.notes += [
        "measured / against: the ratio; MB = 1e6 bytes; medians",
        f"checkpoint: {args.reps} pairs (incr, then full of the same rows) in one writer; "
        "bytes = what each added to the store",
        f"cold open: fresh process, read-only, {args.reps} each, alternating",
    ]
    if args.checkpoints:
        report.notes.append(f"stored: folder; full only: {args.full_checkpoints} checkpoints")
    if args.rows != GOAL_ROWS:
        report.notes.append(f"the goals are set at {GOAL_ROWS:,} rows, not {args.rows:,}")
    if not args.chdb_durable:
        report.notes.append("chdb.durable left out (--chdb-durable: minutes at 1M rows)")
    started = time.perf_counter()
    if "local" in stores:
        with tempfile.TemporaryDirectory(prefix="bench-chains-") as root:
            measure("local", {"kind": "local", "root": root}, None, args, report)
    for ms in args.latency_ms if "s3" in stores else []:
        # a SeaweedFS each (or --endpoint), behind the latency proxy
        with s3_bench(args.endpoint, args.key, args.secret, args.bucket, ms, "chains") as s3:
            report.notes.append(s3.note)
            label = f"s3+{ms:g}ms" if ms else "s3"
            measure(label, s3.store, s3_env(s3.target), args, report)
    report.finish(started, smoke=args.smoke, folder=args.results)


if __name__ == "__main__":
    main()
