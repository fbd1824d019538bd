"""One measurement in a fresh process; prints a JSON dict. Run by bench_core.py."""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

T0 = time.perf_counter()
IMPL, ROOT, OID, PHASE, ROWS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

DDL = (
    "CREATE TABLE IF NOT EXISTS memories (id String, version UInt32, "
    "content String CODEC(ZSTD(3)), embedding Array(Float32), "
    "edited_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (id, version)"
)
BULK = (
    "INSERT INTO memories SELECT concat('b', toString(number)), 1, repeat('y', 200), "
    "arrayMap(x -> toFloat32(x), range(256)), "
    "toDateTime64('2026-11-30 12:00:00', 3, 'UTC') FROM numbers({start}, {count})"
)


def open_obj(read_only: bool = False) -> Any:
    if IMPL == "durable_obj":
        import durable_obj

        return durable_obj.open(f"{ROOT}/{OID}", owner="bench", read_only=read_only)
    import chdb.durable as cd

    return cd.Namespace("local:" + ROOT, owner="bench").open(OID, read_only=read_only)


def row(i: int) -> str:
    emb = ",".join(f"{((i * 7 + j) % 1000) / 1000:.3f}" for j in range(256))
    return f"('m{i}', 1, '{'x' * 180}-{i}', [{emb}], '2026-11-30 12:00:00.000')"


def insert(obj: Any, i: int) -> float:
    start = time.perf_counter()
    obj.execute("INSERT INTO memories VALUES " + row(i))
    return time.perf_counter() - start


def timed_ms(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def write() -> dict[str, float]:
    out: dict[str, float] = {}
    obj = open_obj()
    obj.execute(DDL)
    obj.flush()
    lat = sorted(insert(obj, i) for i in range(200))
    obj.flush()
    out["execute_p50_ms"] = lat[len(lat) // 2] * 1e3
    out["execute_p99_ms"] = lat[int(len(lat) * 0.99)] * 1e3
    for n in (1, 10, 100):
        for i in range(n):
            insert(obj, 1000 + i)
        out[f"flush_{n}_ms"] = timed_ms(obj.flush)
    for start in range(0, ROWS, 1000):
        obj.execute(BULK.format(start=start, count=min(1000, ROWS - start)))
    out["checkpoint_ms"] = timed_ms(obj.checkpoint)
    for i in range(64):
        for j in range(10):
            insert(obj, 10000 + i * 10 + j)
        obj.flush()
    obj.close()
    return out


def cold_open() -> dict[str, float]:
    obj = open_obj(read_only=True)
    out = {"cold_open_ms": (time.perf_counter() - T0) * 1e3}
    out["rows"] = float(str(obj.query("SELECT count() FROM memories").data()).strip())
    obj.close()
    return out


result = write() if PHASE == "write" else cold_open()
result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
