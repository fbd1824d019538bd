"""CPU per acknowledged 2-statement unit, durable_obj beside chdb.durable.

    python benchmarks/run.py --only cpu                 # folder + S3 server, 300 units, 3 rounds
    python benchmarks/run.py --only cpu --quick         # 100 units, 2 rounds
    python benchmarks/run.py --only cpu --stores local  # one store

Each variant runs in a fresh process, the variants alternating round by
round, on the same store:

* `durable_obj`: `obj.write(a, b)` (one unit: both statements, one commit),
  the engine's files where the default puts them (`placement.py`: in memory
  when the machine has a RAM-backed folder);
* `durable_obj disk`: the same with `DURABLE_OBJ_ENGINE_FILES=disk` (the
  engine's files in the temporary folder, as before issue 37);
* `chdb.durable`: `execute(a); execute(b); flush()`, as it ships (its
  engine's files in the temporary folder).

CPU is the process's user + system time (`os.times`: every thread, the
engine's pools included) over the measured units, after 20 warm-up units;
wall is the elapsed time. The ratio is each variant's CPU over
chdb.durable's in the same round (issue 37's goal: <= 0.5 on the folder and
on the S3 server).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from harness.procs import run_json
from harness.servers import s3_bench, s3_env

DDL = (
    "CREATE TABLE memories (id String, content String, at DateTime) ENGINE = MergeTree ORDER BY id",
    "CREATE TABLE log (id String, event String) ENGINE = MergeTree ORDER BY id",
)
VARIANTS = ("durable_obj", "durable_obj disk", "chdb.durable")
WARMUP = 20


def statements(i: int) -> tuple[str, str]:
    ident = f"u{i}"
    text = f"memory {ident}: " + "x" * 180
    return (
        f"INSERT INTO memories VALUES ('{ident}', '{text}', 1767225600)",
        f"INSERT INTO log VALUES ('{ident}', 'remembered')",
    )


def child(spec: dict[str, Any]) -> dict[str, Any]:
    n = spec["units"]
    if spec["variant"].startswith("durable_obj"):
        import durable_obj

        obj: Any = durable_obj.open(spec["url"], owner="bench", storage_options=spec["storage"])

        def unit(i: int) -> None:
            obj.write(*statements(i))

        obj.write(*DDL)
    else:
        import chdb.durable as cd

        obj = cd.Namespace(spec["cd_url"], owner="bench").open(spec["oid"])
        for ddl in DDL:
            obj.execute(ddl)
        obj.flush()

        def unit(i: int) -> None:
            a, b = statements(i)
            obj.execute(a)
            obj.execute(b)
            obj.flush()

    for i in range(WARMUP):
        unit(1_000_000 + i)
    t0, w0 = os.times(), time.perf_counter()
    for i in range(n):
        unit(i)
    t1, w1 = os.times(), time.perf_counter()
    obj.close()
    user, system = t1.user - t0.user, t1.system - t0.system
    return {
        "cpu_ms": (user + system) / n * 1e3,
        "user_ms": user / n * 1e3,
        "system_ms": system / n * 1e3,
        "wall_ms": (w1 - w0) / n * 1e3,
    }


def run(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    args = ["--child", json.dumps(spec)]
    return run_json(__spec__.name, args, env, what=spec["variant"], timeout=1800, tail=3000)


def measure(
    store: str, where: dict[str, Any], env: dict[str, str], units: int, rounds: int
) -> None:
    samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    ratios: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        got: dict[str, dict[str, Any]] = {}
        for variant in order:
            oid = f"cpu-{uuid.uuid4().hex[:8]}"
            spec = {
                **where,
                "variant": variant,
                "units": units,
                "oid": oid,
                "url": f"{where['url'].rstrip('/')}/{oid}",
            }
            venv = dict(env)
            venv["DURABLE_OBJ_ENGINE_FILES"] = "disk" if variant.endswith("disk") else "auto"
            got[variant] = run(spec, venv)
            samples[variant].append(got[variant])
        for variant in VARIANTS:
            ratios[variant].append(got[variant]["cpu_ms"] / got["chdb.durable"]["cpu_ms"])
    for variant in VARIANTS:
        s = samples[variant]

        def med(key: str, s: list[dict[str, Any]] = s) -> float:
            return float(statistics.median(x[key] for x in s))

        print(
            f"{store:6} {variant:17} {med('cpu_ms'):8.2f} {med('user_ms'):7.2f} "
            f"{med('system_ms'):7.2f} {med('wall_ms'):8.2f} "
            f"{statistics.median(ratios[variant]):7.3f}"
            f"  ({', '.join(f'{x:.3f}' for x in ratios[variant])})",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--units", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stores", default="local,s3")
    p.add_argument("--s3-endpoint", default=None, help="an S3 server (default: SeaweedFS here)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.quick:
        args.units, args.rounds = 100, 2
    print(f"CPU per 2-statement unit, {args.units} units, {args.rounds} rounds (medians)")
    print(
        f"{'store':6} {'variant':17} {'cpu ms':>8} {'user':>7} {'system':>7} {'wall ms':>8} "
        f"{'/ chdb.durable':>14}"
    )
    for store in args.stores.split(","):
        if store == "local":
            with tempfile.TemporaryDirectory(prefix="bench-cpu-") as root:
                where = {"url": root, "storage": {}, "cd_url": "local:" + root}
                measure(store, where, dict(os.environ), args.units, args.rounds)
            continue
        key, secret = os.environ.get("S3_KEY", ""), os.environ.get("S3_SECRET", "")
        with s3_bench(args.s3_endpoint, key, secret, "bench", 0.0, "cpu") as bench:
            t = bench.target
            prefix = bench.store["prefix"]
            where = {
                "url": f"s3://{t.bucket}/{prefix}",
                "cd_url": f"s3://{t.bucket}/{prefix}",
                "storage": {
                    "key": t.key,
                    "secret": t.secret,
                    "endpoint_url": t.endpoint,
                    "client_kwargs": {"region_name": "us-east-1"},
                },
            }
            measure(store, where, s3_env(t), args.units, args.rounds)


if __name__ == "__main__":
    main()
