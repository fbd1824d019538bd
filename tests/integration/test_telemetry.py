"""OpenTelemetry (`durable_obj.telemetry`): every span and metric by name,
with its attributes and unit, read back through the SDK's in-memory
exporter and reader; nothing recorded, nothing raised, without an SDK or
without opentelemetry; no credential or statement in any attribute."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import durable_obj
from durable_obj import errors, telemetry
from durable_obj.testing import FaultyStore
from durable_obj.testing.faulty import Fault

ROOT = Path(__file__).resolve().parents[2]
DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"
OBJECT = {"durable_obj.object.id", "durable_obj.store", "durable_obj.seq", "db.system"}
MODE = {"durable_obj.object.mode"}

#: Each span's attribute names, exactly (a failed one adds error.type).
SPAN_ATTRS = {
    "durable_obj.open": OBJECT | MODE | {"durable_obj.generation", "durable_obj.bytes"},
    "durable_obj.flush": OBJECT | MODE | {"durable_obj.statements", "durable_obj.bytes"},
    "durable_obj.checkpoint": OBJECT
    | MODE
    | {"durable_obj.bytes", "durable_obj.checkpoint.incremental", "durable_obj.checkpoint.links"},
    "durable_obj.refresh": OBJECT | MODE | {"durable_obj.refresh.moved"},
    "durable_obj.restore": OBJECT | {"durable_obj.bytes"},
    "durable_obj.gc": (OBJECT - {"durable_obj.seq"})
    | {"durable_obj.bytes", "durable_obj.gc.deleted", "durable_obj.gc.dry_run"},
}
DURATION_ATTRS = {"db.system", "durable_obj.store", "durable_obj.object.mode"}
#: Each metric: unit, and the attribute names of its points.
METRICS: dict[str, tuple[str, set[str]]] = {
    "durable_obj.open.duration": ("s", DURATION_ATTRS),
    "durable_obj.flush.duration": ("s", DURATION_ATTRS),
    "durable_obj.ack.duration": ("s", DURATION_ATTRS),
    "durable_obj.checkpoint.duration": (
        "s",
        DURATION_ATTRS | {"durable_obj.checkpoint.incremental"},
    ),
    "durable_obj.refresh.duration": ("s", DURATION_ATTRS),
    "durable_obj.restore.duration": ("s", {"db.system", "durable_obj.store"}),
    "durable_obj.gc.duration": ("s", {"db.system", "durable_obj.store"}),
    "durable_obj.bytes.written": (
        "By",
        {"db.system", "durable_obj.store", "durable_obj.bytes.kind"},
    ),
    "durable_obj.refusals": ("{refusal}", {"db.system", "error.type", "durable_obj.operation"}),
    "durable_obj.objects.open": ("{object}", {"db.system", "durable_obj.object.mode"}),
    "durable_obj.leases": ("{lease}", {"db.system", "durable_obj.lease.state"}),
    "durable_obj.bytes.stored": ("By", {"db.system", "durable_obj.object.mode"}),
    "durable_obj.follower.lag": ("s", {"db.system"}),
}
#: Metrics with a point only while a follower is open.
FOLLOWING = {"durable_obj.follower.lag"}


class Otel:
    """An SDK wired to durable_obj through `telemetry.configure`."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        assert telemetry.drain()
        return [s for s in self.exporter.get_finished_spans() if name in (None, s.name)]

    def metrics(self) -> dict[str, Any]:
        assert telemetry.drain()
        data = self.reader.get_metrics_data()
        found: dict[str, Any] = {}
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """A metric's points by their attributes (`at`): a sum or gauge's
        value, a histogram's count."""
        out = {}
        for p in self.metrics()[name].data.data_points:
            key = frozenset(p.attributes.items())
            out[key] = p.count if hasattr(p, "bucket_counts") else p.value
        return out

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    sdk = Otel()
    telemetry.configure(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    try:
        yield sdk
    finally:
        telemetry.configure()
        sdk.shutdown()


def at(**attrs: Any) -> frozenset[tuple[str, Any]]:
    """A point's attributes, `db.system` included: at(mode="writer") for
    durable_obj.object.mode, error_type= for error.type, others by their
    last word (store, kind, operation, state)."""
    names = {
        "mode": "durable_obj.object.mode",
        "store": "durable_obj.store",
        "kind": "durable_obj.bytes.kind",
        "operation": "durable_obj.operation",
        "state": "durable_obj.lease.state",
        "incremental": "durable_obj.checkpoint.incremental",
        "error_type": "error.type",
    }
    return frozenset({("db.system", "chdb"), *((names[k], v) for k, v in attrs.items())})


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_every_span_with_its_attributes(otel: Otel, tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w")
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.write("INSERT INTO m VALUES (1, 'a')")
        obj.checkpoint()
        obj.write("INSERT INTO m VALUES (2, 'b')")
        obj.checkpoint()
        with ns.open("o", read_only=True) as reader:
            obj.write("INSERT INTO m VALUES (3, 'c')")
            assert reader.refresh() is True
            head = obj.head
            assert head is not None
    report = ns.gc("o", grace=0)
    assert {s.name for s in otel.spans()} == set(SPAN_ATTRS)
    for span in otel.spans():
        attrs = _attrs(span)
        assert set(attrs) == SPAN_ATTRS[span.name], span.name
        assert attrs["db.system"] == "chdb" and attrs["durable_obj.object.id"] == "o"
        assert attrs["durable_obj.store"] == "file"
        assert span.status.status_code == StatusCode.UNSET
    flushes = otel.spans("durable_obj.flush")
    assert [_attrs(s)["durable_obj.seq"] for s in flushes] == [1, 3, 5]
    assert [_attrs(s)["durable_obj.statements"] for s in flushes] == [2, 1, 1]
    assert _attrs(flushes[-1])["durable_obj.bytes"] == head.manifest.wal[-1].size
    full, increment = otel.spans("durable_obj.checkpoint")
    assert (_attrs(full)["durable_obj.seq"], _attrs(increment)["durable_obj.seq"]) == (2, 4)
    assert _attrs(full)["durable_obj.checkpoint.incremental"] is False
    assert _attrs(full)["durable_obj.checkpoint.links"] == 0
    assert _attrs(increment)["durable_obj.checkpoint.incremental"] is True
    assert _attrs(increment)["durable_obj.checkpoint.links"] == 1
    assert head.manifest.base is not None
    assert _attrs(increment)["durable_obj.bytes"] == head.manifest.base.size
    # the reader's open restored the base and its link: its child span
    opens = otel.spans("durable_obj.open")
    assert [_attrs(s)["durable_obj.object.mode"] for s in opens] == ["writer", "reader"]
    (restore,) = otel.spans("durable_obj.restore")
    assert restore.parent is not None and restore.parent.span_id == opens[1].context.span_id
    bases = sum(r.size for r in head.manifest.all_bases())
    assert _attrs(restore)["durable_obj.bytes"] == bases  # opened at seq 4: no WAL yet
    assert _attrs(opens[1])["durable_obj.seq"] == 4
    (refresh,) = otel.spans("durable_obj.refresh")
    assert _attrs(refresh)["durable_obj.refresh.moved"] is True
    assert _attrs(refresh)["durable_obj.seq"] == 5
    (gc,) = otel.spans("durable_obj.gc")
    assert _attrs(gc)["durable_obj.bytes"] == report.deleted_bytes
    assert _attrs(gc)["durable_obj.gc.deleted"] == len(report.deleted)
    assert _attrs(gc)["durable_obj.gc.dry_run"] is False


def test_a_span_is_the_callers_child_and_spans_the_call_itself(otel: Otel, tmp_path: Path) -> None:
    """A hook completes its span on a thread of its own (telemetry/later.py):
    the span still starts and ends within the call it measures, not when
    that thread gets to it, and is a child of the caller's current span."""
    ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w")
    tracer = otel.tracer_provider.get_tracer("caller")
    with ns.open("o") as obj:
        obj.execute(DDL)
        for n in range(20):
            obj.execute(f"INSERT INTO m VALUES ({n}, 'a')")
            with tracer.start_as_current_span("request") as request:
                before = time.time_ns()
                obj.flush()
                after = time.time_ns()
            flush = otel.spans("durable_obj.flush")[-1]
            assert flush.parent is not None
            assert flush.parent.span_id == request.get_span_context().span_id
            assert flush.start_time is not None and flush.end_time is not None
            assert before <= flush.start_time <= flush.end_time <= after
    assert len(otel.spans("durable_obj.flush")) == 20
    assert sum(otel.points("durable_obj.flush.duration").values()) == 20


def test_every_metric_with_its_unit_and_attributes(otel: Otel, tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w")
    obj = ns.open("o")
    obj.execute(DDL)
    obj.write("INSERT INTO m VALUES (1, 'a')")
    with obj.batch():
        obj.execute("INSERT INTO m VALUES (2, 'b')")
    obj.checkpoint()
    assert obj.head is not None
    stored = sum(r.size for r in [*obj.head.manifest.all_bases(), *obj.head.manifest.wal])
    assert stored > 0
    assert otel.points("durable_obj.bytes.stored") == {at(mode="writer"): stored}
    with pytest.raises(errors.ClassificationRefused):
        obj.execute("SELECT 1")
    with pytest.raises(errors.Nondeterministic):
        obj.write("ALTER TABLE m ADD COLUMN d Date MATERIALIZED today()")
    with pytest.raises(errors.ClassificationRefused):
        obj.query("INSERT INTO m VALUES (4, 'd')")
    assert otel.points("durable_obj.objects.open") == {at(mode="writer"): 1, at(mode="reader"): 0}
    assert otel.points("durable_obj.leases") == {at(state="held"): 1, at(state="fenced"): 0}
    # another writer takes the lease: this one is fenced at its next commit
    with pytest.warns(RuntimeWarning, match="force takeover"):
        other = ns.open("o", force=True)
    with pytest.raises(errors.LeaseFenced):
        obj.write("INSERT INTO m VALUES (5, 'e')")
    assert otel.points("durable_obj.leases") == {at(state="held"): 1, at(state="fenced"): 1}
    assert otel.points("durable_obj.objects.open")[at(mode="writer")] == 2
    with pytest.raises(errors.LeaseFenced):
        obj.close()  # the fenced write stays unflushed: close says it is lost
    other.close()
    with pytest.raises(errors.Closed):
        other.query("SELECT 1")
    with ns.open("o", read_only=True) as reader:
        assert reader.refresh() is False
    ns.gc("o", grace=0)
    found = otel.metrics()
    assert set(found) == set(METRICS) - FOLLOWING
    for name, (unit, keys) in METRICS.items():
        if name in FOLLOWING:
            continue
        assert found[name].unit == unit, name
        points = found[name].data.data_points
        assert points, name
        for point in points:
            assert set(point.attributes) - {"error.type"} == keys - {"error.type"}, name
    assert otel.points("durable_obj.objects.open") == {at(mode="writer"): 0, at(mode="reader"): 0}
    assert otel.points("durable_obj.leases") == {at(state="held"): 0, at(state="fenced"): 0}
    assert otel.points("durable_obj.bytes.stored") == {at(mode="writer"): 0}
    writer = {"store": "file", "mode": "writer"}
    # write() and batch() acked; two write()s failed, each under its category
    assert otel.points("durable_obj.ack.duration") == {
        at(**writer): 2,
        at(**writer, error_type="nondeterministic"): 1,
        at(**writer, error_type="lease_fenced"): 1,
    }
    assert otel.points("durable_obj.flush.duration") == {
        at(**writer): 2,  # the DDL with the first write; the batch (the other had none)
        at(**writer, error_type="lease_fenced"): 1,
    }
    reader = {"store": "file", "mode": "reader"}
    assert otel.points("durable_obj.open.duration") == {at(**writer): 2, at(**reader): 1}
    assert otel.points("durable_obj.refresh.duration") == {at(**reader): 1}
    assert otel.points("durable_obj.restore.duration") == {at(store="file"): 2}
    assert otel.points("durable_obj.gc.duration") == {at(store="file"): 1}
    assert otel.points("durable_obj.checkpoint.duration") == {at(**writer, incremental=False): 1}
    wal = sum(_attrs(s).get("durable_obj.bytes", 0) for s in otel.spans("durable_obj.flush"))
    base = sum(_attrs(s)["durable_obj.bytes"] for s in otel.spans("durable_obj.checkpoint"))
    assert wal > 0 and base > 0
    assert otel.points("durable_obj.bytes.written") == {
        at(store="file", kind="wal"): wal,
        at(store="file", kind="base"): base,
    }
    assert otel.points("durable_obj.refusals") == {
        at(operation="execute", error_type="classification_refused"): 1,
        at(operation="write", error_type="nondeterministic"): 1,
        at(operation="write", error_type="lease_fenced"): 1,
        at(operation="query", error_type="classification_refused"): 1,
        at(operation="query", error_type="closed"): 1,
    }


def test_follower_lag_grows_while_its_polls_fail_and_falls_when_one_lands(
    otel: Otel, tmp_path: Path
) -> None:
    """`durable_obj.follower.lag`: seconds since a follower's view was last
    the store's newest head. Polls that fail leave it growing by the time
    that passes (the monotonic clock, no timing judged); the first poll that
    lands brings it back under what it had reached."""
    url = str(tmp_path / "ns" / "o")
    with durable_obj.open(url, owner="w") as writer:
        writer.execute(DDL)
        writer.flush()
        follower = durable_obj.open(url, read_only=True, follow=0.05)
        try:
            (lag,) = otel.points("durable_obj.follower.lag").values()
            assert lag >= 0
            poll = follower._follow_poll
            real = poll.store.get_if_changed  # type: ignore[attr-defined]

            def down(*args: Any, **kwargs: Any) -> Any:
                raise errors.BackendError("the store is unreachable (injected)")

            poll.store.get_if_changed = down  # type: ignore[attr-defined]
            first = otel.points("durable_obj.follower.lag")[at()]
            time.sleep(0.3)
            later = otel.points("durable_obj.follower.lag")[at()]
            assert later - first >= 0.3
            writer.write("INSERT INTO m VALUES (1, 'a')")
            poll.store.get_if_changed = real  # type: ignore[attr-defined]
            deadline = time.monotonic() + 30
            while follower.seq != writer.seq and time.monotonic() < deadline:
                time.sleep(0.02)
            assert follower.seq == writer.seq
            assert otel.points("durable_obj.follower.lag")[at()] < later
        finally:
            follower.close()
    assert "durable_obj.follower.lag" not in otel.metrics() or not otel.points(
        "durable_obj.follower.lag"
    )


def test_a_failed_operation_says_its_category(otel: Otel, tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w")
    flaky = FaultyStore(ns.store, seed=0, rate=1.0, faults=(Fault.ERROR,))
    flaky.enabled = False
    with durable_obj.Namespace(flaky, owner="w").open("o") as obj:
        obj.execute(DDL)
        flaky.enabled = True
        with pytest.raises(errors.BackendError):
            obj.flush()
        flaky.enabled = False
    with pytest.raises(errors.NotFound):
        ns.open("absent", read_only=True)
    failed_flush, flush = otel.spans("durable_obj.flush")
    assert failed_flush.status.status_code == StatusCode.ERROR
    assert failed_flush.status.description == "backend"
    assert _attrs(failed_flush)["error.type"] == "backend"
    assert "durable_obj.bytes" not in _attrs(failed_flush)
    assert flush.status.status_code == StatusCode.UNSET and "error.type" not in _attrs(flush)
    failed_open = otel.spans("durable_obj.open")[-1]
    assert _attrs(failed_open)["error.type"] == "not_found"
    assert _attrs(failed_open)["durable_obj.object.id"] == "absent"
    durations = otel.points("durable_obj.flush.duration")
    assert durations[at(store="file", mode="writer", error_type="backend")] == 1
    # a failed commit wrote nothing: only the one that landed is counted
    wal = otel.points("durable_obj.bytes.written")
    assert list(wal.values()) == [_attrs(flush)["durable_obj.bytes"]]


def test_without_an_sdk_nothing_is_recorded_and_nothing_raised(tmp_path: Path) -> None:
    sdk = Otel()  # built, never configured: the global providers are the API's proxies
    try:
        assert not telemetry.enabled()
        ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w")
        with ns.open("o") as obj:
            obj.execute(DDL)
            obj.write("INSERT INTO m VALUES (1, 'a')")
            obj.checkpoint()
            with pytest.raises(errors.ClassificationRefused):
                obj.execute("SELECT 1")
        with ns.open("o", read_only=True) as reader:
            assert reader.refresh() is False
            assert reader.query("SELECT count() FROM m") == "1\n"
        ns.gc("o", grace=0)
        assert sdk.spans() == [] and sdk.metrics() == {}
        assert telemetry._SINK is None
    finally:
        sdk.shutdown()


def _child(tmp_path: Path, *parts: str) -> dict[str, Any]:
    code = "\n".join(textwrap.dedent(part) for part in parts)
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


_WORK = """
    ns = durable_obj.Namespace(sys.argv[1] + "/ns", owner="w")
    with ns.open("o") as obj:
        obj.execute("CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k")
        obj.write("INSERT INTO m VALUES (1)")
        obj.checkpoint()
        try:
            obj.execute("SELECT 1")
        except durable_obj.errors.ClassificationRefused:
            pass
"""


@pytest.mark.slow
def test_without_opentelemetry_every_hook_passes_through(tmp_path: Path) -> None:
    answer = _child(
        tmp_path,
        """
        import json, sys
        sys.modules["opentelemetry"] = None  # as if not installed: its import fails
        import durable_obj
        from durable_obj import telemetry
        """,
        _WORK,
        """
        print(json.dumps({"enabled": telemetry.enabled(), "absent": telemetry._ABSENT}))
        """,
    )
    assert answer == {"enabled": False, "absent": True}


@pytest.mark.slow
def test_an_sdk_configured_later_as_the_global_one_is_used(tmp_path: Path) -> None:
    """The usual wiring: the SDK set as the global providers, here after
    durable_obj was imported and had run unconfigured."""
    answer = _child(
        tmp_path,
        """
        import json, sys
        import durable_obj
        from durable_obj import telemetry
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        """,
        _WORK,
        """
        before = telemetry.enabled()
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        with ns.open("o") as obj:
            obj.write("INSERT INTO m VALUES (2)")
        assert telemetry.drain()
        names = sorted({
            m.name
            for r in reader.get_metrics_data().resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        })
        spans = sorted({s.name for s in exporter.get_finished_spans()})
        print(json.dumps({"before": before, "spans": spans, "metrics": names}))
        """,
    )
    assert answer["before"] is False
    assert answer["spans"] == ["durable_obj.flush", "durable_obj.open", "durable_obj.restore"]
    assert {"durable_obj.flush.duration", "durable_obj.ack.duration"} <= set(answer["metrics"])


def test_no_credential_or_statement_reaches_an_attribute(
    otel: Otel, moto_s3: tuple[str, dict[str, Any]]
) -> None:
    root, options = moto_s3
    secret, key_id = options["secret"], options["key"]
    carrier = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    ns = durable_obj.Namespace(root, owner="w", storage_options=options)
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.write("INSERT INTO m VALUES (1, 'a')")
        obj.checkpoint()
        with pytest.raises((errors.SecretRefused, errors.ClassificationRefused)):
            obj.execute(
                "INSERT INTO m SELECT 1, 'x' FROM s3('http://127.0.0.1:9/b/x.csv', "
                f"'AKIAEXAMPLE', '{carrier}', 'CSV')"
            )
        with ns.open("o", read_only=True) as reader:
            reader.refresh()
    ns.gc("o", grace=0)
    values = [str(v) for s in otel.spans() for v in _attrs(s).values()]
    for metric in otel.metrics().values():
        for point in metric.data.data_points:
            values += [str(v) for v in point.attributes.values()]
    assert len(otel.spans()) >= 6 and values
    bucket = root.split("://", 1)[1].split("/", 1)[0]
    assert {v for v in values if v.startswith("s3")} == {f"s3://{bucket}"}
    for value in values:
        for hidden in (secret, key_id, carrier, "AKIAEXAMPLE", "INSERT", "SELECT"):
            assert hidden not in value


@pytest.mark.parametrize(
    ("url", "store"),
    [
        ("s3://AKIAKEY:s3cr3t@bucket/ns/o", "s3://bucket"),
        ("gs://bucket/ns/o?token=s3cr3t#x", "gs://bucket"),
        (
            "az://container@account.blob.core.windows.net/ns?sig=s3cr3t",
            "az://account.blob.core.windows.net",
        ),
        (
            "https://account.blob.core.windows.net/c/o?sv=1&sig=s3cr3t",
            "https://account.blob.core.windows.net",
        ),
        ("memory://test-ns/o", "memory://test-ns"),
        ("file:///home/someone/ns/o", "file"),
        ("/home/someone/ns/o", "file"),
    ],
)
def test_a_store_is_its_scheme_and_bucket_only(url: str, store: str) -> None:
    assert telemetry.store_of(url) == store


def test_every_name_is_documented() -> None:
    page = (ROOT / "docs" / "guides" / "telemetry.md").read_text()
    names = [f"durable_obj.{op}" for op in telemetry.OPS if telemetry.OPS[op].span]
    names += [op.histogram for op in telemetry.OPS.values()] + list(METRICS)
    names += [v for k, v in vars(telemetry).items() if k.isupper() and isinstance(v, str)]
    for name in names:
        assert f"`{name}`" in page, name
