"""A service under load: N agents x M concurrent writes, each a 2-statement unit.

    python benchmarks/run.py --only service                  # 50 x 20, folder + S3 (+0 / +20 ms)
    python benchmarks/run.py --only service --quick          # 10 x 5
    python benchmarks/run.py --only service --smoke          # tiny: proves it runs
    python benchmarks/run.py --only service --stores s3-20   # one store

The workload of issue 27's trial: one process, `--objects` durable objects
(one per agent), `--tasks` concurrent tasks per object, each writing
`--writes` units of two statements (a memory and its log line, with query
parameters), closed loop. Each run opens its objects with the run already
measuring (the event loop's gaps include the opens), in a fresh child
process per run. Patterns, side by side on the same store:

* `aexecute`: `await aexecute(a); await aexecute(b); await aflush()`, the
  natural pattern before units of work (it can commit half of a unit);
* `awrite`:   `await awrite(a, b)` (a unit, group-committed);
* `threads`:  the sync API on `objects x tasks` threads, `obj.write(a, b)`.

Reported per run: writes/s, ack latency p50/p99 (from a write's start to
its durable return) and its spread (p99/p50), the wait for admission
(`max_units_in_flight`, `--max-units`, and across objects
`durable_obj.aio.MAX_UNITS_IN_FLIGHT`, `--process-units`; from a write's
start to its first admission) and the time from admission to the ack, with their spreads,
commits per write (segments / writes: below 1 means group commit), the
loop's max tick gap during the opens and the run
(async patterns), the gap while the run is launched (every task's first
step runs in one loop turn: `launch`, shown apart since it is the
harness's gather of objects x tasks coroutines at once), and one flush's
latency on that store (a solo write, median of 5) to read ack p99 (and
admitted-to-ack p99) against. Ratios are each pattern's writes/s over the
first pattern's in the same run.

In a closed loop the mean ack latency is the writes in flight over the
throughput (Little's law): a bound on admission moves that time from the
object's queues to the admission wait; it does not remove it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import tempfile
import threading
import time
import uuid
from typing import Any

from harness.procs import run_json
from harness.report import pct
from harness.servers import s3_bench

DDL = (
    "CREATE TABLE IF NOT EXISTS memories (id String, content String) "
    "ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE IF NOT EXISTS log (id String, event String) ENGINE = MergeTree ORDER BY id",
)
MEMORY = "INSERT INTO memories VALUES ({id:String}, {content:String})"
LOG = "INSERT INTO log VALUES ({id:String}, 'remembered')"
PATTERNS = ("aexecute", "awrite", "threads")


def unit(obj: int, task: int, n: int) -> tuple[dict[str, str], dict[str, str]]:
    ident = f"o{obj}-t{task}-w{n}"
    return {"id": ident, "content": f"memory {ident}: " + "x" * 180}, {"id": ident}


# -- the child: one run ---------------------------------------------------------------
#: When the write in progress (of this task or thread) was first admitted by
#: its object, and by the process (`durable_obj.aio.MAX_UNITS_IN_FLIGHT`).
_admitted: contextvars.ContextVar[float | None] = contextvars.ContextVar("admitted", default=None)
_admitted_all: contextvars.ContextVar[float | None] = contextvars.ContextVar("all", default=None)


def _time_admission() -> None:
    """Note when each write is first admitted (`core/admission.py`): its
    awrite/aexecute (async) or write (threads) returns from the wait (the
    object's, then the process's when set)."""
    try:
        from durable_obj.core import admission
        from durable_obj.core.admission import Admission
    except ImportError:  # a version without admission: every write is admitted at its start
        return
    sync_acquire, async_acquire = Admission.acquire, Admission.aacquire

    def note(self: Admission) -> None:
        var = _admitted_all if self in admission._process else _admitted
        if var.get() is None:
            var.set(time.perf_counter())

    def acquire(self: Admission) -> bool:
        taken: bool = sync_acquire(self)
        note(self)
        return taken

    async def aacquire(self: Admission) -> None:
        await async_acquire(self)
        note(self)

    Admission.acquire, Admission.aacquire = acquire, aacquire  # type: ignore[method-assign,unused-ignore]


def _timed(acks: list[tuple[float, float, float]], start: float) -> None:
    """One write acknowledged: (start->ack, start->admitted, admitted->ack)."""
    now = time.perf_counter()
    admitted = max(_admitted.get() or start, _admitted_all.get() or start)
    _admitted.set(None)
    _admitted_all.set(None)
    acks.append((now - start, admitted - start, now - admitted))


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import durable_obj
    import durable_obj.aio

    durable_obj.aio.preload()  # chDB's load, before any loop runs (docs/guides/async.md's advice)
    _time_admission()

    url, storage = spec["url"], spec["storage"]
    n_obj, n_task, n_write = spec["objects"], spec["tasks"], spec["writes"]
    pattern = spec["pattern"]
    acks: list[tuple[float, float, float]] = []
    opts = {"max_units_in_flight": spec["max_units"]} if spec.get("max_units") else {}
    if pattern == "threads":
        ns = durable_obj.Namespace(url, owner="svc", storage_options=storage, **opts)
        t0 = time.perf_counter()
        objs = [ns.open(f"agent-{i}") for i in range(n_obj)]
        opened = time.perf_counter() - t0
        for o in objs:
            o.write(*DDL)
        seq0 = sum(o.seq for o in objs)
        first = objs[0]
        solo = _solo([lambda i=i: first.write(MEMORY, params=unit(-1, i, 0)[0]) for i in range(5)])

        def work(i: int, t: int) -> None:
            for n in range(n_write):
                memory, log = unit(i, t, n)
                _admitted.set(None)
                _admitted_all.set(None)
                s = time.perf_counter()
                objs[i].write((MEMORY, memory), (LOG, log))
                _timed(acks, s)

        started = time.perf_counter()
        threads = [
            threading.Thread(target=work, args=(i, t)) for i in range(n_obj) for t in range(n_task)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - started
        commits = sum(o.seq for o in objs) - seq0 - 5
        for o in objs:
            o.close()
        return _result(acks, elapsed, commits, n_obj * n_task * n_write, solo, None, opened)
    return asyncio.run(_async_child(spec, acks))


def _solo(calls: list[Any]) -> float:
    times = []
    for call in calls:
        s = time.perf_counter()
        call()
        times.append(time.perf_counter() - s)
    return sorted(times)[len(times) // 2]


async def _async_child(
    spec: dict[str, Any], acks: list[tuple[float, float, float]]
) -> dict[str, Any]:
    import durable_obj
    import durable_obj.aio

    if spec.get("local_workers"):
        durable_obj.aio.LOCAL_WORKERS = spec["local_workers"]
    if spec.get("process_units"):
        durable_obj.aio.MAX_UNITS_IN_FLIGHT = spec["process_units"]

    url, storage = spec["url"], spec["storage"]
    n_obj, n_task, n_write = spec["objects"], spec["tasks"], spec["writes"]
    pattern = spec["pattern"]
    opts = {"max_units_in_flight": spec["max_units"]} if spec.get("max_units") else {}
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    gaps.clear()
    t0 = time.perf_counter()
    objs = await asyncio.gather(
        *(
            durable_obj.aopen(f"{url}/agent-{i}", owner="svc", storage_options=storage, **opts)
            for i in range(n_obj)
        )
    )
    opened = time.perf_counter() - t0
    open_gap = max(gaps, default=0.0)
    gaps.clear()
    for o in objs:
        await o.awrite(*DDL)
    seq0 = sum(o.sync.seq for o in objs)
    solo_times = []
    for i in range(5):
        s = time.perf_counter()
        await objs[0].awrite(MEMORY, params=unit(-1, i, 0)[0])
        solo_times.append(time.perf_counter() - s)

    async def work(i: int, t: int) -> None:
        o = objs[i]
        for n in range(n_write):
            memory, log = unit(i, t, n)
            _admitted.set(None)  # (the context this task copied may hold the setup's)
            _admitted_all.set(None)
            s = time.perf_counter()
            if pattern == "awrite":
                await o.awrite((MEMORY, memory), (LOG, log))
            else:
                await o.aexecute(MEMORY, params=memory)
                await o.aexecute(LOG, params=log)
                await o.aflush()
            _timed(acks, s)

    started = time.perf_counter()
    gaps.clear()
    burst = asyncio.gather(*(work(i, t) for i in range(n_obj) for t in range(n_task)))
    await asyncio.sleep(0.2)  # the launch: every task's first step in one loop turn
    burst_gap = max(gaps, default=0.0)
    gaps.clear()
    await burst
    elapsed = time.perf_counter() - started
    commits = sum(o.sync.seq for o in objs) - seq0 - 5
    stop.set()
    await tick
    for o in objs:
        await o.aclose()
    solo = sorted(solo_times)[2]
    gap = max(max(gaps, default=0.0), open_gap)
    out = _result(acks, elapsed, commits, n_obj * n_task * n_write, solo, gap, opened)
    out["open_gap_ms"], out["run_gap_ms"] = open_gap * 1e3, max(gaps, default=0.0) * 1e3
    out["burst_gap_ms"] = burst_gap * 1e3
    return out


def _result(
    acks: list[tuple[float, float, float]],
    elapsed: float,
    commits: int,
    writes: int,
    solo: float,
    gap: float | None,
    opened: float,
) -> dict[str, Any]:
    ack, wait, inside = ([a[n] for a in acks] for n in range(3))
    return {
        "writes_s": writes / elapsed,
        "p50_ms": pct(ack, 0.5) * 1e3,
        "p99_ms": pct(ack, 0.99) * 1e3,
        "wait_p50_ms": pct(wait, 0.5) * 1e3,
        "wait_p99_ms": pct(wait, 0.99) * 1e3,
        "in_p50_ms": pct(inside, 0.5) * 1e3,
        "in_p99_ms": pct(inside, 0.99) * 1e3,
        "commits_per_write": commits / writes,
        "gap_ms": None if gap is None else gap * 1e3,
        "solo_ms": solo * 1e3,
        "open_s": opened,
    }


# -- the parent -----------------------------------------------------------------------
def run_one(spec: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    args = ["--child", json.dumps(spec)]
    return run_json(__spec__.name, args, env, what=spec["pattern"], timeout=1800, tail=3000)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=50)
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--writes", type=int, default=1, help="units per task")
    p.add_argument("--stores", default="local,s3,s3-20", help="local, s3, s3-20 (comma list)")
    p.add_argument("--s3-endpoint", default=None, help="an S3 server (default: SeaweedFS here)")
    p.add_argument(
        "--local-workers", type=int, default=0, help="durable_obj.aio.LOCAL_WORKERS (0: default)"
    )
    p.add_argument("--patterns", default=",".join(PATTERNS), help="aexecute, awrite, threads")
    p.add_argument(
        "--max-units", type=int, default=0, help="max_units_in_flight per object (0: default)"
    )
    p.add_argument(
        "--process-units",
        type=int,
        default=0,
        help="durable_obj.aio.MAX_UNITS_IN_FLIGHT, across objects (0: none)",
    )
    p.add_argument("--json", default=None, help="append each row as JSON to this file")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.quick:
        args.objects, args.tasks = 10, 5
    if args.smoke:
        args.objects, args.tasks, args.writes, args.stores = 2, 2, 1, "local"
    sizes = {
        "objects": args.objects,
        "tasks": args.tasks,
        "writes": args.writes,
        "local_workers": args.local_workers,
        "patterns": args.patterns.split(","),
        "max_units": args.max_units,
        "process_units": args.process_units,
        "json": args.json,
    }
    print(f"{args.objects} objects x {args.tasks} tasks x {args.writes} unit(s) of 2 statements")
    header = (
        f"{'store':8} {'pattern':9} {'writes/s':>9} {'ratio':>6} {'ack p50/p99 ms':>15} "
        f"{'spread':>6} {'wait p50/p99':>13} {'in->ack p50/p99':>15} {'spread':>6} "
        f"{'1 flush':>8} {'p99/flush ack|in':>16} {'commits/w':>9} {'loop max':>9} "
        f"{'launch':>7} {'opens':>6}"
    )
    print(header)
    for store in args.stores.split(","):
        if store == "local":
            with tempfile.TemporaryDirectory(prefix="bench-service-") as root:
                _store_rows(store, {"url": root, "storage": {}}, sizes, None)
            continue
        latency = 20.0 if store == "s3-20" else 0.0
        key, secret = os.environ.get("S3_KEY", ""), os.environ.get("S3_SECRET", "")
        with s3_bench(args.s3_endpoint, key, secret, "bench", latency, "service") as bench:
            t = bench.target
            storage = {
                "key": t.key,
                "secret": t.secret,
                "endpoint_url": t.endpoint,
                "client_kwargs": {"region_name": "us-east-1"},
            }
            url = f"s3://{t.bucket}/{bench.store['prefix']}"
            _store_rows(store, {"url": url, "storage": storage}, sizes, None)


def _store_rows(
    store: str, where: dict[str, Any], sizes: dict[str, Any], env: dict[str, str] | None
) -> None:
    base = None
    for pattern in sizes["patterns"]:
        spec = {**where, **sizes, "pattern": pattern}
        spec["url"] = f"{where['url'].rstrip('/')}/{pattern}-{uuid.uuid4().hex[:6]}"
        r = run_one(spec, env)
        base = base or r["writes_s"]
        gap = "-" if r["gap_ms"] is None else f"{r['gap_ms']:.1f} ms"
        launch = f"{r['burst_gap_ms']:.0f} ms" if "burst_gap_ms" in r else "-"
        print(
            f"{store:8} {pattern:9} {r['writes_s']:9.1f} {r['writes_s'] / base:6.2f} "
            f"{r['p50_ms']:7.0f}/{r['p99_ms']:<7.0f} {r['p99_ms'] / r['p50_ms']:6.1f} "
            f"{r['wait_p50_ms']:6.0f}/{r['wait_p99_ms']:<6.0f} "
            f"{r['in_p50_ms']:7.0f}/{r['in_p99_ms']:<7.0f} {r['in_p99_ms'] / r['in_p50_ms']:6.1f} "
            f"{r['solo_ms']:5.0f} ms {r['p99_ms'] / r['solo_ms']:8.1f}|"
            f"{r['in_p99_ms'] / r['solo_ms']:<7.1f} {r['commits_per_write']:9.2f} {gap:>9} "
            f"{launch:>7} {r['open_s']:5.1f}s",
            flush=True,
        )
        if sizes.get("json"):
            with open(sizes["json"], "a") as out:
                out.write(json.dumps({"store": store, "pattern": pattern, **sizes, **r}) + "\n")


if __name__ == "__main__":
    main()
