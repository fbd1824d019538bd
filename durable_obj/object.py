"""DurableObject: the state machine that keeps a local chDB and its stored
state honest with each other.

    open  = read head -> take the lease (CAS) while the base and every WAL
            segment download in parallel -> verify -> RESTORE -> replay ->
            re-assert the lease (CAS)
    execute = classify -> run locally -> buffer           (NOT durable)
    flush   = create the segment -> CAS the head          (durable on return)
    checkpoint = BACKUP -> create the base -> CAS the head with an empty WAL
    close   = flush -> release the lease (CAS) -> drop the scratch

Three rules the code below exists to hold:

* Nothing is called durable until a head CAS says so, and an ambiguous answer
  is settled by reading back: every head write carries a unique nonce, so the
  stored bytes equal ours exactly when our write landed.
* The fence is the CAS, not the clock. A superseded writer's next commit
  fails its precondition, it reads the head, sees another instance or
  generation, and becomes `LeaseFenced` for good.
* One lock serialises every public call and the heartbeat's renewal.

Lease arithmetic lives in `lease.py`, the entry gates in `engine.py`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any

from durable_obj import lease as leases
from durable_obj.determinism import Pinner
from durable_obj.digest import bytes_digest, file_digest, verify, verify_bytes
from durable_obj.engine import (
    Engine,
    acquire,
    check_compatible,
    check_mutation,
    check_read,
    engine_root,
    prestart,
)
from durable_obj.errors import (
    BackendError,
    ClassificationRefused,
    Closed,
    CommitAmbiguous,
    Corrupt,
    DurableError,
    InvalidArgument,
    LeaseFenced,
    LeaseHeld,
    NotFound,
    ProtocolUnsupported,
    StoreAmbiguous,
)
from durable_obj.head import Head, ObjectRef
from durable_obj.options import Options
from durable_obj.protocol import (
    BACKUP_FORMAT,
    CHECKPOINT_DIR,
    CHECKPOINT_SUFFIX,
    COMMIT_BACKOFF_BASE,
    COMMIT_BACKOFF_MAX,
    HEAD_KEY,
    PROTOCOL_VERSION,
    SUPPORTED_READER_FEATURES,
    SUPPORTED_WRITER_FEATURES,
    WAL_DIR,
    WAL_SUFFIX,
)
from durable_obj.replay import Replayer
from durable_obj.stores.base import Store, Version
from durable_obj.wal import WalBuffer, parse_segment

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

log = logging.getLogger("durable_obj")

_NEW, _OPEN, _CLOSING, _CLOSED = "new", "open", "closing", "closed"
#: How often open() starts over when the head moves under it.
_OPEN_ATTEMPTS = 5


class Result(str):
    """A query's output: a `str`, with `.data()` for chdb.durable-style callers."""

    def data(self) -> str:
        return str(self)


class _HeadMoved(Exception):
    """The head changed between reading it and taking the lease: start over."""


class DurableObject:
    """One durable object. Use `durable_obj.open()` or `Namespace.open()`."""

    def __init__(
        self,
        store: Store,
        oid: str,
        *,
        owner: str | None,
        read_only: bool,
        options: Options,
        progress: Callback | None = None,
    ) -> None:
        self._store = store
        self._oid = oid
        self._opts = options
        self._read_only = read_only
        self._progress = progress
        self._me = leases.Holder(owner or f"anon-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex)
        self._lock = threading.RLock()
        self._state = _NEW
        self._fenced = False
        self._head: Head | None = None
        self._version: Version | None = None
        #: The head as read before open() took the lease: what a failed open restores.
        self._taken_from: Head | None = None
        self._local_expiry = 0.0
        self._buf = WalBuffer()
        self._engine: Engine | None = None
        self._work: str | None = None
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._pinner: Pinner | None = None
        self._buffered_since = 0.0
        self._timezone = options.timezone

    # -- introspection -------------------------------------------------------
    @property
    def oid(self) -> str:
        return self._oid

    @property
    def url(self) -> str:
        return f"{self._store.url.rstrip('/')}/{self._oid}"

    @property
    def db(self) -> str:
        return self._opts.db if self._head is None else self._head.manifest.db

    @property
    def generation(self) -> int:
        return 0 if self._head is None else self._head.lease.generation

    @property
    def seq(self) -> int:
        return 0 if self._head is None else self._head.manifest.seq

    @property
    def pending(self) -> int:
        """Statements executed here and not yet made durable by flush()."""
        return len(self._buf)

    @property
    def fenced(self) -> bool:
        return self._fenced

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def timezone(self) -> str:
        """The object's session time zone: every statement runs and replays in it."""
        return self._timezone

    @property
    def head(self) -> Head | None:
        """A copy of the head as this object last read or wrote it."""
        return None if self._head is None else self._head.model_copy(deep=True)

    def __repr__(self) -> str:
        return (
            f"DurableObject({self.url!r}, state={self._state}, generation={self.generation}, "
            f"seq={self.seq}, pending={self.pending})"
        )

    def __enter__(self) -> DurableObject:
        return self

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
            if self._state != _CLOSED:
                self._teardown_local(background=False)
        except Exception:
            pass

    # -- keys ----------------------------------------------------------------
    def _key(self, rel: str) -> str:
        return f"{self._oid}/{rel}"

    def _read_head(self) -> tuple[Head, Version] | None:
        blob = self._store.get(self._key(HEAD_KEY))
        if blob is None:
            return None
        return Head.parse(blob.data), blob.version

    # -- open ----------------------------------------------------------------
    def _open(self, force: bool) -> None:
        """Open the object; on any failure leave nothing behind but what it was."""
        with self._lock:
            if self._state != _NEW:
                raise DurableError(f"{self.url} was already opened")
            started = time.monotonic()
            # Inside the engine's backups folder: RESTORE reads only from there.
            backups = os.path.join(engine_root(), "backups")
            self._work = tempfile.mkdtemp(prefix=f"{_safe(self._oid)}-", dir=backups)
            try:
                for attempt in range(1, _OPEN_ATTEMPTS + 1):
                    try:
                        existed = self._open_once(force)
                        break
                    except _HeadMoved:
                        if attempt == _OPEN_ATTEMPTS:
                            raise LeaseHeld(
                                f"{self.url}: the head kept changing while taking the lease "
                                f"({attempt} attempts); another writer is active. Nothing "
                                "was changed."
                            ) from None
                        self._reset_engine()
            except BaseException:
                self._abort_open()
                raise
            self._state = _OPEN
            if not self._read_only:
                self._start_heartbeat()
            log.info(
                "opened %s %s: generation %d, seq %d, %d WAL segment(s), %.3f s",
                self.url,
                "read-only" if self._read_only else ("existing" if existed else "new"),
                self.generation,
                self.seq,
                len(self._head.manifest.wal) if self._head else 0,
                time.monotonic() - started,
            )

    def _open_once(self, force: bool) -> bool:
        # The process's engine starts in the background while the head is
        # read; the base and the segments download while the open goes on.
        prestart()
        got = self._read_head()
        if got is not None:
            self._check_protocol(got[0])
        elif self._read_only:
            raise NotFound(
                f"no durable object at {self.url} (no {HEAD_KEY}); a read-only open "
                "never creates one. Check the URL and storage_options."
            )
        with ThreadPoolExecutor(2) as pool:  # the base, and every segment
            futures = [] if got is None else self._start_fetches(pool, got[0])
            try:
                self._start_engine()
                if got is None:
                    if self._create_cold():
                        return False
                    raise _HeadMoved()  # lost the creation race: read it again
                head, version = got
                self._check_engine(head)
                if self._read_only:
                    self._head, self._version = head, version
                else:
                    self._take_lease(head, version, force)
                self._restore(head, futures)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
        if not self._read_only:
            # A slow restore can outlast the TTL: re-assert before handing out
            # a writer, so we never return one whose lease was already taken.
            self._commit()
        return True

    def _check_protocol(self, head: Head) -> None:
        proto = head.protocol
        if proto.version > PROTOCOL_VERSION:
            raise ProtocolUnsupported(
                f"{self.url} declares protocol version {proto.version}; this library speaks "
                f"{PROTOCOL_VERSION}. Upgrade durable_obj; nothing was changed."
            )
        unknown = sorted(set(proto.reader_features) - SUPPORTED_READER_FEATURES)
        if unknown:
            raise ProtocolUnsupported(
                f"{self.url} requires reader feature(s) {unknown} this library lacks; "
                "not opened, nothing was changed"
            )
        unknown = sorted(set(proto.writer_features) - SUPPORTED_WRITER_FEATURES)
        if unknown and not self._read_only:
            raise ProtocolUnsupported(
                f"{self.url} requires writer feature(s) {unknown} this library lacks; "
                "open it read_only=True instead. Nothing was changed."
            )

    def _check_engine(self, head: Head) -> None:
        assert self._engine is not None
        check_compatible(
            name=head.engine.name,
            backup_format=head.engine.backup_format,
            min_reader=head.engine.min_reader,
            running=self._engine.version,
        )

    def _create_cold(self) -> bool:
        """Create the object with one conditional create. False: lost the race."""
        assert self._engine is not None
        now = time.time()
        head = Head.cold(
            db=self._opts.db,
            engine_version=self._engine.version,
            lease=leases.cold(self._me, now, self._opts.lease_ttl),
        )
        head.set_extension("timezone", self._opts.timezone)
        self._pin_session(head)  # validates the time zone before anything is written
        body = head.to_bytes()
        try:
            version = self._store.create(self._key(HEAD_KEY), body)
        except StoreAmbiguous:
            blob = self._store.get(self._key(HEAD_KEY))
            version = blob.version if blob is not None and blob.data == body else None
            if blob is None:
                raise CommitAmbiguous(
                    f"creating {self.url} got no answer and the head is not readable; "
                    "nothing was written. Retry the open."
                ) from None
        if version is None:
            return False
        self._head, self._version = head, version
        self._local_expiry = now + self._opts.lease_ttl
        assert self._engine is not None
        self._engine.create_database(head.manifest.db)
        self._engine.use_database(head.manifest.db)
        return True

    def _take_lease(self, head: Head, version: Version, force: bool) -> None:
        now = time.time()
        taken, forced = leases.acquire(
            head.lease,
            self._me,
            now,
            self._opts.lease_ttl,
            clock_skew=self._opts.clock_skew,
            force=force,
        )
        if forced:
            message = (
                f"force takeover of {self.url}: the lease of {head.lease.owner!r} had not "
                "expired; whatever it executed but did not flush is lost, and its next "
                "commit will fail with lease_fenced"
            )
            warnings.warn(message, RuntimeWarning, stacklevel=4)
            log.warning(message)
        desired = head.model_copy(deep=True)
        desired.lease = taken
        if "timezone" not in desired.extension():
            # Replay of a head without one runs in UTC; say so from now on.
            desired.set_extension("timezone", "UTC")
        assert self._engine is not None
        desired.engine.version = self._engine.version
        body = desired.to_bytes()
        try:
            new = self._store.replace(self._key(HEAD_KEY), body, version)
        except StoreAmbiguous:
            blob = self._store.get(self._key(HEAD_KEY))
            new = blob.version if blob is not None and blob.data == body else None
        if new is None:
            # Lost the race: refuse if someone now holds it, else start over.
            current = self._read_head()
            if current is not None and not force:
                leases.acquire(
                    current[0].lease,
                    self._me,
                    time.time(),
                    self._opts.lease_ttl,
                    clock_skew=self._opts.clock_skew,
                    force=False,
                )
            raise _HeadMoved()
        self._head, self._version = desired, new
        self._taken_from = head
        self._local_expiry = now + self._opts.lease_ttl
        if head.lease.generation and not head.lease.released:
            log.info(
                "%s: took the lease from %r at generation %d",
                self.url,
                head.lease.owner,
                desired.lease.generation,
            )

    def _start_fetches(self, pool: ThreadPoolExecutor, head: Head) -> list[Future[object]]:
        """Download the base and fetch every segment, all at once, each verified."""
        assert self._work is not None
        futures: list[Future[object]] = []
        base = head.manifest.base
        if base is not None:
            futures.append(pool.submit(self._fetch_base, base))
        if head.manifest.wal:
            futures.append(pool.submit(self._fetch_segments, head.manifest.wal))
        return futures

    def _fetch_base(self, ref: ObjectRef) -> str:
        assert self._work is not None
        # chDB tells an archive's format by its extension: keep the key's name.
        path = os.path.join(self._work, os.path.basename(ref.key))
        part = path + ".incoming"
        if not self._store.download(self._key(ref.key), part, self._progress):
            raise Corrupt(
                f"{self.url}: the base {ref.key} named by the head is missing; the object "
                "cannot be restored without it and was not opened. Nothing was changed."
            )
        verify(*file_digest(part), ref, "base checkpoint")
        os.replace(part, path)
        return path

    def _fetch_segments(self, refs: list[ObjectRef]) -> list[list[str]]:
        """Every segment's statements, in manifest order: one batched read."""
        keys = [self._key(ref.key) for ref in refs]
        blobs = self._store.get_many(keys, self._opts.fetch_concurrency)
        segments = []
        for ref, blob in zip(refs, blobs, strict=True):
            if blob is None:
                raise Corrupt(
                    f"{self.url}: WAL segment {ref.key} named by the head is missing; committed "
                    "writes cannot be replayed without it, so the object was not opened"
                )
            verify_bytes(blob.data, ref, "WAL segment")
            segments.append(parse_segment(blob.data, ref.key))
        return segments

    def _restore(self, head: Head, futures: list[Future[object]]) -> None:
        engine = self._engine
        assert engine is not None
        db = head.manifest.db
        self._pin_session(head)
        pending = list(futures)
        if head.manifest.base is not None:
            path = pending.pop(0).result()
            assert isinstance(path, str)
            # RESTORE appends, so it only ever targets a fresh engine.
            engine.restore(db, path)
            os.unlink(path)
        else:
            engine.create_database(db)
        engine.use_database(db)
        replayer = Replayer(engine, db)
        segments = pending.pop(0).result() if pending else []
        assert isinstance(segments, list)
        for ref, statements in zip(head.manifest.wal, segments, strict=True):
            for n, sql in enumerate(statements, start=1):
                replayer.apply(sql, f"{ref.key} statement {n}")
        replayer.finish()
        if replayer.statements:
            log.debug(
                "%s: replayed %d statement(s) in %d engine call(s)",
                self.url,
                replayer.statements,
                replayer.engine_calls,
            )

    def _pin_session(self, head: Head) -> None:
        """The object's time zone (head extension; UTC when absent) and the
        determinism gate, set before anything is restored or replayed."""
        engine = self._engine
        assert engine is not None
        tz = head.extension().get("timezone", "UTC")
        if not isinstance(tz, str):
            raise Corrupt(f"{self.url}: head.durable_obj.timezone is not a string")
        try:
            engine.set_timezone(tz)
        except InvalidArgument as exc:
            raise Corrupt(f"{self.url}: head.durable_obj.timezone: {exc}") from None
        self._timezone = tz
        self._pinner = Pinner(engine, mode=self._opts.nondeterminism, timezone=tz)

    def _start_engine(self) -> None:
        self._engine = acquire()

    def _reset_engine(self) -> None:
        """Between open attempts: an empty engine and scratch."""
        if self._engine is not None:
            self._engine.release()
            self._engine = None
        assert self._work is not None
        for name in os.listdir(self._work):
            os.unlink(os.path.join(self._work, name))
        self._head = self._version = self._taken_from = None

    def _abort_open(self) -> None:
        """Undo a partial open: release a lease we took, drop local state.
        Local state goes even if the release is interrupted."""
        try:
            if not self._read_only and self._head is not None and self._version is not None:
                # The head as it was, not as this open rewrote it (engine
                # version, time zone): only the released lease remains.
                released = (self._taken_from or self._head).model_copy(deep=True)
                released.lease = leases.release(self._head.lease)
                try:
                    self._store.replace(self._key(HEAD_KEY), released.to_bytes(), self._version)
                except DurableError:
                    log.warning("%s: could not release the lease after a failed open", self.url)
        finally:
            self._head = self._version = self._taken_from = None
            self._teardown_local()
            self._state = _CLOSED

    # -- reads and writes ----------------------------------------------------
    def _require_open(self) -> Engine:
        if self._state in (_CLOSED, _CLOSING):
            raise Closed(f"{self.url} is closed")
        if self._state != _OPEN or self._engine is None:
            raise DurableError(f"{self.url} is not open")
        return self._engine

    def _require_writable(self) -> Engine:
        engine = self._require_open()
        if self._read_only:
            raise ClassificationRefused(
                f"{self.url} was opened read-only; execute(), flush() and checkpoint() "
                "need a writer open"
            )
        if self._fenced:
            raise LeaseFenced(
                f"{self.url}: this writer lost its lease (another writer took over); it "
                "accepts no writes. Reopen to continue from the last flushed state."
            )
        return engine

    def query(self, sql: str, fmt: str = "CSV") -> Result:
        """Run one read-only statement locally. No network, nothing logged.

        Allowed on a fenced writer: the local copy is still exactly what this
        instance restored and wrote.
        """
        with self._lock:
            engine = self._require_open()
            analysis = engine.analyze(sql, self.db)
            syntax = engine.syntax_error(sql) if analysis.query_class == "UNKNOWN" else ""
            check_read(analysis, syntax)
            return Result(engine.text(sql, fmt, redact=analysis.has_secrets))

    def execute(self, sql: str, *, allow_nondeterministic: bool = False) -> None:
        """Run one mutation locally and buffer it. NOT durable until flush().

        A statement whose replay could differ (now(), rand(), a table function
        reading outside, ...) is pinned to the values it has now, or refused
        with `Nondeterministic`; see `durable_obj.determinism`. An expert who
        accepts divergent replicas passes `allow_nondeterministic=True`: the
        statement is logged as written, with a warning.
        """
        with self._lock:
            engine = self._require_writable()
            self._buf.admit(sql)  # limits before anything runs
            analysis = engine.analyze(sql, self.db)
            syntax = engine.syntax_error(sql) if analysis.query_class == "UNKNOWN" else ""
            check_mutation(analysis, self.db, syntax)
            if allow_nondeterministic:
                text = sql
                warnings.warn(
                    f"{self.url}: logging a statement unchecked for determinism; replicas "
                    "may replay it to other values",
                    RuntimeWarning,
                    stacklevel=2,
                )
            else:
                assert self._pinner is not None
                text = self._pinner.prepare(sql, self.db)
            line = self._buf.admit(text)
            engine.run(text)
            if not self._buf:
                self._buffered_since = time.monotonic()
            self._buf.append(line)
            if self._auto_flush_due():
                self._flush_locked()
                self._maybe_fold()
            if not _is_insert(text) and self._pinner is not None:
                self._pinner.schema_changed()

    def tables(self) -> list[str]:
        """The object's tables and dictionaries by name (views and the inner
        tables of materialized views excluded)."""
        with self._lock:
            engine = self._require_open()
            out = engine.run_params(
                "SELECT name FROM system.tables WHERE database = {db:String} AND "
                "engine NOT IN ('View', 'MaterializedView') AND NOT startsWith(name, '.inner') "
                "ORDER BY name "
                "FORMAT JSONCompactEachRow",
                {"db": self.db},
            )
            return [json.loads(line)[0] for line in out.splitlines() if line]

    def snapshot(self) -> str:
        """A full BACKUP of the local state as a `.tar` in this object's scratch
        (removed on close). Works on a read-only object too; used by fork."""
        with self._lock:
            engine = self._require_open()
            assert self._work is not None
            path = os.path.join(self._work, f"snapshot-{uuid.uuid4().hex}.tar")
            engine.backup(self.db, path)
            return path

    def export(
        self,
        to: str,
        *,
        format: str = "parquet",
        storage_options: dict[str, Any] | None = None,
        callback: Callback | None = None,
    ) -> list[str]:
        """Write every table to `to/<table>.<ext>` on any fsspec location, for
        ClickHouse, DuckDB or Spark to read many objects at once. Returns the
        URLs written. Each file is written locally first, then streamed."""
        import fsspec

        kind = EXPORT_FORMATS.get(format.lower())
        if kind is None:
            raise InvalidArgument(
                f"unknown export format {format!r}; use one of {sorted(EXPORT_FORMATS)}"
            )
        engine_format, ext = kind
        written = []
        with self._lock:
            engine = self._require_open()
            assert self._work is not None
            fs, root = fsspec.core.url_to_fs(to, **(storage_options or {}))
            for table in self.tables():
                local = os.path.join(self._work, f"export-{uuid.uuid4().hex}.{ext}")
                engine.run_params(
                    "SELECT * FROM {db:Identifier}.{t:Identifier} INTO OUTFILE "
                    f"'{_sql_string(local)}' FORMAT {engine_format}",
                    {"db": self.db, "t": table},
                )
                target = f"{root.rstrip('/')}/{table}.{ext}"
                try:
                    fs.makedirs(root, exist_ok=True)
                    if callback is not None:
                        fs.put_file(local, target, callback=callback)
                    else:
                        fs.put_file(local, target)
                except OSError as exc:
                    raise BackendError(
                        f"exporting {table} to {to} failed: {exc.strerror or type(exc).__name__}"
                    ) from exc
                finally:
                    os.unlink(local)
                written.append(fs.unstrip_protocol(target))
        log.info("%s: exported %d table(s) to %s", self.url, len(written), to)
        return written

    # -- durability ----------------------------------------------------------
    def flush(self) -> str | None:
        """Publish the buffered statements as one WAL segment and commit it.

        On return they survive the machine. Returns the segment key, or None
        when nothing was buffered. On failure the statements stay buffered
        and a later flush() retries them under a new key.
        """
        with self._lock:
            self._require_writable()
            key = self._flush_locked()
            self._maybe_fold()
            return key

    def _auto_flush_due(self) -> bool:
        opts = self._opts
        if not opts.auto_flush or not self._buf:
            return False
        if self._buf.nbytes >= opts.auto_flush_bytes:
            return True
        age = time.monotonic() - self._buffered_since
        return opts.auto_flush_age is not None and age >= opts.auto_flush_age

    def _maybe_fold(self, segments: int | None = None) -> None:
        """Growth policy: fold a long WAL into a new checkpoint, so the head
        stays small and the next open replays little."""
        assert self._head is not None
        wal = self._head.manifest.wal
        limit = self._opts.fold_segments if segments is None else segments
        size_limit = self._opts.fold_bytes if segments is None else 0
        if (limit and len(wal) >= limit) or (size_limit and sum(r.size for r in wal) >= size_limit):
            log.info("%s: folding %d WAL segment(s) into a checkpoint", self.url, len(wal))
            try:
                self._checkpoint_locked()
            except DurableError as exc:
                # The flush before it is committed; folding only saves replay
                # time, so a failure is reported, never raised over a success.
                log.warning("%s: folding the WAL failed (%s); will retry", self.url, exc)

    def _flush_locked(self) -> str | None:
        if not self._buf:
            return None
        assert self._head is not None
        payload = self._buf.serialize()
        size, sha256 = bytes_digest(payload)
        manifest = self._head.manifest
        seq = manifest.seq + 1
        ref = ObjectRef(
            key=f"{WAL_DIR}/{self.generation}-{seq}-{uuid.uuid4().hex[:8]}{WAL_SUFFIX}",
            size=size,
            sha256=sha256,
        )
        self._publish(ref, lambda: self._store.create(self._key(ref.key), payload))
        saved = (list(manifest.wal), manifest.seq)
        manifest.wal = [*manifest.wal, ref]
        manifest.seq = seq
        try:
            self._commit()
        except BaseException:
            manifest.wal, manifest.seq = saved
            raise
        count = len(self._buf)
        self._buf.clear()
        log.debug("%s: flushed %d statement(s) as %s", self.url, count, ref.key)
        return ref.key

    def checkpoint(self) -> str:
        """Snapshot the database as a new base and empty the WAL list.

        Shortens the next open; durability never depends on it. Includes
        buffered statements, which it makes durable too.
        """
        with self._lock:
            self._require_writable()
            return self._checkpoint_locked()

    def _checkpoint_locked(self) -> str:
        engine = self._engine
        assert engine is not None and self._head is not None and self._work is not None
        started = time.monotonic()
        manifest = self._head.manifest
        seq = manifest.seq + 1
        name = f"{self.generation}-{seq}-{uuid.uuid4().hex[:8]}{CHECKPOINT_SUFFIX}"
        local = os.path.join(self._work, name)
        engine.backup(manifest.db, local)
        try:
            size, sha256 = file_digest(local)
            ref = ObjectRef(key=f"{CHECKPOINT_DIR}/{name}", size=size, sha256=sha256)
            self._publish(
                ref, lambda: self._store.create_file(self._key(ref.key), local, self._progress)
            )
        finally:
            os.unlink(local)
        saved = self._head.model_copy(deep=True)
        manifest.base = ref
        manifest.wal = []
        manifest.seq = seq
        # This engine wrote the archive: it is now the oldest that reads it.
        self._head.engine.version = engine.version
        self._head.engine.min_reader = engine.version
        self._head.engine.backup_format = BACKUP_FORMAT
        try:
            self._commit()
        except BaseException:
            saved.lease = self._head.lease
            self._head = saved
            raise
        self._buf.clear()
        log.info(
            "%s: checkpoint %s, %d bytes, %.3f s",
            self.url,
            ref.key,
            size,
            time.monotonic() - started,
        )
        return ref.key

    def _publish(self, ref: ObjectRef, create: Callable[[], Version | None]) -> None:
        """Create an immutable, uniquely named key; settle an unknown answer by
        reading it back (same size and SHA-256 means it landed)."""
        try:
            version = create()
        except StoreAmbiguous as exc:
            if not self._landed(ref):
                raise CommitAmbiguous(
                    f"{self.url}: uploading {ref.key} got no answer and it cannot be read "
                    "back; nothing was committed and the statements stay buffered. "
                    "Retry flush()."
                ) from exc
            return
        if version is None:
            raise BackendError(
                f"{self.url}: {ref.key} already exists, yet every key is minted unique; "
                "something else writes under this object's prefix. Nothing was committed."
            )

    def _landed(self, ref: ObjectRef) -> bool:
        assert self._work is not None
        probe = os.path.join(self._work, f"probe-{uuid.uuid4().hex}")
        try:
            if not self._store.download(self._key(ref.key), probe):
                return False
            verify(*file_digest(probe), ref, "uploaded object")
            return True
        except DurableError:
            return False
        finally:
            if os.path.exists(probe):
                os.unlink(probe)

    def _commit(self, *, release: bool = False) -> None:
        """Write `self._head` by compare-and-swap, and prove it landed.

        Renews the lease (or releases it) in the same write. A failed
        precondition or an unknown answer is settled by reading the head: our
        exact bytes mean success; another instance or generation means we
        were fenced; our own lease at another version means an earlier
        ambiguous write of ours landed, so refresh the token and retry.
        """
        assert self._head is not None and self._version is not None
        deadline = time.monotonic() + self._opts.commit_deadline
        ambiguous = False
        attempt = 0
        while True:
            attempt += 1
            now = time.time()
            head = self._head
            head.lease = (
                leases.release(head.lease)
                if release
                else leases.renew(head.lease, now, self._opts.lease_ttl)
            )
            body = head.to_bytes()
            new: Version | None = None
            try:
                new = self._store.replace(self._key(HEAD_KEY), body, self._version)
            except StoreAmbiguous:
                ambiguous = True
            if new is not None:
                self._version = new
                self._local_expiry = now + self._opts.lease_ttl
                return
            try:
                blob = self._store.get(self._key(HEAD_KEY))
            except BackendError:
                blob = None
                ambiguous = True
            else:
                if blob is not None and blob.data == body:
                    self._version = blob.version
                    self._local_expiry = now + self._opts.lease_ttl
                    return
                current = None if blob is None else Head.parse(blob.data)
                if current is None or not leases.owns(
                    current.lease, self._me, head.lease.generation
                ):
                    self._fence(current)
                if blob is not None:
                    self._version = blob.version
            if time.monotonic() >= deadline:
                if ambiguous:
                    raise CommitAmbiguous(
                        f"{self.url}: could not prove whether the head commit landed after "
                        f"{attempt} attempt(s); the statements stay buffered. The next open "
                        "shows whether they were committed."
                    )
                raise BackendError(
                    f"{self.url}: the head commit did not apply after {attempt} attempt(s); "
                    "nothing was committed and the statements stay buffered"
                )
            time.sleep(min(COMMIT_BACKOFF_BASE * 2 ** (attempt - 1), COMMIT_BACKOFF_MAX))

    def _fence(self, current: Head | None) -> None:
        self._fenced = True
        holder = "nobody (the head is gone)" if current is None else repr(current.lease.owner)
        log.warning("%s: fenced; the lease now belongs to %s", self.url, holder)
        raise LeaseFenced(
            f"{self.url}: another writer ({holder}) took the lease; this commit was refused "
            "and nothing more from this writer will be committed. Unflushed statements are "
            "lost; reopen to continue from the last flushed state."
        )

    # -- heartbeat -----------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._hb_stop.clear()
        self._hb_thread = threading.Thread(
            target=self._heartbeat, name=f"durable_obj-lease-{self._oid}", daemon=True
        )
        self._hb_thread.start()

    def _stop_heartbeat(self) -> None:
        self._hb_stop.set()
        thread, self._hb_thread = self._hb_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _heartbeat(self) -> None:
        """Renew every interval, until closed or fenced."""
        while not self._hb_stop.wait(self._opts.heartbeat):
            if not self._beat():
                return

    def _beat(self) -> bool:
        """One renewal (or a due auto-flush). If renewals fail until the lease
        we believe in runs out, fence ourselves: from then on another writer
        may take over. False: beat no more. (A test drives it directly to
        stall the heartbeat deterministically.)"""
        with self._lock:
            if self._state != _OPEN or self._fenced:
                return False
            try:
                if self._auto_flush_due():
                    self._flush_locked()  # its commit renews the lease too
                    self._maybe_fold()
                else:
                    self._commit()
            except LeaseFenced:
                return False
            except DurableError as exc:
                if leases.must_self_fence(self._local_expiry, time.time()):
                    self._fenced = True
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
    def close(self, *, discard: bool = False) -> None:
        """Flush, release the lease, drop the local copy.

        If the flush fails, the error is raised and the object stays open with
        its statements buffered: retry close() or flush(), or call
        close(discard=True) to drop them knowingly.
        """
        with self._lock:
            if self._state in (_CLOSED, _CLOSING, _NEW):
                if self._state == _NEW:
                    self._state = _CLOSED
                return
            self._state = _CLOSING
        self._stop_heartbeat()
        with self._lock:
            try:
                if not self._read_only and not self._fenced:
                    if not discard:
                        self._flush_locked()
                        self._maybe_fold(self._opts.close_fold_segments)
                    elif self._buf:
                        log.warning(
                            "%s: close(discard=True) dropped %d unflushed statement(s)",
                            self.url,
                            len(self._buf),
                        )
                    self._commit(release=True)
                elif self._fenced and self._buf and not discard:
                    lost = len(self._buf)
                    self._buf.clear()
                    raise LeaseFenced(
                        f"{self.url}: this writer was fenced; {lost} unflushed statement(s) "
                        "were never committed"
                    )
            except LeaseFenced:
                self._teardown_local()
                self._state = _CLOSED
                raise
            except BaseException:
                if discard:
                    self._teardown_local()
                    self._state = _CLOSED
                else:
                    self._state = _OPEN
                    self._start_heartbeat()
                raise
            self._teardown_local()
            self._state = _CLOSED

    def _abandon(self) -> None:
        """What a SIGKILL leaves: no flush, no release, only local resources
        freed (so a test can reopen in the same process). Testing only."""
        self._hb_stop.set()
        thread, self._hb_thread = self._hb_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._teardown_local()
            self._state = _CLOSED

    def _teardown_local(self, *, background: bool = True) -> None:
        if self._engine is not None:
            if background and not sys.is_finalizing():
                self._engine.release()
            else:
                self._engine.close()  # from __del__ or at exit: no queries now
            self._engine = None
        work, self._work = self._work, None
        if not work:
            return
        if background and not sys.is_finalizing():
            # A large scratch takes a while to unlink and nothing waits on it.
            # Not a daemon, so the process finishes it before exiting.
            threading.Thread(target=shutil.rmtree, args=(work, True), name="durable_obj-rm").start()
        else:
            # From __del__ or at interpreter exit no thread may be started.
            shutil.rmtree(work, ignore_errors=True)


#: export format -> (engine output format, file extension)
EXPORT_FORMATS = {
    "parquet": ("Parquet", "parquet"),
    "csv": ("CSVWithNames", "csv"),
    "jsonl": ("JSONEachRow", "jsonl"),
}


def _sql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _is_insert(sql: str) -> bool:
    return sql.lstrip()[:6].lower() == "insert"


def _safe(oid: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", oid)[:48] or "obj"
