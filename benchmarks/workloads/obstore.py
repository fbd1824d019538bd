"""The S3 transport question of issue 16 §1, measured: durable_obj's S3 store
(conditional writes through obstore, durable_obj/stores/s3writes.py; its
batched reader for GETs), the same store with its writes on the aiobotocore
client (`DURABLE_OBJ_S3_WRITES=client`, the path before issue 16 §1 and the
fallback today), and obstore (the Rust `object_store` crate) called bare, on
the same SeaweedFS.

    python benchmarks/run.py --only obstore              # 200 PUTs of each kind, 1,001 GETs
    python benchmarks/run.py --only obstore --latency-ms 20
    python benchmarks/run.py --only obstore --smoke      # tiny: proves it runs, measures nothing

Figures, each the same requests through both clients, alternating blocks:

* create: a conditional create of a fresh 3 KB key (`If-None-Match: *`),
  p50 / p99 latency and the client's CPU per request (`durable_obj`: the
  store as shipped; `durable_obj-client`: its aiobotocore fallback);
* replace: a compare-and-swap of one 2 KB key (`If-Match: <etag>`), the
  token taken from the previous answer;
* 1,001 GETs of 3 KB keys at once (a long WAL's open): wall time and the
  client's CPU (`time.process_time`, this process: SeaweedFS runs apart).

It also checks, and prints, the semantics a transport must keep: a second
create of a key is refused (durable_obj: None; obstore: AlreadyExistsError)
and a replace with a stale token is refused (None; PreconditionError).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import uuid
from typing import Any

from harness.report import pct, timed
from harness.s3proxy import LatencyProxy
from harness.servers import S3Server, seaweed

from durable_obj.stores import open_store


def ours(server: S3Server, prefix: str, writes: str = "obstore") -> Any:
    """The S3 store; `writes="client"`: its conditional writes through aiobotocore."""
    before = os.environ.pop("DURABLE_OBJ_S3_WRITES", None)
    if writes == "client":
        os.environ["DURABLE_OBJ_S3_WRITES"] = "client"  # read when the store opens
    try:
        return open_store(
            f"s3://{server.bucket}/{prefix}",
            {
                "key": server.key,
                "secret": server.secret,
                "endpoint_url": server.endpoint,
                "client_kwargs": {"region_name": "us-east-1"},
            },
        )
    finally:
        os.environ.pop("DURABLE_OBJ_S3_WRITES", None)
        if before is not None:
            os.environ["DURABLE_OBJ_S3_WRITES"] = before


def theirs(server: S3Server, prefix: str) -> Any:
    from obstore.store import S3Store

    return S3Store(
        server.bucket,
        prefix=prefix,
        endpoint=server.endpoint,
        access_key_id=server.key,
        secret_access_key=server.secret,
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def semantics(store: Any, obs: Any) -> dict[str, str]:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    assert store.create("sem/k", b"1") is not None
    ours_refuses_create = store.create("sem/k", b"2") is None
    first = store.get("sem/h") or store.create("sem/h", b"a")
    v1 = store.get("sem/h").version
    assert store.replace("sem/h", b"b", v1) is not None and first is not None
    ours_refuses_stale = store.replace("sem/h", b"c", v1) is None
    obstore.put(obs, "sem/ko", b"1", mode="create")
    try:
        obstore.put(obs, "sem/ko", b"2", mode="create")
        theirs_create = "NOT refused"
    except (AlreadyExistsError, PreconditionError) as exc:
        theirs_create = f"refused ({type(exc).__name__})"
    except Exception as exc:  # the class a caller would have to map
        theirs_create = f"refused only as {type(exc).__name__} (not AlreadyExists/Precondition)"
    put = obstore.put(obs, "sem/ho", b"a")
    obstore.put(obs, "sem/ho", b"b", mode={"e_tag": put["e_tag"]})
    try:
        obstore.put(obs, "sem/ho", b"c", mode={"e_tag": put["e_tag"]})
        theirs_stale = "NOT refused"
    except PreconditionError as exc:
        theirs_stale = f"refused ({type(exc).__name__})"
    except Exception as exc:
        theirs_stale = f"refused only as {type(exc).__name__} (not Precondition)"
    yes = "refused (None)"
    return {
        "durable_obj second create": yes if ours_refuses_create else "NOT refused",
        "durable_obj stale replace": yes if ours_refuses_stale else "NOT refused",
        "obstore second create": theirs_create,
        "obstore stale replace": theirs_stale,
    }


def bench_puts(store: Any, slow: Any, obs: Any, n: int) -> dict[str, dict[str, list[float]]]:
    import obstore

    body, head = os.urandom(3072), os.urandom(2048)
    out: dict[str, dict[str, list[float]]] = {}

    def keep(name: str, wall: float, cpu: float) -> None:
        runs = out.setdefault(name, {"wall": [], "cpu": []})
        runs["wall"].append(wall)
        runs["cpu"].append(cpu)

    store.create("cas/h", head)
    version = store.get("cas/h").version
    slow.create("cas/s", head)
    slow_version = slow.get("cas/s").version
    etag = obstore.put(obs, "cas/o", head)["e_tag"]
    for block in range(0, n, 20):
        for _ in range(min(20, n - block)):
            key = f"c/{uuid.uuid4().hex}"
            w, c, _ = timed(lambda key=key: store.create(key, body))
            keep("create durable_obj", w, c)
            w, c, _ = timed(lambda key=key: slow.create(key + "s", body))
            keep("create durable_obj-client", w, c)
            w, c, _ = timed(lambda key=key: obstore.put(obs, key + "o", body, mode="create"))
            keep("create obstore", w, c)
            w, c, version = timed(lambda v=version: store.replace("cas/h", os.urandom(2048), v))
            keep("replace durable_obj", w, c)
            w, c, slow_version = timed(
                lambda v=slow_version: slow.replace("cas/s", os.urandom(2048), v)
            )
            keep("replace durable_obj-client", w, c)
            mode = {"e_tag": etag}
            w, c, res = timed(
                lambda mode=mode: obstore.put(obs, "cas/o", os.urandom(2048), mode=mode)
            )
            etag = res["e_tag"]
            keep("replace obstore", w, c)
    return out


def bench_gets(store: Any, obs: Any, n: int) -> dict[str, tuple[float, float]]:
    import obstore

    keys = [f"wal/{i:05d}.jsonl" for i in range(n)]
    body = os.urandom(3072)
    for key in keys:
        store.create(key, body)

    async def all_obstore() -> list[bytes]:
        sem = asyncio.Semaphore(32)

        async def one(key: str) -> bytes:
            async with sem:
                got = await obstore.get_async(obs, key)
                return bytes(await got.bytes_async())

        return await asyncio.gather(*(one(k) for k in keys))

    out = {}
    for _ in range(2):  # the second round: connections warm on both sides
        w, c, blobs = timed(lambda: store.get_many(keys, 32))
        assert all(b is not None and b.data == body for b in blobs)
        out["durable_obj"] = (w, c)
        w, c, datas = timed(lambda: asyncio.run(all_obstore()))
        assert all(d == body for d in datas)
        out["obstore"] = (w, c)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--puts", type=int, default=200, help="requests per PUT kind")
    parser.add_argument("--gets", type=int, default=1001, help="keys read at once")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added per request")
    parser.add_argument("--smoke", action="store_true", help="tiny: runs, measures nothing")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.smoke:
        args.puts, args.gets = 4, 11
    with seaweed() as server:
        target, proxy = server, None
        if args.latency_ms:
            proxy = LatencyProxy(server.endpoint, args.latency_ms / 1e3).start()
            target = S3Server(proxy.endpoint, server.key, server.secret, server.bucket)
        try:
            prefix = f"obs-{uuid.uuid4().hex[:8]}"
            store, obs = ours(target, prefix), theirs(target, prefix)
            slow = ours(target, prefix, writes="client")
            checks = semantics(store, obs)
            puts = bench_puts(store, slow, obs, args.puts)
            gets = bench_gets(store, obs, args.gets)
            store.close()
            slow.close()
        finally:
            if proxy is not None:
                proxy.stop()
    doc: dict[str, Any] = {"smoke": args.smoke, "latency_ms": args.latency_ms, "checks": checks}
    doc["puts"] = {
        name: {
            "p50_ms": statistics.median(r["wall"]) * 1e3,
            "p99_ms": pct(r["wall"], 0.99) * 1e3,
            "cpu_ms": statistics.mean(r["cpu"]) * 1e3,
        }
        for name, r in puts.items()
    }
    doc["gets"] = {name: {"wall_s": w, "cpu_s": c} for name, (w, c) in gets.items()}
    if args.json:
        print(json.dumps(doc))
        return
    lat = f", +{args.latency_ms:g} ms per request" if args.latency_ms else ""
    print(f"SeaweedFS on 127.0.0.1{lat}; {args.puts} PUTs of each kind, {args.gets} GETs")
    for name, said in checks.items():
        print(f"  {name}: {said}")
    print(f"{'':28}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/req':>12}")
    for name, r in doc["puts"].items():
        print(f"{name:28}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}{r['cpu_ms']:>12.2f}")
    for name, r in doc["gets"].items():
        print(f"{args.gets} GETs {name:17}{r['wall_s']:>10.3f} s wall {r['cpu_s']:>8.3f} s CPU")
    if args.smoke:
        print("--smoke: a check that it runs; not a measurement")


if __name__ == "__main__":
    main()
