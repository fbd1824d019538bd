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
from typing import Any  # noqa: E402

from harness.workload import BULK, DDL, row_sql, values_sql  # noqa: E402

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


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return ms_since(start)


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
    n = 100_000
    for size in (1, 10, 100):
        times = []
        # small flushes are cheap and noisy: three times the samples
        for _ in range(SPEC["flushes"] * (1 if size == 100 else 3)):
            for _ in range(size):
                n += 1
                obj.execute(row_sql(n))
            times.append(timed(obj.flush))
        out[f"flush_{size}_ms"] = times
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
    """The same INSERTs on a plain chdb connection: the floor under both."""
    import tempfile

    from chdb.state import sqlitelike

    with tempfile.TemporaryDirectory(prefix="bench-raw-") as path:
        conn = sqlitelike.Connection(path)
        conn.query("CREATE DATABASE IF NOT EXISTS bench")
        conn.query("USE bench")
        conn.query(DDL)
        out = {"execute_ms": execute_latencies(conn.query, SPEC["executes"])}
        out["bulk_ms"] = bulk_latencies(conn.query)
        conn.close()
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
    """Read-only cold open; the clock started before either library was imported."""
    obj = open_obj(read_only=True)
    out: dict[str, Any] = {"open_ms": ms_since(T0)}
    out["rows"] = int(str(obj.query("SELECT count() FROM memories").data()).strip())
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


def fsync_dir(path: str) -> None:
    import os

    dirfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def s3_client() -> Any:
    """A bare boto3 client on the spec's S3 store (through the latency proxy
    when the run has one): the floors' uploads and downloads."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=STORE["endpoint"],
        aws_access_key_id=STORE["key"],
        aws_secret_access_key=STORE["secret"],
        region_name="us-east-1",
    )


def folder_publisher() -> Any:
    """The floor of a durable publish on this disk: write and fsync a file
    of the segment's bytes and a file of the head's, rename the second over
    a fixed name, and fsync the directory. Plain Python, no library."""
    import os

    folder = os.path.join(STORE["root"], SPEC["oid"])
    # "wal": the V1 layout, the segment in wal/ below the head's folder, so
    # two directories are fsync'd (the segment's before the head names it)
    segments = os.path.join(folder, "wal") if SPEC.get("layout") == "wal" else folder
    os.makedirs(segments)

    def publish(segment: bytes, head: bytes, k: int) -> None:
        for path, data in (
            (os.path.join(segments, f"seg-{k}"), segment),
            (os.path.join(folder, "head.tmp"), head),
        ):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if segments != folder and data is segment:
                fsync_dir(segments)
        os.replace(os.path.join(folder, "head.tmp"), os.path.join(folder, "head.json"))
        fsync_dir(folder)

    return publish


def s3_publisher() -> Any:
    """The floor of a publish on S3: two bare conditional PUTs through
    obstore, the segment created if absent, the head replaced if its ETag
    still matches (the head's bytes change every time, as a head's must)."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        STORE["bucket"],
        prefix=f"{STORE['prefix']}/{SPEC['oid']}",
        endpoint=STORE["endpoint"],
        access_key_id=STORE["key"],
        secret_access_key=STORE["secret"],
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    etag = obstore.put(store, "head.json", b"{}", mode="create")["e_tag"]

    def publish(segment: bytes, head: bytes, k: int) -> None:
        nonlocal etag
        obstore.put(store, f"wal/seg-{k}.jsonl", segment, mode="create")
        etag = obstore.put(store, "head.json", head, mode={"e_tag": etag})["e_tag"]

    return publish


def phase_floor() -> dict[str, Any]:
    """The floor under phase_write's flushes: per flush, the same statements
    (one JSON line each) published as a segment and a head of `head_bytes`,
    with nothing of durable_obj: fsync'd files on a folder, two bare
    conditional PUTs on S3."""
    publish = folder_publisher() if STORE["kind"] == "local" else s3_publisher()
    out: dict[str, Any] = {}
    n, k = 100_000, 0
    for size in (1, 10, 100):
        times = []
        for _ in range(SPEC["flushes"] * (1 if size == 100 else 3)):
            lines = []
            for _ in range(size):
                n += 1
                lines.append(json.dumps({"sql": row_sql(n)}) + "\n")
            segment = "".join(lines).encode()
            k += 1
            head = str(k).encode().ljust(SPEC["head_bytes"], b"h")
            times.append(timed(lambda s=segment, h=head, k=k: publish(s, h, k)))
        out[f"flush_{size}_ms"] = times
    return out


def floor_archive(i: int) -> str:
    """Where the checkpoint floor leaves its i-th archive: beside the
    objects on a folder, below the run's prefix on S3 (a key)."""
    import os

    if STORE["kind"] == "local":
        return os.path.join(STORE["root"], "floor", SPEC["oid"], f"b{i}.tar")
    return f"{STORE['prefix']}/floor/{SPEC['oid']}-{i}.tar"


def phase_ckpt_floor() -> dict[str, Any]:
    """The floors under a checkpoint of `rows` rows, in plain chdb and boto3:
    the engine's BACKUP of the same rows to a .tar (on a folder: into the
    store's folder, then the archive and its directory fsync'd), and (on S3)
    a bare boto3 upload_file of that archive (its default multipart
    transfer); and under a cold open of it: hashlib's SHA-256 of that
    archive, which an open verifies before it shows anything restored from
    it, and (on S3) a bare boto3 download_file of it. The archives stay for
    phase_open_floor."""
    import hashlib
    import os
    import tempfile

    import chdb._chdb as engine

    local = STORE["kind"] == "local"
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-floor-") as path:
        backups = os.path.dirname(floor_archive(0)) if local else os.path.join(path, "backups")
        os.makedirs(backups)
        conn = engine.connect(  # type: ignore[attr-defined]
            os.path.join(path, "data") + "?backups.allowed_path=" + backups
        )
        conn.query("CREATE DATABASE bench")
        conn.query("USE bench")
        conn.query(DDL)
        rows = SPEC["rows"]
        for start in range(0, rows, 10_000):
            conn.query(BULK.format(start=start, count=min(10_000, rows - start)))
        out: dict[str, Any] = {"backup_ms": [], "fsync_ms": []}
        archive = ""
        for i in range(SPEC["repeat"]):
            archive = os.path.join(backups, f"b{i}.tar")
            sql = f"BACKUP DATABASE bench TO File('{archive}')"
            out["backup_ms"].append(timed(lambda sql=sql: conn.query(sql, "CSV")))
            if local:

                def sync(archive: str = archive) -> None:
                    fd = os.open(archive, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    fsync_dir(backups)

                out["fsync_ms"].append(timed(sync))
        conn.close()

        def digest() -> None:
            h = hashlib.sha256()
            with open(archive, "rb") as handle:
                while chunk := handle.read(4 << 20):
                    h.update(chunk)

        # what an open must do before it may show the base: verify its SHA-256
        out["sha256_ms"] = [timed(digest) for _ in range(SPEC["repeat"])]
        if not local:
            client = s3_client()
            out["upload_ms"] = [
                timed(
                    lambda i=i: client.upload_file(
                        os.path.join(backups, f"b{i}.tar"), STORE["bucket"], floor_archive(i)
                    )
                )
                for i in range(SPEC["repeat"])
            ]
            # under an S3 cold open: the base's bytes coming back
            fetched = os.path.join(path, "fetched.tar")
            out["download_ms"] = [
                timed(lambda i=i: client.download_file(STORE["bucket"], floor_archive(i), fetched))
                for i in range(SPEC["repeat"])
            ]
            client.close()
    return out


def phase_open_floor() -> dict[str, Any]:
    """The floor under a cold open, timed like phase_open from before any
    import: a fresh process that imports chdb, (on S3) downloads the
    checkpoint floor's archive with bare boto3, and RESTOREs it."""
    import os
    import tempfile

    import chdb._chdb as engine

    with tempfile.TemporaryDirectory(prefix="bench-open-floor-") as path:
        if STORE["kind"] == "local":
            archive = floor_archive(0)
        else:
            archive = os.path.join(path, "base.tar")
            client = s3_client()
            client.download_file(STORE["bucket"], floor_archive(0), archive)
            client.close()
        backups = os.path.dirname(archive)
        conn = engine.connect(  # type: ignore[attr-defined]
            os.path.join(path, "data") + "?backups.allowed_path=" + backups
        )
        conn.query(f"RESTORE DATABASE bench FROM File('{archive}')", "CSV")
        out: dict[str, Any] = {"open_ms": ms_since(T0)}
        out["rows"] = int(str(conn.query("SELECT count() FROM bench.memories", "CSV")).strip())
        conn.close()
    return out


PHASES = {
    "write": phase_write,
    "write_variants": phase_write_variants,
    "floor": phase_floor,
    "ckpt_floor": phase_ckpt_floor,
    "open_floor": phase_open_floor,
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
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))
