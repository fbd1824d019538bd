"""The change feed: every commit of an object after a seq, as an event, in
seq order, read from storage (no engine, no lease).

    for change in obj.changes(since=kept):      # or Namespace.changes(oid, ...)
        index(change.statements); kept = change.seq

Every committed seq is one artifact (`history.py`): a WAL segment (a
`commit` event, its statements as logged, pinned values included) or a
base (a `checkpoint` event: a new base with an empty WAL; the logical data
did not change, but see below). An event carries the seq, the commit time the ref was
stamped with (`head.stamp_of`; None for a ref chdb.durable wrote), the
writer's generation (read from the minted key, `<gen>-<seq>-<u>.jsonl`) and
owner (from the stamp), and the key.

Where the events come from: the current head names every seq from its base
on, so a consumer that keeps up reads only the head (one conditional read
per poll while nothing changes, `get_if_changed`) and the new segments. A
consumer further behind than the last checkpoint needs the segments that
checkpoint superseded: the time-travel history (`history.read`: the
archived manifests under `history/`, one listing) names them while they are
inside the retention window and not collected. A seq the feed cannot serve
that way is `FeedGap` (a `NotFound`) naming the oldest seq it still can:
never a silent skip. Each segment is checked against the size and SHA-256
its ref names before a statement of it is handed out (`Corrupt` if not), and
of an encrypted object unsealed (every tag checked) with the key provider
the object was opened with (`KeyRefused` without it).

A checkpoint also commits the statements its writer had executed and not
flushed: they are in the new base and in no `commit` event. A consumer that
must see every statement (an indexer) needs its writer to flush() before
checkpoint() (a fold, after a flush or on close, never holds any).

Resuming is exact: `changes(since=s)` yields seq s + 1 first, so a consumer
that kept the last seq it handled gets exactly the next ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from durable_obj.core import history
from durable_obj.errors import FeedGap, InvalidArgument, NotFound
from durable_obj.replica import restore
from durable_obj.stores.base import UNCHANGED
from durable_obj.wire.digest import verify_bytes
from durable_obj.wire.head import Head, ObjectRef, stamp_of
from durable_obj.wire.keyring import Keys
from durable_obj.wire.protocol import DEFAULT_RETENTION, head_key, object_key, seq_of
from durable_obj.wire.wal import parse_segment

if TYPE_CHECKING:
    from durable_obj.core.options import Options
    from durable_obj.stores.base import Store, Version
    from durable_obj.wire.sealing import Codec

log = logging.getLogger("durable_obj")

#: At most this many segments are read (and held) at once.
BATCH = 32
#: Seconds between polls of a following feed, by default.
DEFAULT_POLL = 1.0


@dataclass(frozen=True)
class Change:
    """One commit: a WAL segment (`commit`) or a new base (`checkpoint`)."""

    seq: int
    kind: Literal["commit", "checkpoint"]
    #: The committed_at stamp of its ref (aware, UTC); None when it carries none.
    committed_at: datetime | None
    #: The writer's lease generation, from the minted key (None if not minted).
    generation: int | None
    #: The writer's owner name, from the stamp (None when it carries none).
    owner: str | None
    #: The statements as logged, in replay order (empty for a checkpoint).
    statements: tuple[str, ...]
    #: The segment's or base's key, relative to the object.
    key: str

    def to_json(self) -> dict[str, Any]:
        """The event as JSON values (`committed_at` as ISO 8601 text in UTC)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "committed_at": history.iso(self.committed_at),
            "generation": self.generation,
            "owner": self.owner,
            "key": self.key,
            "statements": list(self.statements),
        }


@dataclass(frozen=True)
class _Item:
    seq: int
    ref: ObjectRef
    checkpoint: bool


class Feed:
    """The events of `oid` after `since`, fetched a batch at a time.

    `last` is the seq of the last event handed out; `next_batch()` reads the
    head (conditionally) when nothing is planned, plans what follows `last`,
    and returns the next events, [] when there is nothing new now."""

    def __init__(
        self,
        store: Store,
        oid: str,
        *,
        since: int | None,
        retention: float = DEFAULT_RETENTION,
        clock: Any = None,
        keys: Keys | None = None,
    ) -> None:
        bad = isinstance(since, bool) or not isinstance(since, int) or since < 0
        if since is not None and bad:
            raise InvalidArgument(f"since= is a seq (an int >= 0), not {since!r}")
        #: The seq of the last event handed out (None: the head's, at the first read).
        self.last = since
        self.store, self.oid = store, oid
        self.url = f"{store.url.rstrip('/')}/{oid}"
        #: The wall clock of the retention window (a test passes a frozen one).
        self.retention, self.clock = retention, clock or time
        #: The key provider of an encrypted object (none: a plain one).
        self.keys = keys if keys is not None else Keys(oid, self.url, None)
        self._version: Version | None = None
        self._planned: list[_Item] = []
        self._codec: Codec | None = None

    @classmethod
    def of(cls, store: Store, oid: str, since: int | None, options: Options) -> Feed:
        """The feed of `oid` read with `options` (its retention, its key)."""
        keys = Keys(oid, f"{store.url.rstrip('/')}/{oid}", options.encryption)
        return cls(store, oid, since=since, retention=options.retention, keys=keys)

    def next_batch(self, limit: int = BATCH) -> list[Change]:
        if not self._planned:
            got = self.store.get_if_changed(head_key(self.oid), self._version)
            if got is None:
                raise NotFound(f"no durable object at {self.url} (no head.json)")
            if got is UNCHANGED:
                return []
            head = Head.parse(got.data, self.url)
            restore.check_protocol(head, url=self.url, read_only=True)
            if self.last is None:
                self.last = head.manifest.seq  # only what is committed from now on
            # how its blobs are stored: sealed (a key refused here) or compressed
            self._codec = self.keys.codec(head)
            self._planned = self._plan(head, self.last)
            self._version = got.version
        batch, self._planned = self._planned[:limit], self._planned[limit:]
        changes = self._read(batch)
        if changes:
            self.last = changes[-1].seq
        return changes

    def _plan(self, head: Head, after: int) -> list[_Item]:
        """Every seq after `after` up to the head's, and the ref of each."""
        m = head.manifest
        if after > m.seq:
            raise InvalidArgument(
                f"since={after} is past the newest commit of {self.url} (seq {m.seq}): a seq "
                "kept from another object, or from one deleted and created again?"
            )
        base_seq = m.seq - len(m.wal)
        first = base_seq if m.base is not None else base_seq + 1  # oldest seq the head names
        items = []
        if after + 1 < first:
            items = self._from_history(head, after, first)
        if m.base is not None and after < base_seq:
            items.append(_Item(base_seq, m.base, True))
        for i, ref in enumerate(m.wal):
            if base_seq + i + 1 > after:
                items.append(_Item(base_seq + i + 1, ref, False))
        return items

    def _from_history(self, head: Head, after: int, first: int) -> list[_Item]:
        """The seqs after `after` and before `first` (the head's oldest),
        from the chains archived in history/ while they are restorable."""
        past = history.read(
            self.store,
            self.oid,
            now=self.clock.time(),
            default=self.retention,
            head=head,
            codec=self._codec,
        )
        restorable = {p.seq: p for p in past.restorable}
        oldest = first  # the oldest seq from which on every one is served
        while oldest - 1 in restorable:
            oldest -= 1
        items = []
        for seq in range(after + 1, first):
            point = restorable.get(seq)
            if point is None:
                raise self._gap(after, seq, oldest, past.retention)
            items.append(_Item(seq, _ref(point), point.kind == "base"))
        return items

    def _gap(self, since: int, missing: int, oldest: int, retention: float) -> FeedGap:
        return FeedGap(
            f"{self.url}: the change feed cannot serve every commit after seq {since}: seq "
            f"{missing} is outside the retention window ({retention:g} s) or was collected "
            f"by gc. The oldest commit it can serve is seq {oldest} (resume with "
            f"since={oldest - 1}, knowing seqs {since + 1}..{oldest - 1} are lost to the "
            "feed), or reopen the object for its current state.",
            since=since,
            oldest=oldest,
        )

    def _read(self, items: list[_Item]) -> list[Change]:
        """Each item's event; a segment read, checked and parsed."""
        segments = [i for i in items if not i.checkpoint]
        keys = [object_key(self.oid, i.ref.key) for i in segments]
        blobs = dict(zip(keys, self.store.get_many(keys), strict=True)) if keys else {}
        out = []
        for item in items:
            statements: list[str] = []
            if not item.checkpoint:
                blob = blobs[object_key(self.oid, item.ref.key)]
                if blob is None:  # collected since it was planned
                    raise FeedGap(
                        f"{self.url}: WAL segment {item.ref.key} (seq {item.seq}) was "
                        f"collected by gc before the change feed read it; the commits from "
                        f"seq {item.seq} on are lost to this feed. Call changes() again "
                        "to learn the oldest seq it can still serve.",
                        since=item.seq - 1,
                    )
                verify_bytes(blob.data, item.ref, "WAL segment")
                assert self._codec is not None
                body = self._codec.decode(item.ref.key, blob.data)  # unsealed, decompressed
                statements = parse_segment(body, item.ref.key)
            out.append(_change(item, tuple(statements)))
        return out


def _ref(point: history.Point) -> ObjectRef:
    m = point.chain.manifest
    if point.index < 0:
        assert m.base is not None
        return m.base
    return m.wal[point.index]


def _change(item: _Item, statements: tuple[str, ...]) -> Change:
    stamped, owner = stamp_of(item.ref)
    name = item.ref.key.rsplit("/", 1)[-1]
    generation = int(name.split("-", 1)[0]) if seq_of(name) is not None else None
    return Change(
        seq=item.seq,
        kind="checkpoint" if item.checkpoint else "commit",
        committed_at=history.utc(stamped),
        generation=generation,
        owner=owner,
        statements=statements,
        key=item.ref.key,
    )


def changes(feed: Feed, poll: float, follow: bool) -> Iterator[Change]:
    """The events of `feed`, in seq order; with `follow`, forever, polling
    the head every `poll` seconds when there is nothing new."""
    check_poll(poll)
    return _changes(feed, follow=follow, poll=poll)


def _changes(feed: Feed, *, follow: bool, poll: float) -> Iterator[Change]:
    while True:
        batch = feed.next_batch()
        yield from batch
        if not batch:
            if not follow:
                return
            time.sleep(poll)


async def achanges(feed: Feed, poll: float, *, follow: bool) -> AsyncIterator[Change]:
    """`changes` for asyncio: each read in a worker thread, the waits on the
    loop (check `poll` with `check_poll` first). asyncio is imported here,
    where a loop already runs: a synchronous open never pays for it."""
    import asyncio

    while True:
        batch = await asyncio.to_thread(feed.next_batch)
        for change in batch:
            yield change
        if not batch:
            if not follow:
                return
            await asyncio.sleep(poll)


def check_poll(poll: float) -> None:
    if not isinstance(poll, int | float) or isinstance(poll, bool) or not poll > 0:
        raise InvalidArgument(f"poll= is seconds between reads of the head (> 0), not {poll!r}")
