"""What telemetry costs a flush (issue 40): no hooks, hooks with nothing
configured, hooks recording into the OpenTelemetry SDK.

    python benchmarks/run.py --only telemetry               # 600 flushes per build
    python benchmarks/run.py --only telemetry -- --flushes 300 --rows 10
    python benchmarks/run.py --only telemetry -- --stores local,s3   # + SeaweedFS
    python benchmarks/run.py --only telemetry --smoke       # a few: runs only

One process, one object on each store (folding off; `local`: a folder,
`s3`: a SeaweedFS started on 127.0.0.1), three builds of
the flush path interleaved in blocks of 10 flushes (`BLOCK`), their order
rotated each round so that the machine's drift spreads over all of them. The
hooks complete their records on a thread of their own; a block lets that
work fall on the build's own next flushes, and it is drained before the next
build's block:

* `bare`: every hooked method of the flush path replaced by the function it
  wraps (`__wrapped__`): the build without the hooks;
* `unconfigured`: the hooks, with no SDK (the global providers are the
  API's proxies): each is a call and a check;
* `sdk`: the hooks recording into an SDK `TracerProvider` (in-memory span
  exporter, simple processor) and `MeterProvider` (in-memory reader),
  through `telemetry.configure`.

Each sample is one `flush()` of --rows buffered agent-memory-sized INSERTs
(executed before the clock starts): its wall time and the process's CPU
time. Per build: the median, and the median of the round-by-round ratios to
`bare` (each round runs the three builds' blocks back to back, so a ratio
compares the n-th flushes of blocks a few milliseconds apart and the
machine's drift cancels out).
Goals: unconfigured within 1% of bare, sdk within 2%.

Then the floor under the `sdk` build's cost: what the SDK's own calls for one
flush cost with nothing of durable_obj around them (start a span, make it
current and not, a histogram point, a counter add, the span's attributes and
end, on the same providers) against one hooked call of an empty function
with the same attributes: what the hook adds beyond the SDK, per flush.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

from harness.servers import seaweed
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import durable_obj
from durable_obj import telemetry
from durable_obj.core.object import DurableObject

#: The hooked methods a flush runs through.
HOOKED = ("_commit_payload", "_checkpoint_locked", "_write_queued", "execute")
BUILDS = ("bare", "unconfigured", "sdk")
#: Flushes of one build in a row: the hooks complete their records on a
#: thread of their own, whose work falls on the flushes after theirs.
BLOCK = 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flushes", type=int, default=600, help="flushes per build")
    ap.add_argument("--rows", type=int, default=1, help="INSERTs buffered per flush")
    ap.add_argument("--stores", default="local", help="comma list: local, s3")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    flushes = 5 if args.smoke else args.flushes

    hooked = {name: getattr(DurableObject, name) for name in HOOKED}
    bare = {name: fn.__wrapped__ for name, fn in hooked.items()}
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    # the SDK's sink is made once; a switch of build only points the hooks at it
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    sink = telemetry._SINK
    telemetry.configure()

    def use(build: str) -> None:
        for name in HOOKED:
            setattr(DurableObject, name, (bare if build == "bare" else hooked)[name])
        sdk = build == "sdk"
        telemetry._SINK, telemetry._PINNED, telemetry._WATCH = (
            (sink, sdk, not sdk) if sdk else (None, False, True)
        )

    print(sdk_floor(tracer_provider, meter_provider, exporter, 500 if args.smoke else 20_000))
    for store in args.stores.split(","):
        with where(store) as (url, options):
            samples, cpu = measure(url, options, flushes, args.rows, use, exporter)
        use("unconfigured")
        print(
            f"flush of {args.rows} INSERT(s), {store}, {flushes} flushes per build, "
            f"in blocks of {BLOCK}"
        )
        for what, values in (("wall", samples), ("cpu", cpu)):
            p50 = {b: statistics.median(v) for b, v in values.items()}
            p99 = {
                b: statistics.quantiles(v, n=100)[98] if len(v) > 1 else v[0]
                for b, v in values.items()
            }
            for build in BUILDS:
                paired = statistics.median(
                    a / b if b else 1.0 for a, b in zip(values[build], values["bare"], strict=True)
                )
                print(
                    f"  {what:<4} {build:<13} p50 {p50[build] * 1e3:8.3f} ms   "
                    f"x{p50[build] / p50['bare']:.4f} of bare's p50   "
                    f"x{paired:.4f} paired (median of round ratios)   "
                    f"p99 {p99[build] * 1e3:8.3f} ms x{p99[build] / p99['bare']:.3f}"
                )
    return 0


def sdk_floor(
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    exporter: InMemorySpanExporter,
    count: int,
) -> str:
    """Microseconds per flush: the SDK's calls alone, and the hook around an
    empty function recording the same (`telemetry.configure`d on the same
    providers). Best of 5 batches of `count` (a multiple of 500)."""
    from opentelemetry import context, trace

    tracer = tracer_provider.get_tracer("floor")
    meter = meter_provider.get_meter("floor")
    histogram = meter.create_histogram("floor.duration", unit="s")
    counter = meter.create_counter("floor.bytes", unit="By")
    attrs = {
        telemetry.OBJECT_ID: "o",
        telemetry.STORE: "file",
        telemetry.SEQ: 5,
        telemetry.MODE: "writer",
        telemetry.STATEMENTS: 1,
        telemetry.BYTES: 300,
    }
    metric = {telemetry.DB_SYSTEM: telemetry.SYSTEM, telemetry.STORE: "file"}

    def floor() -> None:
        span = tracer.start_span("durable_obj.flush", attributes=metric)
        token = context.attach(trace.set_span_in_context(span))
        context.detach(token)
        histogram.record(0.001, {**metric, telemetry.MODE: "writer"})
        counter.add(300, {**metric, telemetry.KIND: "wal"})
        span.set_attributes({**attrs, telemetry.DB_SYSTEM: telemetry.SYSTEM})
        span.end()

    @telemetry.operation("flush", lambda args, kwargs, result: dict(attrs))
    def hooked() -> None:
        pass

    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    best = {}
    try:
        for name, fn, drained in (
            ("sdk", floor, False),
            ("caller", hooked, False),
            ("hook", hooked, True),
        ):
            runs = []
            for _ in range(5):
                took = 0.0
                for _ in range(0, count, 500):  # the exporter emptied as an exporter would
                    started = time.perf_counter()
                    for _ in range(500):
                        fn()
                    if drained:  # the hook's thread's share counted too
                        telemetry.drain()
                    took += time.perf_counter() - started
                    telemetry.drain()
                    exporter.clear()
                runs.append(took / count)
            best[name] = min(runs) * 1e6
    finally:
        telemetry.configure()
    return (
        f"per flush, best of 5 x {count:,}: the SDK's own calls {best['sdk']:.1f} us, "
        f"the hook recording the same {best['hook']:.1f} us (x{best['hook'] / best['sdk']:.2f}), "
        f"of which on the caller's thread {best['caller']:.1f} us"
    )


@contextlib.contextmanager
def where(store: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The object's URL and storage options on `store` (local or s3)."""
    if store == "local":
        with tempfile.TemporaryDirectory() as root:
            yield f"{root}/o", {}
        return
    if store != "s3":
        raise SystemExit(f"unknown store {store!r}: local or s3")
    with seaweed() as server:
        options = {
            "key": server.key,
            "secret": server.secret,
            "endpoint_url": server.endpoint,
            "client_kwargs": {"region_name": "us-east-1"},
        }
        yield f"s3://{server.bucket}/telemetry-{uuid.uuid4().hex[:8]}/o", options


def measure(
    url: str,
    options: dict[str, Any],
    flushes: int,
    rows: int,
    use: Any,
    exporter: InMemorySpanExporter,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per build: each flush's wall and CPU seconds, the builds interleaved."""
    samples: dict[str, list[float]] = {b: [] for b in BUILDS}
    cpu: dict[str, list[float]] = {b: [] for b in BUILDS}
    text = "x" * 200
    opts: dict[str, Any] = {"fold_segments": 0, "close_fold_segments": 0}
    with durable_obj.open(url, owner="bench", storage_options=options, **opts) as obj:
        obj.execute("CREATE TABLE m (k UInt64, v String) ENGINE = MergeTree ORDER BY k")
        obj.flush()
        k = 0
        rounds = -(-flushes // BLOCK)
        for i in range(rounds + 2):  # 2 rounds of warm-up
            order = BUILDS[i % 3 :] + BUILDS[: i % 3]
            for build in order:
                use(build)
                for _ in range(BLOCK):
                    for _ in range(rows):
                        k += 1
                        obj.execute(f"INSERT INTO m VALUES ({k}, '{text}')")
                    started, used = time.perf_counter(), time.process_time()
                    obj.flush()
                    elapsed = time.perf_counter() - started
                    if i >= 2:
                        samples[build].append(elapsed)
                        cpu[build].append(time.process_time() - used)
                # what the hooks left to their thread is recorded before the
                # next build's block: within a block, it runs during (and
                # counts against) the block's own next flushes
                telemetry.drain()
                if len(exporter.get_finished_spans()) > 1000:
                    exporter.clear()
    return samples, cpu


if __name__ == "__main__":
    raise SystemExit(main())
