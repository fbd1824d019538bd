"""The store conformance suite: what every store must do, as pytest tests.

A store's test class subclasses `StoreTests` and provides the `store` fixture
(a fresh, empty root per test). Stores that several processes can share
subclass `SharedStoreTests` instead, which adds the multi-process races; they
may override `store_url` / `storage_options` so child processes open the same
root through `open_store`.

The races prove one winner per round, which only a linearizable server can
give. A test class for an emulator that is not one (moto's server let two
racers win a create in 4 of 400 rounds) subclasses `StoreContract`, which is
everything but the races, and the races run against a real server.

    class TestFileStore(SharedStoreTests):

        @pytest.fixture
        def store(self, tmp_path):
            return FileStore(str(tmp_path))
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import resource
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from durable_obj.errors import BackendError
from durable_obj.stores import UNCHANGED, Blob, Store, Version, open_store

#: Race rounds and racers per round.
RACE_ROUNDS = 20
RACERS = 8
#: How long a racer waits for the others at the start line before the round fails.
START_TIMEOUT = 120.0

#: The start line of the process races: every racer of a round opens its
#: store, then waits here until all of them are ready, so the writes go out
#: together however slowly each process started (set by `_enter_race`).
_start_line: Any = None


def _enter_race(barrier: Any) -> None:
    global _start_line
    _start_line = barrier


def _race_create(url: str, options: dict[str, Any], key: str, me: int) -> bool:
    store = open_store(url, options)
    _start_line.wait(START_TIMEOUT)
    return store.create(key, f"racer-{me}".encode()) is not None


def _race_replace(url: str, options: dict[str, Any], key: str, token: str, me: int) -> bool:
    # Unique bytes per racer: stores whose token is a content hash (S3 ETags)
    # cannot tell an identical rewrite apart, and durable_obj never makes one.
    store = open_store(url, options)
    body = f"racer-{me}-{uuid.uuid4().hex}".encode()
    _start_line.wait(START_TIMEOUT)
    return store.replace(key, body, Version(token)) is not None


class StoreContract:
    """Everything a store must do but the races; subclass and provide a
    `store` fixture."""

    #: Size of the streamed transfer test; cloud stores raise it to 200 MB.
    stream_bytes: int = 24 * 1024 * 1024

    @pytest.fixture
    def store(self) -> Store:  # pragma: no cover - always overridden
        raise NotImplementedError

    def store_url(self, store: Store) -> str:
        return store.url

    def storage_options(self, store: Store) -> dict[str, Any]:
        return {}

    # -- create ---------------------------------------------------------
    def test_get_missing(self, store: Store) -> None:
        assert store.get("nope/head.json") is None

    def test_create_twice(self, store: Store) -> None:
        first = store.create("a/k", b"one")
        assert first is not None
        assert store.create("a/k", b"two") is None
        blob = store.get("a/k")
        assert blob is not None
        assert blob.data == b"one"
        assert blob.version == first

    def test_create_empty(self, store: Store) -> None:
        assert store.create("a/empty", b"") is not None
        blob = store.get("a/empty")
        assert blob is not None and blob.data == b""

    def test_get_many_answers_as_get_does(self, store: Store) -> None:
        keys = [f"wal/{n:020d}.jsonl" for n in range(40)]
        keys += ["odd/a b+c=d&e~f%g", "odd/\u00e9t\u00e9", "a/empty"]
        for n, key in enumerate(keys):
            assert store.create(key, f"{key}:{n}".encode() * (n % 3)) is not None
        asked = [*keys, "missing/one", keys[0]]
        many = store.get_many(asked, concurrency=8)
        assert many == [store.get(key) for key in asked]
        assert many[-2] is None
        assert [blob.data for blob in many[:3] if blob] == [
            b"",
            b"wal/00000000000000000001.jsonl:1",
            b"wal/00000000000000000002.jsonl:2" * 2,
        ]
        assert store.get_many([]) == []
        assert store.get_many(["missing/only"]) == [None]

    # -- conditional read -----------------------------------------------
    def test_get_if_changed(self, store: Store) -> None:
        key = "o/head.json"
        v1 = store.create(key, b"v1")
        assert v1 is not None
        assert store.get_if_changed(key, v1) is UNCHANGED
        assert store.get_if_changed(key, None) == store.get(key) == Blob(b"v1", v1)
        v2 = store.replace(key, b"v2", v1)
        assert v2 is not None
        assert store.get_if_changed(key, v1) == Blob(b"v2", v2)
        assert store.get_if_changed(key, v2) is UNCHANGED
        if v2.token.startswith('"'):
            # An ETag handed on without its quotes names the same version.
            assert store.get_if_changed(key, Version(v2.token.strip('"'))) is UNCHANGED
        assert store.get_if_changed(key, Version("no-such-version")) == Blob(b"v2", v2)
        assert store.get_if_changed("o/missing.json", v2) is None
        assert store.get_if_changed("o/missing.json", None) is None
        store.delete(key)
        assert store.get_if_changed(key, v2) is None
        empty = store.create("o/empty", b"")
        assert empty is not None
        assert store.get_if_changed("o/empty", empty) is UNCHANGED

    # -- replace --------------------------------------------------------
    def test_read_your_write(self, store: Store) -> None:
        v1 = store.create("h", b"v1")
        assert v1 is not None
        v2 = store.replace("h", b"v2", v1)
        assert v2 is not None and v2 != v1
        blob = store.get("h")
        assert blob is not None and blob.data == b"v2" and blob.version == v2

    def test_replace_with_stale_version(self, store: Store) -> None:
        v1 = store.create("h", b"v1")
        assert v1 is not None
        v2 = store.replace("h", b"v2", v1)
        assert v2 is not None
        assert store.replace("h", b"v3", v1) is None
        blob = store.get("h")
        assert blob is not None and blob.data == b"v2"

    def test_replace_missing_key(self, store: Store) -> None:
        v1 = store.create("h", b"v1")
        assert v1 is not None
        assert store.replace("other", b"x", v1) is None
        assert store.get("other") is None

    def test_replace_after_delete(self, store: Store) -> None:
        v1 = store.create("h", b"v1")
        assert v1 is not None
        store.delete("h")
        assert store.replace("h", b"x", v1) is None
        assert store.get("h") is None

    def test_replace_after(self, store: Store) -> None:
        """`first()` has run, and the key is unchanged while it runs; its
        error is raised and nothing is replaced; a lost race still runs it."""
        v1 = store.create("o/head.json", b"v1")
        assert v1 is not None
        seen: list[bytes | None] = []

        def first() -> None:
            blob = store.get("o/head.json")
            seen.append(None if blob is None else blob.data)
            assert store.create(f"o/wal/{len(seen)}", b"segment") is not None

        v2 = store.replace_after("o/head.json", b"v2", v1, first)
        assert v2 is not None and seen == [b"v1"] and store.get("o/wal/1") is not None
        assert store.get("o/head.json") == Blob(b"v2", v2)

        def failing() -> None:
            raise BackendError("the segment did not land")

        with pytest.raises(BackendError, match="did not land"):
            store.replace_after("o/head.json", b"v3", v2, failing)
        assert store.get("o/head.json") == Blob(b"v2", v2)
        assert store.replace_after("o/head.json", b"v4", v1, first) is None  # stale
        assert seen == [b"v1", b"v2"] and store.get("o/wal/2") is not None
        v5 = store.replace("o/head.json", b"v5", v2)  # nothing left locked or staged
        assert v5 is not None
        assert [e.key for e in store.list_keys("o")] == ["o/head.json", "o/wal/1", "o/wal/2"]

    # -- streaming ------------------------------------------------------
    def test_stream_file_roundtrip(self, store: Store, tmp_path: Any) -> None:
        src = os.path.join(str(tmp_path), "src.bin")
        digest = hashlib.sha256()
        block = os.urandom(1024 * 1024)
        with open(src, "wb") as handle:
            for i in range(self.stream_bytes // len(block)):
                chunk = block[:-1] + bytes([i % 256])
                handle.write(chunk)
                digest.update(chunk)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert store.create_file("ckpt/big.tar", src) is not None
        assert store.create_file("ckpt/big.tar", src) is None
        dst = os.path.join(str(tmp_path), "dst.bin")
        assert store.download("ckpt/big.tar", dst)
        growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        check = hashlib.sha256()
        with open(dst, "rb") as handle:
            while chunk := handle.read(1 << 20):
                check.update(chunk)
        assert check.hexdigest() == digest.hexdigest()
        if store.protocol != "memory":
            # Bounded memory: peak RSS grows by far less than the payload.
            assert growth_kib * 1024 < self.stream_bytes // 2

    def test_create_file_from_missing_local_file(self, store: Store, tmp_path: Any) -> None:
        # A local file that cannot be read is the caller's error, named as a
        # BackendError (not an OSError from below the store); nothing is created.
        from durable_obj.errors import BackendError

        with pytest.raises(BackendError, match=r"ckpt/none\.tar"):
            store.create_file("ckpt/none.tar", os.path.join(str(tmp_path), "absent.bin"))
        assert store.get("ckpt/none.tar") is None

    def test_adopt_and_fetch_file(self, store: Store, tmp_path: Any) -> None:
        # A file given away (adopt_file) lands whole, exactly once; one only
        # read (fetch_file) has the stored bytes; whether either was moved or
        # linked rather than copied is the store's business, not the bytes'.
        data = os.urandom(256 * 1024 + 7)
        sha = hashlib.sha256(data).hexdigest()
        src = os.path.join(str(tmp_path), "given.tar")
        with open(src, "wb") as handle:
            handle.write(data)
        assert store.adopt_file("ckpt/adopted.tar", src, lambda: sha) is not None
        again = os.path.join(str(tmp_path), "again.tar")
        with open(again, "wb") as handle:
            handle.write(b"someone else's")
        assert store.adopt_file("ckpt/adopted.tar", again, lambda: sha) is None
        blob = store.get("ckpt/adopted.tar")
        assert blob is not None and blob.data == data
        dst = os.path.join(str(tmp_path), "read.tar")
        assert store.fetch_file("ckpt/adopted.tar", dst)
        with open(dst, "rb") as handle:
            assert handle.read() == data
        os.unlink(dst)  # what the reader does; the key stays
        blob = store.get("ckpt/adopted.tar")
        assert blob is not None and blob.data == data
        assert store.fetch_file("ckpt/absent.tar", dst) is False
        assert not os.path.exists(dst)

    @pytest.mark.parametrize("size", [64 * 1024 + 3, 17 * 1024 * 1024 + 5])
    def test_adopt_growing_file(self, store: Store, tmp_path: Any, size: int) -> None:
        # A file its producer still writes (a BACKUP archive) lands whole,
        # once complete; past 16 MiB an S3 store sends it in parts as it grows.
        from durable_obj.stores.growing import GrowingFile

        data = os.urandom(size)
        sha = hashlib.sha256(data).hexdigest()
        path = os.path.join(str(tmp_path), "growing.tar")
        source = GrowingFile(path)
        step = max(1, size // 7)

        def write() -> None:
            with open(path, "wb") as handle:
                for at in range(0, size, step):
                    handle.write(data[at : at + step])
                    handle.flush()
                    threading.Event().wait(0.01)

        producer = source.produce(write)
        try:
            assert store.adopt_growing("ckpt/grown.tar", source, lambda: sha) is not None
        finally:
            producer.join()
            source.close()
        blob = store.get("ckpt/grown.tar")
        assert blob is not None and len(blob.data) == size and blob.data == data

    def test_adopt_growing_file_whose_producer_fails(self, store: Store, tmp_path: Any) -> None:
        # A BACKUP that fails midway creates nothing, at any size.
        from durable_obj.stores.growing import GrowingFile, SourceFailed

        path = os.path.join(str(tmp_path), "failing.tar")
        source = GrowingFile(path)

        def write() -> None:
            with open(path, "wb") as handle:
                handle.write(os.urandom(17 * 1024 * 1024 + 1))
                handle.flush()
            raise RuntimeError("the engine failed")

        producer = source.produce(write)
        try:
            with pytest.raises(SourceFailed) as failed:
                store.adopt_growing("ckpt/failed.tar", source, lambda: "0" * 64)
        finally:
            producer.join()
            source.close()
        assert isinstance(failed.value.__cause__, RuntimeError)
        assert store.get("ckpt/failed.tar") is None

    def test_download_missing(self, store: Store, tmp_path: Any) -> None:
        dst = os.path.join(str(tmp_path), "x")
        assert store.download("missing", dst) is False
        assert not os.path.exists(dst)

    def test_read_into_streams_a_key_in_order(self, store: Store) -> None:
        # A streamed read (a sealed base opened as it downloads) hands over
        # every byte in order after a restart(); a missing key is False.
        data = os.urandom(2 * 1024 * 1024 + 5)
        assert store.create("ckpt/streamed.tar", data) is not None
        got: list[bytes] = []
        restarts: list[int] = []

        class Sink:
            def restart(self) -> None:
                restarts.append(len(got))
                got.clear()

            def write(self, piece: bytes) -> None:
                got.append(bytes(piece))

        assert store.read_into("ckpt/streamed.tar", Sink()) is True
        assert b"".join(got) == data and restarts and restarts[0] == 0
        assert store.read_into("ckpt/missing.tar", Sink()) is False

    # -- listing and delete ---------------------------------------------
    def test_list_and_delete(self, store: Store) -> None:
        for key in ("o1/head.json", "o1/wal/1.jsonl", "o2/head.json", "o10/head.json"):
            assert store.create(key, key.encode()) is not None
        assert [e.key for e in store.list_keys("o1")] == ["o1/head.json", "o1/wal/1.jsonl"]
        everything = store.list_keys()
        assert [e.key for e in everything] == sorted(
            ["o1/head.json", "o1/wal/1.jsonl", "o2/head.json", "o10/head.json"]
        )
        assert all(e.size == len(e.key) for e in everything)
        store.delete("o1/wal/1.jsonl")
        store.delete("o1/wal/1.jsonl")
        assert [e.key for e in store.list_keys("o1")] == ["o1/head.json"]

    def test_list_folders(self, store: Store) -> None:
        keys = [
            "o1/head.json",
            "o1/wal/1.jsonl",
            "o1/checkpoints/deep/x.tar",
            "o2/head.json",
            "o10/wal/only.jsonl",
            "a b+c=d~e/head.json",
            "\u00e9t\u00e9/head.json",
            "top-level-file",
        ]
        for key in keys:
            assert store.create(key, b"x") is not None
        # The folders directly below the root (never a file, never deeper) ...
        expected = sorted({k.split("/", 1)[0] for k in keys if "/" in k})
        assert store.list_folders() == expected
        # ... and below a prefix; nothing below a missing prefix or a file.
        assert store.list_folders("o1") == ["checkpoints", "wal"]
        assert store.list_folders("o1/checkpoints") == ["deep"]
        assert store.list_folders("o2") == []
        assert store.list_folders("missing") == []
        assert store.list_folders("top-level-file") == []
        # What it names agrees with a listing of every key.
        assert set(store.list_folders()) == {
            e.key.split("/", 1)[0] for e in store.list_keys() if "/" in e.key
        }
        # A folder whose keys were all deleted may still be named (a local
        # folder, SeaweedFS's filer), never one that never held a key.
        store.delete("o2/head.json")
        assert set(store.list_folders()) <= set(expected)

    def test_list_folders_many_pages(self, store: Store) -> None:
        """More folders than one listing page holds (1,000 on S3 and GCS)."""
        names = [f"obj-{n:05d}" for n in range(1005)]
        if store.protocol == "memory" or store.protocol == "file":
            names = names[:50]  # nothing pages there
        pool = ThreadPoolExecutor(16)
        try:
            created = list(pool.map(lambda n: store.create(f"{n}/head.json", b"h"), names))
        finally:
            pool.shutdown()
        assert all(v is not None for v in created)
        assert store.list_folders() == names

    def test_list_keys_many_answers_as_list_keys_does(self, store: Store) -> None:
        for key in ("o1/head.json", "o1/wal/1.jsonl", "o2/head.json", "o10/head.json"):
            assert store.create(key, key.encode()) is not None
        asked = ["o1", "o2", "o10", "missing", "o1"]
        many = store.list_keys_many(asked, concurrency=3)
        assert many == [store.list_keys(prefix) for prefix in asked]
        assert [[e.key for e in entries] for entries in many] == [
            ["o1/head.json", "o1/wal/1.jsonl"],
            ["o2/head.json"],
            ["o10/head.json"],
            [],
            ["o1/head.json", "o1/wal/1.jsonl"],
        ]
        assert store.list_keys_many([]) == []

    def test_key_escape_refused(self, store: Store) -> None:
        from durable_obj.errors import BackendError

        for bad in ("../x", "a/../../x", "/abs", "a//b"):
            with pytest.raises(BackendError):
                store.create(bad, b"x")


class ThreadRaces(StoreContract):
    """One winner per round among 8 threads, for create and for replace."""

    def test_thread_race_create(self, store: Store) -> None:
        for _ in range(RACE_ROUNDS):
            key = f"race/{uuid.uuid4().hex}"
            barrier = threading.Barrier(RACERS)

            def go(me: int, key: str = key, barrier: threading.Barrier = barrier) -> bool:
                barrier.wait()
                return store.create(key, f"racer-{me}".encode()) is not None

            with ThreadPoolExecutor(RACERS) as pool:
                wins = list(pool.map(go, range(RACERS)))
            assert sum(wins) == 1
            blob = store.get(key)
            assert blob is not None and blob.data == f"racer-{wins.index(True)}".encode()

    def test_thread_race_replace(self, store: Store) -> None:
        key = f"race/{uuid.uuid4().hex}"
        version = store.create(key, b"start")
        assert version is not None
        for _ in range(RACE_ROUNDS):
            barrier = threading.Barrier(RACERS)

            def go(me: int, v: Version = version, barrier: threading.Barrier = barrier) -> bool:
                barrier.wait()
                return store.replace(key, f"racer-{me}-{uuid.uuid4().hex}".encode(), v) is not None

            with ThreadPoolExecutor(RACERS) as pool:
                wins = list(pool.map(go, range(RACERS)))
            assert sum(wins) == 1
            blob = store.get(key)
            assert blob is not None
            assert blob.data.startswith(f"racer-{wins.index(True)}-".encode())
            version = blob.version


class ProcessRaces(StoreContract):
    """One winner per round among 8 processes opening the same root."""

    def test_process_race_create_and_replace(self, store: Store) -> None:
        url, options = self.store_url(store), self.storage_options(store)
        ctx = multiprocessing.get_context("spawn")
        # One racer per pool process: a process waiting at the (reusable)
        # barrier holds its one task, so the round's RACERS tasks land on
        # RACERS different processes.
        barrier = ctx.Barrier(RACERS)
        with ctx.Pool(RACERS, initializer=_enter_race, initargs=(barrier,)) as pool:
            for _ in range(RACE_ROUNDS):
                key = f"prace/{uuid.uuid4().hex}"
                wins = pool.starmap(_race_create, [(url, options, key, i) for i in range(RACERS)])
                assert sum(wins) == 1
                blob = store.get(key)
                assert blob is not None
                wins = pool.starmap(
                    _race_replace,
                    [(url, options, key, blob.version.token, i) for i in range(RACERS)],
                )
                assert sum(wins) == 1
                after = store.get(key)
                assert after is not None
                assert after.data.startswith(f"racer-{wins.index(True)}-".encode())


class StoreTests(ThreadRaces):
    """The contract and the thread races: subclass and provide a `store` fixture."""


class SharedStoreTests(StoreTests, ProcessRaces):
    """For stores that several processes share: adds the 8-process races."""
