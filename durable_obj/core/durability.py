"""Durability: flush, checkpoint, and the policies that call them on their
own (auto-flush, folding a long WAL into a checkpoint).

    flush      = create the segment -> CAS the head         (durable on return)
    checkpoint = BACKUP -> create the base -> CAS the head with an empty WAL

The commits themselves are `publishing.py` (the keys) and `commit.py` (the
head); the group commit a flush joins is `group.py`, through `units.py`.
These are the methods of `DurableObject` that start them, under its lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from durable_obj.core import chains, interrupts, observed, publishing
from durable_obj.core.catalog import note_writer
from durable_obj.core.options import make_options
from durable_obj.core.surface import refuse_in_transaction
from durable_obj.core.units import Units
from durable_obj.errors import DurableError, InvalidArgument, LeaseFenced
from durable_obj.replica import links
from durable_obj.replica.archives import NotIncremental
from durable_obj.stores.growing import GrowingFile, SourceFailed
from durable_obj.wire import keyring, sealer
from durable_obj.wire.beside import Beside
from durable_obj.wire.protocol import mint_checkpoint_key, object_key
from durable_obj.wire.v1base import DefaultBase

if TYPE_CHECKING:
    from durable_obj.wire.head import Head
    from durable_obj.wire.keys import KeyProvider
    from durable_obj.wire.sealing import Codec
    from durable_obj.wire.unsealing import Hashing

log = logging.getLogger("durable_obj")


class _Sealed:
    """The size and SHA-256 of a sealed base, taken by its sealer as it
    writes it (`sealer.py`): `result()` waits for the sealing to end."""

    def __init__(self, stored: GrowingFile) -> None:
        self.stored = stored
        self.taken: Hashing | None = None

    def result(self) -> tuple[int, str]:
        self.stored.wait()  # SourceFailed if the sealing (or BACKUP) failed
        assert self.taken is not None
        return self.taken.result()


def _sealer(codec: Codec, key: str, archive: GrowingFile, sealed: _Sealed) -> Callable[[], None]:
    """The producer of the sealed base `key` at `sealed`'s file, read from
    `archive` while BACKUP still writes it, chunks sealed in parallel."""

    def seal() -> None:
        assert codec.key is not None
        with open(sealed.stored.path, "wb") as out:
            sealed.taken = sealer.seal_read(codec.key, codec.oid, key, archive.read, out)

    return seal


class Durability(Units):
    """flush(), checkpoint(), auto-flush and folding, of `DurableObject`."""

    @interrupts.settled  # a Ctrl-C takes effect once the commit settles
    def flush(self) -> str | None:
        """Publish the buffered statements as one WAL segment and commit it.

        On return every statement executed before the call survives the
        machine. Returns the new segment's key. When nothing is buffered it
        returns, once, the key of the last commit (a segment, or a base) if
        this thread executed statements since it was last told a key: another
        thread's flush(), a checkpoint or the auto-flush committed them. Else
        None: this thread executed nothing since. On failure the statements
        stay buffered and a later flush() retries them under a new key.
        """
        refuse_in_transaction(self, "flush()")
        with self._lock:
            self._require_writable(engine=False)
            if not self._buf:
                return self._buf.answer()
            return self._durable_through(self._buf.end)

    def _auto_flush_due(self) -> bool:
        return bool(self._buf) and self._opts.auto_flush_due(self._buf.buf.nbytes, self._buf.age())

    def _maybe_fold(self, segments: int | None = None) -> None:
        """Growth policy: fold a long WAL into a new checkpoint, so the head
        stays small and the next open replays little."""
        assert self._w.head is not None
        wal = self._w.head.manifest.wal
        if self._txn is not None or self._diverged:
            return  # the local copy is not the log's now: a checkpoint would store it
        cheap = chains.cheap(self._w.head, self._local, self._opts)
        if self._opts.fold_due(wal, segments, cheap=cheap):
            log.info("%s: folding %d WAL segment(s) into a checkpoint", self.url, len(wal))
            try:
                self._checkpoint_locked()
            except DurableError as exc:
                # The flush before it is committed; folding only saves replay
                # time, so a failure is reported, never raised over a success.
                log.warning("%s: folding the WAL failed (%s); will retry", self.url, exc)

    def _flush_locked(self) -> None:
        """Commit everything buffered, joining a commit in flight (group.py);
        nobody is told the key (an auto-flush, close)."""
        if self._buf:
            self._group.through(self._buf.end, self._commit_payload)
            self._maybe_fold()

    @interrupts.settled
    def rotate_key(self, new: KeyProvider) -> int:
        """Wrap this encrypted object's data keys under the key provider
        `new` instead of the one it was opened with: one head write, no data
        rewritten. From then on the object opens with `new` only. Returns
        how many data keys were rewrapped. A new data key comes with the next
        full base (`checkpoint(full=True)`; an increment keeps the active
        key). `InvalidArgument` on a plain object."""
        with self._lock:
            self._require_writable()
            old, head = self._w.keys.provider, self._w.head
            assert head is not None
            if old is None or not keyring.is_encrypted(head):
                raise InvalidArgument(
                    f"{self.url} is not encrypted: there is no key to rotate. Fork it into "
                    "an encrypted object instead (durable_obj.fork(..., dst_encryption=key))."
                )
            make_options({"encryption": new})  # the same check open() makes
            self._group.idle()
            saved = head.model_copy(deep=True)
            proven = self._w.proven
            count = keyring.rewrap(head, self.oid, old, new)
            try:
                self._w.commit()
            except BaseException as exc:
                if self._w.proven is proven:  # (an interrupt after the proof keeps it)
                    saved.lease = head.lease
                    self._w.head = saved
                if isinstance(exc, LeaseFenced):
                    self._fenced_by(exc)
                raise
            self._w.keys = keyring.Keys(self.oid, self.url, new)
            note_writer(self._w)  # the row's encrypted_with (a hint: never raises)
            log.info("%s: %d data key(s) rewrapped under %s", self.url, count, new.key_id)
            return count

    @interrupts.settled  # a Ctrl-C takes effect once the checkpoint settles
    def checkpoint(self, *, full: bool = False) -> str:
        """Snapshot the database as a new base and empty the WAL list.

        Shortens the next open; durability never depends on it. Includes
        buffered statements, which it makes durable too. The base is an
        increment over the one before it when the policy allows
        (`core/chains.py`); `full=True` takes a full one.
        """
        refuse_in_transaction(self, "checkpoint()")
        with self._lock:
            self._require_writable()
            return self._checkpoint_locked(caller_told=True, full=full)

    @observed.checkpoint
    def _checkpoint_locked(self, *, caller_told: bool = False, full: bool = False) -> str:
        with interrupts.settling(self.url):  # (a fold, from a flush or the auto-flush)
            before, _ = self._proof()
            try:
                return self._checkpoint_settling(caller_told=caller_told, full=full)
            except BaseException:
                proven, landed = self._proof()
                if proven is not before and landed is not None:
                    # Proven, then interrupted (a second Ctrl-C): the base
                    # holds every buffered line, never committed again.
                    self._buf.committed(landed, caller_told=caller_told)
                raise

    def _checkpoint_settling(self, *, caller_told: bool, full: bool) -> str:
        self._group.idle()  # never beside a commit in flight; the lock is held from here
        while (txn := self._txn) is not None:  # one began while idle() waited: not logged yet
            assert not txn.admits(), "a checkpoint inside its own transaction"
            txn.wait()
            self._group.idle()
        engine, work = self._local.engine, self._local.work
        assert engine is not None and work is not None
        started = time.monotonic()
        key = mint_checkpoint_key(self.generation, self.seq + 1)
        local = os.path.join(work, os.path.basename(key))
        head = self._w.head
        assert head is not None
        increment = chains.plan(head, self._local, self._opts, full=full, engine=engine)
        over = None if increment is None else increment.base
        # BACKUP writes the archive on a thread while it is hashed and
        # stored (growing.py); nothing of a failed BACKUP is committed.
        # a base of `default` is written in V1's shape (v1base.py)
        retry_full = False
        archive = GrowingFile(local, DefaultBase(local) if self.db == "default" else None)
        backup = archive.produce(lambda: engine.backup(self.db, local, over))
        # The listing the next increment needs, read as BACKUP writes the
        # archive (`links.stub_walked`), kept once the base is committed.
        listed = os.path.join(work, _NEXT_STUB)
        walked = Beside(lambda: listed if links.stub_walked(archive.read, listed) else None)
        # An encrypted object's base is sealed as BACKUP writes it, under a
        # new data key (one per checkpoint), and the sealed file is stored.
        stored, sealing, section, digest = archive, None, None, None
        provider = self._w.keys.provider
        if provider is not None and keyring.is_encrypted(head):
            # A full base starts a new data key; an increment is sealed under
            # the active one, as its links are, so every key its chain needs
            # stays in the head for as long as the chain does.
            rotated = head
            if increment is None:
                rotated = head.model_copy(deep=True)
                keyring.rotate(
                    rotated,
                    self.oid,
                    provider,
                    now=self._w.clock.time(),
                    retention=self._opts.retention,
                )
                section = rotated.extension()[keyring.ENCRYPTION]
            stored = GrowingFile(local + ".sealed")
            digest = _Sealed(stored)
            sealing = stored.produce(_sealer(self._w.codec(rotated), key, archive, digest))
        try:
            ref = publishing.commit_base(
                self._w,
                key,
                stored,
                engine_version=engine.version,
                scratch=work,
                progress=self._progress,
                encryption=section,
                chain=None if increment is None else increment.chain,
                digest=digest,
            )
        except SourceFailed as exc:
            cause: BaseException = exc
            while isinstance(cause, SourceFailed) and cause.__cause__ is not None:
                cause = cause.__cause__  # the sealing failed because BACKUP did
            if isinstance(cause, NotIncremental):
                retry_full = True
            else:
                raise cause from None  # BACKUP's own error
        except LeaseFenced as exc:
            self._fenced_by(exc)
            raise
        finally:
            backup.join()
            walked.join()  # it reads through the archive's descriptor
            archive.close()
            if sealing is not None:
                sealing.join()
                stored.close()
            if not retry_full and self._w.head is not None:
                self._keep_listing(self._w.head, key, local, walked)
            with contextlib.suppress(FileNotFoundError):  # not committed, or kept
                os.unlink(listed)
            for path in (local, local + ".sealed"):
                with contextlib.suppress(FileNotFoundError):  # a folder store moved it in
                    os.unlink(path)
        if retry_full:
            log.info(
                "%s: %s; taking a full checkpoint instead",
                self.url,
                "an increment would hold a file grown since its base",
            )
            return self._checkpoint_settling(caller_told=caller_told, full=True)
        self._buf.committed(key, caller_told=caller_told)
        note_writer(self._w)  # the catalog's row (a hint: never raises)
        log.info(
            "%s: checkpoint %s, %d bytes, %.3f s",
            self.url,
            key,
            ref.size,
            time.monotonic() - started,
        )
        return key

    def _keep_listing(self, head: Head, key: str, local: str, walked: Beside[str | None]) -> None:
        """After a checkpoint of `key` (committed when the head names it),
        keep its listing for the next one to be an increment over it: the
        file `walked` wrote as BACKUP wrote the archive; else read from the
        archive now (a folder store moved it in, so it is read back from
        there)."""
        stub = os.path.join(os.path.dirname(local), "base.stub")
        if head.manifest.base is None or head.manifest.base.key != key:
            return  # not committed: the base and its listing stay
        self._local.base_link = None
        try:
            if (listed := _walked(walked)) is not None:
                os.replace(listed, stub)
            elif os.path.exists(local):
                links.stub(local, stub)
            else:
                back = local + ".back"
                try:
                    if not self._w.store.fetch_file(object_key(self.oid, key), back, None):
                        return
                    links.stub(back, stub)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(back)
        except (DurableError, OSError) as exc:  # the next checkpoint is full: never an error here
            log.info(
                "%s: kept no listing of %s (%s); the next checkpoint is full", self.url, key, exc
            )
            return
        self._local.keep_base(head, stub)


#: Where a checkpoint keeps the listing it read (`links.stub_walked`) until
#: its base is committed: then it becomes `base.stub`.
_NEXT_STUB = "base.stub.next"


def _walked(walked: Beside[str | None]) -> str | None:
    """The listing `walked` wrote, or None; any error of its is only a miss."""
    try:
        return walked.result()
    except Exception:  # the archive failed, or its listing did not read: read it again
        return None
