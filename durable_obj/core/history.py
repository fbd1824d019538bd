"""Time travel: the restorable points of an object, and the manifest of one.

Every committed seq is exactly one artifact: a flush publishes one segment at
seq + 1, a checkpoint one base at seq + 1 with an empty WAL. So a chain (a
base, or none, and the segments committed onto it) names a point per seq::

    base at s0 = seq - len(wal),  wal[i] at s0 + i + 1,  the last at seq

The current head holds the newest chain. Before a checkpoint (or a fold)
replaces the base, its writer archives the manifest being superseded as an
immutable `history/<gen>-<seq>-<u8>.json` (a conditional create, settled by
reading back like every immutable key; `publishing.commit_base`). The file
describes state that WAS committed (the writer's head as last proven
stored), so when the checkpoint's head commit then fails (a crash, a fence,
an ambiguous answer), the orphan is harmless: the same chain stays in the
head, is extended, and is archived again later, under another key, as a
longer chain with the same prefix. History is the union of the head's chain
and every archive; `build` checks that a seq maps to one key across them
(`History.conflicts` lists any that do not; the newest chain wins).

A point's time is the `committed_at` its ref carries (`head.stamp`, set by
durable_obj when it commits); a ref chdb.durable wrote has none, and falls
back to the store's modified time of its key (the upload, just before the
commit); a store that reports none leaves the time unknown, and such a
point counts as older than any window. The head stores epoch seconds; a
`Point` gives an aware UTC `datetime` (to the microsecond), and every
comparison here (`at=`, the window's start) is between such datetimes, so a
point's own `committed_at` passed back as `at=` names exactly that point.

Restorable, for a window of `retention` seconds at `now`: in seq order,
every point from the last one committed before `now - retention` (the state
in effect when the window opens) onward, whose base and segments are all
still stored. The newest point, the head, is always among them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from durable_obj.errors import Corrupt, InvalidArgument, NotFound
from durable_obj.wire.digest import bytes_digest
from durable_obj.wire.head import Head, Manifest, ObjectRef, stamp_of
from durable_obj.wire.protocol import (
    DEFAULT_RETENTION,
    HISTORY_DIR,
    MAX_HEAD_BYTES,
    head_key,
    mint_history_key,
    object_key,
    seq_of,
)
from durable_obj.wire.untrusted import dump_json, parse_json

if TYPE_CHECKING:
    from durable_obj.stores.base import Entry, Store
    from durable_obj.wire.sealing import Codec

log = logging.getLogger("durable_obj")

#: The `format` field of a history file.
HISTORY_FORMAT = "durable_obj.history/1"


@dataclass(frozen=True)
class Chain:
    """A manifest as some head held it: `source` is `head.json` or the key of
    the history file (relative to the object) that archived it."""

    manifest: Manifest
    source: str

    @property
    def base_seq(self) -> int:
        return self.manifest.seq - len(self.manifest.wal)


@dataclass(frozen=True)
class Point:
    """One committed seq: the artifact it published and where it lives."""

    seq: int
    kind: Literal["base", "segment"]
    key: str
    generation: int | None
    owner: str | None
    #: When it was committed: an aware datetime in UTC; None when unknown.
    committed_at: datetime | None
    #: "stamp": recorded at commit; "store": the key's modified time; None: unknown.
    time_source: Literal["stamp", "store"] | None
    #: Its chain, and its place there (-1: the base).
    chain: Chain = field(repr=False, compare=False)
    index: int = field(repr=False, compare=False)
    #: The base and every segment up to it are still stored.
    available: bool = True

    def to_json(self) -> dict[str, Any]:
        """The point as JSON values: `committed_at` is ISO 8601 text in UTC
        to the microsecond (`2026-05-01T14:03:00.250000+00:00`), or None;
        `datetime.fromisoformat` and `--at` read it back as the same
        instant."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "key": self.key,
            "generation": self.generation,
            "owner": self.owner,
            "committed_at": iso(self.committed_at),
            "time_source": self.time_source,
            "available": self.available,
        }


@dataclass
class History:
    """Every known point of an object, and those restorable in its window
    (`retention` seconds back from `now`, epoch seconds)."""

    oid: str
    retention: float
    now: float
    points: list[Point]
    restorable: list[Point]
    #: history/ keys (namespace keys) and the chain each archived.
    files: list[tuple[str, Chain]]
    #: (seq, kept key, other key): a seq that two chains map to different keys.
    conflicts: list[tuple[int, str, str]] = field(default_factory=list)
    #: history files that could not be read as one (kept by gc, never used).
    unreadable: list[str] = field(default_factory=list)

    @property
    def cutoff(self) -> datetime:
        """When the window opens: `now - retention`, in UTC."""
        return window_start(self.now, self.retention)

    @property
    def oldest(self) -> Point | None:
        return self.restorable[0] if self.restorable else None

    @property
    def head_seq(self) -> int:
        return self.points[-1].seq if self.points else 0

    def describe_oldest(self) -> str:
        oldest = self.oldest
        if oldest is None:
            return "nothing is restorable (the object has no commit)"
        return f"the oldest restorable point is seq {oldest.seq} ({when(oldest.committed_at)})"

    def resolve(self, at: int | datetime) -> Point:
        """The point `at` names: a seq, or the last commit at or before an
        aware datetime. `NotFound` (naming the oldest restorable point) for a
        point outside the window or collected; `InvalidArgument` for a naive
        datetime or what is neither."""
        if isinstance(at, datetime):
            return self._at_time(at)
        if isinstance(at, bool) or not isinstance(at, int):
            raise InvalidArgument(
                f"at= is a seq (int) or a timezone-aware datetime, not {type(at).__name__}"
            )
        found = next((p for p in self.restorable if p.seq == at), None)
        if found is not None:
            return found
        if at > self.head_seq:
            raise NotFound(
                f"{self.oid!r} has no commit at seq {at}: the newest is seq {self.head_seq}; "
                f"{self.describe_oldest()}. Nothing was opened."
            )
        raise NotFound(
            f"seq {at} of {self.oid!r} is outside the retention window "
            f"({self.retention:g} s) or was already collected; {self.describe_oldest()}. "
            "Nothing was opened."
        )

    def _at_time(self, at: datetime) -> Point:
        if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
            raise InvalidArgument(
                f"at={at.isoformat()} is a naive datetime: give a time zone (for example "
                "datetime.now(timezone.utc), or '...Z' / '+02:00' on the command line); a "
                "naive time means a different instant on every machine. Nothing was opened."
            )
        timed = [p for p in self.points if p.committed_at is not None and p.committed_at <= at]
        if not timed:
            raise NotFound(
                f"nothing of {self.oid!r} was committed at or before {at.isoformat()} that is "
                f"still known; {self.describe_oldest()}. Nothing was opened."
            )
        last = max(timed, key=lambda p: p.seq)
        # A point committed after `at` with a lower seq (a skewed clock) is not
        # "at or before": the state at `at` is the one of the newest seq before it.
        if last not in self.restorable:
            raise NotFound(
                f"the state of {self.oid!r} at {at.isoformat()} (seq {last.seq}) is outside "
                f"the retention window ({self.retention:g} s) or was already collected; "
                f"{self.describe_oldest()}. Nothing was opened."
            )
        return last

    def needed_keys(self) -> set[str]:
        """Keys (relative to the object) that a restorable point needs."""
        keys: set[str] = set()
        for point in self.restorable:
            keys.update(ref.key for ref in refs_of(point))
        return keys

    def needed_files(self) -> set[str]:
        """history/ keys (namespace keys) whose chain holds a restorable point,
        or that could not be read (never collected on a guess)."""
        first = self.oldest.seq if self.oldest is not None else None
        keep = set(self.unreadable)
        for key, chain in self.files:
            if first is not None and chain.manifest.seq >= first:
                keep.add(key)
        return keep


def utc(t: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime (rounded to the microsecond);
    None for None and for what no datetime holds (not finite, or beyond the
    years 1-9999: a stamp that is not a time)."""
    if t is None or not math.isfinite(t):
        return None
    try:
        return datetime.fromtimestamp(t, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def window_start(now: float, retention: float) -> datetime:
    """`now - retention` in UTC; a window reaching before year 1 (retention
    may be up to 2**53 s) opens at the earliest datetime. Rounding to the
    microsecond keeps order, so a point committed inside the window stays
    inside."""
    return utc(now - retention) or datetime.min.replace(tzinfo=UTC)


def iso(t: datetime | None) -> str | None:
    """`t` as ISO 8601 text in UTC, to the microsecond."""
    return None if t is None else t.astimezone(UTC).isoformat(timespec="microseconds")


def when(t: datetime | None) -> str:
    if t is None:
        return "commit time unknown"
    return "committed " + t.astimezone(UTC).isoformat(timespec="seconds")


def refs_of(point: Point) -> list[ObjectRef]:
    """The base (every link of an incremental one) and segments the state
    at `point` is made of."""
    m = point.chain.manifest
    return m.all_bases() + list(m.wal[: point.index + 1])


def manifest_at(head: Head, point: Point) -> Head:
    """A head naming exactly the state right after `point`'s commit: its
    chain's base (and the links beneath it) and segments up to it (read
    only: never written)."""
    past = head.model_copy(deep=True)
    m = point.chain.manifest
    past.manifest = Manifest(
        db=m.db, base=m.base, wal=list(m.wal[: point.index + 1]), seq=point.seq
    )
    past.set_chain(m.chain)
    return past


def encode_archive(manifest: Manifest, *, archived_at: float, owner: str | None) -> bytes:
    """The history file of `manifest` (the one a checkpoint supersedes)."""
    doc = {
        "format": HISTORY_FORMAT,
        "archived_at": archived_at,
        "owner": owner,
        "manifest": manifest.model_dump(),
    }
    return dump_json(doc)  # an unknown field's lone surrogate written back escaped


def archive_of(
    head: Head, retention: float, now: float, owner: str | None, codec: Codec | None = None
) -> tuple[ObjectRef, bytes] | None:
    """The history file (its ref under a fresh key, its bytes) that archives
    `head`'s manifest before a checkpoint supersedes it; None when there is
    nothing to keep (no window, or nothing committed yet)."""
    manifest = head.manifest
    if retention <= 0 or (manifest.base is None and not manifest.wal):
        return None
    body = encode_archive(manifest, archived_at=now, owner=owner)
    key = mint_history_key(head.lease.generation, manifest.seq)
    if codec is not None and codec.encrypted:
        body = codec.encode(key, body, compressible=False)
    size, sha256 = bytes_digest(body)
    return ObjectRef(key=key, size=size, sha256=sha256), body


def parse_archive(data: bytes, key: str) -> Chain:
    """A history file's chain; `Corrupt` if it is not one."""
    if len(data) > 2 * MAX_HEAD_BYTES:
        raise Corrupt(f"{key} is {len(data)} bytes, more than any archived manifest")
    doc = parse_json(data, key, safe="nothing was changed")
    try:
        if not isinstance(doc, dict) or doc.get("format") != HISTORY_FORMAT:
            raise ValueError(f"not a {HISTORY_FORMAT} document")
        manifest = Manifest.model_validate(doc["manifest"])
    except (ValueError, KeyError) as exc:  # `Invalid` is a ValueError
        raise Corrupt(f"{key} is not a history file ({exc})") from None
    if len(manifest.wal) > manifest.seq:
        raise Corrupt(f"{key} archives more segments than its seq counts")
    return Chain(manifest, key)


def build(
    oid: str,
    head: Head,
    archives: list[tuple[str, Chain]],
    entries: list[Entry],
    *,
    retention: float,
    now: float,
    unreadable: list[str] | None = None,
) -> History:
    """The history of `oid` from its head, its archives (namespace key,
    chain) and the listing of its keys (existence, modified times)."""
    stored = {e.key[len(oid) + 1 :]: e for e in entries}
    chains = sorted((chain for _, chain in archives), key=lambda c: c.manifest.seq)
    chains.append(Chain(head.manifest, "head.json"))
    merged: dict[int, Point] = {}
    conflicts: list[tuple[int, str, str]] = []
    for chain in chains:  # oldest first: a newer chain's point replaces an older's
        for point in _points(chain, stored):
            old = merged.get(point.seq)
            if old is not None and old.key != point.key:
                conflicts.append((point.seq, point.key, old.key))
                log.warning(
                    "%s: seq %d is %s in %s but %s in %s; using the newer",
                    oid,
                    point.seq,
                    point.key,
                    chain.source,
                    old.key,
                    old.chain.source,
                )
            merged[point.seq] = point
    points = [merged[s] for s in sorted(merged)]
    cutoff = window_start(now, retention)
    inside = [
        i for i, p in enumerate(points) if p.committed_at is not None and p.committed_at >= cutoff
    ]
    start = max(inside[0] - 1, 0) if inside else max(len(points) - 1, 0)
    restorable = [p for p in points[start:] if p.available]
    if points and points[-1] not in restorable:
        restorable.append(points[-1])  # the head: a missing key there is Corrupt on open
    return History(
        oid=oid,
        retention=retention,
        now=now,
        points=points,
        restorable=restorable,
        files=list(archives),
        conflicts=conflicts,
        unreadable=list(unreadable or []),
    )


def _points(chain: Chain, stored: dict[str, Entry]) -> list[Point]:
    m = chain.manifest
    out: list[Point] = []
    try:  # every link of an incremental base is needed too
        available = all(link.key in stored for link in m.chain)
    except Corrupt:
        available = False
    refs: list[tuple[int, ObjectRef]] = [] if m.base is None else [(-1, m.base)]
    refs += list(enumerate(m.wal))
    for index, ref in refs:
        entry = stored.get(ref.key)
        available = available and entry is not None
        stamped, owner = stamp_of(ref)
        committed_at = utc(stamped)
        source: Literal["stamp", "store"] | None = "stamp"
        if committed_at is None:  # none, or one no datetime holds
            committed_at = None if entry is None else utc(entry.modified)
            source = None if committed_at is None else "store"
        name = ref.key.rsplit("/", 1)[-1]
        gen = name.split("-", 1)[0]
        out.append(
            Point(
                seq=chain.base_seq + index + 1,
                kind="base" if index < 0 else "segment",
                key=ref.key,
                generation=int(gen) if seq_of(name) is not None else None,
                owner=owner,
                committed_at=committed_at,
                time_source=source,
                chain=chain,
                index=index,
                available=available,
            )
        )
    return out


def read(
    store: Store,
    oid: str,
    *,
    now: float,
    retention: float | None = None,
    default: float = DEFAULT_RETENTION,
    head: Head | None = None,
    codec: Codec | None = None,
) -> History:
    """The history of `oid` as stored now: its head (or `head`, as just read),
    every history file, one listing. `retention` None: the window the head
    records (`Head.retention`), else `default`."""
    if head is None:
        blob = store.get(head_key(oid))
        if blob is None:
            raise NotFound(f"no durable object {oid!r} in {store.url}")
        head = Head.parse(blob.data, f"{store.url.rstrip('/')}/{oid}")
    if retention is None:
        retention = head.retention if head.retention is not None else default
    entries = store.list_keys(oid)
    prefix = object_key(oid, f"{HISTORY_DIR}/")
    keys = sorted(e.key for e in entries if e.key.startswith(prefix))
    archives: list[tuple[str, Chain]] = []
    unreadable: list[str] = []
    for key, blob in zip(keys, store.get_many(keys), strict=True):
        if blob is None:
            continue  # collected since the listing
        name = key[len(oid) + 1 :]
        try:
            data = blob.data if codec is None else codec.decode(name, blob.data, what="history")
            archives.append((key, parse_archive(data, name)))
        except Corrupt as exc:
            log.warning("%s: %s; ignored", oid, exc)
            unreadable.append(key)
    return build(oid, head, archives, entries, retention=retention, now=now, unreadable=unreadable)
