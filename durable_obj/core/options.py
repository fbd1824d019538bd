"""Per-object options, validated once, with a sane default for each, and the
growth policies they set (when to auto-flush, when to fold the WAL)."""

from __future__ import annotations

import dataclasses
import decimal
import math
import numbers
import posixpath
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal

from durable_obj.errors import InvalidArgument
from durable_obj.gate.bounds import MAX_BOUND_SECONDS, Bounds
from durable_obj.wire.protocol import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_COMMIT_DEADLINE,
    DEFAULT_DATABASE,
    DEFAULT_LEASE_TTL,
    DEFAULT_RETENTION,
    DEFAULT_TIMEZONE,
    HEARTBEAT_TTL_FRACTION,
    MAX_SAFE_INT,
)

if TYPE_CHECKING:
    from durable_obj.wire.head import ObjectRef

Seconds = float

#: A ref's size, for a C-speed sum over a WAL list (`fold_due`, every flush).
_SIZE = attrgetter("size")


@dataclass(frozen=True)
class Options:
    """What `open()` and `Namespace()` accept as keyword options.

    A service running SQL it does not trust sets both bounds:
    `query_bounds` for every read, `write_bounds` for every statement of a
    write (`durable_obj.Bounds`; see docs/security.md).

    Each value is checked when the options are made (`make_options`; the
    rules are `_RULES`): a number as any real number (numpy's, a Decimal)
    or a string of ASCII digits, never as a bool; a flag as a bool (or 0/1,
    "true"/"false"); text as valid Unicode (no lone surrogate).
    Hand-written rather than a pydantic model: a fresh process makes them
    on every open, and pydantic's import was most of a cold open's cost."""

    #: Seconds a writer's lease lasts without renewal (at least 0.1).
    lease_ttl: Seconds = DEFAULT_LEASE_TTL
    #: Seconds between renewals; at most lease_ttl / 3 (default exactly that),
    #: at least 0.01.
    heartbeat_interval: Seconds | None = None
    #: Allowance added to another writer's expiry before a normal takeover.
    clock_skew: Seconds = DEFAULT_CLOCK_SKEW
    #: How long a commit retries before reporting commit_ambiguous or backend.
    commit_deadline: Seconds = DEFAULT_COMMIT_DEADLINE
    #: Database name of a new object (an existing object's head decides).
    db: str = DEFAULT_DATABASE
    #: Parallel fetches of base and WAL segments during open.
    fetch_concurrency: int = 32
    #: Growth policy: after a flush, fold the WAL into a new checkpoint when it
    #: holds this many segments (0: never) ...
    fold_segments: int = 64
    #: ... or this many bytes (0: never).
    fold_bytes: int = 32 * 1024 * 1024
    #: On close, fold instead of just flushing when the WAL holds more segments.
    close_fold_segments: int = 8
    #: Checkpoints: an increment over the base before it when the policy
    #: allows (False: every base is full, as chdb.durable reads them) ...
    incremental_checkpoints: bool = True
    #: ... while the chain holds fewer links than this (its full base included) ...
    chain_links: int = 8
    #: ... and its increments fewer bytes than this fraction of its full base.
    chain_ratio: float = 0.5
    #: Growth policy with cheap checkpoints: fold after this many segments
    #: when the fold would be an increment (0: as fold_segments says).
    cheap_fold_segments: int = 16
    #: Flush by itself when the buffer reaches auto_flush_bytes or its oldest
    #: statement is auto_flush_age seconds old (checked on execute and on the
    #: heartbeat). Off by default: flush() stays the explicit durability boundary.
    auto_flush: bool = False
    auto_flush_bytes: int = 1024 * 1024
    auto_flush_age: Seconds | None = None
    #: Backpressure: the most writes of this object in flight at once (a
    #: unit of `write()`/`batch()`/`awrite()`/`abatch()` from admission until
    #: it is durable or failed; an `aexecute()` until its statement ran).
    #: More writers wait for admission, first come first admitted, holding
    #: no worker thread (`core/admission.py`). 64: as many queued units as
    #: one async lane call merges, so the bound costs no merging.
    max_units_in_flight: int = 64
    #: Session time zone of a new object (an existing object's head decides).
    timezone: str = DEFAULT_TIMEZONE
    #: A short description of a new object, shown by list() and `ls` (an
    #: existing object's head keeps its own).
    description: str | None = None
    #: "pin": evaluate non-deterministic values once and log literals;
    #: "refuse": never rewrite a statement, refuse it instead.
    nondeterminism: Literal["pin", "refuse"] = "pin"
    #: Time travel: seconds of past states kept restorable (open at=, fork
    #: at=); a writer records it in the head, and gc keeps what it needs.
    #: 0: keep no history (superseded bases and segments go as before).
    retention: Seconds = DEFAULT_RETENTION
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
    #: seconds (at least 0.001) on the process's heartbeat scheduler
    #: (`core/follow.py`); None:
    #: only refresh() moves it. `on_change(update)` is called, outside the
    #: object's lock, each time the view moved (a `follow.Update`).
    follow: Seconds | None = None
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
    #: this many seconds (at least 0.01) on the heartbeat scheduler; 0 or None: only
    #: `sweep_ttl()` sweeps. Read-only objects never sweep.
    ttl_sweep_interval: Seconds | None = 60.0

    def __post_init__(self) -> None:
        for name, rule in _RULES.items():
            value = getattr(self, name)
            try:
                checked = rule(value)
            except _Bad as exc:
                raise InvalidArgument(f"option {name}: {exc}") from None
            except Exception as exc:  # a value whose own methods fail (__float__, __eq__, ...)
                raise InvalidArgument(
                    f"option {name}: not a valid value of this option (reading it raised "
                    f"{type(exc).__name__})"
                ) from None
            if checked is not value:
                object.__setattr__(self, name, checked)
        limit = self.lease_ttl * HEARTBEAT_TTL_FRACTION
        if self.heartbeat_interval is not None and self.heartbeat_interval > limit + 1e-9:
            raise InvalidArgument(
                f"option heartbeat_interval: {self.heartbeat_interval} s is over lease_ttl / 3 "
                f"({limit:.3g} s): one lost renewal would let the lease lapse"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every option's default."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def given(self) -> dict[str, Any]:
        """The options given to `make_options` (checked), without the defaults."""
        return {name: getattr(self, name) for name in getattr(self, "_given", ())}

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
            size_limit and sum(map(_SIZE, wal)) >= size_limit
        )


def make_options(values: dict[str, Any]) -> Options:
    """Validate keyword options; `InvalidArgument` names the bad one."""
    unknown = sorted(set(values) - set(Options.names()))
    if unknown:
        known = ", ".join(sorted(Options.names()))
        raise InvalidArgument(f"option {unknown[0]}: unknown option; the options are {known}")
    opts = Options(**values)
    object.__setattr__(opts, "_given", tuple(values))
    return opts


class _Bad(ValueError):
    """What is wrong with one option's value (made `InvalidArgument`)."""


Rule = Callable[[Any], Any]


def _number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    none: bool = False,
    period: float | None = None,
) -> Rule:
    """A finite number, as a float: any real number but a bool (an int, a
    float, numpy's, a Decimal, a Fraction) or a string of ASCII digits.
    `period`: the least seconds of a period something runs at (0 stays 0:
    off), so a tiny one (1e-300) cannot keep a thread busy."""

    def rule(value: Any) -> Any:
        if value is None and none:
            return None
        number = _real(value)
        if number is None:
            raise _Bad("Input should be a valid number")
        if not math.isfinite(number):
            raise _Bad("Input should be a finite number")
        _bounded(number, gt, ge, le)
        if period is not None and 0 < number < period:
            raise _Bad(
                f"Input should be at least {period} (seconds): a shorter period keeps a thread busy"
            )
        return number

    return rule


def _real(value: Any) -> float | None:
    """`value` as a float, or None when it is no number (a bool is none)."""
    if isinstance(value, (bool, *np_bool_types())):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text.isascii():
            return None  # int() and float() read other scripts' digits too
        try:
            return float(text)
        except ValueError:
            return None
    if isinstance(value, numbers.Real | decimal.Decimal):
        try:
            return float(value)
        except (OverflowError, ValueError):
            return math.inf
    return None


def np_bool_types() -> tuple[type, ...]:
    """numpy's bool type when numpy is loaded (it is no int and no bool)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


def _integer(*, ge: int | None = None, le: int | None = None) -> Rule:
    """A whole number: an int (numpy's too), a real number with no
    fractional part below 2**53, or a string of ASCII digits; never a bool."""

    def rule(value: Any) -> int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            whole = int(value)
        elif isinstance(value, str) and value.strip().isascii():
            try:
                whole = int(value.strip())
            except ValueError:
                raise _Bad("Input should be a valid integer, unable to parse string") from None
        else:
            number = _real(value)
            if number is None:
                raise _Bad("Input should be a valid integer")
            if not math.isfinite(number) or abs(number) > MAX_SAFE_INT:
                raise _Bad("Input should be a valid integer, not a number this large")
            if not number.is_integer():
                raise _Bad("Input should be a valid integer, got a number with a fractional part")
            whole = int(number)
        if abs(whole) > MAX_SAFE_INT:
            raise _Bad(f"Input should be less than or equal to {MAX_SAFE_INT}")
        _bounded(whole, None, ge, le)
        return whole

    return rule


def _bounded(value: float, gt: float | None, ge: float | None, le: float | None) -> None:
    if gt is not None and not value > gt:
        raise _Bad(f"Input should be greater than {_shown(gt)}")
    if ge is not None and not value >= ge:
        raise _Bad(f"Input should be greater than or equal to {_shown(ge)}")
    if le is not None and not value <= le:
        raise _Bad(f"Input should be less than or equal to {_shown(le)}")


def _shown(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() else str(limit)


_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})


def _flag(value: Any) -> bool:
    """A bool (numpy's too), a number that is 0 or 1, or a word for one."""
    if isinstance(value, (bool, *np_bool_types())):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
    elif (number := _real(value)) is not None and number in (0.0, 1.0):
        return number == 1.0
    raise _Bad("Input should be a valid boolean")


def _text(*, low: int = 1, high: int, none: bool = False) -> Rule:
    def rule(value: Any) -> Any:
        if value is None and none:
            return None
        if not isinstance(value, str):
            raise _Bad("Input should be a valid string")
        value = str.__str__(value)  # a StrEnum member or numpy string: its text
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad("Input should be a valid string, not one with a lone surrogate") from None
        if len(value) < low:
            raise _Bad(f"String should have at least {low} character")
        if len(value) > high:
            raise _Bad(f"String should have at most {high} characters")
        return value

    return rule


def _choice(*choices: str | None) -> Rule:
    def rule(value: Any) -> Any:
        if value is None and None in choices:
            return None
        if isinstance(value, str) and str.__str__(value) in choices:
            return str.__str__(value)
        shown = " or ".join("None" if c is None else repr(c) for c in choices)
        raise _Bad(f"Input should be {shown}")

    return rule


def _description(value: Any) -> str | None:
    text = _text(high=500, none=True)(value)
    if text is not None and any(
        ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029" for ch in text
    ):
        raise _Bad("a description is one line of text, with no control character")
    return text  # type: ignore[no-any-return]


def _external(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if value is None or value is False or (isinstance(value, int | float) and value == 0):
        return ()  # None, False, 0: none
    if not isinstance(value, list | tuple | set | frozenset):
        raise _Bad("give 'url', 's3' or absolute folder paths, as a string or a list of them")
    out = []
    for item in value:
        if isinstance(item, str):
            item = _text(high=4096)(item)
        if not isinstance(item, str) or not (item in ("url", "s3") or item.startswith("/")):
            raise _Bad(f"{item!r}: give 'url', 's3' or an absolute folder path for file()")
        # a folder as the path it names (`/a/../b` is `/b`); links are
        # resolved where a file() path is judged (`reach.file_allowed`)
        out.append(item if item in ("url", "s3") else posixpath.normpath("/" + item.lstrip("/")))
    return tuple(out)


_BOUND_FIELDS = {
    "seconds": _number(ge=0, le=MAX_BOUND_SECONDS),
    "result_rows": _integer(ge=0),
    "result_bytes": _integer(ge=0),
    "memory_bytes": _integer(ge=0),
}


def _bounds(value: Any) -> Bounds | None:
    """A `Bounds` (or a dict of its fields), each field a non-negative number."""
    if value is None:
        return None
    if isinstance(value, Bounds):
        given = {name: getattr(value, name) for name in _BOUND_FIELDS}
    elif isinstance(value, dict):
        given = dict(value)
    else:
        raise _Bad("Input should be a dictionary or an instance of Bounds")
    checked = {}
    for name, item in given.items():
        rule = _BOUND_FIELDS.get(name)
        if rule is None:
            raise _Bad(f"{name!r} is not a bound; the bounds are {', '.join(_BOUND_FIELDS)}")
        try:
            checked[name] = rule(item)
        except _Bad as exc:
            raise _Bad(f"{name}: {exc}") from None
    return Bounds(**checked)


def _callable(value: Any) -> Any:
    if value is not None and not callable(value):
        raise _Bad("Input should be callable")
    return value


def _provider(value: Any) -> Any:
    if value is None:
        return None
    for name in ("key_id", "wrap", "unwrap"):
        if not hasattr(value, name):
            raise _Bad(
                "give a key provider (durable_obj.StaticKey, EnvKey, KeyFile, AwsKms, "
                f"or an object with key_id, wrap and unwrap), not {type(value).__name__}"
            )
    if not isinstance(value.key_id, str) or not value.key_id:
        raise _Bad("the key provider's key_id must be a non-empty string")
    return value


#: How each option's value is checked (and normalised: numbers to float or int).
_RULES: dict[str, Rule] = {
    "lease_ttl": _number(gt=0, period=0.1),
    "heartbeat_interval": _number(gt=0, none=True, period=0.01),
    "clock_skew": _number(ge=0),
    "commit_deadline": _number(gt=0),
    "db": _text(high=200),
    "fetch_concurrency": _integer(ge=1, le=128),
    "fold_segments": _integer(ge=0, le=100_000),
    "fold_bytes": _integer(ge=0),
    "close_fold_segments": _integer(ge=0),
    "incremental_checkpoints": _flag,
    "chain_links": _integer(ge=1, le=64),
    "chain_ratio": _number(ge=0, le=100),
    "cheap_fold_segments": _integer(ge=0, le=100_000),
    "auto_flush": _flag,
    "auto_flush_bytes": _integer(ge=1),
    "auto_flush_age": _number(gt=0, none=True),
    "max_units_in_flight": _integer(ge=1, le=1_000_000),
    "timezone": _text(high=64),
    "description": _description,
    "nondeterminism": _choice("pin", "refuse"),
    "retention": _number(ge=0, le=MAX_SAFE_INT),
    "external_reads": _external,
    "query_bounds": _bounds,
    "write_bounds": _bounds,
    "follow": _number(gt=0, none=True, period=0.001),
    "on_change": _callable,
    "encryption": _provider,
    "compression": _choice("zstd", None),
    "ttl_sweep_interval": _number(ge=0, none=True, period=0.01),
}
