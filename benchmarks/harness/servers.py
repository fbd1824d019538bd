"""The S3 side of a run: a SeaweedFS started here (or any endpoint), the
environment chdb.durable reads its endpoint and keys from, and the latency
proxy (`harness.s3proxy`) every request of every client goes through when a
run adds latency."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.procs import REPO
from harness.s3proxy import LatencyProxy


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key: str
    secret: str
    bucket: str


def s3_env(server: S3Server) -> dict[str, str]:
    """The environment chdb.durable reads its S3 endpoint and keys from."""
    env = dict(os.environ)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)
    env.update(
        {
            "CHDB_DURABLE_S3_ENDPOINT": server.endpoint,
            "AWS_ACCESS_KEY_ID": server.key,
            "AWS_SECRET_ACCESS_KEY": server.secret,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    return env


@contextlib.contextmanager
def seaweed() -> Iterator[S3Server]:
    """SeaweedFS `weed mini` on free 127.0.0.1 ports, stopped on exit."""
    sys.path.insert(0, REPO)
    from tests import serverprocs

    with tempfile.TemporaryDirectory(prefix="bench-seaweed-") as workdir:
        server, endpoint = serverprocs.start_seaweed(workdir)
        try:
            yield S3Server(endpoint, serverprocs.S3_KEY, serverprocs.S3_SECRET, serverprocs.BUCKET)
        finally:
            server.stop()


@dataclass
class S3Bench:
    """The S3 side of a benchmark run: the server, what the libraries talk
    to (the server, or the latency proxy before it), the store spec the
    child processes take, and a note for the report."""

    server: S3Server
    target: S3Server
    store: dict[str, Any]
    note: str


@contextlib.contextmanager
def s3_bench(
    endpoint: str | None, key: str, secret: str, bucket: str, latency_ms: float, prefix: str
) -> Iterator[S3Bench]:
    """An S3 server for a run (`endpoint`, or a SeaweedFS started here), behind
    the latency proxy adding `latency_ms` per request when > 0."""
    with contextlib.ExitStack() as stack:
        server = (
            S3Server(endpoint, key, secret, bucket) if endpoint else stack.enter_context(seaweed())
        )
        target = server
        if latency_ms:
            proxy = LatencyProxy(server.endpoint, latency_ms / 1e3).start()
            stack.callback(proxy.stop)
            target = S3Server(proxy.endpoint, server.key, server.secret, server.bucket)
        store = {
            "kind": "s3",
            "endpoint": target.endpoint,
            "key": target.key,
            "secret": target.secret,
            "bucket": target.bucket,
            "prefix": f"{prefix}-{uuid.uuid4().hex[:8]}",
        }
        where = endpoint or "SeaweedFS on 127.0.0.1"
        extra = f", +{latency_ms:g} ms per request via a proxy" if latency_ms else ""
        note = f"s3: {where}{extra}; both implementations on the same bucket"
        yield S3Bench(server, target, store, note)


@contextlib.contextmanager
def s3_runs(
    endpoint: str | None,
    key: str,
    secret: str,
    bucket: str,
    latencies: Sequence[float],
    prefix: str,
) -> Iterator[Iterator[tuple[float, S3Bench]]]:
    """One S3 server (`endpoint`, or a SeaweedFS started here), behind a
    latency proxy per entry of `latencies` in turn."""
    with contextlib.ExitStack() as stack:
        server = (
            S3Server(endpoint, key, secret, bucket) if endpoint else stack.enter_context(seaweed())
        )

        def each() -> Iterator[tuple[float, S3Bench]]:
            for ms in latencies:
                with s3_bench(
                    server.endpoint, server.key, server.secret, server.bucket, ms, prefix
                ) as s3:
                    yield ms, s3

        yield each()
