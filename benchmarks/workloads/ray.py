"""durable_obj.ray (issue 18): requests per second across 20 objects through
Ray handles, against the same work in one process without Ray; and the time
from an actor's death (SIGKILL) to its object serving again.

    python benchmarks/run.py --only ray                 # 20 objects, 10 s per figure
    python benchmarks/run.py --only ray --smoke         # tiny: proves it runs, measures nothing
    python benchmarks/run.py --only ray -- --shards 4,20 --threads 4 --seconds 10 --kills 5

A request is one single-row INSERT and a flush (execute + flush: two calls,
and one WAL segment committed). --threads driver threads each loop over their
share of --objects objects, for --seconds:

* in one process: a `durable_obj.Pool` of the objects in the benchmark's own
  process, the threads calling `pool.object(id)`, execute, flush;
* through Ray: `durable_obj.ray.Hosts(shards=S)`, the threads calling
  `handle.execute` and `handle.flush` (two calls to the actor, another
  process, per request), and again with `handle.write(sql)` (the same
  execute + flush in one call). Once per --shards value (4: a
  pool of actors each holding 5 objects; 20 = one actor per object).

Recovery: the worker process of one actor is SIGKILLed (--kills times); the
figure is the time from the kill to the first `handle.query()` that answers,
through the same handle (Ray restarts the actor, the new incarnation takes
the object's lease back at once and reopens it).

Ray runs one local node (`ray.init`, pinned to 127.0.0.1) with --cpus CPUs;
the store is a local folder. The machine's cores are shared by the driver,
the actors and chDB: on 2 cores the figures are a floor, not a capacity.
Raw samples go to benchmarks/results/ray-<time>.json.
"""

from __future__ import annotations

import os

# Before Ray is imported: keep every address on 127.0.0.1, no usage report.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import argparse
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from harness.procs import RESULTS
from harness.report import OwnRow, Report, median

import durable_obj

DDL = "CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k"
OPTIONS = {"fold_segments": 0, "close_fold_segments": 0, "lease_ttl": 30}


def run_threads(
    threads: int, oids: list[str], seconds: float, request: Callable[[str, int], None]
) -> tuple[int, float]:
    """Each thread loops `request(oid, n)` over its share of `oids` for
    `seconds`; (requests done, wall seconds)."""
    stop = threading.Event()
    counts = [0] * threads
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        mine = oids[i::threads]
        n = 0
        try:
            while not stop.is_set():
                for oid in mine:
                    request(oid, n)
                    counts[i] += 1
                n += 1
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return sum(counts), wall


def in_process(root: str, oids: list[str], threads: int, seconds: float) -> float:
    url = os.path.join(root, "local")
    with durable_obj.Pool(url, owner="bench", **OPTIONS) as pool:
        for oid in oids:
            with pool.object(oid) as obj:
                obj.execute(DDL)
                obj.flush()

        def request(oid: str, n: int) -> None:
            with pool.object(oid) as obj:
                obj.execute(f"INSERT INTO t VALUES ({n}, 'x')")
                obj.flush()

        done, wall = run_threads(threads, oids, seconds, request)
    return done / wall


def through_ray(
    root: str, oids: list[str], threads: int, seconds: float, shards: int
) -> tuple[float, float]:
    """(req/s with execute + flush: two calls, req/s with write(): one call)."""
    from durable_obj.ray import Hosts

    url = os.path.join(root, f"ray-{shards}")
    hosts = Hosts(url, shards=shards, name=f"bench-{uuid.uuid4().hex[:6]}", **OPTIONS)
    try:
        handles = {oid: hosts.get(oid) for oid in oids}
        for handle in handles.values():
            handle.execute(DDL)
            handle.flush()

        def request(oid: str, n: int) -> None:
            handle = handles[oid]
            handle.execute(f"INSERT INTO t VALUES ({n}, 'x')")
            handle.flush()

        def batched(oid: str, n: int) -> None:
            handles[oid].write(f"INSERT INTO t VALUES ({n}, 'y')")

        done, wall = run_threads(threads, oids, seconds, request)
        done_w, wall_w = run_threads(threads, oids, seconds, batched)
        return done / wall, done_w / wall_w
    finally:
        hosts.shutdown()


def recovery(root: str, kills: int) -> list[float]:
    """Seconds from SIGKILL of an actor's worker to its object answering again."""
    import ray

    from durable_obj.ray import Hosts

    url = os.path.join(root, "recovery")
    hosts = Hosts(url, shards=1, name=f"recover-{uuid.uuid4().hex[:6]}", **OPTIONS)
    samples = []
    try:
        handle = hosts.get("agent")
        handle.execute(DDL)
        handle.execute("INSERT INTO t VALUES (1, 'x')")
        handle.flush()
        for _ in range(kills):
            pid = ray.get(hosts.actor("agent").stats.remote())["pid"]
            killed = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            while True:
                try:
                    assert handle.query("SELECT count() FROM t", "TSV").strip() == "1"
                    break
                except durable_obj.HostLost:
                    time.sleep(0.01)
            samples.append(time.perf_counter() - killed)
    finally:
        hosts.shutdown()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--shards", default="4,20")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--cpus", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: runs, measures nothing")
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args()
    if args.smoke:
        args.objects, args.seconds, args.shards, args.kills = 4, 0.5, "2", 1
    shard_counts = [int(s) for s in args.shards.split(",")]

    import ray

    report = Report("ray", vars(args))
    if args.smoke:
        report.notes.append("--smoke: a check that every figure runs; the figures mean nothing")
    oids = [f"agent-{i:02d}" for i in range(args.objects)]
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as root:
        ray.init(
            address="local",  # a node of its own, never a cluster found on the machine
            num_cpus=args.cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
        )
        try:
            # The baseline is measured again right before each Ray figure, and
            # each ratio is against the baseline beside it: on a shared
            # machine the load moves between figures.
            baselines = []
            for shards in shard_counts:
                local = in_process(
                    os.path.join(root, f"local-{shards}"), oids, args.threads, args.seconds
                )
                baselines.append(local)
                rate, one_call = through_ray(root, oids, args.threads, args.seconds, shards)
                for how, value in (("execute+flush", rate), ("write()", one_call)):
                    report.own.append(
                        OwnRow(
                            "local",
                            f"{args.objects} objs, Ray, {shards} actor(s), {how}",
                            "req/s",
                            value,
                            note=f"{value / local:.2f}x the 1-process rate beside it",
                        )
                    )
            report.samples["baselines_req_s"] = baselines
            report.own.insert(
                0,
                OwnRow(
                    "local",
                    f"{args.objects} objs, 1 process, no Ray",
                    "req/s",
                    median(baselines),
                    note="median of the runs beside each Ray figure: "
                    + ", ".join(f"{b:.1f}" for b in baselines),
                ),
            )
            samples = recovery(root, args.kills)
            report.samples["recovery_s"] = samples
            report.own.append(
                OwnRow(
                    "local",
                    "actor SIGKILL -> serving again, median",
                    "s",
                    median(samples),
                    note=f"{len(samples)} kills, max {max(samples):.2f} s",
                )
            )
        finally:
            ray.shutdown()
    report.notes.append(
        f"a request = execute (single-row INSERT) + flush; {args.threads} driver threads; "
        f"{args.seconds:g} s per figure; folder store; Ray local node, {args.cpus} CPUs"
    )
    report.print()
    print(f"\nresults: {report.write(args.results)}")


if __name__ == "__main__":
    main()
