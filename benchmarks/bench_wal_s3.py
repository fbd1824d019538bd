"""Cold open of a long WAL on an S3 server: durable_obj vs chdb.durable.

    python benchmarks/bench_wal_s3.py                       # starts SeaweedFS on 127.0.0.1
    python benchmarks/bench_wal_s3.py --segments 1001 --repeat 3
    python benchmarks/bench_wal_s3.py --endpoint http://127.0.0.1:9000 --key K --secret S \\
        --bucket B                                          # any S3-compatible server

Each implementation writes its own object with `--segments` WAL segments of
one single-row INSERT each (no checkpoint) on the same server; then both are
opened read-only in fresh processes, alternating, and the median wall time of
the open (after the library import) is compared. chdb.durable is pointed at
the server with CHDB_DURABLE_S3_ENDPOINT and AWS_* variables.
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
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITE = r"""
import sys, json
impl, bucket, prefix, oid, segments, opts = sys.argv[1:7]
opts = json.loads(opts)
if impl == "durable_obj":
    import durable_obj
    obj = durable_obj.Namespace(f"s3://{bucket}/{prefix}", owner="bench",
                                storage_options=opts, fold_segments=0,
                                close_fold_segments=0).open(oid)
else:
    import chdb.durable as cd
    obj = cd.Namespace(f"s3://{bucket}/{prefix}", owner="bench").open(oid)
obj.execute("CREATE TABLE m (id UInt32, content String) ENGINE = MergeTree ORDER BY id")
obj.flush()
for n in range(1, int(segments)):
    obj.execute(f"INSERT INTO m VALUES ({n}, 'memory {n}')")
    obj.flush()
obj.close()
"""

OPEN = r"""
import sys, json, time
impl, bucket, prefix, oid, opts = sys.argv[1:6]
opts = json.loads(opts)
if impl == "durable_obj":
    import durable_obj, chdb._chdb
    t = time.perf_counter()
    ns = durable_obj.Namespace(f"s3://{bucket}/{prefix}", storage_options=opts,
                               fetch_concurrency=int(sys.argv[6]))
    obj = ns.open(oid, read_only=True)
else:
    import chdb.durable as cd
    t = time.perf_counter()
    obj = cd.Namespace(f"s3://{bucket}/{prefix}").open(oid, read_only=True)
elapsed = time.perf_counter() - t
rows = int(str(obj.query("SELECT count() FROM m").data()).strip())
obj.close()
print(json.dumps({"open_s": elapsed, "rows": rows}))
"""


def run(code: str, args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def bench(endpoint: str, key: str, secret: str, bucket: str, args: argparse.Namespace) -> None:
    env = dict(os.environ)
    env.update(
        {
            "CHDB_DURABLE_S3_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    opts = json.dumps({"endpoint_url": endpoint, "key": key, "secret": secret})
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    impls = ("durable_obj", "chdb.durable")
    for impl in impls:
        start = time.perf_counter()
        run(WRITE, [impl, bucket, prefix, impl.replace(".", "-"), str(args.segments), opts], env)
        print(f"wrote {impl}: {time.perf_counter() - start:.1f} s", flush=True)
    opens: dict[str, list[float]] = {impl: [] for impl in impls}
    for rep in range(args.repeat):
        for impl in impls if rep % 2 == 0 else impls[::-1]:
            name = impl.replace(".", "-")
            argv = [impl, bucket, prefix, name, opts, str(args.concurrency)]
            got = json.loads(run(OPEN, argv, env))
            assert got["rows"] == args.segments - 1, got
            opens[impl].append(got["open_s"])
            print(f"  {impl}: {got['open_s']:.3f} s", flush=True)
    ours, theirs = (statistics.median(opens[i]) for i in impls)
    print(f"\n{args.segments}-segment WAL on {endpoint}, read-only cold open after import")
    print(f"{'':<14}{'durable_obj':>13}{'chdb.durable':>14}{'ratio':>8}{'speedup':>9}")
    print(f"{'median open s':<14}{ours:>13.3f}{theirs:>14.3f}{ours / theirs:>8.3f}"
          f"{theirs / ours:>8.1f}x")  # fmt: skip
    out = os.path.join(REPO, "benchmarks", "results")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"wal-s3-{int(time.time())}.json")
    with open(path, "w") as handle:
        json.dump({"args": vars(args), "endpoint": endpoint, "opens": opens}, handle, indent=1)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1001)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="durable_obj fetches")
    parser.add_argument("--endpoint", help="an S3-compatible server; default: start SeaweedFS")
    parser.add_argument("--key", default="")
    parser.add_argument("--secret", default="")
    parser.add_argument("--bucket", default="")
    args = parser.parse_args()
    if args.endpoint:
        bench(args.endpoint, args.key, args.secret, args.bucket, args)
        return
    sys.path.insert(0, REPO)
    from tests import servers

    with tempfile.TemporaryDirectory(prefix="bench-seaweed-") as workdir:
        server, endpoint = servers.start_seaweed(workdir)
        try:
            bench(endpoint, servers.S3_KEY, servers.S3_SECRET, servers.BUCKET, args)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
