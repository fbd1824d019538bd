"""Followers: how far behind a writer a follower runs, and what it costs idle.

    python benchmarks/run.py --only follow           # SeaweedFS it starts, +20 ms per request
    python benchmarks/run.py --only follow --latency-ms 0
    python benchmarks/run.py --only follow --endpoint http://127.0.0.1:9000 \
        --key K --secret S --bucket B
    python benchmarks/run.py --only follow --smoke   # a check that it runs

One writer (straight to the server) and one follower (`follow=interval`,
through benchmarks/harness/s3proxy.py, which delays each of its requests by
--latency-ms) of one object, for each interval (0.1 s and 1 s):

* lag: the writer flushes one row; the time from flush() returning to the
  follower's on_change for that seq (its view moved: the head read, the
  segment fetched, verified and replayed). Between samples the writer waits
  a random fraction of the interval, so flushes land at every phase of the
  poll. Printed as p50 / p99 over --samples flushes.
* idle: the writer closed, nothing is written for --idle seconds; the requests the follower
  sent through the proxy, per minute, and how many were listings (none).
  One poll is one conditional GET answered 304; a poll's period is the
  interval plus that request's own time (the next poll is scheduled when
  the last one returned).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import random
import threading
import time
import uuid
from functools import partial
from typing import Any

from harness.report import pct
from harness.s3proxy import LatencyProxy
from harness.servers import S3Server, seaweed

import durable_obj
from durable_obj.core.follow import Update

DDL = "CREATE TABLE m (k UInt64) ENGINE = MergeTree ORDER BY k"


def _listing(path: str) -> bool:
    return "list-type=" in path or "prefix=" in path


def _options(server: S3Server, endpoint: str) -> dict[str, Any]:
    return {
        "key": server.key,
        "secret": server.secret,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }


def one_interval(
    server: S3Server, latency: float, interval: float, samples: int, idle: float
) -> dict[str, Any]:
    url = f"s3://{server.bucket}/bench-follow-{uuid.uuid4().hex[:8]}"
    proxy = LatencyProxy(server.endpoint, latency).start()
    try:
        ns = durable_obj.Namespace(
            url,
            owner="bench",
            storage_options=_options(server, server.endpoint),
            fold_segments=0,
            close_fold_segments=0,
        )
        writer = ns.open("o")
        writer.execute(DDL)
        writer.flush()
        arrived: dict[int, float] = {}
        moved = threading.Condition()

        def on_change(update: Update) -> None:
            with moved:
                arrived[update.seq] = time.perf_counter()
                moved.notify_all()

        fns = durable_obj.Namespace(
            url,
            storage_options=_options(server, proxy.endpoint),
            follow=interval,
            on_change=on_change,
        )
        follower = fns.open("o", read_only=True)
        rng = random.Random(7)
        lags = []
        try:
            for i in range(samples):
                time.sleep(rng.uniform(0, interval))  # land at a random phase of the poll
                writer.execute(f"INSERT INTO m VALUES ({i})")
                writer.flush()
                flushed, seq = time.perf_counter(), writer.seq
                reached = partial(operator.contains, arrived, seq)  # seq in arrived
                with moved:
                    if not moved.wait_for(reached, timeout=60 + 10 * interval):
                        raise RuntimeError(f"the follower never reached seq {seq}")
                    lags.append(arrived[seq] - flushed)
            assert int(follower.query("SELECT count() FROM m")) == samples
            # idle: no writer at all (a live writer's lease renewal rewrites the
            # head every lease_ttl / 3, which a follower then reads in full once)
            writer.close()
            time.sleep(interval * 2 + 2 * latency)  # that head read is over
            proxy.requests.clear()
            started = time.perf_counter()
            time.sleep(idle)
            seen = list(proxy.requests)
            span = time.perf_counter() - started
        finally:
            follower.close()
            writer.close()
    finally:
        proxy.stop()
    return {
        "interval_s": interval,
        "latency_ms": latency * 1e3,
        "samples": samples,
        "lag_p50_ms": pct(lags, 0.50) * 1e3,
        "lag_p99_ms": pct(lags, 0.99) * 1e3,
        "lag_max_ms": max(lags) * 1e3,
        "idle_s": span,
        "idle_requests_per_minute": len(seen) * 60 / span,
        "idle_listings": sum(1 for s in seen if _listing(s.path)),
        "idle_kinds": sorted({f"{s.method} {s.status}" for s in seen}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="an S3 endpoint (default: start SeaweedFS)")
    parser.add_argument("--key", default="")
    parser.add_argument("--secret", default="")
    parser.add_argument("--bucket", default="")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--samples", type=int, default=100, help="flushes per interval")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle counting")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.idle, args.intervals = 3, 1.0, [0.1]
    with contextlib.ExitStack() as stack:
        if args.endpoint:
            server = S3Server(args.endpoint, args.key, args.secret, args.bucket)
        else:
            server = stack.enter_context(seaweed())
        rows = [
            one_interval(server, args.latency_ms / 1e3, interval, args.samples, args.idle)
            for interval in args.intervals
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    where = args.endpoint or "SeaweedFS on 127.0.0.1"
    print(f"follower on {where}, +{args.latency_ms:g} ms per follower request")
    print(f"{'interval':>9} {'lag p50':>9} {'lag p99':>9} {'idle req/min':>13} {'listings':>9}")
    for r in rows:
        print(
            f"{r['interval_s']:>8g}s {r['lag_p50_ms']:>7.0f}ms {r['lag_p99_ms']:>7.0f}ms "
            f"{r['idle_requests_per_minute']:>13.0f} {r['idle_listings']:>9}  "
            f"({r['samples']} flushes; idle: {', '.join(r['idle_kinds']) or 'nothing'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
