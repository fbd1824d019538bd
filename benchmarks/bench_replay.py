"""Replay speed and the cost of the determinism gate, against chdb.durable.

    python benchmarks/bench_replay.py                  # local folder
    python benchmarks/bench_replay.py --segments 1001 --statements 1

Writes one object per implementation with `--segments` WAL segments of
`--statements` single-row INSERTs each (no checkpoint), then opens each
read-only in fresh processes, alternating, and reports the median open time,
replay statements/s, and the ratio durable_obj / chdb.durable. Also measures
execute() with and without the determinism gate in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

WRITE = r"""
import sys, warnings
impl, root, oid = sys.argv[1:4]
segments, per = int(sys.argv[4]), int(sys.argv[5])
if impl == "durable_obj":
    import durable_obj
    obj = durable_obj.open(f"{root}/{oid}", owner="bench")
else:
    import chdb.durable as cd
    obj = cd.Namespace("local:" + root, owner="bench").open(oid)
obj.execute("CREATE TABLE m (id UInt32, content String, at DateTime64(3, 'UTC')) "
            "ENGINE = MergeTree ORDER BY id")
n = 0
for s in range(segments):
    for _ in range(per):
        n += 1
        row = f"({n}, 'memory {n} {'x' * 150}', '2026-11-30 12:00:00.000')"
        obj.execute("INSERT INTO m VALUES " + row)
    obj.flush()
obj.close()
"""

OPEN = r"""
import sys, time, json
t0 = time.perf_counter()
impl, root, oid = sys.argv[1], sys.argv[2], sys.argv[3]
if impl == "durable_obj":
    import durable_obj
    import chdb._chdb  # what chdb.durable's import pays too; measure replay apart
    t1 = time.perf_counter()
    obj = durable_obj.open(f"{root}/{oid}", read_only=True)
else:
    import chdb.durable as cd
    t1 = time.perf_counter()
    obj = cd.Namespace("local:" + root).open(oid, read_only=True)
opened = time.perf_counter() - t0
replayed = time.perf_counter() - t1
rows = int(str(obj.query("SELECT count() FROM m").data()).strip())
obj.close()
print(json.dumps({"open_s": opened, "open_after_import_s": replayed, "rows": rows}))
"""

GATE = r"""
import time, tempfile, warnings, json, statistics
import durable_obj
warnings.simplefilter("ignore")
obj = durable_obj.open(tempfile.mkdtemp() + "/gate")
obj.execute("CREATE TABLE m (id UInt32, content String, at DateTime64(3, 'UTC')) "
            "ENGINE = MergeTree ORDER BY id")
def sql(i):
    return f"INSERT INTO m VALUES ({i}, 'memory {i} {'x' * 150}', '2026-11-30 12:00:00.000')"
def execute_ms(n):
    lat = []
    for i in range(n):
        t = time.perf_counter()
        obj.execute(sql(i))
        lat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1e3
def gate_ms(n):
    # the work the gate adds to execute(): tokenize, look up, pin, settings
    lat = []
    for i in range(n):
        t = time.perf_counter()
        obj._pinner.prepare(sql(i), "default")
        lat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1e3
execute_ms(50)
print(json.dumps({"execute_ms": execute_ms(300), "gate_ms": gate_ms(300)}))
obj.close(discard=True)
"""


def _run(code: str, *args: object) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=64)
    parser.add_argument("--statements", type=int, default=10, help="INSERTs per segment")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    impls = ("durable_obj", "chdb.durable")
    result: dict[str, Any] = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="durable-replay-") as root:
        for impl in impls:
            start = time.perf_counter()
            _run(WRITE, impl, root, impl.replace(".", "-"), args.segments, args.statements)
            print(f"wrote {impl}: {time.perf_counter() - start:.1f} s", flush=True)
        opens: dict[str, list[float]] = {impl: [] for impl in impls}
        replays: dict[str, list[float]] = {impl: [] for impl in impls}
        for rep in range(args.repeat):
            for impl in impls if rep % 2 == 0 else impls[::-1]:
                got = json.loads(_run(OPEN, impl, root, impl.replace(".", "-")))
                assert got["rows"] == args.segments * args.statements, got
                opens[impl].append(got["open_s"])
                replays[impl].append(got["open_after_import_s"])
    gate = json.loads(_run(GATE))
    total = args.segments * args.statements
    print(f"\n{args.segments} segments x {args.statements} single-row INSERTs, local folder")
    print(f"{'metric':<34}{'durable_obj':>13}{'chdb.durable':>14}{'ratio':>8}")
    ours, theirs = (statistics.median(opens[i]) for i in impls)
    print(f"{'cold open, read-only (s)':<34}{ours:>13.3f}{theirs:>14.3f}{ours / theirs:>8.3f}")
    print(
        f"{'replay statements/s (open incl.)':<34}{total / ours:>13.0f}{total / theirs:>14.0f}"
        f"{theirs / ours:>8.1f}x"
    )
    ours2, theirs2 = (statistics.median(replays[i]) for i in impls)
    print(
        f"{'replay statements/s (after import)':<34}{total / ours2:>13.0f}"
        f"{total / theirs2:>14.0f}{theirs2 / ours2:>8.1f}x"
    )
    print(
        f"\nexecute() median {gate['execute_ms']:.3f} ms, of which the determinism gate "
        f"(median of the gate alone) {gate['gate_ms']:.3f} ms"
    )
    result.update({"opens": opens, "replays": replays, "gate": gate})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"replay-{int(time.time())}.json")
    with open(path, "w") as handle:
        json.dump(result, handle, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
