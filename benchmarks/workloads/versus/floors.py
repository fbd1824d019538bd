"""The floors under run.py's figures: the same bytes with nothing of durable_obj in
the way (plain Python, chdb, boto3, obstore), each a phase of `child.py` run in
its own fresh process: `phase_floor` (a flush's two publishes), `phase_ckpt_floor`
(a checkpoint's BACKUP and upload, and an open's SHA-256 and download) and
`phase_open_floor` (a cold open's RESTORE). `spec` and `store` are the child's.
"""

import json
import time
from typing import Any

from harness.workload import BULK, DDL, QUERIES, QUERY_RUNS, row_sql


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return ms_since(start)


def query_times(run: Any) -> dict[str, list[float]]:
    """`QUERIES` through `run(sql)`, each once untimed and then timed
    `QUERY_RUNS` times: {"query_<name>_ms": [ms, ...]}."""
    out: dict[str, list[float]] = {}
    for name, sql in QUERIES.items():
        run(sql)
        out[f"query_{name}_ms"] = [timed(lambda sql=sql: run(sql)) for _ in range(QUERY_RUNS)]
    return out


def fsync_dir(path: str) -> None:
    import os

    dirfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def s3_client(store: dict[str, Any]) -> Any:
    """A bare boto3 client on the spec's S3 store (through the latency proxy
    when the run has one): the floors' uploads and downloads."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=store["endpoint"],
        aws_access_key_id=store["key"],
        aws_secret_access_key=store["secret"],
        region_name="us-east-1",
    )


def folder_publisher(spec: dict[str, Any], store: dict[str, Any]) -> Any:
    """The floor of a durable publish on this disk: write and fsync a file
    of the segment's bytes and a file of the head's, rename the second over
    a fixed name, and fsync the directory. Plain Python, no library."""
    import os

    folder = os.path.join(store["root"], spec["oid"])
    # "wal": the V1 layout, the segment in wal/ below the head's folder, so
    # two directories are fsync'd (the segment's before the head names it)
    segments = os.path.join(folder, "wal") if spec.get("layout") == "wal" else folder
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


def obstore_store(store: dict[str, Any], prefix: str | None = None) -> Any:
    """A bare obstore client of the store's bucket (under `prefix`)."""
    from obstore.store import S3Store

    return S3Store(
        store["bucket"],
        prefix=prefix,
        endpoint=store["endpoint"],
        access_key_id=store["key"],
        secret_access_key=store["secret"],
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def s3_publisher(spec: dict[str, Any], store: dict[str, Any]) -> Any:
    """The floor of a publish on S3: two bare conditional PUTs through
    obstore, the segment created if absent, the head replaced if its ETag
    still matches (the head's bytes change every time, as a head's must)."""
    import obstore

    store = obstore_store(store, f"{store['prefix']}/{spec['oid']}")
    etag = obstore.put(store, "head.json", b"{}", mode="create")["e_tag"]

    def publish(segment: bytes, head: bytes, k: int) -> None:
        nonlocal etag
        obstore.put(store, f"wal/seg-{k}.jsonl", segment, mode="create")
        etag = obstore.put(store, "head.json", head, mode={"e_tag": etag})["e_tag"]

    return publish


#: Where durable_obj keeps an engine's part files by default, when this
#: machine has it (a tmpfs); the floors' engines keep theirs there too.
#: Not `placement.ram_folder()`: the open floor is timed from before any
#: import, and importing durable_obj would be in its time.
RAM = "/dev/shm"


def engine_data(prefix: str) -> tuple[str, str]:
    """(a new folder for a bare engine's data, the query string it connects
    with): in the RAM folder when there is one, read with `pread`, as
    durable_obj's engine by default (`replica/placement.py`); else in the
    temporary folder with the engine's defaults. The caller removes it."""
    import os
    import tempfile

    ram = RAM if os.path.isdir(RAM) and os.access(RAM, os.W_OK) else None
    folder = tempfile.mkdtemp(prefix=prefix, dir=ram)
    return folder, "local_filesystem_read_method=pread" if ram else ""


def connect(folder: str, *args: str) -> Any:
    """A bare chdb connection on `folder`/data with the settings `args`."""
    import os

    import chdb._chdb as engine

    query = "&".join(a for a in args if a)
    return engine.connect(  # type: ignore[attr-defined]
        os.path.join(folder, "data") + (f"?{query}" if query else "")
    )


def phase_floor(spec: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """The publish alone under phase_write's flushes: per flush, the same
    statements (one JSON line each) published as a segment and a head of
    `head_bytes`, with nothing of durable_obj (fsync'd files on a folder,
    two bare conditional PUTs on S3), in a process that runs no engine. The
    floors a flush is judged by also run the INSERTs first, as a flush
    follows the INSERTs it publishes, and take turns with its flushes
    (`inline_floors`)."""
    publish = (
        folder_publisher(spec, store) if store["kind"] == "local" else s3_publisher(spec, store)
    )
    out: dict[str, Any] = {}
    n, k = 100_000, 0
    for size in (1, 10, 100):
        times = []
        for _ in range(spec["flushes"] * (1 if size == 100 else 3)):
            segment = segment_of(n + 1, size)
            n += size
            k += 1
            head = str(k).encode().ljust(spec["head_bytes"], b"h")
            times.append(timed(lambda s=segment, h=head, k=k: publish(s, h, k)))
        out[f"flush_{size}_ms"] = times
    return out


def segment_of(first: int, size: int, run: Any = None) -> bytes:
    """The statements `row_sql(first)` .. `row_sql(first + size - 1)` as a
    segment's JSON lines, each first run by `run` (a bare chdb's `query`)
    when given, as a flush follows the INSERTs it publishes."""
    lines = []
    for n in range(first, first + size):
        sql = row_sql(n)
        if run is not None:
            run(sql)
        lines.append(json.dumps({"sql": sql}) + "\n")
    return "".join(lines).encode()


def inline_floors(spec: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """The floors of `phase_write`'s flushes measured in its own process,
    each turn beside a flush: name -> `turn(first, size, head_bytes)`, which
    runs the same INSERTs on a bare connection of the process's engine (in
    a database of its own, untimed) and returns the ms of one publish of
    their segment and a head of `head_bytes` (`phase_floor`'s publishers:
    "floor" on the flat layout, on a folder also "floor_v1", the V1 layout).
    A fsync here costs from 0.3 to 4 ms from one second to the next, so a
    floor measured in another process, seconds away, moves a ratio by more
    than the difference it is there to show."""
    from durable_obj.replica import server

    conn = server.connect()
    conn.query("CREATE DATABASE IF NOT EXISTS bench_floor")
    conn.query(f"CREATE TABLE bench_floor.{DDL.split('CREATE TABLE IF NOT EXISTS ')[1]}")

    def into(sql: str) -> str:  # the floor's own table, never the object's
        return sql.replace("INSERT INTO memories ", "INSERT INTO bench_floor.memories ", 1)

    layouts = {"floor": "flat", **({"floor_v1": "wal"} if store["kind"] == "local" else {})}
    turns: dict[str, Any] = {}
    for name, layout in layouts.items():
        each = {**spec, "oid": f"{spec['oid']}-{name}", "layout": layout}
        publish = (
            folder_publisher(each, store) if store["kind"] == "local" else s3_publisher(each, store)
        )

        def turn(first: int, size: int, head_bytes: int, publish: Any = publish) -> float:
            segment = segment_of(first, size, lambda sql: conn.query(into(sql)))
            head = str(first).encode().ljust(head_bytes, b"h")
            return timed(lambda: publish(segment, head, first))

        turns[name] = turn
    return turns


def floor_archive(spec: dict[str, Any], store: dict[str, Any], i: int) -> str:
    """Where the checkpoint floor leaves its i-th archive: beside the
    objects on a folder, below the run's prefix on S3 (a key)."""
    import os

    if store["kind"] == "local":
        return os.path.join(store["root"], "floor", spec["oid"], f"b{i}.tar")
    return f"{store['prefix']}/floor/{spec['oid']}-{i}.tar"


#: The bytes of the head a checkpoint's floor publishes: about what a head
#: naming a base and no segment takes (ours: 0.6-1.2 KB).
CHECKPOINT_HEAD_BYTES = 1024


def head_publisher(spec: dict[str, Any], store: dict[str, Any], backups: str) -> Any:
    """publish(i): the head that names a checkpoint floor's archive i, as a
    flush's floor publishes one: on a folder (the archive and its folder
    fsync'd already), a file written and fsync'd, renamed over head.json
    in the archive folder's parent (V1's layout: the bases in a folder
    below the head) and that folder fsync'd; on S3 a conditional PUT
    through bare obstore, the ETag the last one returned."""
    import os

    if store["kind"] != "local":
        import obstore

        bare = obstore_store(store, f"{store['prefix']}/floor/{spec['oid']}")
        etag = obstore.put(bare, "head.json", b"{}", mode="overwrite")["e_tag"]

        def put(i: int) -> None:
            nonlocal etag
            head = str(i).encode().ljust(CHECKPOINT_HEAD_BYTES, b"h")
            etag = obstore.put(bare, "head.json", head, mode={"e_tag": etag})["e_tag"]

        return put
    parent = os.path.dirname(backups)

    def write(i: int) -> None:
        tmp = os.path.join(parent, f"{spec['oid']}.head.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, str(i).encode().ljust(CHECKPOINT_HEAD_BYTES, b"h"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(parent, f"{spec['oid']}.head.json"))
        fsync_dir(parent)

    return write


def phase_ckpt_floor(spec: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """The floors under a checkpoint of `rows` rows, in plain chdb and boto3:
    the engine's BACKUP of the same rows to a .tar, each after the same
    single-row INSERT as the implementations' (on a folder: into the
    store's folder, then the archive and its directory fsync'd), and (on S3)
    a bare boto3 upload_file of that archive (its default multipart
    transfer); then the publish of a head that names it (`head_publisher`),
    as a checkpoint must publish one; and under a cold open of it: hashlib's SHA-256 of that
    archive, which an open verifies before it shows anything restored from
    it, and (on S3) a bare obstore download of it. The archives stay for
    phase_open_floor."""
    import hashlib
    import os
    import shutil
    import tempfile

    local = store["kind"] == "local"
    data, args = engine_data("bench-ckpt-floor-")
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-floor-") as path:
        backups = (
            os.path.dirname(floor_archive(spec, store, 0))
            if local
            else os.path.join(path, "backups")
        )
        os.makedirs(backups)
        conn = connect(data, args, "backups.allowed_path=" + backups)
        conn.query("CREATE DATABASE bench")
        conn.query("USE bench")
        conn.query(DDL)
        rows = spec["rows"]
        for start in range(0, rows, 10_000):
            conn.query(BULK.format(start=start, count=min(10_000, rows - start)))
        out: dict[str, Any] = {"backup_ms": [], "fsync_ms": [], "head_ms": []}
        archive = ""
        publish_head = head_publisher(spec, store, backups)
        for i in range(spec["repeat"]):
            if i:  # the row each implementation's checkpoint i follows (`phase_load`)
                conn.query(row_sql(i))
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
                # the head that names it, as a flush's floor publishes one
                out["head_ms"].append(timed(lambda i=i: publish_head(i)))
        conn.close()

        def digest() -> None:
            h = hashlib.sha256()
            with open(archive, "rb") as handle:
                while chunk := handle.read(4 << 20):
                    h.update(chunk)

        # what an open must do before it may show the base: verify its SHA-256
        out["sha256_ms"] = [timed(digest) for _ in range(spec["repeat"])]
        out["size_mib"] = [os.path.getsize(archive) / 2**20]
        if not local:
            client = s3_client(store)
            out["upload_ms"] = [
                timed(
                    lambda i=i: client.upload_file(
                        os.path.join(backups, f"b{i}.tar"),
                        store["bucket"],
                        floor_archive(spec, store, i),
                    )
                )
                for i in range(spec["repeat"])
            ]
            out["head_ms"] = [timed(lambda i=i: publish_head(i)) for i in range(spec["repeat"])]
            # under an S3 cold open: the base's bytes coming back
            fetched = os.path.join(path, "fetched.tar")
            out["download_ms"] = [
                timed(lambda i=i: obstore_download(store, floor_archive(spec, store, i), fetched))
                for i in range(spec["repeat"])
            ]
            client.close()
    shutil.rmtree(data, ignore_errors=True)
    return out


def obstore_download(store: dict[str, Any], key: str, path: str) -> None:
    """`key` of the store's bucket streamed to `path` through bare obstore
    (it imports in milliseconds and needs no client set-up, as durable_obj's
    reads of fully given options need none: `s3static`)."""
    import obstore

    with open(path, "wb") as out:
        for chunk in obstore.get(obstore_store(store), key).stream():
            out.write(chunk)


def phase_open_floor(spec: dict[str, Any], store: dict[str, Any], t0: float) -> dict[str, Any]:
    """The floor under a cold open, timed like phase_open from before any
    import: a fresh process that imports chdb, (on S3) downloads the base
    durable_obj's open restores (`spec["archive"]`, a path on a folder, a
    key on S3; "": the object has none) with bare obstore, and REstores it
    into a folder where durable_obj keeps its part files (`engine_data`);
    then runs the statements of its WAL segments (`spec["segments"]`, the
    same paths or keys, in the head's order), read (or downloaded) and
    split as stored; then the floor under the queries after it
    (`query_times`), on that connection. The base is of database `default`
    in V1's shape, which the engine restores under another name with
    `allow_different_database_def`, as ours does."""
    import os
    import resource
    import shutil
    import tempfile

    data, args = engine_data("bench-open-floor-")
    with tempfile.TemporaryDirectory(prefix="bench-open-floor-") as path:
        local = store["kind"] == "local"
        archive = spec["archive"]
        if archive and not local:
            archive = os.path.join(path, "base.tar")
            obstore_download(store, spec["archive"], archive)
        allowed = "backups.allowed_path=" + os.path.dirname(archive) if archive else ""
        conn = connect(data, args, allowed)
        if archive:
            conn.query(
                f"RESTORE DATABASE default AS bench FROM File('{archive}') "
                "SETTINGS allow_different_database_def = 1",
                "CSV",
            )
        else:
            conn.query("CREATE DATABASE bench")
        conn.query("USE bench")
        if spec.get("segments"):
            for body in segment_bodies(store, spec["segments"]):
                for line in body.splitlines():
                    conn.query(json.loads(line)["sql"])
        out: dict[str, Any] = {"open_ms": ms_since(t0)}
        out["rows"] = int(str(conn.query("SELECT count() FROM bench.memories", "CSV")).strip())
        out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out.update(query_times(lambda sql: conn.query(sql, "CSV")))
        conn.close()
    shutil.rmtree(data, ignore_errors=True)
    return out


def segment_bodies(store: dict[str, Any], segments: list[str]) -> list[bytes]:
    """The stored bytes of each of `segments` (paths on a folder; keys on S3,
    fetched through bare obstore 32 at a time, as many as a restore
    fetches at once by default: `fetch_concurrency`)."""
    if store["kind"] == "local":
        bodies = []
        for path in segments:
            with open(path, "rb") as handle:
                bodies.append(handle.read())
        return bodies
    from concurrent.futures import ThreadPoolExecutor

    import obstore

    bare = obstore_store(store)
    with ThreadPoolExecutor(32) as pool:
        return list(pool.map(lambda key: bytes(obstore.get(bare, key).bytes()), segments))
