"""The one head writer (durable_obj/core/commit.py) and the keys it commits
(publishing.py): every write settles a lost answer by reading back, and a
caller gets a settled answer or `CommitAmbiguous`, never `StoreAmbiguous`.

Each fault is injected on every call of one store operation (rate 1):
`LOST_RESPONSE` applies the write and loses the answer, `AMBIGUOUS_BEFORE`
loses it without applying anything.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core import ops
from durable_obj.core.commit import HeadWriter
from durable_obj.core.publishing import commit_base, commit_segment, publish
from durable_obj.stores.base import Store, Version
from durable_obj.stores.file import FileStore
from durable_obj.stores.growing import GrowingFile, SourceFailed
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore, abandon
from durable_obj.wire import lease as leases
from durable_obj.wire.digest import bytes_digest
from durable_obj.wire.head import Head, Lease, ObjectRef

DDL = "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"
DEADLINE = 0.2
LANDED, NOT_LANDED = Fault.LOST_RESPONSE, Fault.AMBIGUOUS_BEFORE


def memory() -> MemoryStore:
    return MemoryStore(f"commit-{uuid.uuid4().hex}")


def faulty(inner: Store, op: str, fault: Fault) -> FaultyStore:
    return FaultyStore(inner, seed=0, rate=1.0, faults=[fault], ops=[op])


def stored(store: Store, oid: str = "o") -> Head:
    blob = store.get(f"{oid}/head.json")
    assert blob is not None
    return Head.parse(blob.data)


def leased_object(inner: Store, oid: str = "o") -> None:
    """An object with one committed row, whose lease a dead writer still holds."""
    obj = durable_obj.Namespace(inner, owner="holder").open(oid)
    obj.execute(DDL)
    obj.execute("INSERT INTO m VALUES (1)")
    obj.flush()
    abandon(obj)


# -- release() ------------------------------------------------------------------
def test_ops_release_whose_answer_is_lost_but_landed_is_settled() -> None:
    inner = memory()
    leased_object(inner)
    before = stored(inner)
    store = faulty(inner, "replace", LANDED)
    head = ops.release(store, "o", commit_deadline=DEADLINE)
    after = stored(inner)
    assert head.lease.released and after.lease.released
    assert after.lease.generation == before.lease.generation
    assert after.manifest == before.manifest
    assert [f for _op, _key, f in store.injected] == [LANDED]


def test_ops_release_that_never_lands_is_commit_ambiguous() -> None:
    inner = memory()
    leased_object(inner)
    store = faulty(inner, "replace", NOT_LANDED)
    with pytest.raises(errors.CommitAmbiguous, match="indeterminate") as caught:
        ops.release(store, "o", commit_deadline=DEADLINE)
    assert not isinstance(caught.value, errors.StoreAmbiguous)
    assert stored(inner).lease.owner == "holder"  # nothing was changed
    assert len(store.injected) > 1  # it wrote again until the deadline


@pytest.mark.parametrize("fault", [LANDED, NOT_LANDED])
def test_namespace_release_answers_settled_or_commit_ambiguous(fault: Fault) -> None:
    inner = memory()
    leased_object(inner)
    ns = durable_obj.Namespace(faulty(inner, "replace", fault), commit_deadline=DEADLINE)
    if fault is LANDED:
        ns.release("o")
        assert stored(inner).lease.released
    else:
        with pytest.raises(errors.CommitAmbiguous):
            ns.release("o")
        assert not stored(inner).lease.released


def test_release_of_a_head_released_meanwhile_is_done() -> None:
    """The holder closed between our read and our write: the lease is
    released, which is all a release asks."""
    inner = memory()
    leased_object(inner)

    class ClosesFirst(FaultyStore):
        def replace(self, key: str, data: bytes, version: Version) -> Version | None:
            blob = self.inner.get(key)
            assert blob is not None
            head = Head.parse(blob.data)
            head.lease = leases.release(head.lease)
            assert self.inner.replace(key, head.to_bytes(), blob.version) is not None
            return None  # our own write finds the head moved

    head = ops.release(ClosesFirst(inner, seed=0, rate=0.0), "o", commit_deadline=DEADLINE)
    assert head.lease.released and stored(inner).lease.released


# -- fork() ---------------------------------------------------------------------
def source(inner: Store) -> None:
    with durable_obj.Namespace(inner, owner="w").open("src") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1), (2)")


@pytest.mark.parametrize("op", ["create", "create_file"])
def test_fork_whose_answer_is_lost_but_landed_is_settled(op: str) -> None:
    """`create` writes the fork's head, `create_file` its base."""
    inner = memory()
    source(inner)
    store = faulty(inner, op, LANDED)
    info = durable_obj.Namespace(store, commit_deadline=DEADLINE).fork("src", "dst")
    assert info.seq == 1 and info.owner is None
    assert [(o, f) for o, _key, f in store.injected] == [(op, LANDED)]
    with durable_obj.Namespace(inner).open("dst", read_only=True) as fork:
        assert fork.query("SELECT k FROM m ORDER BY k") == "1\n2\n"


@pytest.mark.parametrize("op", ["create", "create_file"])
def test_fork_that_never_lands_is_commit_ambiguous(op: str) -> None:
    inner = memory()
    source(inner)
    ns = durable_obj.Namespace(faulty(inner, op, NOT_LANDED), commit_deadline=DEADLINE)
    with pytest.raises(errors.CommitAmbiguous, match="indeterminate") as caught:
        ns.fork("src", "dst")
    assert not isinstance(caught.value, errors.StoreAmbiguous)
    assert inner.get("dst/head.json") is None


# -- the writer itself ------------------------------------------------------------
def writer_object(inner: Store) -> tuple[HeadWriter, leases.Holder]:
    me = leases.Holder("me", uuid.uuid4().hex)
    writer = HeadWriter(inner, "o", holder=me, commit_deadline=DEADLINE)
    assert writer.create_cold(db="default", engine_version="26.1.1", timezone="UTC")
    return writer, me


def test_commit_whose_answer_is_lost_but_landed_counts_and_renews() -> None:
    inner = memory()
    writer, _me = writer_object(inner)
    writer.store = faulty(inner, "replace", LANDED)
    assert writer.head is not None
    writer.head.manifest.seq = 1
    writer.commit()
    head = stored(inner)
    assert head.manifest.seq == 1 and head.lease.expires_at == writer.expires_at
    assert writer.version == inner.get("o/head.json").version  # type: ignore[union-attr]


def test_commit_that_never_lands_is_commit_ambiguous_and_unchanged() -> None:
    inner = memory()
    writer, _me = writer_object(inner)
    writer.store = faulty(inner, "replace", NOT_LANDED)
    assert writer.head is not None
    writer.head.manifest.seq = 1
    with pytest.raises(errors.CommitAmbiguous, match="indeterminate"):
        writer.commit()
    assert stored(inner).manifest.seq == 0 and not writer.fenced


@pytest.mark.parametrize(
    ("rival", "said"),
    [
        (lambda lease: leases.release(lease), "the lease was released at generation 1"),
        (
            lambda lease: lease.model_copy(
                update={"owner": "x", "instance": "i-x", "generation": 2}
            ),
            "the lease was taken by 'x' (instance i-x) at generation 2",
        ),
    ],
)
def test_fence_says_what_became_of_the_lease(
    rival: object, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Not "the lease now belongs to None": released, or taken by whom."""
    inner = memory()
    writer, _me = writer_object(inner)
    blob = inner.get("o/head.json")
    assert blob is not None
    head = Head.parse(blob.data)
    head.lease = rival(head.lease)  # type: ignore[operator]
    assert inner.replace("o/head.json", head.to_bytes(), blob.version) is not None
    with pytest.raises(errors.LeaseFenced, match=re.escape(said)):
        writer.commit()
    assert writer.fenced
    assert f"fenced; {said}" in caplog.text


def test_create_loses_to_another_head_and_retries_a_create_that_did_not_land() -> None:
    inner = memory()
    writer_object(inner)  # someone else's head is there
    other = HeadWriter(inner, "o", holder=leases.Holder("b", "i-b"), commit_deadline=DEADLINE)
    assert not other.create_cold(db="default", engine_version="26.1.1", timezone="UTC")
    assert other.head is None
    fresh = memory()
    store = FaultyStore(fresh, seed=0, rate=1.0, faults=[NOT_LANDED], ops=["create"])
    calls = 0
    original = store._pick

    def first_only(op: str, key: str) -> Fault | None:
        nonlocal calls
        calls += 1
        return original(op, key) if calls == 1 else None

    store._pick = first_only  # type: ignore[method-assign]
    writer = HeadWriter(store, "o", holder=leases.Holder("c", "i-c"), commit_deadline=DEADLINE)
    assert writer.create_cold(db="default", engine_version="26.1.1", timezone="UTC")
    assert stored(fresh).lease.instance == "i-c"


def test_take_retries_over_an_unchanged_head_and_settles_a_lost_answer() -> None:
    inner = memory()
    blob_head = Head.cold(db="default", engine_version="26.1.1", lease=Lease(generation=3))
    assert inner.create("o/head.json", blob_head.to_bytes()) is not None
    for fault in (LANDED, NOT_LANDED):
        me = leases.Holder("me", uuid.uuid4().hex)
        store = faulty(inner, "replace", fault)
        writer = HeadWriter(store, "o", holder=me, commit_deadline=DEADLINE)
        read = writer.read()
        assert read is not None
        if fault is LANDED:
            taken = writer.take(read, force=False, clock_skew=5.0, engine_version="26.1.1")
            assert taken is not None and taken.lease.generation == 4
            assert stored(inner).lease.instance == me.instance
            assert writer.taken_from == read.head
        else:
            with pytest.raises(errors.CommitAmbiguous, match="indeterminate"):
                writer.take(read, force=True, clock_skew=5.0, engine_version="26.1.1")


def test_publish_settles_by_size_and_sha256() -> None:
    inner = memory()
    writer, _me = writer_object(inner)
    data = b'{"sql": "SELECT 1"}\n'
    size, sha = bytes_digest(data)
    ref = ObjectRef(key="wal/1-1-abcdef12.jsonl", size=size, sha256=sha)
    writer.store = faulty(inner, "create", LANDED)
    publish(writer, ref, lambda key: writer.store.create(key, data))
    assert inner.get("o/wal/1-1-abcdef12.jsonl") is not None
    ref2 = ObjectRef(key="wal/1-2-abcdef12.jsonl", size=size, sha256=sha)
    writer.store = faulty(inner, "create", NOT_LANDED)
    with pytest.raises(errors.CommitAmbiguous, match="indeterminate"):
        publish(writer, ref2, lambda key: writer.store.create(key, data))


def test_flush_that_never_lands_is_commit_ambiguous_and_stays_buffered() -> None:
    inner = memory()
    store = FaultyStore(inner, seed=0, rate=1.0, faults=[NOT_LANDED], ops=["replace"])
    store.enabled = False
    obj = durable_obj.Namespace(store, commit_deadline=DEADLINE).open("o")
    try:
        obj.execute(DDL)
        store.enabled = True
        with pytest.raises(errors.CommitAmbiguous, match="indeterminate"):
            obj.flush()
        assert obj.pending == 1 and stored(inner).manifest.seq == 0
        store.enabled = False
        assert obj.flush() is not None and stored(inner).manifest.seq == 1
    finally:
        store.enabled = False
        obj.close()


@pytest.mark.parametrize("op", ["create", "create_file", "replace"])
def test_a_resent_write_that_meets_its_own_landed_first_is_success(op: str) -> None:
    """A client that resends a conditional PUT after a dropped connection
    (aiohttp does, for PUT on a reused connection) gets "precondition
    failed" for a write that landed: the segment, the base and the head are
    read back and count as ours; nothing is reported lost or fenced."""
    inner = memory()
    store = faulty(inner, op, Fault.RESENT)
    store.enabled = False
    obj = durable_obj.Namespace(store, owner="me").open("o")
    try:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")
        store.enabled = True
        assert obj.flush() is not None
        obj.execute("INSERT INTO m VALUES (2)")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3)")
        assert obj.flush() is not None
        assert store.injected and not obj.fenced
    finally:
        store.enabled = False
        obj.close()
    with durable_obj.Namespace(inner).open("o", read_only=True) as again:
        assert again.rows("SELECT k FROM m ORDER BY k") == [(1,), (2,), (3,)]


def test_a_segment_key_holding_other_bytes_is_refused_and_nothing_committed() -> None:
    inner = memory()
    writer, _me = writer_object(inner)
    data = b'{"sql": "SELECT 1"}\n'
    size, sha = bytes_digest(data)
    ref = ObjectRef(key="wal/1-1-abcdef12.jsonl", size=size, sha256=sha)
    assert inner.create("o/wal/1-1-abcdef12.jsonl", b'{"sql": "SELECT 2"}\n') is not None
    with pytest.raises(errors.BackendError, match=r"already exists.*Nothing was committed"):
        publish(writer, ref, lambda key: writer.store.create(key, data))
    assert stored(inner).manifest.seq == 0


class MovingStore(MemoryStore):
    """Takes an adopted file as a folder store on its filesystem does: the
    path is gone before the store asks for the file's SHA-256."""

    def adopt_file(
        self, key: str, path: str, sha256: Callable[[], str], callback: Any = None
    ) -> Version | None:
        with open(path, "rb") as handle:
            data = handle.read()
        os.unlink(path)
        version = self.create(key, data)
        assert sha256() == bytes_digest(data)[1]
        return version


def _growing(
    path: Path,
    data: bytes,
    fail: bool = False,
    pause: float = 0.002,
    written: threading.Event | None = None,
) -> tuple[GrowingFile, Any]:
    """`data` written to `path` in pieces on a thread, as BACKUP writes
    (`pause` between them; `written` set once all are)."""
    source = GrowingFile(str(path))

    def write() -> None:
        with open(path, "wb") as handle:
            for at in range(0, len(data), 1 << 20):
                handle.write(data[at : at + (1 << 20)])
                handle.flush()
                time.sleep(pause)
        if written is not None:
            written.set()
        if fail:
            raise RuntimeError("BACKUP failed")

    return source, source.produce(write)


@pytest.mark.parametrize("fault", [None, LANDED])
def test_commit_base_hashes_the_file_while_it_is_written_and_taken(
    tmp_path: Path, fault: Fault | None
) -> None:
    # The digest reads the archive while it is written, through a descriptor
    # that outlives the store moving the file away; a lost answer is settled
    # against that digest.
    inner = MovingStore(f"commit-{uuid.uuid4().hex}")
    writer, _me = writer_object(inner)
    if fault is not None:
        writer.store = FaultyStore(inner, seed=0, rate=1.0, faults=[fault], ops=["create_file"])
    data = os.urandom(9 * 1024 * 1024 + 5)  # several of the digest's chunks
    path = tmp_path / "backup.tar"
    source, producer = _growing(path, data)
    try:
        ref = commit_base(
            writer,
            "checkpoints/1-1-abcdef12.tar",
            source,
            engine_version="26.1.1",
            scratch=str(tmp_path),
        )
    finally:
        producer.join()
        source.close()
    assert (ref.size, ref.sha256) == bytes_digest(data) and not path.exists()
    head = stored(inner)
    assert head.manifest.base is not None and head.manifest.base.sha256 == ref.sha256
    blob = inner.get("o/checkpoints/1-1-abcdef12.tar")
    assert blob is not None and blob.data == data


class SlowFolder(FileStore):
    """A folder store that, once an adopted base is in place, holds on for
    a while and records the head it finds on disk then (`seen`); with
    `fail`, it then fails as a store can (the base in place all the same)."""

    def __init__(self, root: str, fail: bool = False) -> None:
        super().__init__(root)
        self.fail = fail
        self.seen: list[Head] = []

    def adopt_growing(
        self, key: str, source: GrowingFile, sha256: Callable[[], str], callback: Any = None
    ) -> Version | None:
        version = super().adopt_growing(key, source, sha256, callback)
        time.sleep(0.3)  # the head's commit, staged meanwhile, must not land
        self.seen.append(stored(self))
        if self.fail:
            raise errors.BackendError("the store failed after the base was in place")
        return version


def test_commit_base_lands_the_head_only_once_the_base_is_in_place(tmp_path: Path) -> None:
    # The head is made from the digest and staged while the store takes the
    # base; it is renamed into place only after the base is durable there.
    inner = SlowFolder(str(tmp_path / "store"))
    writer, _me = writer_object(inner)
    source, producer = _growing(tmp_path / "backup.tar", os.urandom(3 << 20))
    try:
        ref = commit_base(
            writer, "checkpoints/1-1-abcdef12.tar", source, engine_version="26.1.1", scratch=None
        )
    finally:
        producer.join()
        source.close()
    assert [head.manifest.base for head in inner.seen] == [None]
    assert stored(inner).manifest.base == ref and stored(inner).manifest.seq == 1


def test_commit_base_whose_store_fails_commits_nothing_and_stages_nothing(
    tmp_path: Path,
) -> None:
    inner = SlowFolder(str(tmp_path / "store"), fail=True)
    writer, _me = writer_object(inner)
    before = stored(inner)
    source, producer = _growing(tmp_path / "backup.tar", os.urandom(3 << 20))
    try:
        with pytest.raises(errors.BackendError, match="store failed"):
            commit_base(
                writer,
                "checkpoints/1-1-abcdef12.tar",
                source,
                engine_version="26.1.1",
                scratch=None,
            )
    finally:
        producer.join()
        source.close()
    after = stored(inner)
    assert (after.manifest.seq, after.manifest.base) == (0, None) and after == before
    assert writer.head is not None and writer.head.manifest.base is None
    # the staged head was dropped, whenever its worker ended
    deadline = time.monotonic() + 5
    while any(n.endswith(".tmp") for n in os.listdir(tmp_path / "store" / "o")):
        assert time.monotonic() < deadline, os.listdir(tmp_path / "store" / "o")
        time.sleep(0.01)
    writer.commit()  # the writer goes on from the head as it was
    assert stored(inner).manifest.base is None


class Archives(MemoryStore):
    """Records, for each history file created, whether BACKUP had written
    the whole base by then (`written`, set by the producer at its end)."""

    def __init__(self) -> None:
        super().__init__(f"commit-{uuid.uuid4().hex}")
        self.written = threading.Event()
        self.archived: list[bool] = []

    def create(self, key: str, data: bytes) -> Version | None:
        if "/history/" in f"/{key}":
            self.archived.append(self.written.is_set())
        return super().create(key, data)


def _archiving_writer(inner: Store) -> HeadWriter:
    """A writer with time travel on and one segment committed: a checkpoint
    then archives the manifest it supersedes."""
    me = leases.Holder("me", uuid.uuid4().hex)
    writer = HeadWriter(inner, "o", holder=me, commit_deadline=DEADLINE, retention=3600)
    assert writer.create_cold(db="default", engine_version="26.1.1", timezone="UTC")
    commit_segment(writer, [b'{"sql": "SELECT 1"}\n'], scratch=None)
    return writer


@pytest.mark.parametrize("fail", [False, True])
def test_the_superseded_manifest_is_archived_once_backup_has_written_the_base(
    tmp_path: Path, fail: bool
) -> None:
    # Sent while BACKUP ran, the history file's PUT took CPU from it (on S3
    # beside a server on the same cores, 29.8 against 22.5 ms a checkpoint of
    # 1k rows); a BACKUP that fails leaves no history file at all.
    inner = Archives()
    writer = _archiving_writer(inner)
    path = tmp_path / "backup.tar"
    source, producer = _growing(path, os.urandom(3 << 20), fail, 0.05, inner.written)
    try:
        if fail:
            with pytest.raises(SourceFailed):
                commit_base(
                    writer, "checkpoints/2-2-abcdef12.tar", source, engine_version="26.1.1",
                    scratch=None,
                )  # fmt: skip
        else:
            commit_base(
                writer, "checkpoints/2-2-abcdef12.tar", source, engine_version="26.1.1",
                scratch=None,
            )  # fmt: skip
    finally:
        producer.join()
        source.close()
    assert inner.archived == ([] if fail else [True])
    assert len(inner.list_keys("o/history/")) == (0 if fail else 1)


class SlowUpload(MemoryStore):
    """Uploads an adopted growing file as S3 does, reading it as it grows,
    slowly (a large base on a slow link), then creating the key."""

    def adopt_growing(
        self, key: str, source: GrowingFile, sha256: Callable[[], str], callback: Any = None
    ) -> Version | None:
        parts, offset = [], 0
        while chunk := source.read(offset, 256 * 1024):
            parts.append(chunk)
            offset += len(chunk)
            time.sleep(0.05)
        return self.create(key, b"".join(parts))


def test_an_interrupted_checkpoint_leaves_no_publish_running(tmp_path: Path) -> None:
    # Ctrl-C while the commit waits for the base's publish: before, the
    # publish thread ran on past the call (a wait interrupted once no longer
    # waited, on CPython 3.11 and 3.12) and, its archive closed by the
    # caller's cleanup, uploaded it truncated (found by attack, on S3).
    inner = SlowUpload(f"commit-{uuid.uuid4().hex}")
    writer, _me = writer_object(inner)
    source, producer = _growing(tmp_path / "backup.tar", os.urandom(3 << 20))
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            commit_base(
                writer, "checkpoints/1-1-abcdef12.tar", source, engine_version="26.1.1",
                scratch=None,
            )  # fmt: skip
        alive = [t.name for t in threading.enumerate() if t.name == "durable_obj-adopt"]
    finally:
        timer.join()
        producer.join()
        source.close()
    assert alive == []
    assert inner.list_keys("o/checkpoints/") == []
    assert stored(inner).manifest.base is None and writer.head is not None
    assert writer.head.manifest.base is None


def test_commit_base_of_a_failed_backup_creates_and_commits_nothing(tmp_path: Path) -> None:
    inner = memory()
    writer, _me = writer_object(inner)
    source, producer = _growing(tmp_path / "backup.tar", os.urandom(3 << 20), fail=True)
    try:
        with pytest.raises(SourceFailed) as failed:
            commit_base(
                writer,
                "checkpoints/1-1-abcdef12.tar",
                source,
                engine_version="26.1.1",
                scratch=str(tmp_path),
            )
    finally:
        producer.join()
        source.close()
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert inner.get("o/checkpoints/1-1-abcdef12.tar") is None
    assert stored(inner).manifest.seq == 0 and stored(inner).manifest.base is None


def test_a_checkpoint_whose_backup_fails_raises_the_engines_error_and_keeps_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inner = memory()
    obj = durable_obj.Namespace(inner, owner="me").open("o")
    try:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")
        engine = obj._local.engine
        assert engine is not None
        real = engine.backup

        def half(db: str, path: str, base: tuple[str, str] | None = None) -> None:
            real(db, path, base)
            with open(path, "r+b") as handle:
                handle.truncate(100)
            raise errors.EngineError("BACKUP failed halfway")

        monkeypatch.setattr(engine, "backup", half)
        with pytest.raises(errors.EngineError, match="halfway"):
            obj.checkpoint()
        assert obj.pending == 2 and [e.key for e in inner.list_keys("o/checkpoints/")] == []
        monkeypatch.undo()
        obj.checkpoint()
        assert obj.pending == 0
    finally:
        obj.close()
    with durable_obj.Namespace(inner).open("o", read_only=True) as again:
        assert again.rows("SELECT k FROM m") == [(1,)]


def test_a_refused_create_whose_winner_is_not_visible_yet_is_lease_held_at_once() -> None:
    """Issue 26: chdb.durable's test_conditional_create_race. Another writer
    created the head; our reads do not see it yet, so our create is refused.
    That is `LeaseHeld` at once (V1), not 31 s of retries ending BackendError."""

    class Stale(MemoryStore):
        def get(self, key: str) -> Any:
            return None if key.endswith("head.json") else super().get(key)

    inner = Stale(f"commit-{uuid.uuid4().hex}")
    writer_object(inner)  # the winner's head is there
    started = time.monotonic()
    with pytest.raises(errors.LeaseHeld, match="created this object's head at the same moment"):
        durable_obj.Namespace(inner, owner="late", commit_deadline=30).open("o")
    assert time.monotonic() - started < 5


# -- a commit that raised, yet landed ----------------------------------------------
class LandsThenFails(MemoryStore):
    """A head replace that lands and then raises `failure` (once it is set):
    an interrupt after a folder's rename (its fsync), or a lost answer whose
    read-back fails too until the commit deadline (`CommitAmbiguous`)."""

    failure: BaseException | None = None
    reads_fail = False

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        new = super().replace(key, data, version)
        failure, self.failure = self.failure, None
        if failure is not None and new is not None:
            if isinstance(failure, errors.StoreAmbiguous):
                self.reads_fail = True
            raise failure
        return new

    def get(self, key: str) -> Any:
        if self.reads_fail and key.endswith("head.json"):
            raise errors.BackendError("the read-back failed too")
        return super().get(key)


def _rows(store: Store) -> list[tuple[Any, ...]]:
    with durable_obj.Namespace(store).open("o", read_only=True) as obj:
        return obj.rows("SELECT k FROM m ORDER BY k")


@pytest.mark.parametrize(
    "failure",
    [KeyboardInterrupt(), errors.StoreAmbiguous("the answer was lost")],
    ids=["interrupted", "ambiguous"],
)
@pytest.mark.parametrize("then", ["flush", "checkpoint", "renew", "close"])
def test_a_commit_that_raised_yet_landed_is_never_written_over(
    failure: BaseException, then: str
) -> None:
    """The seq of a commit that landed though its caller was told otherwise
    keeps naming that one state: the writer's next commit (of another
    segment at that seq, a base, or the lease alone, which would take the
    seq back) is refused and the writer stops; a reopen continues from it."""
    store = LandsThenFails(f"commit-{uuid.uuid4().hex}")
    obj = durable_obj.Namespace(store, owner="me", commit_deadline=DEADLINE).open("o")
    try:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")
        obj.flush()
        obj.execute("INSERT INTO m VALUES (2)")
        store.failure = failure
        with pytest.raises((KeyboardInterrupt, errors.CommitAmbiguous)):
            obj.flush()
        store.reads_fail = False
        landed = stored(store)
        assert landed.manifest.seq == 2 and obj.pending == 1
        assert _rows(store) == [(1,), (2,)]
        obj.execute("INSERT INTO m VALUES (3)")
        with pytest.raises(errors.LeaseFenced, match="never proven, landed as seq 2"):
            if then == "flush":
                obj.flush()
            elif then == "checkpoint":
                obj.checkpoint()
            elif then == "renew":
                obj._w.commit()
            else:
                obj.close()
        assert stored(store).manifest == landed.manifest
        assert stored(store).lease.released and obj.fenced
    finally:
        abandon(obj)
    assert _rows(store) == [(1,), (2,)]
    again = durable_obj.Namespace(store, owner="me").open("o")
    try:
        assert again.seq == 2
        again.execute("INSERT INTO m VALUES (3)")
        again.flush()
    finally:
        again.close()
    assert _rows(store) == [(1,), (2,), (3,)]


def test_a_renewal_that_raised_yet_landed_is_written_over() -> None:
    """A lease-only commit that landed unproven named the same state: the
    next commit goes over it, and nothing stops."""
    store = LandsThenFails(f"commit-{uuid.uuid4().hex}")
    writer, _me = writer_object(store)
    store.failure = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        writer.commit()
    assert writer.head is not None
    writer.head.manifest.seq = 1
    writer.commit()
    assert stored(store).manifest.seq == 1 and not writer.fenced


def test_a_release_that_failed_leaves_the_writer_holding_its_lease() -> None:
    """close() whose release is refused keeps the object open with the lease
    it held: its next commit renews that lease and writes a valid head
    (it used to renew the released lease it had tried to write: a head no
    open could parse)."""
    inner = memory()
    store = faulty(inner, "replace", Fault.ERROR)
    store.enabled = False
    obj = durable_obj.Namespace(store, owner="me", commit_deadline=DEADLINE).open("o")
    try:
        obj.execute(DDL)
        obj.flush()
        store.enabled = True
        with pytest.raises(errors.BackendError, match="injected failure"):
            obj.close()
        store.enabled = False
        assert obj.state == "open" and obj.head is not None and not obj.head.lease.released
        obj.execute("INSERT INTO m VALUES (1)")
        obj.flush()
        assert stored(inner).lease.owner == "me" and stored(inner).manifest.seq == 2
    finally:
        store.enabled = False
        obj.close()
    assert stored(inner).lease.released
    assert _rows(inner) == [(1,)]


class LandsOnceUnread(LandsThenFails):
    """The first armed replace lands, its answer is lost, and one read-back fails."""

    def get(self, key: str) -> Any:
        if self.reads_fail and key.endswith("head.json"):
            self.reads_fail = False
            raise errors.BackendError("the read-back failed once")
        return super().get(key)


@pytest.mark.parametrize("change", ["segment", "renewal"])
def test_an_attempt_of_the_same_commit_that_landed_is_written_over(change: str) -> None:
    """Within one commit, an earlier attempt that landed unproven (its own
    lease, its own nonce) names the state being written: the next attempt
    goes over it and the commit succeeds, nothing stops."""
    store = LandsOnceUnread(f"commit-{uuid.uuid4().hex}")
    writer, _me = writer_object(store)
    assert writer.head is not None
    if change == "segment":
        writer.head.manifest.seq = 1
    store.failure = errors.StoreAmbiguous("the answer was lost")
    writer.commit()
    assert stored(store).manifest.seq == writer.head.manifest.seq and not writer.fenced
    assert stored(store).lease == writer.head.lease


class LostThenRefused(MemoryStore):
    """Armed: a head replace lands and its answer is lost, the read-back
    fails once, and the next replace is refused outright (BackendError)."""

    armed = 0

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if self.armed == 2:
            self.armed = 0
            raise errors.BackendError("refused")
        new = super().replace(key, data, version)
        if self.armed == 1:
            self.armed = 3
            raise errors.StoreAmbiguous("the answer was lost")
        return new

    def get(self, key: str) -> Any:
        if self.armed == 3:
            self.armed = 2
            raise errors.BackendError("the read-back failed")
        return super().get(key)


def test_a_refusal_after_a_lost_answer_is_read_back_not_reported_as_nothing_applied() -> None:
    """After a write whose answer was lost, a later attempt's refusal says
    nothing of that earlier write: the commit reads back (and here finds its
    own write), never 'did not apply' for a head that landed."""
    store = LostThenRefused(f"commit-{uuid.uuid4().hex}")
    writer, _me = writer_object(store)
    assert writer.head is not None
    writer.head.manifest.seq = 1
    store.armed = 1
    writer.commit()
    assert stored(store).manifest.seq == 1 and not writer.fenced
