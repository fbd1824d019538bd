"""The names OpenTelemetry sees: the scope, attributes, instruments and
the duration histograms' buckets (docs/guides/telemetry.md)."""

from __future__ import annotations

__all__ = [
    "BUCKETS",
    "BYTES",
    "BYTES_STORED",
    "BYTES_WRITTEN",
    "DB_SYSTEM",
    "DELETED",
    "DRY_RUN",
    "ERROR_TYPE",
    "FOLLOWER_LAG",
    "GENERATION",
    "INCREMENTAL",
    "KIND",
    "LEASES",
    "LEASE_STATE",
    "LINKS",
    "METRIC_KEYS",
    "MODE",
    "MOVED",
    "OBJECTS_OPEN",
    "OBJECT_ID",
    "OPERATION",
    "REFUSALS",
    "SCOPE",
    "SEQ",
    "STATEMENTS",
    "STORE",
    "SYSTEM",
]

SCOPE = "durable_obj"

# -- attribute names ---------------------------------------------------------------
DB_SYSTEM = "db.system"
SYSTEM = "chdb"
ERROR_TYPE = "error.type"
OBJECT_ID = "durable_obj.object.id"
STORE = "durable_obj.store"
SEQ = "durable_obj.seq"
GENERATION = "durable_obj.generation"
BYTES = "durable_obj.bytes"
MODE = "durable_obj.object.mode"
STATEMENTS = "durable_obj.statements"
INCREMENTAL = "durable_obj.checkpoint.incremental"
LINKS = "durable_obj.checkpoint.links"
MOVED = "durable_obj.refresh.moved"
DELETED = "durable_obj.gc.deleted"
DRY_RUN = "durable_obj.gc.dry_run"
KIND = "durable_obj.bytes.kind"
OPERATION = "durable_obj.operation"
LEASE_STATE = "durable_obj.lease.state"

#: The attributes a metric may carry: each has few values.
METRIC_KEYS = frozenset({DB_SYSTEM, STORE, MODE, INCREMENTAL, ERROR_TYPE})

# -- instrument names ----------------------------------------------------------------
BYTES_WRITTEN = "durable_obj.bytes.written"
REFUSALS = "durable_obj.refusals"
OBJECTS_OPEN = "durable_obj.objects.open"
LEASES = "durable_obj.leases"
BYTES_STORED = "durable_obj.bytes.stored"
FOLLOWER_LAG = "durable_obj.follower.lag"

#: Bucket bounds, in seconds, of every duration histogram (the SDK's default
#: bounds are for milliseconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
