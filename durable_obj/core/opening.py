"""One attempt at open(): from the stored head (or none) to a restored local
copy and, for a writer, a lease proven held.

    read head -> check protocol -> check the lease is free -> start fetching
    the base and every segment -> engine -> create the object, or take the
    lease (CAS) -> pin the session -> RESTORE -> replay -> re-assert the lease,
    if the restore took longer than the heartbeat's interval (`_reassert`)

The order is part of the contract: a writer open of an object leased
elsewhere answers `lease_held` before anything local to this process can
fail (the engine, say), and nothing is written
before every check that can refuse has passed. When the head changes
between reading it and taking the lease, the open starts over.

A live lease of another writer is `lease_held`, except with `force` (any
holder) or `reclaim` (an earlier process of this same writer: `SameOwner`
for reclaim=True, or the caller's callable): then it is taken at once, the
generation moves, and the old holder's next commit fails its CAS.
"""

from __future__ import annotations

import logging
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, cast

from durable_obj.core import history
from durable_obj.core.readback import Stored
from durable_obj.errors import InvalidArgument, LeaseHeld, NotFound
from durable_obj.replica import restore
from durable_obj.replica.local import warm_catalog
from durable_obj.replica.server import prestart
from durable_obj.stores.base import UNCHANGED
from durable_obj.wire import lease as leases
from durable_obj.wire.protocol import HEAD_KEY

if TYPE_CHECKING:
    from collections.abc import Callable

    from fsspec.callbacks import Callback

    from durable_obj.core.commit import HeadWriter
    from durable_obj.core.options import Options
    from durable_obj.replica.engine import Engine
    from durable_obj.replica.local import LocalCopy
    from durable_obj.wire.head import Lease, ObjectRef

log = logging.getLogger("durable_obj")


#: How often open() starts over when the head moves under it.
OPEN_ATTEMPTS = 5


class HeadMoved(Exception):
    """The head changed between reading it and taking the lease: start over."""


class SameOwner:
    """`reclaim=True` as an open carries it: the owner name is this writer's
    identity, so a live lease held under the same name by another instance
    (an earlier process of this writer: killed, restarted, or still running
    as a zombie) is taken at once. Exactly the namesakes a `reclaim`
    callable never takes; every other owner keeps the `LeaseHeld` rule."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def __call__(self, owner: str) -> bool:
        return owner == self.owner

    def __repr__(self) -> str:
        return f"SameOwner({self.owner!r})"


def reclaim_rule(reclaim: object, owner: str | None) -> Callable[[str], bool] | None:
    """What an open's `reclaim=` means for a writer named `owner` (None or
    empty: a random name): None (False, the default), `SameOwner` (True), or
    the caller's callable. `InvalidArgument`, before anything is read, for
    True without an owner name and for anything that is neither."""
    if reclaim is None or reclaim is False:
        return None
    if reclaim is True:
        if not owner:
            raise InvalidArgument(
                "reclaim=True takes back a live lease held under this writer's own owner "
                "name by an earlier process, but no owner= was given: this writer's name is "
                "random (anon-...) and never the same twice, so it has nothing to reclaim. "
                "Pass owner= with a name that stays the same across restarts (a service "
                "replica, a worker, a server), used by one live process at a time. Nothing "
                "was opened."
            )
        return SameOwner(owner)
    if callable(reclaim) and not isinstance(reclaim, int | str):
        return cast("Callable[[str], bool]", reclaim)
    raise InvalidArgument(
        f"reclaim= is True, False or a callable (owner name -> bool), not "
        f"{type(reclaim).__name__}; nothing was opened"
    )


def _reassert(writer: HeadWriter, options: Options, elapsed: float) -> bool:
    """Must a writer's open re-assert its lease before handing the writer
    out? Only after a restore slower than one heartbeat interval (at most
    lease_ttl / 3): `elapsed` seconds since the take, by the monotonic
    clock, or the lease it took having less left than `lease_ttl` minus
    that interval by the wall clock the lease is written in (either may
    step). A faster one hands out a lease with at least that much left,
    which the heartbeat renews one interval later, as it renews every
    lease; so an open of a small object writes the head once, not twice.
    (A takeover by force meanwhile fences this writer at its next commit,
    as one just after the open does.)"""
    interval = options.heartbeat
    left = writer.expires_at - writer.clock.time()
    return elapsed > interval or left < options.lease_ttl - interval


class Opener:
    """One open() of `writer`'s object into `local`, with its retries. The
    caller cleans up after any failure: `local` and `writer` hold what was
    done so far."""

    def __init__(
        self,
        writer: HeadWriter,
        local: LocalCopy,
        options: Options,
        *,
        read_only: bool,
        force: bool,
        create: bool = True,
        progress: Callback | None = None,
        at: int | datetime | None = None,
        reclaim: Callable[[str], bool] | None = None,
    ) -> None:
        self.writer = writer
        #: `reclaim_rule`'s answer: None, `SameOwner`, or the caller's callable.
        self.reclaim = reclaim
        #: This open takes back a live lease from an earlier self (`reclaim`).
        self.reclaimed = False
        self.local = local
        self.options = options
        self.at = at
        self.read_only = read_only
        self.force = force
        self.create = create
        self.progress = progress

    def run(self) -> bool:
        """Open, starting over (with an empty engine and scratch) while the
        head moves under us; True if the object existed."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                return self._once()
            except HeadMoved:
                if attempt == OPEN_ATTEMPTS:
                    raise LeaseHeld(
                        f"{self.writer.url}: the head kept changing while taking the lease "
                        f"({attempt} attempts); another writer is active. Nothing was changed."
                    ) from None
                self.local.reset()
                self.writer.forget()
        raise AssertionError("unreachable")

    def _once(self) -> bool:
        writer, local, options = self.writer, self.local, self.options
        read_only, force = self.read_only, self.force
        self.reclaimed = False  # decided anew on each attempt's head
        # The process's engine starts in the background while the head is
        # read, and reads the gate's catalogue once it runs (a base's
        # definitions and every statement are checked with it); the base
        # and the segments download while the open goes on.
        prestart(then=warm_catalog)
        got = writer.read()
        if got is not None:
            restore.check_protocol(got.head, url=writer.url, read_only=read_only)
            writer.keys.check(got.head)  # the key it needs, before anything is changed
            if self.at is not None:
                got = self._past(got)
            if not read_only and not force and self._reclaims(got.head.lease):
                force = self.reclaimed = True
            if not read_only and not force:
                assert writer.holder is not None
                leases.check_free(
                    got.head.lease,
                    writer.holder,
                    writer.clock.time(),
                    clock_skew=options.clock_skew,
                    reclaiming=isinstance(self.reclaim, SameOwner),
                )
        elif read_only:
            raise NotFound(
                f"no durable object at {writer.url} (no {HEAD_KEY}); a read-only open "
                "never creates one. Check the URL and storage_options."
            )
        elif not self.create:
            raise NotFound(
                f"no durable object at {writer.url} (no {HEAD_KEY}); create=False never "
                "creates one, and nothing was written. Check the object id, the URL and "
                "storage_options, or open with create=True to create it."
            )
        with ThreadPoolExecutor(2) as pool:  # the base, and every segment
            fetches = None
            if got is not None:
                assert local.work is not None
                fetches = restore.Fetches(
                    pool,
                    writer.store,
                    writer.oid,
                    got.head,
                    work=local.work,
                    concurrency=options.fetch_concurrency,
                    codec=writer.codec(got.head),
                    progress=self.progress,
                )
            try:
                engine = local.start_engine()
                if got is None:
                    local.pin(options.timezone)  # checks it before anything is written
                    if not writer.create_cold(
                        db=options.db,
                        engine_version=engine.version,
                        timezone=options.timezone,
                        description=options.description,
                    ):
                        raise HeadMoved()  # lost the creation race: read it again
                    engine.create_database(options.db)
                    engine.use_database(options.db)
                    return False
                if got.head.manifest.base is not None:
                    warm_catalog()  # the base's definitions are checked with it
                restore.check_engine(engine, got.head)
                taken_at = writer.clock.monotonic()
                if read_only:
                    writer.adopt(got)
                else:
                    self._take_lease(engine, got, force)
                local.pin_head(got.head)
                kept = restore.restore(
                    engine,
                    got.head,
                    fetches,
                    url=writer.url,
                    stub=None if read_only else local.work,
                )
                local.keep_base(got.head, kept)
            except BaseException:
                if fetches is not None:
                    fetches.cancel()
                raise
        if not read_only and _reassert(writer, options, writer.clock.monotonic() - taken_at):
            # A slow restore can outlast the TTL: re-assert before handing out
            # a writer, so we never return one whose lease was already taken.
            writer.commit()
        return True

    def _past(self, got: Stored) -> Stored:
        """The head as it would have been read right after the commit `at`
        names (a read-only open only): the same verified open path restores
        it. `NotFound` names the oldest restorable point."""
        at = self.at
        assert self.read_only and at is not None
        past = history.read(
            self.writer.store,
            self.writer.oid,
            now=self.writer.clock.time(),
            default=self.options.retention,  # when the head records no window
            head=got.head,
            codec=self.writer.codec(got.head),
        )
        point = past.resolve(at)
        log.info(
            "%s: opening at seq %d (%s)",
            self.writer.url,
            point.seq,
            history.when(point.committed_at),
        )
        return Stored(history.manifest_at(got.head, point), got.version)

    def _reclaims(self, lease: Lease) -> bool:
        """May this open take `lease` at once, though it is live? With
        reclaim=True (`SameOwner`), when it is held under this writer's
        owner name by another instance; with a `reclaim` callable, when the
        callable says its (other) owner is an earlier self (an earlier
        incarnation of a restarted host). Every other holder keeps the
        normal `LeaseHeld` rule."""
        if self.reclaim is None or lease.released or lease.owner is None:
            return False
        holder = self.writer.holder
        assert holder is not None
        if lease.instance == holder.instance:
            return False  # our own instance: nothing to take back
        if isinstance(self.reclaim, SameOwner):
            return lease.owner == holder.owner
        if lease.owner == holder.owner:
            return False  # a namesake, which may be alive: only reclaim=True takes it
        return bool(self.reclaim(lease.owner))

    def _take_lease(self, engine: Engine, got: Stored, force: bool) -> None:
        """Take the lease, and say so once: one log record per takeover of a
        lease that was ever held, plus the RuntimeWarning of a `force` take
        (the warning is what a caller sees; the record is at INFO so that
        the two are not the same line twice at the default log level)."""
        writer = self.writer
        taken = writer.take(
            got,
            force=force,
            clock_skew=self.options.clock_skew,
            engine_version=engine.version,
        )
        if taken is None:
            raise HeadMoved()
        previous = got.head.lease
        generation = taken.lease.generation
        if taken.forced and self.reclaimed:
            log.warning(
                "%s: took the lease at once from %r (an earlier process of this writer: "
                "reclaim) at generation %d; that process, if it still runs, is fenced at its "
                "next commit and loses what it did not flush",
                writer.url,
                previous.owner,
                generation,
            )
        elif taken.forced:
            message = (
                f"force takeover of {writer.url}: the lease of {previous.owner!r} had not "
                "expired; whatever it executed but did not flush is lost, and its next "
                "commit will fail with lease_fenced"
            )
            # _take_lease, _once, run, DurableObject._open, Namespace.open: its caller
            warnings.warn(message, RuntimeWarning, stacklevel=6)
            log.info(
                "%s: took the lease by force from %r at generation %d",
                writer.url,
                previous.owner,
                generation,
            )
        elif previous.generation and not previous.released:
            log.info(
                "%s: took the lease from %r at generation %d (its lease had expired)",
                writer.url,
                previous.owner,
                generation,
            )


class Refresh:
    """A read-only object's view moved to the head as stored now: only the
    new WAL segments when the head kept its base and extended its WAL, else
    the whole new base and WAL (a checkpoint, a fold, another database).

    `fetch()` reads, checks, downloads and verifies everything first, and
    touches nothing local: a failure there leaves the view as it was.
    `apply()` then changes the engine; the caller closes the object if it
    fails, since the local copy is then neither view."""

    def __init__(
        self,
        writer: HeadWriter,
        local: LocalCopy,
        options: Options,
        *,
        progress: Callback | None = None,
    ) -> None:
        self.writer, self.local, self.options, self.progress = writer, local, options, progress
        self._got: Stored | None = None
        self._fetches: restore.Fetches | None = None
        self._tail: list[ObjectRef] = []
        self._full = False

    def fetch(self, known: Stored | None = None) -> bool:
        """False when the stored head names the same data as the view: at
        once when it is still the version held (`get_if_changed`: no body).
        `known`: a head just read by someone else (a follower's shared poll)."""
        writer, local = self.writer, self.local
        was = writer.head
        assert was is not None and local.engine is not None and local.work is not None
        got = writer.read_if_changed() if known is None else known
        if got is UNCHANGED:
            return False  # one conditional request: nothing was committed since
        if got is None:
            raise NotFound(
                f"no durable object at {writer.url} any more (no {HEAD_KEY}); the view "
                "was not changed"
            )
        restore.check_protocol(got.head, url=writer.url, read_only=True)
        old, new = was.manifest, got.head.manifest
        if new == old:
            writer.adopt(got)  # a renewal moved only the lease
            return False
        restore.check_engine(local.engine, got.head)
        same_base = new.db == old.db and new.base == old.base and new.seq > old.seq
        extends = new.wal[: len(old.wal)] == old.wal and got.head.timezone == local.timezone
        self._full = not (same_base and extends)
        fetched = got.head
        if not self._full:
            fetched = got.head.model_copy(deep=True)
            fetched.manifest.base = None
            fetched.manifest.set_chain([])
            fetched.manifest.wal = self._tail = new.wal[len(old.wal) :]
        with ThreadPoolExecutor(2) as pool:
            fetches = restore.Fetches(
                pool,
                writer.store,
                writer.oid,
                fetched,
                work=local.work,
                concurrency=self.options.fetch_concurrency,
                codec=writer.codec(fetched),
                progress=self.progress,
            )
            try:
                fetches.segments()
                if fetched.manifest.base is not None:
                    fetches.check_base()
            except BaseException:
                fetches.cancel()
                raise
        self._got, self._fetches = got, fetches
        return True

    def apply(self) -> None:
        got, fetches, local = self._got, self._fetches, self.local
        assert got is not None and fetches is not None and local.engine is not None
        head, url = got.head, self.writer.url
        if self._full:
            engine = local.fresh_engine()
            local.pin_head(head)
            restore.restore(engine, head, fetches, url=url)
        else:
            db = head.manifest.db
            restore.replay(local.engine, db, self._tail, fetches.segments(), url=url)
        self.writer.adopt(got)
        log.info(
            "%s: refreshed to seq %d (%s)",
            url,
            head.manifest.seq,
            "a new base" if self._full else f"{len(self._tail)} new WAL segment(s)",
        )
