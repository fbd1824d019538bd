"""durable_obj vs chdb.durable, side by side, same machine, same local folder.

    python benchmarks/bench_core.py            # ~1-2 minutes
    python benchmarks/bench_core.py --rows 100000 --repeat 5

Each measurement runs in a fresh process per implementation, alternating
between the two, so import and engine start are paid the same way. Prints
medians and the ratio durable_obj / chdb.durable (below 1 is faster), and
writes JSON next to this script (benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

IMPLS = ("durable_obj", "chdb.durable")

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_core_child.py")


def child(impl: str, root: str, oid: str, phase: str, rows: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, CHILD, impl, root, oid, phase, str(rows)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} {phase} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000, help="rows in the checkpointed base")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    samples: dict[str, dict[str, list[float]]] = {impl: {} for impl in IMPLS}
    with tempfile.TemporaryDirectory(prefix="durable-bench-") as root:
        for rep in range(args.repeat):
            for impl in IMPLS if rep % 2 == 0 else IMPLS[::-1]:
                oid = f"{impl.replace('.', '-')}-{rep}"
                for phase in ("write", "open"):
                    for key, value in child(impl, root, oid, phase, args.rows).items():
                        name = f"{phase}:{key}" if key == "peak_rss_mib" else key
                        samples[impl].setdefault(name, []).append(float(value))
    medians = {impl: {k: statistics.median(v) for k, v in samples[impl].items()} for impl in IMPLS}
    print(
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}; rows={args.rows}, repeat={args.repeat}"
    )
    print("cold open = base of rows + 64 segments x 10 statements, read-only, fresh process")
    print(f"{'metric':<24}{'durable_obj':>14}{'chdb.durable':>14}{'ratio':>9}")
    for key in medians["durable_obj"]:
        ours, theirs = medians["durable_obj"][key], medians["chdb.durable"].get(key, float("nan"))
        ratio = ours / theirs if theirs else float("nan")
        print(f"{key:<24}{ours:>14.2f}{theirs:>14.2f}{ratio:>9.3f}")
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"core-{int(time.time())}.json")
    with open(path, "w") as handle:
        json.dump({"args": vars(args), "samples": samples, "medians": medians}, handle, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
