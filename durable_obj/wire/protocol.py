"""The V1 contract as constants: key layout, limits, versions, lease defaults.

chdb.durable 4.4 (`chdb/durable/protocol.py`) is the reference; every number
here must agree with it, or objects stop being interchangeable.

The key layout is spelled here and nowhere else::

    <object-id>/head.json
    <object-id>/checkpoints/<generation>-<seq>-<unique>.tar
    <object-id>/wal/<generation>-<seq>-<unique>.jsonl
    <object-id>/history/<generation>-<seq>-<unique>.json   (durable_obj only)

A head names its base and segments relative to the object (`wal/...`);
`object_key` makes that a key of the namespace. Every WAL and checkpoint key is
minted unique (`mint_wal_key`, `mint_checkpoint_key`), so a conditional create
of one never collides with another writer's, and `seq_of` reads the sequence
number back (garbage collection orders keys by it). A history file
(`mint_history_key`, `durable_obj.core.history`) archives a manifest a checkpoint
superseded; its seq is that manifest's. chdb.durable never reads `history/`.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

#: Protocol version this library speaks. A head declaring more is refused.
PROTOCOL_VERSION: Final = 1

#: V1 defines no feature names; these two are ours (`keyring.py`), declared
#: as both reader and writer features so that chdb.durable, which knows
#: none, refuses such an object with `protocol_unsupported` instead of
#: reading sealed or compressed bytes. Any other name is one we do not know.
ENCRYPTED_FEATURE: Final = "durable_obj.encryption"
COMPRESSED_FEATURE: Final = "durable_obj.zstd-wal"
#: The base is an incremental archive over the links `Manifest.chain` names
#: (`replica/links.py`): a V1 reader would restore it without them.
INCREMENTAL_FEATURE: Final = "durable_obj.incremental-base"
SUPPORTED_READER_FEATURES: Final[frozenset[str]] = frozenset(
    {ENCRYPTED_FEATURE, COMPRESSED_FEATURE, INCREMENTAL_FEATURE}
)
SUPPORTED_WRITER_FEATURES: Final[frozenset[str]] = SUPPORTED_READER_FEATURES

ENGINE_NAME: Final = "chdb"

#: chDB backup archive generation. A head with a higher one is refused.
BACKUP_FORMAT: Final = 1

MAX_SQL_BYTES: Final = 64 * 1024 * 1024
MAX_WAL_SEGMENT_BYTES: Final = 128 * 1024 * 1024
MAX_HEAD_BYTES: Final = 1024 * 1024
#: JSON's safe integer range, which every binding can round-trip.
MAX_SAFE_INT: Final = 2**53 - 1

HEAD_KEY: Final = "head.json"
WAL_DIR: Final = "wal"
CHECKPOINT_DIR: Final = "checkpoints"
#: Checkpoints are plain tar. chDB restores a 100k-row .tar in ~0.01 s and the
#: same data from .tar.gz in seconds (gzip is single-threaded in the restore
#: path), for about 8 % less storage; chdb.durable restores either by the
#: extension in the key, so interop holds (tests/integration/test_interop.py).
CHECKPOINT_SUFFIX: Final = ".tar"
WAL_SUFFIX: Final = ".jsonl"
HISTORY_DIR: Final = "history"
HISTORY_SUFFIX: Final = ".json"
#: Default retention window of past states, in seconds (7 days): long enough
#: to ask "what did the agent know last Tuesday", short enough that gc still
#: bounds storage. 0 keeps no history (the V1 behaviour).
DEFAULT_RETENTION: Final = 7 * 24 * 3600.0

DEFAULT_DATABASE: Final = "default"
#: Session time zone of a new object, and of a head that records none.
DEFAULT_TIMEZONE: Final = "UTC"

#: Lease defaults, in seconds. The heartbeat renews at most every TTL/3 so one
#: lost renewal never lets the lease lapse; `clock_skew` is added to another
#: writer's expiry before a normal (non-force) takeover believes it.
DEFAULT_LEASE_TTL: Final = 30.0
DEFAULT_CLOCK_SKEW: Final = 5.0
HEARTBEAT_TTL_FRACTION: Final = 1.0 / 3.0

#: How long a commit keeps trying to prove itself before `commit_ambiguous`.
DEFAULT_COMMIT_DEADLINE: Final = 30.0
COMMIT_BACKOFF_BASE: Final = 0.05
COMMIT_BACKOFF_MAX: Final = 2.0

_SHA256_RE: Final = re.compile(r"\A[0-9a-f]{64}\Z")
#: A control character (below U+0020), anywhere in a key.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f]")
#: `<generation>-<seq>-<unique>.<ext>`: the name of a minted WAL or checkpoint key.
_MINTED_RE: Final = re.compile(r"\A(\d+)-(\d+)-[0-9A-Za-z]+\.")


# -- key layout -------------------------------------------------------------
def head_key(oid: str) -> str:
    """The namespace key of an object's head."""
    return f"{oid}/{HEAD_KEY}"


def object_key(oid: str, rel: str) -> str:
    """A key a head names (relative to its object) as a key of the namespace."""
    return f"{oid}/{rel}"


def mint_wal_key(generation: int, seq: int) -> str:
    """A fresh, unique key for the WAL segment a writer publishes at `seq`."""
    return _mint(WAL_DIR, generation, seq, WAL_SUFFIX)


def mint_checkpoint_key(generation: int, seq: int) -> str:
    """A fresh, unique key for the base a writer (or a fork) publishes at `seq`."""
    return _mint(CHECKPOINT_DIR, generation, seq, CHECKPOINT_SUFFIX)


def mint_history_key(generation: int, seq: int) -> str:
    """A fresh, unique key for the archive of the manifest at `seq` that a
    checkpoint is about to supersede."""
    return _mint(HISTORY_DIR, generation, seq, HISTORY_SUFFIX)


def _mint(folder: str, generation: int, seq: int, suffix: str) -> str:
    return f"{folder}/{generation}-{seq}-{uuid.uuid4().hex[:8]}{suffix}"


def seq_of(name: str) -> int | None:
    """The sequence number in a minted name (the part after `wal/` or
    `checkpoints/`), or None for a name that was not minted that way.
    chdb.durable mints the same shape."""
    match = _MINTED_RE.match(name)
    return int(match.group(2)) if match else None


def check_key(key: str) -> str:
    """A manifest key is relative, '/'-separated, with no empty, '.' or '..'
    segment and no backslash. Anything else could point outside the object's
    own prefix (another tenant's base). Raises ValueError."""
    if not key:
        raise ValueError("an object key must not be empty")
    if key.startswith("/") or "\\" in key:
        raise ValueError(f"an object key must be relative with '/' separators: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"an object key has an empty or dot segment: {key!r}")
    if _CONTROL_RE.search(key):
        raise ValueError(f"an object key has a control character: {key!r}")
    return key


def check_sha256(value: str) -> str:
    if not _SHA256_RE.match(value):
        raise ValueError("expected a lowercase hex SHA-256 of 64 characters")
    return value


MAX_OID_BYTES: Final = 255


#: What no object id holds: '/', a backslash, a control character.
_NOT_IN_OID: Final = re.compile(r"[/\\\x00-\x1f\x7f]")


def valid_oid(oid: str) -> bool:
    """One flat path segment: no '/', no backslash, no control character,
    never '.' or '..', at most 255 bytes. One id's prefix can then never
    contain another's."""
    return (
        0 < len(oid.encode("utf-8", "surrogatepass")) <= MAX_OID_BYTES
        and oid not in (".", "..")
        and _NOT_IN_OID.search(oid) is None
    )


# -- engine versions --------------------------------------------------------
# chDB versions are release tags ("26.9.0", "26.7.2.59") or pre-releases of one
# ("26.7.2-rc.2"); a release outranks its own pre-releases. Same ordering as
# chdb.durable, so both agree on who may read an object.

_PRE_RANK: Final = {"alpha": 0, "a": 0, "beta": 1, "b": 1, "pre": 2, "rc": 3}
_VERSION_RE: Final = re.compile(
    r"\A(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-.](?P<pre>[A-Za-z]+)\.?(?P<pre_num>[0-9]+)?)?"
    r"(?:[-.+].*)?\Z"
)

VersionKey = tuple[tuple[int, ...], int, int]


def parse_version(text: str) -> VersionKey | None:
    """An orderable form of a chDB version string, or None."""
    match = _VERSION_RE.match(text.strip())
    if not match:
        return None
    try:  # 5,000 digits are over Python's limit for int(): not a version
        release = tuple(int(p) for p in match.group("release").split("."))
        pre_num = int(match.group("pre_num") or 0)
    except ValueError:
        return None
    pre = match.group("pre")
    rank = _PRE_RANK.get(pre.lower()) if pre else None
    if rank is None:
        return (release, len(_PRE_RANK), 0)
    return (release, rank, pre_num)


def version_lt(left: str, right: str) -> bool | None:
    """Is `left` older than `right`? None when either cannot be ordered, which
    a gate must read as "refuse", never as "compatible"."""
    a, b = parse_version(left), parse_version(right)
    if a is None or b is None:
        return None
    width = max(len(a[0]), len(b[0]))
    a_rel = a[0] + (0,) * (width - len(a[0]))
    b_rel = b[0] + (0,) * (width - len(b[0]))
    return (a_rel, a[1], a[2]) < (b_rel, b[1], b[2])
