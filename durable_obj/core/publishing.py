"""The immutable keys a head names, and a writer's commits of them.

`publish` creates a uniquely named key: a WAL segment, a base, a fork's
base, an archived manifest (`history.py`). A create whose answer is lost
(the store raises `StoreAmbiguous`), or that finds the key already there
(our own write met again by a client's resend), is settled by reading the
key back and comparing size and SHA-256: the same means it landed, anything
else is `CommitAmbiguous` or `BackendError`. `StoreAmbiguous` never leaves
here.

`commit_segment` and `commit_base` are a writer's flush and checkpoint:
publish the segment (or the base, and the manifest it supersedes), then
commit it into the head with `HeadWriter.commit` (`commit.py`, the one head
writer). A flush hands the segment's publish to that commit as `first`: a
folder store writes and fsyncs the new head beside the old one meanwhile,
and renames it only once the segment is durable (`Store.replace_after`).
On failure the head is as it was.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_obj.core.history import archive_of
from durable_obj.errors import BackendError, CommitAmbiguous, DurableError, StoreAmbiguous
from durable_obj.wire.beside import Beside
from durable_obj.wire.digest import BackgroundDigest, Digest, bytes_digest, file_digest, verify
from durable_obj.wire.head import Head, ObjectRef, stamp
from durable_obj.wire.keyring import ENCRYPTION
from durable_obj.wire.protocol import BACKUP_FORMAT, mint_wal_key, object_key

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.core.commit import HeadWriter
    from durable_obj.stores.base import Store, Version
    from durable_obj.stores.growing import GrowingFile


# -- a writer's commits -------------------------------------------------------------
def commit_segment(
    writer: HeadWriter, lines: list[bytes], *, frame: bytes | None = None, scratch: str | None
) -> ObjectRef:
    """Publish `lines` as the next WAL segment (`frame`: them compressed
    already, if so) and commit it into the head. On failure the manifest is
    as it was."""
    head = writer.head
    assert head is not None
    manifest = head.manifest
    seq = manifest.next_seq()  # LimitExceeded at V1's largest, before anything is sent
    key = mint_wal_key(head.lease.generation, seq)
    payload = writer.codec().encode_lines(key, lines, frame)  # sealed and/or compressed, or joined
    size, sha256 = bytes_digest(payload)
    ref = _stamped(writer, key, size, sha256)

    def segment() -> None:
        publish(
            writer,
            ref,
            lambda key: writer.store.create(key, payload),
            scratch=scratch,
            unsettled=" The statements stay buffered; retry flush().",
        )

    saved = (list(manifest.wal), manifest.seq)
    proven = writer.proven
    manifest.wal = [*manifest.wal, ref]
    manifest.seq = seq
    try:
        # The segment is published before the head that names it can land;
        # a folder stages that head meanwhile (`Store.replace_after`).
        writer.commit(first=segment)
    except BaseException:
        if writer.proven is proven:  # (an interrupt after the proof keeps it)
            manifest.wal, manifest.seq = saved
        raise
    return ref


def commit_base(
    writer: HeadWriter,
    key: str,
    archive: GrowingFile,
    *,
    engine_version: str,
    scratch: str | None,
    progress: Callback | None = None,
    encryption: dict[str, Any] | None = None,
    chain: list[ObjectRef] | None = None,
    digest: Digest | None = None,
) -> ObjectRef:
    """Publish `archive` (BACKUP by `engine_version`, which may still be
    writing it; sealed under the next data key when the object is
    encrypted, whose head section `encryption` then becomes the head's) as
    the base `key`, minted for the next seq, and commit it with an empty
    WAL. The file is given away: a store on its filesystem moves it into
    place once complete. On failure the head is as it was;
    a failed BACKUP is `SourceFailed` and nothing was created. `chain`:
    the links an increment is over (`Head.set_chain`; None: a full base).
    `digest`: the archive's size and SHA-256, taken by whoever writes it
    (a sealer hashes what it writes); else it is hashed as it grows."""
    head = writer.head
    assert head is not None and writer.holder is not None
    seq = head.manifest.next_seq()  # LimitExceeded at V1's largest, before anything is sent
    again = " The statements stay buffered; retry checkpoint()."
    # Hashed while BACKUP writes it and the store takes it (fsync,
    # upload): the ref exists once all three are done (growing.py).
    taken: BackgroundDigest | None = None
    pending: Digest
    if digest is None:
        pending = taken = BackgroundDigest(archive.chunks())
    else:
        pending = digest
    # The manifest the new base supersedes is archived (retention > 0) while
    # the base is published, not after, once BACKUP has written it (nothing
    # is archived for a failed BACKUP): it was proven committed, so the
    # archive of a checkpoint that then fails is a harmless orphan (history.py).
    history = _archiving(writer, head, scratch=scratch, unsettled=again, after=archive.wait)
    # The store takes the archive on a thread of its own (a folder: syncs it
    # as it grows, then fsync, rename, link; S3: its parts as they fill).
    # The new head needs only the digest: it is made as soon as the digest
    # is, and its commit runs the rest of the publish as `first` (a folder
    # writes and fsyncs the head meanwhile, renamed once the base is in place).
    adopted = Beside(
        lambda: _create(
            writer,
            key,
            lambda key: writer.store.adopt_growing(
                key, archive, lambda: pending.result()[1], progress
            ),
            lambda: _stamped(writer, key, *pending.result()),
            scratch=scratch,
            unsettled=again,
        ),
        name="durable_obj-adopt",
    )

    def published() -> None:
        adopted.result()  # the base, durable in place (or its error: nothing is committed)
        if history is not None:
            history.result()  # its failure fails the checkpoint, as before

    try:
        ref = _stamped(writer, key, *pending.result())
        saved = head.model_copy(deep=True)
        proven = writer.proven
        head.manifest.base = ref
        head.manifest.wal = []
        head.manifest.seq = seq
        head.set_chain(chain or [])
        # This engine wrote the archive: it is now the oldest that reads it.
        head.engine.version = engine_version
        head.engine.min_reader = engine_version
        head.engine.backup_format = BACKUP_FORMAT
        if encryption is not None:
            head.set_extension(ENCRYPTION, encryption)
        try:
            writer.commit(first=published)
        except BaseException:
            if writer.proven is proven:  # (an interrupt after the proof keeps it)
                saved.lease = head.lease
                writer.head = saved
            raise
    except BaseException:
        # given up (an interrupt, a failed digest or commit): a publish still
        # reading the archive stops (an S3 upload aborts) rather than run on
        archive.abandon()
        raise
    finally:
        adopted.join()  # never left running past a failed digest or commit
        if taken is not None:
            taken.join()  # before the archive's descriptor closes, whatever the store did
        if history is not None:
            history.join()  # never left running past a failed base
    return ref


def _archiving(
    writer: HeadWriter,
    head: Head,
    *,
    scratch: str | None,
    unsettled: str,
    after: Callable[[], object],
) -> Beside[None] | None:
    """`publish` of the archive of `head`'s manifest (`history.archive_of`)
    on a thread, once `after()` returned (BACKUP has written the base: sent
    while it ran, the archive slowed it, as its store's work took CPU from
    it; nothing is sent if it raises); None when there is nothing to archive."""
    assert writer.holder is not None
    archived = archive_of(
        head, writer.retention, writer.clock.time(), writer.holder.owner, writer.codec()
    )
    if archived is None:
        return None
    ref, body = archived

    def archive() -> None:
        after()
        publish(
            writer,
            ref,
            lambda k: writer.store.create(k, body),
            scratch=scratch,
            unsettled=unsettled,
        )

    return Beside(archive)


def _stamped(writer: HeadWriter, key: str, size: int, sha256: str) -> ObjectRef:
    """A ref that says when and by whom it is committed (`history.py`)."""
    assert writer.holder is not None
    ref = ObjectRef(key=key, size=size, sha256=sha256)
    return stamp(ref, committed_at=writer.clock.time(), owner=writer.holder.owner)


# -- immutable keys ---------------------------------------------------------------
def publish(
    writer: HeadWriter,
    ref: ObjectRef,
    create: Callable[[str], Version | None],
    *,
    scratch: str | None = None,
    unsettled: str = "",
) -> None:
    """Create the uniquely named key `ref` of `writer`'s object with
    `create(namespace key)`; settle a lost answer by reading it back (same
    size and SHA-256 means it landed). `scratch`: where the read-back may
    download to."""
    _create(writer, ref.key, create, lambda: ref, scratch=scratch, unsettled=unsettled)


def _create(
    writer: HeadWriter,
    name: str,
    create: Callable[[str], Version | None],
    ref: Callable[[], ObjectRef],
    *,
    scratch: str | None,
    unsettled: str,
) -> None:
    """`publish` of the key `name`, whose ref (size, SHA-256) is asked
    for only when a lost answer must be settled."""
    key = object_key(writer.oid, name)
    try:
        version = create(key)
    except StoreAmbiguous as exc:
        if not _landed(writer.store, key, ref(), scratch):
            raise CommitAmbiguous(
                f"{writer.url}: uploading {name} got no answer and it cannot be read "
                f"back: the upload is indeterminate. Nothing was committed.{unsettled}"
            ) from exc
        return
    # "Already exists" of a key minted unique is our own write met again
    # when the client resent the request after a dropped connection (the
    # first one landed); anything else there is not ours.
    if version is None and not _landed(writer.store, key, ref(), scratch):
        raise BackendError(
            f"{writer.url}: {name} already exists, yet every key is minted unique; "
            "something else writes under this object's prefix. Nothing was committed."
        )


def _landed(store: Store, key: str, ref: ObjectRef, scratch: str | None) -> bool:
    probe = os.path.join(scratch or tempfile.gettempdir(), f"probe-{uuid.uuid4().hex}")
    try:
        if not store.download(key, probe):
            return False
        verify(*file_digest(probe), ref, "uploaded object")
        return True
    except DurableError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)
