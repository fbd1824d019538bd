"""A restart after kill -9: how long until the same service serves again.

    python benchmarks/bench_restart.py                 # 50 objects, folder + SeaweedFS
    python benchmarks/bench_restart.py --smoke         # 2 objects, folder only

Two services, each killed with SIGKILL while holding live leases (TTL 60 s)
and started again under the same owner name:

* `service`: a process that opened `--objects` objects with `aopen` and
  wrote a unit to each. Measured from starting the new process (Python,
  chDB's import, the opens) until every object is open with `reclaim=True`
  and one read of each answered. Beside it, the same restart without
  `reclaim` is refused (`LeaseHeld`) and says how long it would wait.
* `mcp`: `durable-obj mcp URL` over stdio, restarted with `--reclaim`;
  measured from starting the server until its first tool call answered.

Goals (issue 27): the service serves within 2 s, the MCP server answers
within 3 s, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import s3_bench

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TTL = "60"


def _service(spec: dict[str, Any]) -> None:
    """The child: open every object (reclaim or not), write or read, report."""
    import durable_obj

    async def main() -> None:
        t0 = time.perf_counter()
        opts = {"owner": "svc", "storage_options": spec["storage"], "lease_ttl": float(TTL)}
        if spec["reclaim"]:
            opts["reclaim"] = True
        try:
            objs = await asyncio.gather(
                *(durable_obj.aopen(f"{spec['url']}/a{i}", **opts) for i in range(spec["n"]))
            )
        except durable_obj.LeaseHeld as exc:
            print(json.dumps({"refused": str(exc)[:300]}), flush=True)
            return
        if spec["write"]:
            for o in objs:
                await o.awrite(
                    "CREATE TABLE IF NOT EXISTS m (k String) ENGINE = MergeTree ORDER BY k",
                    ("INSERT INTO m VALUES ({k:String})", {"k": "before"}),
                )
            print(json.dumps({"ready": True}), flush=True)
            await asyncio.sleep(3600)  # killed here
        for o in objs:
            await o.arows("SELECT count() FROM m")
        print(json.dumps({"served_s": time.perf_counter() - t0}), flush=True)
        for o in objs:
            await o.aclose()

    asyncio.run(main())


def _child(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def service(url: str, storage: dict[str, Any], n: int) -> tuple[float, float, str]:
    spec = {"url": url, "storage": storage, "n": n, "write": True, "reclaim": False}
    first = _child(spec)
    assert first.stdout is not None
    line = first.stdout.readline()
    assert json.loads(line)["ready"], line
    first.send_signal(signal.SIGKILL)
    first.wait()
    refused = _child({**spec, "write": False})
    out, _ = refused.communicate(timeout=300)
    why = json.loads(out.strip().splitlines()[-1]).get("refused", "(not refused!)")
    started = time.perf_counter()
    again = _child({**spec, "write": False, "reclaim": True})
    out, _ = again.communicate(timeout=300)
    elapsed = time.perf_counter() - started
    served = json.loads(out.strip().splitlines()[-1])["served_s"]
    return elapsed, served, why


def mcp_restart(url: str) -> float:
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "PYTHONPATH": REPO}
    with tempfile.TemporaryDirectory() as tmp:
        pidfile = os.path.join(tmp, "pid")
        argv = [sys.executable, "-m", "durable_obj.cli", "mcp", url, "--lease-ttl", TTL]
        script = f'echo $$ > "{pidfile}"; exec "$@"'
        first = StdioServerParameters(
            command="/bin/sh", args=["-c", script, "sh", *argv], cwd=REPO, env=env
        )

        async def crash() -> None:
            with contextlib.suppress(Exception):
                async with Client(first) as client:
                    await client.call_tool("remember", {"content": "before the crash"})
                    with open(pidfile) as f:
                        os.kill(int(f.read().strip()), signal.SIGKILL)
                    await asyncio.sleep(0.2)
                    await client.call_tool("remember", {"content": "lost"})

        asyncio.run(crash())
        again = StdioServerParameters(
            command=argv[0], args=[*argv[1:], "--reclaim"], cwd=REPO, env=env
        )

        async def restart() -> float:
            started = time.perf_counter()
            async with Client(again) as client:
                await client.call_tool("list_memories", {})
                return time.perf_counter() - started

        return asyncio.run(restart())


def stores(names: list[str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each store named, started (SeaweedFS) and removed around its turn."""
    with contextlib.ExitStack() as stack:
        if "local" in names:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-restart-"))
            yield "local", root, {}
        if "s3" in names:
            bench = stack.enter_context(s3_bench(None, "", "", "bench", 0.0, "restart"))
            t = bench.target
            storage = {
                "key": t.key,
                "secret": t.secret,
                "endpoint_url": t.endpoint,
                "client_kwargs": {"region_name": "us-east-1"},
            }
            yield "s3", f"s3://{t.bucket}/{bench.store['prefix']}", storage


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=50)
    p.add_argument("--stores", default="local,s3")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _service(json.loads(args.child))
        return
    if args.smoke:
        args.objects, args.stores = 2, "local"
    for name, root, storage in stores(args.stores.split(",")):
        url = f"{root.rstrip('/')}/svc-{uuid.uuid4().hex[:6]}"
        elapsed, opens, why = service(url, storage, args.objects)
        print(
            f"{name:6} service, {args.objects} objects: serves {elapsed:.2f} s after start "
            f"(the opens and a read of each: {opens:.2f} s)"
        )
        print(f"{name:6}   without reclaim: {why}")
        if name == "local":
            mcp_url = f"{root.rstrip('/')}/mcp-{uuid.uuid4().hex[:6]}"
            print(f"{name:6} mcp server: answers {mcp_restart(mcp_url):.2f} s after start")


if __name__ == "__main__":
    main()
