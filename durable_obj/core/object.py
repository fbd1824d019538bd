"""DurableObject: the state machine that keeps a local chDB and its stored
state honest with each other.

    open  = read head -> take the lease (CAS) while the base and every WAL
            segment download in parallel -> verify -> RESTORE -> replay ->
            re-assert the lease (CAS) if that took over a heartbeat interval
    execute = classify -> pin or refuse -> run locally -> buffer (NOT durable)
    flush   = create the segment -> CAS the head          (durable on return)
    checkpoint = BACKUP -> create the base -> CAS the head with an empty WAL
    refresh = (a reader) read head -> fetch + verify the new segments, or
              the new base -> replay them, or RESTORE anew
    close   = flush -> release the lease (CAS) -> drop the scratch

Three rules the code below exists to hold:

* Nothing is called durable until a head CAS says so, and an ambiguous answer
  is settled by reading back (`commit.py`, the one head writer).
* The fence is the CAS, not the clock. A superseded writer's next commit
  fails its precondition, it reads the head, sees another instance or
  generation, and becomes `LeaseFenced` for good.
* One lock serialises every public call and the heartbeat's renewal.

Only the states, their transitions and the lock live here. The steps are
elsewhere, each taking its inputs as arguments: the open sequence in
`opening.py` (a reader's refresh too), head writes and their reconcile in
`commit.py`, the segments and bases they commit in `publishing.py`, flush,
checkpoint, auto-flush and folding in `durability.py`,
fetch/verify/restore/replay in `restore.py`, lease arithmetic in `lease.py`,
the reads in `queries.py`, the engine, scratch folder and statement gates in
`local.py` (the statement gate itself in `gate/`, one straight line in
`gate/pipeline.py`), the heartbeat
thread in `heartbeat.py`, export in `export.py`, the buffer and who is owed
a flush() answer in `pending.py`, the read-only properties and the entry
gates in `surface.py`, the warning for an object left open in `unclosed.py`,
a follower's shared poll in `follow.py`, the change feed in `feed.py`,
TTL as logged deletes in `expiry.py`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from durable_obj.core import catalog, feed, follow, interrupts, observed, unclosed
from durable_obj.core.admission import Admission
from durable_obj.core.commit import HeadWriter
from durable_obj.core.durability import Durability
from durable_obj.core.expiry import Expiry
from durable_obj.core.group import GroupCommit
from durable_obj.core.heartbeat import BUSY, Heartbeat
from durable_obj.core.opening import Opener, Refresh
from durable_obj.core.options import Options
from durable_obj.core.pending import Pending
from durable_obj.core.queries import Params
from durable_obj.core.readback import Stored
from durable_obj.core.surface import _CLOSED, _CLOSING, _NEW, _OPEN, refuse_in_transaction
from durable_obj.core.surface import Result as Result
from durable_obj.core.transaction import Transactions
from durable_obj.core.units import _Stopped, collecting
from durable_obj.errors import DurableError, InvalidArgument, LeaseFenced
from durable_obj.replica.export import check_format, export_tables
from durable_obj.replica.local import LocalCopy
from durable_obj.wire import lease as leases
from durable_obj.wire.keyring import is_compressed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from fsspec.callbacks import Callback

    from durable_obj.stores.base import Store

log = logging.getLogger("durable_obj")


class DurableObject(Expiry, Durability, Transactions):
    """One durable object. Use `durable_obj.open()` or `Namespace.open()`."""

    #: The async lane every `AsyncDurableObject` over this object shares (aio).
    _async_lane: Any = None

    def __init__(
        self,
        store: Store,
        oid: str,
        *,
        owner: str | None,
        read_only: bool,
        options: Options,
        progress: Callback | None = None,
        at: int | datetime | None = None,
    ) -> None:
        self._oid = oid
        #: A past point this read-only view is fixed at (time travel), or None.
        self._at = at
        self._opts = options
        self._read_only = read_only
        self._progress = progress
        self._lock = threading.RLock()
        self._state = _NEW
        #: The head as last read or proven written, and every write of it.
        self._w = HeadWriter(
            store,
            oid,
            holder=leases.Holder(owner or f"anon-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex),
            clock=time,
            lease_ttl=options.lease_ttl,
            commit_deadline=options.commit_deadline,
            retention=options.retention,
            encryption=options.encryption,
            compression=options.compression,
        )
        #: The engine, the scratch folder, the session time zone and pinner.
        self._local = LocalCopy(
            oid, url=self._w.url, mode=options.nondeterminism, timezone=options.timezone
        )
        self._local.gate.external = options.external_reads
        self._local.gate.bounded = any(
            b and b.seconds > 0 for b in (options.query_bounds, options.write_bounds)
        )
        self._buf = Pending(self._compresses)
        self._group = GroupCommit(self._lock, self._buf, self.url, self._proof)
        self._diverged = False
        self._txn = None
        self._queued: list[Any] = []
        self._admission = Admission(options.max_units_in_flight)
        self._queue_lock = threading.Lock()
        self._hb: Heartbeat | None = None
        self._fence_note = ""
        self._warned = False
        #: The poll this follower shares (`follow.py`), and why it stopped.
        self._follow_poll: object | None = None
        self._follow_error: DurableError | None = None

    def __enter__(self) -> DurableObject:
        return self

    def _compresses(self) -> bool:
        """Whether the held head declares a zstd WAL (lines are then
        compressed as they are buffered)."""
        head = self._w.head
        return head is not None and is_compressed(head)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Local resources only: never a flush or a release, which are network
        # operations with outcomes a caller must see. The lease expires alone.
        try:
            self._left_open("collected")
        finally:
            with contextlib.suppress(Exception):
                if self._state != _CLOSED:
                    hb, self._hb = self._hb, None
                    if hb is not None:
                        hb.stop(wait=False)  # a finalizer may run on any thread
                    self._local.teardown(background=False)

    # -- open ----------------------------------------------------------------
    @observed.open
    def _open(
        self, force: bool, create: bool = True, reclaim: Callable[[str], bool] | None = None
    ) -> None:
        """Open the object; on any failure leave nothing behind but what it was."""
        follow.check(self, read_only=self._read_only, at=self._at)
        with self._lock:
            if self._state != _NEW:
                raise DurableError(f"{self.url} was already opened")
            started = time.monotonic()
            self._local.make_scratch()
            try:
                existed = Opener(
                    self._w,
                    self._local,
                    self._opts,
                    read_only=self._read_only,
                    force=force,
                    create=create,
                    progress=self._progress,
                    at=self._at,
                    reclaim=reclaim,
                ).run()
                if not self._read_only:
                    catalog.note_writer(self._w)  # the catalog's row: a hint, never raises
            except BaseException:
                self._abort_open()
                raise
            self._state = _OPEN
            unclosed.track(self)
            if not self._read_only:
                self._start_heartbeat()
            elif self._opts.follow is not None:
                follow.join(self)
            head = self._w.head
            log.info(
                "opened %s %s: generation %d, seq %d, %d WAL segment(s), %.3f s",
                self.url,
                "read-only" if self._read_only else ("existing" if existed else "new"),
                self.generation,
                self.seq,
                len(head.manifest.wal) if head else 0,
                time.monotonic() - started,
            )

    def _abort_open(self) -> None:
        """Undo a partial open: release a lease we took, drop local state.
        Local state goes even if the release is interrupted."""
        try:
            if not self._read_only:
                self._w.release_after_failed_open()
        finally:
            self._w.forget()
            self._local.teardown()
            self._state = _CLOSED

    def refresh(self) -> bool:
        """Move a read-only object's view to the state last committed: fetch
        only the new WAL segments, or the new base after a checkpoint. True
        if the view moved. Statements a writer has not flushed are never seen.

        A failure before anything local changed (the head gone, a corrupt
        segment, the network) leaves the view as it was; one while applying
        closes the object (open it again). A writer's copy is always the
        newest state, so on a writer refresh() is a no-op (False); a fenced
        writer is `LeaseFenced`.
        """
        with self._lock:
            self._require_open()
            if not self._read_only:
                self._require_writable()
                return False
            if self._at is not None:
                raise InvalidArgument(
                    f"{self.url} was opened at a past point (at={self._at!r}, seq {self.seq}); "
                    "that view never moves. Open it again without at= for the current state."
                )
            return self._refresh_locked()

    @observed.refresh
    def _refresh_locked(self, known: Stored | None = None) -> bool:
        """refresh() with the lock held; `known`: a head a follower's poll read."""
        step = Refresh(self._w, self._local, self._opts, progress=self._progress)
        if not step.fetch(known):
            return False
        try:
            step.apply()
        except BaseException:
            log.warning("%s: refresh failed while applying; the object was closed", self.url)
            self._w.forget()
            self._local.teardown()
            self._state = _CLOSED
            raise
        return True

    def changes(
        self, since: int | None = None, *, follow: bool = True, poll: float | None = None
    ) -> Iterator[feed.Change]:
        """Every commit after seq `since` (default: this view's seq), one
        `Change` each, in seq order: a `commit` (its statements as logged)
        or a `checkpoint`, with its seq, commit time, generation and owner;
        read from storage, never from the local copy. With `follow` (the
        default) it waits for new commits, reading the head every `poll`
        seconds (default: the `follow` option, else 1 s); without, it ends
        at the newest. Keep the last seq handled and pass it back as `since`
        to resume exactly after it. `FeedGap` (a `NotFound`) when a commit
        after `since` is outside the retention window or collected by gc:
        it names the oldest seq still served. See `durable_obj.core.feed`."""
        return feed.changes(*self._feed(since, poll), follow=follow)

    def _feed(self, since: int | None, poll: float | None) -> tuple[feed.Feed, float]:
        """The feed `changes()` reads, and its poll interval (checked)."""
        self._require_open(engine=False)  # state only: no lock (the async face calls it)
        start = self.seq if since is None else since
        interval = poll if poll is not None else self._opts.follow or feed.DEFAULT_POLL
        feed.check_poll(interval)
        source = feed.Feed(
            self._w.store, self._oid, since=start, retention=self._opts.retention, keys=self._w.keys
        )
        return source, interval

    # -- writes ----------------------------------------------------------------
    @observed.refused("execute")
    def execute(
        self, sql: str, *, params: Params = None, allow_nondeterministic: bool = False
    ) -> None:
        """Run one mutation locally and buffer it. NOT durable until flush().

        `params` binds the statement's `{name:Type}` placeholders (ClickHouse
        query parameters; `durable_obj.gate.params`): each value is read by the
        engine as that type, never pasted as SQL, and the statement runs and
        is logged with the value's exact literal in the placeholder's place,
        so every replay reads the same value.

        A statement whose replay could differ (now(), rand(), a table function
        reading outside, ...) is pinned to the values it has now, or refused
        with `Nondeterministic`; see `durable_obj.gate.determinism`. An expert who
        accepts divergent replicas passes `allow_nondeterministic=True`: the
        statement is logged as written, with a warning. A `CREATE ... IF NOT
        EXISTS` of an existing name, or a `DROP ... IF EXISTS` of an absent
        one, runs but is not logged: it changed nothing.
        """
        batch = collecting(self)
        if batch is not None:  # a batch() block of this thread or task: joins its unit
            batch.execute(sql, params=params, allow_nondeterministic=allow_nondeterministic)
            return
        with self._lock:
            try:
                line = self._run_one(sql, params, allow_nondeterministic)
            except _Stopped as stopped:
                raise self._undo(stopped) from None
            if line is None:
                return
            self._buf.add(line)
            if self._auto_flush_due():
                self._flush_locked()

    def snapshot(self) -> str:
        """A full BACKUP of the local state as a `.tar` in this object's scratch
        (removed on close). Works on a read-only object too; used by fork."""
        refuse_in_transaction(self, "snapshot()")  # it would hold what is not committed
        with self._lock:
            return self._local.snapshot(self._require_open(), self.db)

    def export(
        self,
        to: str,
        *,
        format: str = "parquet",
        storage_options: dict[str, Any] | None = None,
        callback: Callback | None = None,
    ) -> list[str]:
        """Write every table to `to/<table>.<ext>` on any fsspec location, a
        table name that is not plain percent-encoded into one file name (see
        `durable_obj.replica.export`). Returns the URLs written."""
        refuse_in_transaction(self, "export()")  # it would write what may be rolled back
        check_format(format)
        with self._lock:
            engine = self._require_open()
            assert self._local.work is not None
            written = export_tables(
                engine,
                self.db,
                to=to,
                format=format,
                work=self._local.work,
                storage_options=storage_options,
                callback=callback,
            )
        log.info("%s: exported %d table(s) to %s", self.url, len(written), to)
        return written

    # -- heartbeat -----------------------------------------------------------
    def _start_heartbeat(self) -> None:
        opts = self._opts
        self._hb = Heartbeat(
            self._beat,
            opts.heartbeat,
            name=f"durable_obj-lease-{self._oid}",
            check=self._tick,
            check_every=opts.auto_flush_age if opts.auto_flush else None,
        )
        self._hb.start()
        self._start_sweeper()  # the TTL sweep (`expiry.py`), if it has an interval

    def _stop_heartbeat(self) -> None:
        self._stop_sweeper()
        hb, self._hb = self._hb, None
        if hb is not None:
            hb.stop()

    def _beat(self) -> bool | Literal["busy"]:
        """One renewal (or a due auto-flush). If renewals fail until the lease
        we believe in runs out, fence ourselves: from then on another writer
        may take over. False: beat no more. (A test drives it directly to
        stall the heartbeat deterministically.)"""
        return self._on_heartbeat(renew=True)

    def _tick(self) -> bool | Literal["busy"]:
        """Between beats: flush a buffer whose oldest statement reached
        auto_flush_age, so an idle writer's statements do not wait for the
        next execute()."""
        return self._on_heartbeat(renew=False)

    def _on_heartbeat(self, *, renew: bool) -> bool | Literal["busy"]:
        # Never wait for the lock on a shared worker: a caller holding it
        # (a long flush, checkpoint or query) is asked again a moment later.
        if not self._lock.acquire(blocking=False):
            return BUSY
        try:
            return self._heartbeat_locked(renew=renew)
        finally:
            self._lock.release()

    def _heartbeat_locked(self, *, renew: bool) -> bool | Literal["busy"]:
        if self._state != _OPEN or self._w.fenced:
            return False
        if self._group.in_flight:
            return BUSY  # a commit on the wire renews the lease; never wait for it here
        try:
            if self._auto_flush_due():
                self._flush_locked()  # its commit renews the lease too
            elif renew:
                self._w.commit()
        except LeaseFenced as exc:
            self._fenced_by(exc)
            return False
        except DurableError as exc:
            if leases.must_self_fence(self._w.expires_at, time.time()):
                self._w.fenced = True
                self._fence_note = "it could not renew the lease before it ran out"
                log.warning(
                    "%s: could not renew the lease before it expired (%s); "
                    "this writer fenced itself",
                    self.url,
                    type(exc).__name__,
                )
                return False
            log.info("%s: lease renewal failed, will retry: %s", self.url, exc)
        return True

    # -- close ---------------------------------------------------------------
    @interrupts.settled  # a Ctrl-C takes effect once it settles
    def close(self, *, discard: bool = False) -> None:
        """Flush, release the lease, drop the local copy.

        If the flush fails, the error is raised and the object stays open with
        its statements buffered: retry close() or flush(), or call
        close(discard=True) to drop them knowingly. A fenced writer (state
        "fenced") has nothing left to commit or release: close() always
        closes it, and raises `LeaseFenced` if that dropped unflushed
        statements (unless discard=True). Closing a closed object does nothing.
        """
        refuse_in_transaction(self, "close()")
        with self._lock:
            self._await_transaction()  # another caller's transaction ends first
            if self._state in (_CLOSED, _CLOSING, _NEW):
                if self._state == _NEW:
                    self._state = _CLOSED
                return
            self._state = _CLOSING
        follow.leave(self)
        self._stop_heartbeat()
        row = None
        with self._lock:
            try:
                self._group.idle()  # another thread's commit in flight ends first
                if self._w.fenced:
                    lost = self._buf.drop()
                    if lost and not discard:
                        raise self._closed_fenced(lost)
                elif not self._read_only:
                    if not discard:
                        self._flush_locked()
                        self._maybe_fold(self._opts.close_fold_segments)
                    elif self._buf:
                        log.warning(
                            "%s: close(discard=True) dropped %d unflushed statement(s)",
                            self.url,
                            self._buf.drop(),
                        )
                    self._w.commit(release=True)
                    row = catalog.row_of_writer(self._w)
            except LeaseFenced:
                self._local.teardown()
                self._state = _CLOSED
                raise
            except BaseException:
                if discard:
                    self._local.teardown()
                    self._state = _CLOSED
                else:
                    self._state = _OPEN
                    self._start_heartbeat()
                raise
            self._local.teardown()
            self._state = _CLOSED
        catalog.put(self._w.store, row, wait=True)

    def _abandon(self) -> None:
        """What a SIGKILL leaves: no flush, no release, only local resources
        freed (so a test can reopen in the same process). Testing only."""
        self._stop_heartbeat()
        with self._lock:
            self._local.teardown()
            self._state = _CLOSED
