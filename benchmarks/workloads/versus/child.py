"""One measurement in a fresh process; prints one JSON line. Run by run.py.

    python -m workloads.versus.child '{"impl": "durable_obj", "phase": "open", ...}'

The spec names the implementation ("durable_obj", "chdb.durable" or "raw" for
chdb with no durability; durable_obj optionally with "key_hex", a StaticKey,
and "compression": "zstd"), the store ({"kind": "local", "root": ...} or
{"kind": "s3", "endpoint", "key", "secret", "bucket", "prefix"}), the object
id and the phase. chdb.durable reads its S3 endpoint and keys from the
environment the parent sets (CHDB_DURABLE_S3_ENDPOINT, AWS_*).
"""

import time

T0 = time.perf_counter()  # before any library import: a cold open pays for them

import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from harness.workload import BULK, DDL, row_sql, values_sql  # noqa: E402

from workloads.versus import floors  # noqa: E402
from workloads.versus.floors import ms_since, query_times, timed  # noqa: E402

SPEC: dict[str, Any] = json.loads(sys.argv[1])
IMPL: str = SPEC["impl"]
STORE: dict[str, Any] = SPEC.get("store", {})


def namespace(**extra: Any) -> Any:
    """durable_obj's Namespace on the spec's store (`extra`: storage options)."""
    import durable_obj

    options: dict[str, Any] = {"fold_segments": 0, "close_fold_segments": 0}
    if STORE["kind"] == "local":
        url, storage = STORE["root"], dict(STORE.get("storage_options", {}))
    else:
        url = f"s3://{STORE['bucket']}/{STORE['prefix']}"
        storage = {
            "key": STORE["key"],
            "secret": STORE["secret"],
            "endpoint_url": STORE["endpoint"],
            "client_kwargs": {"region_name": "us-east-1"},
        }
    storage.update(extra)
    # the sealing family's variants: a StaticKey (hex) and/or a zstd WAL
    if SPEC.get("key_hex"):
        options["encryption"] = durable_obj.StaticKey(SPEC["key_hex"])
    if SPEC.get("compression"):
        options["compression"] = SPEC["compression"]
    return durable_obj.Namespace(url, owner="bench", storage_options=storage, **options)


def open_obj(read_only: bool = False) -> Any:
    oid = SPEC["oid"]
    if IMPL == "durable_obj":
        return namespace().open(oid, read_only=read_only)
    import chdb.durable as cd

    if STORE["kind"] == "local":
        url = "local:" + STORE["root"]
    else:
        url = f"s3://{STORE['bucket']}/{STORE['prefix']}"
    return cd.Namespace(url, owner="bench").open(oid, read_only=read_only)


def execute_latencies(run: Any, count: int, warmup: int = 20) -> list[float]:
    for i in range(warmup):
        run(row_sql(900_000 + i))
    return [timed(lambda i=i: run(row_sql(i))) for i in range(count)]


def phase_write() -> dict[str, Any]:
    """execute() latency of single-row INSERTs, then flush of 1, 10, 100 statements."""
    obj = open_obj()
    obj.execute(DDL)
    obj.flush()
    out: dict[str, Any] = {"execute_ms": execute_latencies(obj.execute, SPEC["executes"])}
    obj.flush()
    # durable_obj's flushes take turns with their floors' publishes
    # (`floors.inline_floors`), the order turned every round
    turns: dict[str, Any] = {"": None}
    if SPEC.get("inline_floors"):
        turns.update(floors.inline_floors(SPEC, STORE))
    n = 100_000
    for size in (1, 10, 100):
        times: dict[str, list[float]] = {name: [] for name in turns}
        # small flushes are cheap and noisy: three times the samples
        for turn in range(SPEC["flushes"] * (1 if size == 100 else 3)):
            k = turn % len(turns)
            for name in [*turns][k:] + [*turns][:k]:
                if name:
                    times[name].append(turns[name](n + 1, size, len(obj._w.head.to_bytes())))
                else:
                    for i in range(size):
                        obj.execute(row_sql(n + 1 + i))
                    times[name].append(timed(obj.flush))
                n += size
        for name, values in times.items():
            out[f"{name}{'_' if name else ''}flush_{size}_ms"] = values
    out["bulk_ms"] = bulk_latencies(obj.execute, obj.flush)
    obj.close()
    return out


#: Rows of the bulk VALUES INSERT (`values_sql`), and how many are timed.
BULK_ROWS, BULK_TIMES = 1_000, 4


def bulk_latencies(run: Any, flush: Any = None) -> list[float]:
    """execute() of one `BULK_ROWS`-row VALUES INSERT, `BULK_TIMES` times
    (after one untimed), each flushed after it is timed."""
    times = []
    for rep in range(BULK_TIMES + 1):
        sql = values_sql(2_000_000 + rep * BULK_ROWS, BULK_ROWS)
        took = timed(lambda sql=sql: run(sql))
        if rep:
            times.append(took)
        if flush is not None:
            flush()
    return times


def phase_write_variants() -> dict[str, Any]:
    """`phase_write`'s flushes for several variants of one object (SPEC
    "variants": name -> options for `namespace`) in one process, their
    flushes interleaved and the order turned every round: a variant is
    compared with the others under the same machine state, not with another
    process's (on a shared machine a process's median flush varies by a third)."""
    objs = {}
    for name, extra in SPEC["variants"].items():
        SPEC.update(key_hex=extra.get("key_hex"), compression=extra.get("compression"))
        objs[name] = namespace().open(f"{SPEC['oid']}-{name.replace('+', '-')}")
        objs[name].execute(DDL)
        objs[name].flush()
    names, n = list(objs), 100_000
    out: dict[str, Any] = {}
    for size in (1, 10, 100):
        times: dict[str, list[float]] = {name: [] for name in names}
        for turn in range(SPEC["flushes"] * (1 if size == 100 else 3)):
            k = turn % len(names)
            for name in names[k:] + names[:k]:
                for _ in range(size):
                    n += 1
                    objs[name].execute(row_sql(n))
                times[name].append(timed(objs[name].flush))
        out[f"flush_{size}_ms"] = times
    for obj in objs.values():
        obj.close()
    return out


def phase_raw() -> dict[str, Any]:
    """The same INSERTs on a plain chdb connection: the floor under both.
    Its part files go where durable_obj's engine keeps its own by default
    (the RAM folder when there is one: `floors.engine_data`), so the floor
    is the same writes, not the same INSERTs on a slower disk."""
    import shutil

    folder, args = floors.engine_data("bench-raw-")
    try:
        conn = floors.connect(folder, args)
        conn.query("CREATE DATABASE IF NOT EXISTS bench")
        conn.query("USE bench")
        conn.query(DDL)
        out = {"execute_ms": execute_latencies(conn.query, SPEC["executes"])}
        out["bulk_ms"] = bulk_latencies(conn.query)
        conn.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def phase_load() -> dict[str, Any]:
    """Bulk-load `rows`, flush, then time `checkpoints` checkpoints."""
    obj = open_obj()
    obj.execute(DDL)
    rows = SPEC["rows"]
    for start in range(0, rows, 10_000):
        obj.execute(BULK.format(start=start, count=min(10_000, rows - start)))
    obj.flush()
    times: list[float] = []
    incremental: list[float] = []
    # durable_obj's checkpoint after the first is an increment by default:
    # each is timed apart, and the row beside chdb.durable and the floor (a
    # full BACKUP) times a full one (`full=True`) after it
    ours = IMPL == "durable_obj"
    for i in range(SPEC["checkpoints"]):
        if i:
            obj.execute(row_sql(i))
            obj.flush()
            if ours:
                incremental.append(timed(obj.checkpoint))
        times.append(timed(lambda: obj.checkpoint(full=True) if ours else obj.checkpoint()))
    obj.close()
    return {"checkpoint_ms": times, "incremental_ms": incremental}


def phase_append() -> dict[str, Any]:
    """Add `segments` WAL segments of `statements` single-row INSERTs each."""
    obj = open_obj()
    if SPEC.get("create"):
        obj.execute(DDL)
        obj.flush()
    start = time.perf_counter()
    n = SPEC.get("first", 0)
    for _ in range(SPEC["segments"]):
        for _ in range(SPEC["statements"]):
            n += 1
            obj.execute(row_sql(n))
        obj.flush()
    elapsed = ms_since(start)
    obj.close()
    return {"append_ms": elapsed}


def phase_open() -> dict[str, Any]:
    """Read-only cold open, the clock started before either library was
    imported; then the queries an agent asks after it (`query_times`)."""
    obj = open_obj(read_only=True)
    out: dict[str, Any] = {"open_ms": ms_since(T0)}
    out["rows"] = int(str(obj.query("SELECT count() FROM memories").data()).strip())
    # the open's peak, before the queries' own memory
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.update(query_times(lambda sql: obj.query(sql, "CSV")))
    obj.close()
    return out


def phase_populate() -> dict[str, Any]:
    """`objects` objects of `segments` + 2 keys each (head, base, segments):
    one written through the library, the rest copies of its keys written
    straight through the store, `concurrency` at once."""
    from concurrent.futures import ThreadPoolExecutor

    local = STORE["kind"] == "local"
    ns = namespace(**({"fsync": False} if local else {}))
    seed = SPEC["oid"]
    with ns.open(seed, description="the seed of the listing benchmark") as obj:
        obj.execute(DDL)
        obj.execute(row_sql(0))
        obj.checkpoint()
        for i in range(SPEC["segments"]):
            obj.execute(row_sql(i + 1))
            obj.flush()
    store = ns.store
    keys = {}
    for entry in store.list_keys(seed):
        blob = store.get(entry.key)
        keys[entry.key[len(seed) + 1 :]] = blob.data
    start = time.perf_counter()
    todo = [
        (f"{seed}-{n:05d}/{rest}", data)
        for n in range(1, SPEC["objects"])
        for rest, data in keys.items()
    ]
    with ThreadPoolExecutor(SPEC.get("concurrency", 16)) as pool:
        made = list(pool.map(lambda kv: store.create(*kv), todo))
    if not all(made):
        raise RuntimeError("a copied key already existed")
    # Copies written straight to the store are in no catalog row: rebuilt
    # from a LIST and the heads, as an operator repairs one.
    ns.rebuild_catalog()
    return {"keys_per_object": len(keys), "populate_s": time.perf_counter() - start}


def phase_list() -> dict[str, Any]:
    """`Namespace.list()` in a fresh process, timed from before the call to
    its answer: with `verify`, a LIST and every head (`list(verify=True,
    stored=...)`); else from the catalog, twice: the first call (it sets up
    the store's client) and the next (the client warm, as in a service)."""
    ns = namespace()
    verify = SPEC.get("verify", False)
    times, infos = [], []
    for _ in range(1 if verify else 2):
        start = time.perf_counter()
        infos = ns.list(stored=SPEC.get("stored", True), verify=verify)
        times.append(time.perf_counter() - start)
    described = sum(1 for info in infos if info.description)
    catalog = all(info.from_catalog for info in infos)
    if catalog == verify:
        raise RuntimeError(f"list(verify={verify}) answered {'not ' * verify}from the catalog")
    return {"list_s": times, "objects": len(infos), "described": described}


PHASES: dict[str, Callable[[], dict[str, Any]]] = {
    "write": phase_write,
    "write_variants": phase_write_variants,
    "floor": lambda: floors.phase_floor(SPEC, STORE),
    "ckpt_floor": lambda: floors.phase_ckpt_floor(SPEC, STORE),
    "open_floor": lambda: floors.phase_open_floor(SPEC, STORE, T0),
    "raw": phase_raw,
    "load": phase_load,
    "append": phase_append,
    "open": phase_open,
    "populate": phase_populate,
    "list": phase_list,
}

if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    result = PHASES[SPEC["phase"]]()
    result.setdefault("peak_rss_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result))
