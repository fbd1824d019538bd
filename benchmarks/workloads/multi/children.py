"""The multi family's children: one measurement each, in a fresh process.

The parent starts `python -m workloads.multi --child SPEC`, which runs
child_main here: the spec names the phase (populate, one, fleet, many,
threads, pool), the implementation and the store; the result is one JSON
line on stdout. Also the workload these children write: the `memories`
table, its bulk rows and the statements the write loops cycle.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.workload import DDL, WORDS, row_sql

STATEMENTS = 256  # distinct single-row INSERTs, cycled by the write loops

#: Bulk rows from a hash: deterministic and incompressible (as run.py's,
#: but every row at version 1, numbered from 0).
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


def rss_mib() -> float:
    """Resident set size now (not the peak)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Child:
    """The spec of one child: implementation, store, ids, sizes; and `t0`,
    the child's cold start."""

    def __init__(self, spec: dict[str, Any], t0: float) -> None:
        self.spec, self.t0 = spec, t0
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

    def sealing(self) -> dict[str, Any]:
        """The encryption option of an encrypted run (the spec's key_hex:
        a StaticKey made for the run), else none."""
        import durable_obj

        key = self.spec.get("key_hex")
        return {"encryption": durable_obj.StaticKey(bytes.fromhex(key))} if key else {}

    def namespace(self, **extra: Any) -> Any:
        import durable_obj

        url, options = self.storage(**extra)
        return durable_obj.Namespace(
            url,
            owner="bench",
            storage_options=options,
            fold_segments=0,
            close_fold_segments=0,
            **self.sealing(),
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
            **self.sealing(),
        )

    def chdb_durable(self) -> Any:
        import chdb.durable as cd

        if self.store["kind"] == "local":
            url = "local:" + self.store["root"]
        else:
            url = f"s3://{self.store['bucket']}/{self.store['prefix']}"
        return cd.Namespace(url, owner="bench")


def _write(obj: Any, rows: int) -> None:
    obj.execute(DDL)
    if rows:
        obj.execute(BULK.format(count=rows))
    obj.flush()
    obj.checkpoint()


def child_populate(c: Child) -> dict[str, Any]:
    """A seed object of `rows` rows in a checkpointed base, then copies of
    its keys (head and base) under every id of `oids`, 16 at once; in an
    encrypted run every object written through the library instead, 4 at
    once (a sealed blob opens only under the object it was sealed for)."""
    ns = c.namespace(**({"fsync": False} if c.store["kind"] == "local" else {}))
    if c.spec.get("key_hex"):
        oids = c.spec["oids"]

        def write(oid: str) -> None:
            with ns.open(oid) as obj:
                _write(obj, c.spec["rows"])

        with ThreadPoolExecutor(4) as workers:
            list(workers.map(write, oids))
        keys = {e.key[len(oids[0]) + 1 :]: e.size for e in ns.store.list_keys(oids[0])}
        return {"keys": sorted(keys), "bytes": sum(keys.values())}
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
        _write(obj, c.spec["rows"])
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
    return {"rss_mib": rss, "since_start_s": time.perf_counter() - c.t0}


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


def child_rss_floor(c: Child) -> dict[str, Any]:
    """The floor under an idle object's RSS, in plain chdb (no durable_obj):
    a seed database of `rows` rows as child_populate writes it, backed up
    once, then RESTOREd `count` times in this one process, a database each;
    RSS before the first RESTORE, after it, after all."""
    import tempfile

    import chdb._chdb as engine

    with tempfile.TemporaryDirectory(prefix="bench-rss-floor-") as path:
        backups = os.path.join(path, "backups")
        os.makedirs(backups)
        conn = engine.connect(  # type: ignore[attr-defined]
            os.path.join(path, "data") + "?backups.allowed_path=" + backups
        )
        archive = os.path.join(backups, "seed.tar")
        conn.query("CREATE DATABASE seed")
        conn.query("USE seed")
        conn.query(DDL)
        if c.spec["rows"]:
            conn.query(BULK.format(count=c.spec["rows"]))
        conn.query(f"BACKUP DATABASE seed TO File('{archive}')", "CSV")
        conn.query("DROP DATABASE seed SYNC")
        rss0 = rss_mib()
        rss_first = math.nan
        for k in range(c.spec["count"]):
            conn.query(f"RESTORE DATABASE seed AS db{k} FROM File('{archive}')", "CSV")
            if k == 0:
                rss_first = rss_mib()
        rss_all = rss_mib()
        last = f"db{c.spec['count'] - 1}.memories"
        rows = int(str(conn.query(f"SELECT count() FROM {last}", "CSV")).strip())
        conn.close()
    return {
        "rss_before_mib": rss0,
        "rss_first_mib": rss_first,
        "rss_all_mib": rss_all,
        "rows": rows,
    }


CHILDREN = {
    "populate": child_populate,
    "one": child_one,
    "fleet": child_fleet,
    "many": child_many,
    "threads": child_threads,
    "pool": child_pool,
    "rss_floor": child_rss_floor,
}


def child_main(spec: dict[str, Any], t0: float) -> None:
    """Run the spec's phase and print its result as one JSON line; `t0`:
    when the child's interpreter started timing (before its imports)."""
    import warnings

    warnings.simplefilter("ignore")
    result = CHILDREN[spec["phase"]](Child(spec, t0))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))
