"""Shared by the benchmark scripts: fresh-process children, statistics, the
table, the JSON results, and the S3 server (SeaweedFS, or any endpoint).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHILD = os.path.join(HERE, "_child.py")
RESULTS = os.path.join(HERE, "results")
IMPLS = ("durable_obj", "chdb.durable")


def run_child(spec: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        what = f"{spec.get('impl')} {spec.get('phase')} {spec.get('oid', '')}"
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def alternating(rep: int, impls: Sequence[str] = IMPLS) -> Sequence[str]:
    """Both implementations each repetition, the first one swapped every time."""
    return impls if rep % 2 == 0 else impls[::-1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass
class Row:
    """One line of the table: a figure for each implementation and their ratio."""

    store: str
    metric: str
    unit: str
    ours: float
    theirs: float
    goal: float | None = None
    #: "lower" when a smaller figure is better (times, sizes, RSS), else "higher".
    better: str = "lower"
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.theirs if self.theirs else math.nan

    @property
    def verdict(self) -> str:
        if self.goal is None or math.isnan(self.ratio):
            return ""
        return "met" if self.ratio <= self.goal else "NOT met"


@dataclass
class OwnRow:
    """A figure of durable_obj alone (chdb.durable has nothing to compare),
    with an absolute goal: at most `limit`."""

    store: str
    metric: str
    unit: str
    ours: float
    limit: float | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.limit is None or math.isnan(self.ours):
            return ""
        return "met" if self.ours <= self.limit else "NOT met"


@dataclass
class Report:
    """Collects raw samples and table rows, prints them, writes them as JSON."""

    name: str
    args: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    own: list[OwnRow] = field(default_factory=list)
    samples: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def table(self) -> str:
        head = (
            f"{'store':<8}{'metric':<44}{'unit':<7}{'durable_obj':>12}{'chdb.durable':>13}"
            f"{'ratio':>8}  {'goal':<7}{'':<8}"
        )
        lines = [head.rstrip(), "-" * len(head)]
        for r in self.rows:
            goal = f"<={r.goal:g}" if r.goal is not None else ""
            ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
            lines.append(
                f"{r.store:<8}{r.metric:<44}{r.unit:<7}{fmt(r.ours):>12}{fmt(r.theirs):>13}"
                f"{ratio:>8}  {goal:<7}{r.verdict:<8}{r.note}".rstrip()
            )
        return "\n".join(lines)

    def own_table(self) -> str:
        head = f"{'store':<8}{'metric':<44}{'unit':<7}{'durable_obj':>12}  {'goal':<9}{'':<8}"
        lines = [head.rstrip(), "-" * len(head)]
        for r in self.own:
            goal = f"<={r.limit:g}" if r.limit is not None else ""
            lines.append(
                f"{r.store:<8}{r.metric:<44}{r.unit:<7}{fmt(r.ours):>12}  {goal:<9}"
                f"{r.verdict:<8}{r.note}".rstrip()
            )
        return "\n".join(lines)

    def print(self) -> None:
        print(f"\n{machine()}")
        for note in self.notes:
            print(note)
        print()
        print(self.table())
        if self.own:
            print("\ndurable_obj alone (chdb.durable has no such operation):")
            print(self.own_table())

    def write(self, folder: str = RESULTS) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{self.name}-{int(time.time())}.json")
        rows = [{**vars(r), "ratio": r.ratio, "verdict": r.verdict} for r in self.rows]
        payload = {
            "machine": machine(),
            "args": self.args,
            "notes": self.notes,
            "rows": rows,
            "own_rows": [{**vars(r), "verdict": r.verdict} for r in self.own],
            "samples": self.samples,
        }
        with open(path, "w") as handle:
            json.dump(payload, handle, indent=1, default=str)
        return path


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall s, this process's CPU s, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import chdb

    return (
        f"machine: {model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"chdb {chdb.__version__}"
    )


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
    benchmarks/s3proxy.py adding `latency_ms` per request when > 0."""
    import uuid

    from s3proxy import LatencyProxy

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
