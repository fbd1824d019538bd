"""OpenTelemetry spans and metrics, free when nothing is configured.

    pip install "durable_obj[otel]"          # opentelemetry-api
    # then configure an SDK as usual (trace.set_tracer_provider(...),
    # metrics.set_meter_provider(...)): durable_obj records into it

Every hook is a decorator on one central method (open, a segment's commit,
a checkpoint, a refresh, a restore, gc, a write's ack, the public write and
read calls). Until an SDK is configured a hook costs one call and a check:
`opentelemetry` absent, or both global providers still the API's proxies,
means the decorated method runs as if undecorated. A hook never changes
what the method returns or raises; a failure to record is logged, never
raised. Once configured, most of a record is completed on a thread of its
own, while no operation runs (`telemetry/later.py`); `drain()` waits for it.

What is recorded (the names, units and attributes; docs/guides/telemetry.md
is the reference):

* spans `durable_obj.<op>` for open, flush, checkpoint, refresh, restore
  and gc, with the object's id, seq, bytes and store;
* a duration histogram (unit "s") per operation, `durable_obj.ack.duration`
  among them: a `write()` or `batch()` from call to durable;
* `durable_obj.bytes.written` (WAL segments and bases), and
  `durable_obj.refusals`: errors raised to a caller by `error.type` (the
  error's `category`);
* observable gauges `durable_obj.objects.open` and `durable_obj.leases`.

An attribute never holds a credential or a statement: the store is its
URL's scheme and bucket only (`store_of`), and an error is its category,
never its message. Metrics carry only attributes with few values (no object
id, no seq); spans carry the rest.

Layer: above `errors` only, so every layer may hook into it.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from durable_obj.errors import DurableError
from durable_obj.telemetry import later
from durable_obj.telemetry.gauges import Tracked as Tracked
from durable_obj.telemetry.gauges import bytes_stored, follower_lag, leases, objects_open
from durable_obj.telemetry.gauges import track as track
from durable_obj.telemetry.names import *

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

log = logging.getLogger("durable_obj")

P = ParamSpec("P")
R = TypeVar("R")

#: An attribute's value, as OpenTelemetry accepts it.
Value = str | bool | int | float
Attrs = dict[str, Value]
#: What a hook reads after its call: (the call's args, its kwargs, the
#: result or None when it raised) -> attributes.
Describe = Callable[[tuple[Any, ...], Mapping[str, Any], Any], Attrs]


@dataclass(frozen=True)
class Op:
    """One hooked operation: its span (if any), its duration histogram, and
    what else its outcome counts."""

    name: str
    span: bool
    what: str
    #: Its `durable_obj.bytes` are added to `durable_obj.bytes.written` as this kind.
    written: str | None = None
    #: A `DurableError` it raises counts in `durable_obj.refusals` as this operation.
    refusals: str | None = None
    #: Its span is current while it runs (what runs inside is its child).
    #: Else the span is made after the operation, on the telemetry thread,
    #: with its start and end times and the caller's span as its parent:
    #: a flush, whose span started on the caller's thread cost more than
    #: the 2% of a folder flush telemetry may (about 60 us, cold).
    current: bool = True

    @property
    def histogram(self) -> str:
        return f"durable_obj.{self.name}.duration"


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("open", True, "open(): read the head, take the lease, restore, replay"),
        Op(
            "flush",
            True,
            "one WAL segment published and committed by head CAS",
            written="wal",
            current=False,
        ),
        Op("ack", False, "write() or batch(): from the call to durable", refusals="write"),
        Op("checkpoint", True, "BACKUP, store the base, commit it by head CAS", "base"),
        Op("refresh", True, "a reader's refresh: read the head, apply what is new"),
        Op("restore", True, "RESTORE a base (and its links) and replay the WAL"),
        Op("gc", True, "collect what no head or retained point needs"),
    )
}


def store_of(url: str) -> str:
    """A store's URL as an attribute: scheme and bucket (or account) only.
    No user, password, path, query or fragment survives (a SAS token or a
    key in a URL never reaches an exporter); a local path is `file`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "file"
    host = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2]
    return f"{scheme}://{host}" if scheme != "file" and host else scheme


def category(exc: BaseException) -> str:
    """`error.type`: a durable_obj error's category, else the class name."""
    return exc.category if isinstance(exc, DurableError) else type(exc).__qualname__


# -- where records go ----------------------------------------------------------------
class _Sink:
    """The tracer and instruments records go to, once something is configured."""

    def __init__(self, tracer: Tracer, meter: Meter) -> None:
        from opentelemetry import context, trace

        self._context, self._trace = context, trace
        self.tracer = tracer
        self.durations = {
            op.name: meter.create_histogram(
                op.histogram,
                unit="s",
                description=f"Duration of {op.what}",
                explicit_bucket_boundaries_advisory=BUCKETS,
            )
            for op in OPS.values()
        }
        self.written = meter.create_counter(
            BYTES_WRITTEN, unit="By", description="Bytes stored: WAL segments and bases"
        )
        self.refusals = meter.create_counter(
            REFUSALS,
            unit="{refusal}",
            description="Errors raised to a caller of execute, write or a read, by category",
        )
        meter.create_observable_gauge(
            OBJECTS_OPEN,
            callbacks=[objects_open],
            unit="{object}",
            description="Objects open in this process, by mode",
        )
        meter.create_observable_gauge(
            LEASES,
            callbacks=[leases],
            unit="{lease}",
            description="Writers open in this process, by lease state",
        )
        meter.create_observable_gauge(
            BYTES_STORED,
            callbacks=[bytes_stored],
            unit="By",
            description="Bytes the heads of this process's writers name in their stores",
        )
        meter.create_observable_gauge(
            FOLLOWER_LAG,
            callbacks=[follower_lag],
            unit="s",
            description="The largest lag of this process's followers: seconds since "
            "a view was last its store's newest head",
        )
        self._active = threading.local()

    def run(
        self,
        op: Op,
        describe: Describe,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        active: set[str] = self._active.__dict__.setdefault("ops", set())
        if op.name in active:  # a retry inside the same operation: the outer one records
            return fn(*args, **kwargs)
        active.add(op.name)
        mark = object()
        later.busy(mark)  # the records waiting wait for it
        span = None
        token = None
        parent = None
        if op.span and op.current:
            # started here, so that what runs inside is its child; completed
            # on the telemetry thread (`later`), at the time it ended
            span = self.tracer.start_span(f"durable_obj.{op.name}")
            token = self._context.attach(self._trace.set_span_in_context(span))
        elif op.span:
            parent = self._context.get_current()
        begun = time.time_ns()
        result: Any = None
        error: BaseException | None = None
        started = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.perf_counter() - started
            ended = time.time_ns()
            active.discard(op.name)
            later.idle(mark)
            if token is not None:
                self._context.detach(token)
            # a record never fails the operation
            try:
                attrs = describe(args, kwargs, result)
            except Exception:
                log.debug("durable_obj: could not describe %s", op.name, exc_info=True)
                attrs = {}
            # the error's category, not the error: a queued traceback would
            # keep the failed call's frames (an engine among them) alive
            failed = None if error is None else category(error)
            refused = op.refusals is not None and isinstance(error, DurableError)
            try:
                later.submit(
                    self._record, op, attrs, failed, refused, elapsed, (span, parent, begun, ended)
                )
            except Exception:
                log.debug("durable_obj: could not record %s", op.name, exc_info=True)

    def _record(
        self,
        op: Op,
        attrs: Attrs,
        failed: str | None,
        refused: bool,
        elapsed: float,
        times: tuple[Span | None, Context | None, int, int],
    ) -> None:
        span, parent, begun, ended = times
        if span is None and op.span:
            span = self.tracer.start_span(
                f"durable_obj.{op.name}", context=parent, start_time=begun
            )
        try:
            attrs[DB_SYSTEM] = SYSTEM
            if failed is not None:
                attrs[ERROR_TYPE] = failed
            metric = {k: v for k, v in attrs.items() if k in METRIC_KEYS}
            self.durations[op.name].record(elapsed, metric)
            size = attrs.get(BYTES)
            if op.written is not None and failed is None and isinstance(size, int):
                store = attrs.get(STORE, "")
                self.written.add(size, {DB_SYSTEM: SYSTEM, STORE: store, KIND: op.written})
            if refused and op.refusals is not None and failed is not None:
                self.refused(op.refusals, failed)
            if span is not None:
                span.set_attributes(attrs)
                if failed is not None:
                    span.set_status(self._trace.StatusCode.ERROR, failed)
        finally:
            if span is not None:
                span.end(end_time=ended)

    def refused(self, operation: str, error_type: str) -> None:
        self.refusals.add(1, {DB_SYSTEM: SYSTEM, ERROR_TYPE: error_type, OPERATION: operation})


_SINK: _Sink | None = None
#: Whether the hooks still look at the global providers: not once opentelemetry
#: is known absent, nor after configure() chose providers, nor once a sink exists.
_WATCH = True
#: opentelemetry is not installed: every hook is a pass-through for good.
_ABSENT = False
#: configure() chose the providers: the global ones are not looked at.
_PINNED = False
#: What says "no global provider set yet": the API's own globals (read
#: directly: a call of its getters reads the environment every time), else
#: its public getters. None until opentelemetry was first looked for.
_UNSET: Callable[[], bool] | None = None
_LOCK = threading.Lock()


def _sink() -> _Sink | None:
    """Where to record, or None (nothing configured: record nothing)."""
    if _SINK is not None or not _WATCH:
        return _SINK
    return _from_globals()


def _unset_check() -> Callable[[], bool] | None:
    """How to tell that no global provider is set, or None: no opentelemetry."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.metrics import _internal as metrics_state
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:
        return None
    env = {"OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"} & set(os.environ)
    if not env and hasattr(trace, "_TRACER_PROVIDER") and hasattr(metrics_state, "_METER_PROVIDER"):
        return lambda: trace._TRACER_PROVIDER is None and metrics_state._METER_PROVIDER is None

    def unset() -> bool:
        return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) and isinstance(
            metrics.get_meter_provider(), _ProxyMeterProvider
        )

    return unset


#: Whether the environment names a provider for the API's getters to load
#: (read once, at the first hook, as `_unset_check` reads it).
_ENV_PROVIDER: bool | None = None


def _api_unused() -> bool:
    """True while no global provider can be set: nothing imported the
    opentelemetry API (setting a provider imports it) and the environment
    names no provider for its getters to load. Until then the API is not
    imported here (some 10 ms of a cold open); the next hook looks again."""
    global _ENV_PROVIDER
    if "opentelemetry.trace" in sys.modules or "opentelemetry.metrics" in sys.modules:
        return False
    if _ENV_PROVIDER is None:
        names = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")
        _ENV_PROVIDER = any(name in os.environ for name in names)
    return not _ENV_PROVIDER


def _installed() -> bool:
    """Whether the opentelemetry API can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def _from_globals() -> _Sink | None:
    global _SINK, _UNSET, _ABSENT, _WATCH
    unset = _UNSET
    if unset is None:
        if _ENV_PROVIDER is None and not _installed():  # looked for once
            _ABSENT, _WATCH = True, False
            return None
        if _api_unused():
            return None
        unset = _UNSET = _unset_check()
        if unset is None:
            _ABSENT, _WATCH = True, False
            return None
    if unset():
        return None  # no SDK yet: the API would record nothing anyway
    from opentelemetry import metrics, trace

    with _LOCK:
        if _SINK is None and not _PINNED:
            # the API's getters follow a provider of the other kind set later
            _SINK = _Sink(trace.get_tracer(SCOPE), metrics.get_meter(SCOPE))
            _WATCH = False
    return _SINK


def configure(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Record to these providers instead of the global ones (the one of a
    kind not given: the global one). With neither, go back to the global
    providers, as at import. For a process that keeps its providers out of
    the globals, and for tests. What the former providers were handed is
    recorded into them first (`drain`)."""
    global _SINK, _PINNED, _WATCH
    later.drain()
    with _LOCK:
        if tracer_provider is None and meter_provider is None:
            _SINK, _PINNED, _WATCH = None, False, not _ABSENT
            return
        from opentelemetry import metrics, trace

        tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE)
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE)
        _SINK, _PINNED, _WATCH = _Sink(tracer, meter), True, False


def drain(timeout: float | None = 5.0) -> bool:
    """Wait until every operation that has ended is recorded: its span ended
    and exported to the span processors, its points in the instruments
    (hooks complete them on a thread of their own: `telemetry/later.py`).
    Call it before reading an exporter or forcing one to flush; it runs at
    exit by itself. False if `timeout` seconds passed first."""
    return later.drain(timeout)


def enabled() -> bool:
    """Whether hooks record now (an SDK is configured, or `configure` was called)."""
    return _sink() is not None


# -- the hooks -----------------------------------------------------------------------
def operation(name: str, describe: Describe) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Hook `name` (a key of `OPS`) around the decorated function: its span,
    duration and counts, with the attributes `describe` reads after it."""
    op = OPS[name]

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def hooked(*args: P.args, **kwargs: P.kwargs) -> R:
            sink = _SINK
            if sink is None and (not _WATCH or (sink := _from_globals()) is None):
                return fn(*args, **kwargs)
            result: R = sink.run(op, describe, fn, args, kwargs)
            return result

        return hooked

    return decorate


def refusals(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Count each `DurableError` the decorated call raises to its caller in
    `durable_obj.refusals`, as operation `name`, by category."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def hooked(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except DurableError as exc:
                sink = _sink()
                if sink is not None:
                    sink.refused(name, exc.category)
                raise

        return hooked

    return decorate
