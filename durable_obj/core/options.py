"""Per-object options, validated once, with a sane default for each, and the
growth policies they set (when to auto-flush, when to fold the WAL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from durable_obj.errors import InvalidArgument
from durable_obj.gate.bounds import Bounds
from durable_obj.wire.protocol import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_COMMIT_DEADLINE,
    DEFAULT_DATABASE,
    DEFAULT_LEASE_TTL,
    DEFAULT_RETENTION,
    DEFAULT_TIMEZONE,
    HEARTBEAT_TTL_FRACTION,
)

if TYPE_CHECKING:
    from durable_obj.wire.head import ObjectRef

Seconds = float


class Options(BaseModel):
    """What `open()` and `Namespace()` accept as keyword options.

    A service running SQL it does not trust sets both bounds:
    `query_bounds` for every read, `write_bounds` for every statement of a
    write (`durable_obj.Bounds`; see docs/security.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Seconds a writer's lease lasts without renewal.
    lease_ttl: Seconds = Field(default=DEFAULT_LEASE_TTL, gt=0, allow_inf_nan=False)
    #: Seconds between renewals; at most lease_ttl / 3 (default exactly that).
    heartbeat_interval: Seconds | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: Allowance added to another writer's expiry before a normal takeover.
    clock_skew: Seconds = Field(default=DEFAULT_CLOCK_SKEW, ge=0, allow_inf_nan=False)
    #: How long a commit retries before reporting commit_ambiguous or backend.
    commit_deadline: Seconds = Field(default=DEFAULT_COMMIT_DEADLINE, gt=0, allow_inf_nan=False)
    #: Database name of a new object (an existing object's head decides).
    db: str = Field(default=DEFAULT_DATABASE, min_length=1, max_length=200)
    #: Parallel fetches of base and WAL segments during open.
    fetch_concurrency: int = Field(default=32, ge=1, le=128)
    #: Growth policy: after a flush, fold the WAL into a new checkpoint when it
    #: holds this many segments (0: never) ...
    fold_segments: int = Field(default=64, ge=0, le=100_000)
    #: ... or this many bytes (0: never).
    fold_bytes: int = Field(default=32 * 1024 * 1024, ge=0)
    #: On close, fold instead of just flushing when the WAL holds more segments.
    close_fold_segments: int = Field(default=8, ge=0)
    #: Checkpoints: an increment over the base before it when the policy
    #: allows (False: every base is full, as chdb.durable reads them) ...
    incremental_checkpoints: bool = True
    #: ... while the chain holds fewer links than this (its full base included) ...
    chain_links: int = Field(default=8, ge=1, le=64)
    #: ... and its increments fewer bytes than this fraction of its full base.
    chain_ratio: float = Field(default=0.5, ge=0, le=100, allow_inf_nan=False)
    #: Growth policy with cheap checkpoints: fold after this many segments
    #: when the fold would be an increment (0: as fold_segments says).
    cheap_fold_segments: int = Field(default=16, ge=0, le=100_000)
    #: Flush by itself when the buffer reaches auto_flush_bytes or its oldest
    #: statement is auto_flush_age seconds old (checked on execute and on the
    #: heartbeat). Off by default: flush() stays the explicit durability boundary.
    auto_flush: bool = False
    auto_flush_bytes: int = Field(default=1024 * 1024, gt=0)
    auto_flush_age: Seconds | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: Backpressure: the most writes of this object in flight at once (a
    #: unit of `write()`/`batch()`/`awrite()`/`abatch()` from admission until
    #: it is durable or failed; an `aexecute()` until its statement ran).
    #: More writers wait for admission, first come first admitted, holding
    #: no worker thread (`core/admission.py`). 64: as many queued units as
    #: one async lane call merges, so the bound costs no merging.
    max_units_in_flight: int = Field(default=64, ge=1, le=1_000_000)
    #: Session time zone of a new object (an existing object's head decides).
    timezone: str = Field(default=DEFAULT_TIMEZONE, min_length=1, max_length=64)
    #: A short description of a new object, shown by list() and `ls` (an
    #: existing object's head keeps its own).
    description: str | None = Field(default=None, min_length=1, max_length=500)
    #: "pin": evaluate non-deterministic values once and log literals;
    #: "refuse": never rewrite a statement, refuse it instead.
    nondeterminism: Literal["pin", "refuse"] = "pin"
    #: Time travel: seconds of past states kept restorable (open at=, fork
    #: at=); a writer records it in the head, and gc keeps what it needs.
    #: 0: keep no history (superseded bases and segments go as before).
    retention: Seconds = Field(default=DEFAULT_RETENTION, ge=0, le=2**53 - 1, allow_inf_nan=False)
    #: What a read-only query() may read outside the object, off by default:
    #: "url" (the url() table function), "s3" (s3()), or absolute folders
    #: whose files file() may read. Never a mutation, never logged.
    external_reads: tuple[str, ...] = ()
    #: Bounds every query() runs under unless it passes its own
    #: (`durable_obj.Bounds`: seconds, result rows/bytes, memory); None:
    #: unbounded. A Pool serving untrusted SQL sets it for every object.
    query_bounds: Bounds | None = None
    #: Bounds every statement of execute(), write() and batch() runs under,
    #: the gate's engine calls for it included; None (the default): unbounded,
    #: and no engine call added. A statement past its time is refused with
    #: `Timeout`: nothing of it is logged, and a statement stopped while it
    #: ran has the local copy rebuilt, as a unit failing half-run does.
    #: seconds and memory_bytes apply (a write returns no rows). Replay on
    #: open and checkpoints never run under it.
    write_bounds: Bounds | None = None
    #: Followers (read-only opens only): refresh the view every `follow`
    #: seconds on the process's heartbeat scheduler (`core/follow.py`); None:
    #: only refresh() moves it. `on_change(update)` is called, outside the
    #: object's lock, each time the view moved (a `follow.Update`).
    follow: Seconds | None = Field(default=None, gt=0, allow_inf_nan=False)
    on_change: Callable[[Any], object] | None = None
    #: Client-side encryption of a new object (`durable_obj.StaticKey`,
    #: `EnvKey`, `KeyFile`, `AwsKms`, or any `KeyProvider`): every segment,
    #: base and history file is sealed under a data key this provider
    #: wraps. An encrypted object needs it to open; a plain one refuses it.
    encryption: Any = None
    #: "zstd": a new object's WAL segments are zstd-compressed. Off by
    #: default: chdb.durable cannot read such an object (it refuses it by
    #: the head's feature list), and interop with it is the default promise.
    compression: Literal["zstd"] | None = None
    #: A writer sweeps its TTL policies (`set_ttl`, `core/expiry.py`) every
    #: this many seconds on the heartbeat scheduler; 0 or None: only
    #: `sweep_ttl()` sweeps. Read-only objects never sweep.
    ttl_sweep_interval: Seconds | None = Field(default=60.0, ge=0, allow_inf_nan=False)

    @field_validator("encryption")
    @classmethod
    def _provider(cls, value: Any) -> Any:
        if value is None:
            return None
        for name in ("key_id", "wrap", "unwrap"):
            if not hasattr(value, name):
                raise ValueError(
                    "give a key provider (durable_obj.StaticKey, EnvKey, KeyFile, AwsKms, "
                    f"or an object with key_id, wrap and unwrap), not {type(value).__name__}"
                )
        if not isinstance(value.key_id, str) or not value.key_id:
            raise ValueError("the key provider's key_id must be a non-empty string")
        return value

    @field_validator("external_reads", mode="before")
    @classmethod
    def _external(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = (value,)
        out = []
        for item in value or ():
            if not isinstance(item, str) or not (item in ("url", "s3") or item.startswith("/")):
                raise ValueError(
                    f"{item!r}: give 'url', 's3' or an absolute folder path for file()"
                )
            out.append(item if item in ("url", "s3") else item.rstrip("/") or "/")
        return tuple(out)

    @field_validator("description")
    @classmethod
    def _one_line(cls, text: str | None) -> str | None:
        if text is not None and any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
            raise ValueError("a description is one line of text, with no control character")
        return text

    @model_validator(mode="after")
    def _heartbeat_fits(self) -> Options:
        limit = self.lease_ttl * HEARTBEAT_TTL_FRACTION
        if self.heartbeat_interval is not None and self.heartbeat_interval > limit + 1e-9:
            raise ValueError(
                f"heartbeat_interval {self.heartbeat_interval} s is over lease_ttl / 3 "
                f"({limit:.3g} s): one lost renewal would let the lease lapse"
            )
        return self

    @property
    def heartbeat(self) -> float:
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return self.lease_ttl * HEARTBEAT_TTL_FRACTION

    def auto_flush_due(self, nbytes: int, age: float) -> bool:
        """Is a buffer of `nbytes` whose oldest statement is `age` seconds
        old due for an automatic flush?"""
        if not self.auto_flush:
            return False
        if nbytes >= self.auto_flush_bytes:
            return True
        return self.auto_flush_age is not None and age >= self.auto_flush_age

    def fold_due(
        self, wal: Sequence[ObjectRef], segments: int | None = None, *, cheap: bool = False
    ) -> bool:
        """Is `wal` long enough to fold into a checkpoint? `segments` replaces
        both limits with a segment count alone (close uses its own); `cheap`:
        the fold would be an increment (`cheap_fold_segments`)."""
        limit = self.fold_segments if segments is None else segments
        if cheap and segments is None and self.cheap_fold_segments and limit:
            limit = min(limit, self.cheap_fold_segments)  # fold_segments=0 still never folds
        size_limit = self.fold_bytes if segments is None else 0
        return bool(limit and len(wal) >= limit) or bool(
            size_limit and sum(r.size for r in wal) >= size_limit
        )


def make_options(values: dict[str, Any]) -> Options:
    """Validate keyword options; `InvalidArgument` names the bad one."""
    try:
        opts = Options(**values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = ".".join(str(p) for p in err["loc"]) or "options"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = ", ".join(sorted(Options.model_fields))
            msg = f"unknown option; the options are {known}"
        raise InvalidArgument(f"option {name}: {msg}") from None
    return opts
