"""Every write of a head.json, and the one read-back that settles it.

The head is the only key ever replaced, and it is written only here: `create`
(a new object, a fork), `take` (a writer's lease CAS), `commit` (renew or
release the lease, with a new segment or base or none), `release_any` (an
administrator's), `release_after_failed_open` (one best-effort attempt).
The immutable keys a head names (segments, bases, and the history file a
checkpoint writes first, `history.py`) are created in `publishing.py`, which
then commits them here with `commit`.

A write whose answer is lost (timeout, 5xx, lost connection, S3 409: the store
raises `StoreAmbiguous`) or whose precondition failed (a race lost, or our own
write met again by a client's resend) is settled one way, in
`readback.write`: read the head back. The write counts only if the head read back is
the one we wrote: the same lease (our instance, our generation, the expiry we
wrote) and manifest (our unique key at our seq). Anything else goes by the
write's own rule: write again (the head is still ours, or unchanged: only the
token moved), a settled outcome, or lost (another's head: a lost race, or for
a writer the fence), until the commit deadline; after it an unproven outcome
is `CommitAmbiguous`, never success. `StoreAmbiguous` never leaves here.

A commit never writes over a head of ours naming a state never proved
stored (an earlier commit that raised, yet landed): that seq keeps naming
one state, and the writer stops there (`HeadWriter._unproven`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Protocol

from durable_obj.core import readback
from durable_obj.core.readback import Again, Stored, Verdict
from durable_obj.errors import (
    DurableError,
    LeaseFenced,
    LeaseHeld,
    NotFound,
)
from durable_obj.stores.base import Unchanged
from durable_obj.wire import keyring
from durable_obj.wire import lease as leases
from durable_obj.wire.head import EXTENSION, NONCE, RETENTION, Head, Lease
from durable_obj.wire.keyring import Keys
from durable_obj.wire.protocol import (
    DEFAULT_COMMIT_DEADLINE,
    DEFAULT_LEASE_TTL,
    DEFAULT_TIMEZONE,
    head_key,
)

if TYPE_CHECKING:
    from durable_obj.stores.base import Store, Version
    from durable_obj.wire.keys import KeyProvider
    from durable_obj.wire.sealing import Codec

log = logging.getLogger("durable_obj")


class Clock(Protocol):
    """The wall clock (lease expiry), the monotonic clock (deadlines) and sleep
    (backoff). The `time` module is one; a test passes a frozen one."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float, /) -> None: ...


@dataclass(frozen=True, slots=True)
class Taken:
    """A lease taken, and whether that was a forced takeover of a live holder."""

    lease: Lease
    forced: bool


class HeadWriter:
    """The head of one object as this process last proved it stored, and
    every write of it (module docstring).

    `holder` is the writer's identity (None for an administrator or a fork,
    who hold no lease). `head` and `version` are what the last proven write
    (or read) left; `expires_at` is the expiry of the lease last committed;
    `fenced` says this writer must never commit again.
    """

    def __init__(
        self,
        store: Store,
        oid: str,
        *,
        holder: leases.Holder | None = None,
        clock: Clock = time,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        commit_deadline: float = DEFAULT_COMMIT_DEADLINE,
        retention: float = 0.0,
        encryption: KeyProvider | None = None,
        compression: str | None = None,
    ) -> None:
        self.store = store
        self.retention = retention  # time travel: recorded in our heads; > 0 archives
        self.oid = oid
        self.url = f"{store.url.rstrip('/')}/{oid}"
        self.holder = holder
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.commit_deadline = commit_deadline
        self.head: Head | None = None
        self.version: Version | None = None
        self.expires_at = 0.0
        #: The head as read before `take` replaced it: what a failed open puts back.
        self.taken_from: Head | None = None
        #: Lost the lease (a commit found another holder), gave up on it
        #: (the writer could not renew in time), or found a commit of its own
        #: that it never proved stored (`_unproven`): nothing more is committed.
        self.fenced = False
        #: The head last proven stored (or read), with its bytes (`commit`):
        #: set first of all a proof changes, so a caller that finds it the
        #: same after a failed commit rolls its head back.
        self.proven: Stored | None = None
        #: The seq of a commit of ours found landed unproven (`_unproven`).
        self.landed_seq: int | None = None
        self.key = head_key(oid)
        #: The key provider and the data keys it unwrapped (`keyring.py`).
        self.keys = Keys(oid, self.url, encryption)
        #: A new object's WAL is zstd-compressed (the head decides after that).
        self.zstd = compression == "zstd"

    def codec(self, head: Head | None = None) -> Codec:
        """How `head`'s (default: the held head's) blobs are stored."""
        head = head if head is not None else self.head
        assert head is not None
        return self.keys.codec(head)

    # -- reads ------------------------------------------------------------------
    def read(self) -> Stored | None:
        """The head as stored now, or None when there is none."""
        blob = self.store.get(self.key)
        data = None if blob is None else blob.data
        return None if blob is None else Stored(Head.parse(blob.data, self.url), blob.version, data)

    def read_if_changed(self) -> Stored | Unchanged | None:
        """The head as stored now; `UNCHANGED` (one conditional request, no
        body) while it is still the version last held; None when there is none."""
        got = self.store.get_if_changed(self.key, self.version)
        if got is None or isinstance(got, Unchanged):
            return got
        return Stored(Head.parse(got.data, self.url), got.version, got.data)

    def adopt(self, stored: Stored) -> None:
        """Hold `stored` as the current head (a read-only open writes nothing)."""
        self.proven = stored
        self.head, self.version = stored.head, stored.version

    def forget(self) -> None:
        self.head = self.version = self.taken_from = None
        self.expires_at = 0.0
        self.proven = None

    def _proven(self, written: Stored) -> None:
        self.proven = written  # first: from here on the commit counts (`proven`)
        self.head, self.version = written.head, written.version
        self.expires_at = leases.expiry(written.head.lease)

    def _same_state(self, current: Head, body: bytes | None) -> bool:
        """Whether the head stored as `body` is `current` but for the lease."""
        if body is None:
            return False
        mine, other = current.model_copy(deep=True), Head.parse(body, self.url)
        other.lease = mine.lease
        for head in (mine, other):  # (every write's own nonce aside)
            head.model_extra[EXTENSION] = {**head.extension(), NONCE: None}
        return other == mine

    # -- head writes --------------------------------------------------------------
    def create(self, head: Head) -> bool:
        """Create the head where there is none. False: another head is there
        (a lost race); nothing of ours was written."""

        def judge(current: Head | None, version: Version | None) -> Verdict:
            # Nothing there: our create did not land. Someone else's: lost.
            return Again(None) if current is None else None

        written = readback.write(
            self,
            lambda: head,
            None,
            judge,
            what="creating the head",
            unsettled="Open (or fork) again: that shows whether it exists.",
            failed="nothing was written",
        )
        if written is None:
            return False
        self._proven(written)
        return True

    def create_cold(
        self, *, db: str, engine_version: str, timezone: str, description: str | None = None
    ) -> bool:
        """Create a new object: its first head, leased to us at generation 1,
        with its description if any. False: another head is there (a lost race)."""
        assert self.holder is not None
        head = Head.cold(
            db=db,
            engine_version=engine_version,
            lease=leases.cold(self.holder, self.clock.time(), self.lease_ttl),
        )
        head.set_timezone(timezone)
        head.set_description(description)
        head.set_extension(RETENTION, self.retention)
        keyring.start(
            head, self.oid, provider=self.keys.provider, zstd=self.zstd, now=self.clock.time()
        )
        return self.create(head)

    def take(
        self, read: Stored, *, force: bool, clock_skew: float, engine_version: str
    ) -> Taken | None:
        """Take the lease of the head as `read`: `lease.acquire` (`LeaseHeld`
        if another writer holds it and not `force`), then compare-and-swap.
        None: the head moved or went since it was read, and is not held by
        someone else now (start over)."""
        assert self.holder is not None
        head = read.head
        taken, forced = leases.acquire(
            head.lease,
            self.holder,
            self.clock.time(),
            self.lease_ttl,
            clock_skew=clock_skew,
            force=force,
        )
        desired = head.model_copy(deep=True)
        desired.lease = taken
        if not desired.records_timezone:
            # Replay of a head without one runs in UTC; say so from now on.
            desired.set_timezone(DEFAULT_TIMEZONE)
        desired.engine.version = engine_version
        desired.set_extension(RETENTION, self.retention)

        def judge(current: Head | None, version: Version | None) -> Verdict:
            # Unchanged since we read it: our write did not land. Else: lost.
            return Again(read.version) if current is not None and version == read.version else None

        written = readback.write(
            self,
            lambda: desired,
            read.version,
            judge,
            what="taking the lease",
            unsettled=(
                "If it landed, the lease is held by this failed open until it expires "
                "(lease_ttl); nothing else was changed."
            ),
            failed="nothing was changed",
        )
        if written is None:
            # Lost the race: refuse if someone now holds it, else start over.
            current = self.read()
            if current is not None and not force:
                leases.check_free(
                    current.head.lease, self.holder, self.clock.time(), clock_skew=clock_skew
                )
            return None
        self._proven(written)
        self.taken_from = head
        return Taken(lease=taken, forced=forced)

    def commit(self, *, release: bool = False, first: Callable[[], None] | None = None) -> None:
        """Write `self.head` over `self.version` with the lease renewed (or
        released), and prove it landed. Another instance or generation in the
        head read back is the fence: `LeaseFenced`, for good. `first`: the
        publish of what the new head names (a flush's segment), run once
        before the first write can land (`Store.replace_after`); its error
        is raised and nothing is written."""
        head, version = self.head, self.version
        assert head is not None and version is not None and self.holder is not None
        holder, generation = self.holder, head.lease.generation

        def make() -> Head:
            lease = head.lease
            head.lease = (
                leases.release(lease)
                if release
                else leases.renew(lease, self.clock.time(), self.lease_ttl)
            )
            return head

        proven = self.proven
        assert proven is not None

        def judge(current: Head | None, version: Version | None) -> Verdict:
            if current is None or not leases.owns(current.lease, holder, generation):
                self._fence(current)
            if not self._same_state(current, head.to_bytes()) and not self._same_state(
                current, proven.body
            ):
                self._unproven(current, version)
            # Still ours at another token, naming the same state: an earlier
            # write of ours (this commit's, or a renewal never proven). Only
            # the lease changes. (`self.version` stays the proven one.)
            return Again(version)

        held = head.lease
        try:
            written = readback.write(
                self,
                make,
                version,
                judge,
                what="the head commit",
                unsettled="The statements stay buffered; the next open shows whether they "
                "were committed.",
                failed="nothing was committed and the statements stay buffered",
                first=first,
            )
        except BaseException:
            if self.proven is proven:  # not proven: keep the lease held (a failed
                head.lease = held  # release's next commit renews it, not the released one)
            raise
        assert written is not None  # judge never answers "lost": it fences
        self._proven(written)

    def _fence(self, current: Head | None) -> NoReturn:
        self.fenced = True
        what = leases.describe(None if current is None else current.lease)
        log.warning("%s: fenced; %s", self.url, what)
        raise LeaseFenced(
            f"{self.url}: this writer lost its lease ({what}); this commit was refused and "
            "nothing more from this writer will be committed. Unflushed statements are lost; "
            "reopen to continue from the last flushed state."
        )

    def _unproven(self, current: Head, version: Version | None) -> NoReturn:
        """A head of ours names a state we never proved stored: an earlier
        commit that raised (an interrupt, `CommitAmbiguous`) landed. Writing
        over it would make its seq name two states, or take the seq back.
        The writer stops there and releases its lease over it (one attempt),
        so a reopen continues from it at once."""
        self.fenced, seq = True, current.manifest.seq
        self.landed_seq = seq
        log.warning("%s: fenced; an unproven commit of this writer landed as seq %d", self.url, seq)
        if version is not None:
            released = current.model_copy(deep=True)
            released.lease = leases.release(current.lease)
            try:
                self.store.replace(self.key, released.to_bytes(), version)
            except DurableError:
                log.warning("%s: could not release the lease of seq %d", self.url, seq)
        raise LeaseFenced(
            f"{self.url}: this writer stops (an earlier commit of its own, whose outcome was "
            f"never proven, landed as seq {seq}); this commit was refused so that seq {seq} "
            "keeps naming one state. Nothing was lost that a flush acknowledged: reopen to "
            f"continue from seq {seq}, which holds that earlier commit; statements executed "
            "after it and not flushed were not committed."
        )

    def release_any(self) -> Head:
        """Release whoever holds the lease (administrative). Returns the head
        as released; `LeaseHeld` if it changed meanwhile and is still held."""
        read = self.read()
        if read is None:
            raise NotFound(f"no durable object {self.oid!r} in {self.store.url}")
        if read.head.lease.released:
            return read.head
        desired = read.head.model_copy(deep=True)
        desired.lease = leases.release(desired.lease)

        def judge(current: Head | None, version: Version | None) -> Verdict:
            if current is None or version is None:
                raise NotFound(f"{self.url} was deleted while releasing its lease")
            if current.lease.released:
                return Stored(current, version)  # released meanwhile: done
            if version == read.version:
                return Again(version)  # unchanged: our write did not land
            raise LeaseHeld(
                f"the head of {self.oid!r} changed while releasing; nothing was changed"
            )

        written = readback.write(
            self,
            lambda: desired,
            read.version,
            judge,
            what="releasing the lease",
            unsettled="Run the release again; it is safe to repeat.",
            failed="nothing was changed",
        )
        assert written is not None
        return written.head

    def release_after_failed_open(self) -> None:
        """One attempt to put back the head as it was before a failed open
        took the lease (not as the open rewrote it: engine version, time
        zone), with the lease released. A failure is only logged: the lease
        then runs out by itself."""
        if self.head is None or self.version is None:
            return
        released = (self.taken_from or self.head).model_copy(deep=True)
        released.lease = leases.release(self.head.lease)
        try:
            self.store.replace(self.key, released.to_bytes(), self.version)
        except DurableError:
            log.warning("%s: could not release the lease after a failed open", self.url)
