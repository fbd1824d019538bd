"""Many durable objects in one process (issue 14), against one process per object.

    python benchmarks/bench_multi.py                   # local folder + SeaweedFS it starts
    python benchmarks/bench_multi.py --quick           # 30 / 200 objects, shorter runs
    python benchmarks/bench_multi.py --smoke           # tiny: proves it runs, measures nothing
    python benchmarks/bench_multi.py --stores s3 --latency-ms 20   # a distant store
    python benchmarks/bench_multi.py --only threads,pool           # some figure groups

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
benchmarks/s3proxy.py, which waits that long first. Raw samples go to
benchmarks/results/multi-<time>.json.
"""

import time

T0 = time.perf_counter()  # a child's cold start counts from here

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import (  # noqa: E402
    RESULTS,
    OwnRow,
    Report,
    Row,
    fmt,
    median,
    p99,
    s3_bench,
    s3_env,
)
from _workload import WORDS, row_sql  # noqa: E402

GROUPS = ("fleet", "many", "threads", "pool")
GOAL_FLEET_RATIO = 0.1  # one process at least 10x faster in total than one per object
GOAL_RSS_MIB = 1.0  # at most 1 MiB of RSS per small idle object
GOAL_SPEEDUP = 4.0  # 16 threads on 16 objects: at least 4x the statements/s of 1 on 1
#: The goals are judged only at the issue's sizes: 100 objects in the fleet,
#: 1,000 open at once (a smaller run prints its figures without a verdict).
GOAL_FLEET_OBJECTS = 100
GOAL_MANY_OBJECTS = 1000
STATEMENTS = 256  # distinct single-row INSERTs, cycled by the write loops

DDL = (
    "CREATE TABLE IF NOT EXISTS memories (id String, version UInt32, "
    "content String CODEC(ZSTD(3)), embedding Array(Float32), "
    "edited_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (id, version)"
)
#: Bulk rows from a hash: deterministic and incompressible (as run.py's).
BULK = (
    "INSERT INTO memories SELECT concat('b', toString(number)), 1, "
    "concat(hex(cityHash64(number, 'c')), ' ', arrayStringConcat(arrayMap("
    f"i -> [{', '.join(repr(w) for w in WORDS)}][1 + cityHash64(number, i) % {len(WORDS)}], "
    "range(28)), ' ')), "
    "arrayMap(i -> toFloat32((cityHash64(number, i) % 2000000) / 1e6 - 1), range(256)), "
    "toDateTime64('2026-01-01 00:00:00', 3, 'UTC') + "
    "toIntervalMillisecond(cityHash64(number, 't') % 31536000000) "
    "FROM numbers({count})"
)
# -- children: one measurement each, in a fresh process ---------------------------


def rss_mib() -> float:
    """Resident set size now (not the peak)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Child:
    """The spec of one child: implementation, store, ids, sizes."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.store: dict[str, Any] = spec["store"]

    def storage(self, **extra: Any) -> tuple[str, dict[str, Any]]:
        if self.store["kind"] == "local":
            return self.store["root"], dict(extra)
        options = {
            "key": self.store["key"],
            "secret": self.store["secret"],
            "endpoint_url": self.store["endpoint"],
            "client_kwargs": {"region_name": "us-east-1"},
            **extra,
        }
        return f"s3://{self.store['bucket']}/{self.store['prefix']}", options

    def namespace(self, **extra: Any) -> Any:
        import durable_obj

        url, options = self.storage(**extra)
        return durable_obj.Namespace(
            url, owner="bench", storage_options=options, fold_segments=0, close_fold_segments=0
        )

    def pool(self, max_open: int) -> Any:
        import durable_obj

        url, options = self.storage()
        return durable_obj.Pool(
            url,
            owner="bench",
            max_open=max_open,
            idle_close=None,
            storage_options=options,
            fold_segments=0,
            close_fold_segments=0,
        )

    def chdb_durable(self) -> Any:
        import chdb.durable as cd

        if self.store["kind"] == "local":
            url = "local:" + self.store["root"]
        else:
            url = f"s3://{self.store['bucket']}/{self.store['prefix']}"
        return cd.Namespace(url, owner="bench")


def child_populate(c: Child) -> dict[str, Any]:
    """A seed object of `rows` rows in a checkpointed base, then copies of
    its keys (head and base) under every id of `oids`, 16 at once."""
    ns = c.namespace(**({"fsync": False} if c.store["kind"] == "local" else {}))
    seed = c.spec["seed"]
    # Each implementation's objects are copies of a seed it wrote itself:
    # chdb.durable cannot restore durable_obj's checkpoint of a database
    # named `default` (its archive says `CREATE DATABASE default UUID ...
    # ENGINE = Atomic`, chdb.durable's own says `CREATE DATABASE default`,
    # and chdb.durable's RESTORE into its existing `default` refuses the
    # different definition).
    with contextlib.ExitStack() as stack:
        if c.spec["impl"] == "durable_obj":
            obj = stack.enter_context(ns.open(seed))
        else:
            obj = c.chdb_durable().open(seed)
            stack.callback(obj.close)
        obj.execute(DDL)
        if c.spec["rows"]:
            obj.execute(BULK.format(count=c.spec["rows"]))
        obj.flush()
        obj.checkpoint()
    store = ns.store
    keys = {}
    for entry in store.list_keys(seed):
        blob = store.get(entry.key)
        keys[entry.key[len(seed) + 1 :]] = blob.data
    todo = [(f"{oid}/{rest}", data) for oid in c.spec["oids"] for rest, data in keys.items()]
    with ThreadPoolExecutor(16) as workers:
        made = list(workers.map(lambda kv: store.create(*kv), todo))
    if not all(made):
        raise RuntimeError("a copied key already existed")
    return {"keys": sorted(keys), "bytes": sum(len(d) for d in keys.values())}


def child_one(c: Child) -> dict[str, Any]:
    """One object in this process: open as writer, one INSERT, flush, close."""
    oid = c.spec["oid"]
    ours = c.spec["impl"] == "durable_obj"
    obj = c.namespace().open(oid) if ours else c.chdb_durable().open(oid)
    obj.execute(row_sql(1))
    obj.flush()
    rss = rss_mib()
    obj.close()
    return {"rss_mib": rss, "since_start_s": time.perf_counter() - T0}


def child_fleet(c: Child) -> dict[str, Any]:
    """Every id of `oids` in this one process, as child_one does each, all
    open at once; then all closed."""
    ns = c.namespace()
    rss0 = rss_mib()
    start = time.perf_counter()
    objs, per_open = [], []
    rss_first = math.nan
    for n, oid in enumerate(c.spec["oids"]):
        t = time.perf_counter()
        obj = ns.open(oid)
        obj.execute(row_sql(1))
        obj.flush()
        per_open.append(time.perf_counter() - t)
        objs.append(obj)
        if n == 0:
            rss_first = rss_mib()
    written = time.perf_counter() - start
    rss_all = rss_mib()
    t = time.perf_counter()
    for obj in objs:
        obj.close()
    return {
        "rss_before_mib": rss0,
        "rss_first_mib": rss_first,
        "rss_all_mib": rss_all,
        "written_s": written,
        "close_s": time.perf_counter() - t,
        "per_object_s": per_open,
    }


def child_many(c: Child) -> dict[str, Any]:
    """Every id of `oids` opened as a writer in this process by `threads`
    threads, all kept open; RSS before, after the first, after all."""
    ns = c.namespace()
    oids = c.spec["oids"]
    rss0 = rss_mib()
    first = ns.open(oids[0])
    rss_first = rss_mib()
    start = time.perf_counter()
    with ThreadPoolExecutor(c.spec["threads"]) as workers:
        objs = [first, *workers.map(ns.open, oids[1:])]
    opened = time.perf_counter() - start
    rss_all = rss_mib()
    rows = int(str(objs[-1].query("SELECT count() FROM memories").data()).strip())
    t = time.perf_counter()
    with ThreadPoolExecutor(c.spec["threads"]) as workers:
        list(workers.map(lambda o: o.close(), objs))
    return {
        "rss_before_mib": rss0,
        "rss_first_mib": rss_first,
        "rss_all_mib": rss_all,
        "open_rest_s": opened,
        "close_s": time.perf_counter() - t,
        "rows": rows,
    }


def child_threads(c: Child) -> dict[str, Any]:
    """`threads` threads, each looping execute + flush over its own
    `per_thread` objects (round robin) for `seconds`."""
    ns = c.namespace()
    threads, per = c.spec["threads"], c.spec["per_thread"]
    oids = c.spec["oids"][: threads * per]
    objs = [ns.open(oid) for oid in oids]
    statements = [row_sql(i) for i in range(STATEMENTS)]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    stop = threading.Event()
    barrier = threading.Barrier(threads + 1)

    def loop(n: int) -> None:
        mine = objs[n * per : (n + 1) * per]
        out = latencies[n]
        i = n
        barrier.wait()
        try:
            while not stop.is_set():
                obj = mine[i % per]
                obj.execute(statements[i % STATEMENTS])
                t = time.perf_counter()
                obj.flush()
                out.append((time.perf_counter() - t) * 1e3)
                i += 1
        except BaseException as exc:  # reported by the parent
            errors.append(exc)

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(c.spec["seconds"])
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    for obj in objs:
        obj.close()
    flat = [x for lat in latencies for x in lat]
    return {"flushes": len(flat), "elapsed_s": elapsed, "flush_ms": flat}


def child_pool(c: Child) -> dict[str, Any]:
    """Pool.object(id): a miss on each id of `oids` (max_open above them
    all, so no eviction; the first, which starts the engine, apart), then
    `hits` hits on random cached ids."""
    oids = c.spec["oids"]
    pool = c.pool(max_open=len(oids) + 1)
    miss, hit = [], []
    first = pool.object(oids[0])  # starts the engine: not a miss like the others
    t = time.perf_counter()
    first.__enter__()
    engine_ms = (time.perf_counter() - t) * 1e3
    first.__exit__(None, None, None)
    for oid in oids[1:]:
        use = pool.object(oid)
        t = time.perf_counter()
        use.__enter__()
        miss.append((time.perf_counter() - t) * 1e3)
        use.__exit__(None, None, None)
    rng = random.Random(7)
    for _ in range(c.spec["hits"]):
        use = pool.object(rng.choice(oids))
        t = time.perf_counter()
        obj = use.__enter__()
        hit.append((time.perf_counter() - t) * 1e3)
        use.__exit__(None, None, None)
    rows = int(str(obj.query("SELECT count() FROM memories").data()).strip())
    cached = len(pool)
    pool.close()
    return {"miss_ms": miss, "hit_ms": hit, "first_ms": engine_ms, "rows": rows, "cached": cached}


CHILDREN = {
    "populate": child_populate,
    "one": child_one,
    "fleet": child_fleet,
    "many": child_many,
    "threads": child_threads,
    "pool": child_pool,
}


def run_child(spec: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    """One child in a fresh interpreter; its result, plus `wall_s` (spawn to exit)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['phase']} {spec.get('impl', '')} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


# -- the parent: figures and the table ---------------------------------------------


@dataclass
class AtLeast(OwnRow):
    """A durable_obj figure whose goal is a floor: at least `limit`."""

    @property
    def verdict(self) -> str:
        if self.limit is None or math.isnan(self.ours):
            return ""
        return "met" if self.ours >= self.limit else "NOT met"


class MultiReport(Report):
    def own_table(self) -> str:
        head = f"{'store':<8}{'metric':<44}{'unit':<7}{'durable_obj':>12}  {'goal':<9}{'':<8}"
        lines = [head.rstrip(), "-" * len(head)]
        for r in self.own:
            sign = ">=" if isinstance(r, AtLeast) else "<="
            goal = f"{sign}{r.limit:g}" if r.limit is not None else ""
            lines.append(
                f"{r.store:<8}{r.metric:<44}{r.unit:<7}{fmt(r.ours):>12}  {goal:<9}"
                f"{r.verdict:<8}{r.note}".rstrip()
            )
        return "\n".join(lines)


class Bench:
    """Every figure group on one store, rows added to the report."""

    def __init__(
        self,
        label: str,
        store: dict[str, Any],
        direct: dict[str, Any],
        env: dict[str, str] | None,
        direct_env: dict[str, str] | None,
        args: argparse.Namespace,
        report: Report,
    ) -> None:
        self.label, self.store, self.direct, self.env = label, store, direct, env
        self.direct_env = direct_env
        self.args, self.report = args, report
        self.samples: dict[str, Any] = report.samples.setdefault(label, {})

    def child(self, phase: str, impl: str = "durable_obj", **spec: Any) -> dict[str, Any]:
        return run_child({"phase": phase, "impl": impl, "store": self.store, **spec}, self.env)

    def progress(self, what: str, start: float) -> None:
        print(f"  [{self.label}] {what}: {time.perf_counter() - start:.1f} s", flush=True)

    def own(
        self, metric: str, unit: str, ours: float, limit: float | None = None, **kw: Any
    ) -> None:
        self.report.own.append(OwnRow(self.label, metric, unit, ours, limit, **kw))

    def populate(self, groups: set[str]) -> dict[str, list[str]]:
        a = self.args
        ids: dict[str, list[str]] = {}
        if "fleet" in groups:
            for impl in ("one", "dop", "cdp"):
                ids[impl] = [f"{impl}-{n:04d}" for n in range(a.objects)]
        if "many" in groups:
            ids["many"] = [f"many-{n:04d}" for n in range(a.many)]
        if "threads" in groups:
            ids["thr"] = [f"thr-{n:04d}" for n in range(a.threads * max(a.per_thread, 1))]
        if "pool" in groups:
            ids["pool"] = [f"pool-{n:04d}" for n in range(a.pool_misses)]
        for impl, seed in (("durable_obj", "seed"), ("chdb.durable", "seed-cd")):
            start = time.perf_counter()
            mine = [
                oid
                for key, group in ids.items()
                if (key == "cdp") == (impl != "durable_obj")
                for oid in group
            ]
            if not mine:
                continue
            spec = {"phase": "populate", "impl": impl, "store": self.direct, "seed": seed}
            got = run_child({**spec, "rows": a.rows, "oids": mine}, self.direct_env)
            self.progress(
                f"{len(mine):,} objects of {a.rows:,} rows written by {impl} "
                f"({', '.join(got['keys'])}; {got['bytes'] / 2**20:.2f} MiB each)",
                start,
            )
        return ids

    def fleet(self, ids: dict[str, list[str]]) -> None:
        n = self.args.objects
        start = time.perf_counter()
        one = self.child("fleet", oids=ids["one"])
        self.samples["fleet_one"] = one
        self.progress(f"{n} objects in one process", start)
        per: dict[str, dict[str, list[float]]] = {}
        # one process per object, the two implementations alternating
        for k in range(n):
            for impl, key in (("chdb.durable", "cdp"), ("durable_obj", "dop"))[:: 1 - 2 * (k % 2)]:
                got = self.child("one", impl, oid=ids[key][k])
                runs = per.setdefault(impl, {"wall_s": [], "rss_mib": [], "peak_rss_mib": []})
                for name in runs:
                    runs[name].append(got[name])
        self.samples["fleet_per_process"] = per
        self.progress(f"{n} objects, one process each, x2", start)
        ours_total = one["wall_s"]
        dop, cdp = per["durable_obj"], per["chdb.durable"]
        dop_total, cdp_total = sum(dop["wall_s"]), sum(cdp["wall_s"])
        objs = f"{n} objs"
        self.report.add(
            Row(
                self.label,
                f"{objs} open+write+flush+close: 1 proc vs {n}",
                "s",
                ours_total,
                cdp_total,
                goal=GOAL_FLEET_RATIO if n >= GOAL_FLEET_OBJECTS else None,
                note=f"durable_obj {n} procs: {dop_total:.2f} s",
            )
        )
        self.report.add(
            Row(self.label, f"{objs}, one process each: total", "s", dop_total, cdp_total)
        )
        self.report.add(
            Row(
                self.label,
                "  per process (spawn to exit), median",
                "s",
                median(dop["wall_s"]),
                median(cdp["wall_s"]),
            )
        )
        self.report.add(
            Row(
                self.label,
                f"RSS per object: 1 proc vs {n} procs",
                "MiB",
                one["rss_all_mib"] / n,
                sum(cdp["rss_mib"]) / n,
                note=f"durable_obj {n} procs: {sum(dop['rss_mib']) / n:.1f}",
            )
        )
        self.report.add(
            Row(
                self.label,
                "RSS of a 1-object process, median",
                "MiB",
                median(dop["rss_mib"]),
                median(cdp["rss_mib"]),
            )
        )
        if n > 1:
            growth = (one["rss_all_mib"] - one["rss_first_mib"]) / (n - 1)
            self.own(
                f"RSS growth per object, {n} objs (after 1st)",
                "MiB",
                growth,
                GOAL_RSS_MIB if n >= GOAL_FLEET_OBJECTS else None,
                note=f"engine + 1st object {one['rss_first_mib'] - one['rss_before_mib']:.0f} MiB",
            )
        per_obj = one["per_object_s"]
        self.own(
            f"open+write+flush per object, {n} in 1 proc",
            "ms",
            median(per_obj[1:] or per_obj) * 1e3,
            note=f"first (engine start) {per_obj[0] * 1e3:.0f} ms; "
            f"close all {one['close_s']:.2f} s",
        )

    def many(self, ids: dict[str, list[str]]) -> None:
        n = self.args.many
        start = time.perf_counter()
        got = self.child("many", oids=ids["many"], threads=self.args.open_threads)
        self.samples["many"] = got
        self.progress(f"{n:,} objects open in one process", start)
        if got["rows"] != self.args.rows:
            raise RuntimeError(f"an object opened with {got['rows']} rows, not {self.args.rows}")
        rest = max(n - 1, 1)
        self.own(
            f"{n:,} objs open at once: open all but the 1st",
            "s",
            got["open_rest_s"],
            note=f"{self.args.open_threads} threads; {got['open_rest_s'] / rest * 1e3:.1f} ms "
            f"per object; close all {got['close_s']:.2f} s",
        )
        self.own(
            f"{n:,} objs open: RSS growth per object",
            "MiB",
            (got["rss_all_mib"] - got["rss_first_mib"]) / rest,
            GOAL_RSS_MIB if n >= GOAL_MANY_OBJECTS else None,
            note=f"process RSS {got['rss_all_mib']:.0f} MiB with all open",
        )

    def threads(self, ids: dict[str, list[str]]) -> None:
        a = self.args
        start = time.perf_counter()
        shapes = [(1, 1), (a.threads, 1)]
        if a.per_thread > 1:
            shapes.append((a.threads, a.per_thread))
        figures = {}
        for threads, per in shapes:
            got = self.child(
                "threads", oids=ids["thr"], threads=threads, per_thread=per, seconds=a.seconds
            )
            self.samples[f"threads_{threads}x{per}"] = got
            figures[threads, per] = got
            self.progress(f"{threads} thread(s) x {per} object(s) execute+flush", start)
        base = figures[1, 1]["flushes"] / figures[1, 1]["elapsed_s"]
        for (threads, per), got in figures.items():
            rate = got["flushes"] / got["elapsed_s"]
            lat = got["flush_ms"]
            label = f"{threads} thr x {per} obj{'s' if per > 1 else ''}"
            note = f"p50 {median(lat):.1f} ms, p99 {p99(lat):.1f} ms; {got['flushes']} flushes"
            if (threads, per) != (1, 1):
                note += f"; x{rate / base:.2f} of 1x1"
            self.own(f"execute+flush, {label}: flushes/s", "1/s", rate, note=note)
        speed = figures[a.threads, 1]["flushes"] / figures[a.threads, 1]["elapsed_s"] / base
        goal = GOAL_SPEEDUP if a.threads == 16 and self.label == "s3" else None
        self.report.own.append(
            AtLeast(
                self.label,
                f"{a.threads} thr x 1 obj over 1 thr x 1 obj: speedup",
                "x",
                speed,
                goal if a.latency_ms == 20 else None,
                note="goal at --latency-ms 20 on S3",
            )
        )

    def pool(self, ids: dict[str, list[str]]) -> None:
        start = time.perf_counter()
        got = self.child("pool", oids=ids["pool"], hits=self.args.pool_hits)
        self.samples["pool"] = got
        self.progress("Pool.object() misses and hits", start)
        if got["rows"] != self.args.rows or got["cached"] != len(ids["pool"]):
            raise RuntimeError(f"pool: {got['rows']} rows, {got['cached']} cached")
        for kind in ("miss", "hit"):
            lat = got[f"{kind}_ms"]
            what = f"a {self.args.rows:,}-row object" if kind == "miss" else "cached"
            note = f"{len(lat)} samples"
            if kind == "miss":
                note += f"; the first (engine start) apart: {got['first_ms']:.0f} ms"
            self.own(f"pool.object(id) {kind} ({what}), p50", "ms", median(lat), note=note)
            self.own(f"pool.object(id) {kind}, p99", "ms", p99(lat))

    def all(self) -> None:
        groups = self.args.only
        ids = self.populate(groups)
        for group in GROUPS:
            if group in groups:
                getattr(self, group)(ids)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 / 200 objects, 4 s loops")
    parser.add_argument("--smoke", action="store_true", help="tiny: runs, measures nothing")
    parser.add_argument("--stores", default="local,s3", help="comma list: local, s3")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma list of {GROUPS}")
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
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added per S3 request")
    parser.add_argument("--endpoint", help="an S3-compatible server; default: start SeaweedFS")
    parser.add_argument("--key", default="")
    parser.add_argument("--secret", default="")
    parser.add_argument("--bucket", default="")
    parser.add_argument("--results", default=RESULTS, help=f"folder for the JSON ({RESULTS})")
    args = parser.parse_args(argv)
    args.only = {g.strip() for g in args.only.split(",") if g.strip()}
    if args.only - set(GROUPS):
        parser.error(f"--only: unknown group(s) {', '.join(sorted(args.only - set(GROUPS)))}")

    def pick(name: str, smoke: Any, quick: Any, full: Any) -> None:
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else quick if args.quick else full)

    pick("objects", 3, 30, 100)
    pick("many", 5, 200, 1000)
    pick("rows", 50, 1000, 1000)
    pick("threads", 2, 16, 16)
    pick("per_thread", 2, 16, 16)
    pick("seconds", 0.5, 4.0, 10.0)
    pick("pool_misses", 3, 31, 101)
    pick("pool_hits", 5, 1000, 5000)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    report = MultiReport("multi", {k: v for k, v in vars(args).items() if k != "secret"})
    report.notes += [
        "ratio = durable_obj / chdb.durable: below 1 is faster or smaller",
        f"every object a copy of one of {args.rows:,} rows (checkpointed base, empty WAL); "
        "durable_obj with folding off",
        f"fleet: durable_obj opens the {args.objects} objects one after another in one "
        "process; each 'proc' is a fresh interpreter, run one after another; totals from "
        "the first spawn to the last exit; RSS read after the flush, object open",
        "chdb.durable holds one object per process: it has no many-objects or threads figure",
    ]
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
    report.notes.append(f"total wall time {time.perf_counter() - started:.0f} s")
    if args.smoke:
        report.notes.append("--smoke: a check that every figure group runs; not a measurement")
    report.print()
    print(f"\nwrote {report.write(args.results)}")


def child_main(spec: dict[str, Any]) -> None:
    import warnings

    warnings.simplefilter("ignore")
    result = CHILDREN[spec["phase"]](Child(spec))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(json.loads(sys.argv[2]))
    else:
        main()
