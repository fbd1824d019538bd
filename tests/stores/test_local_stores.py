"""The conformance suite on the in-process stores."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from durable_obj.errors import BackendError, MissingDependency, UnsupportedStore
from durable_obj.stores import Blob, Store, open_store, split_url
from durable_obj.stores.file import FileStore
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore
from durable_obj.testing.conformance import SharedStoreTests, StoreTests


class TestMemoryStore(StoreTests):
    stream_bytes = 8 * 1024 * 1024

    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore(f"conf-{uuid.uuid4().hex}")


class TestFaultyStorePassThrough(StoreTests):
    """A FaultyStore that injects nothing is the store it wraps."""

    stream_bytes = 8 * 1024 * 1024

    @pytest.fixture
    def store(self) -> Store:
        return FaultyStore(MemoryStore(f"conf-{uuid.uuid4().hex}"), seed=0, rate=0.0)


class TestFileStore(SharedStoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return FileStore(str(tmp_path / "root"))

    def storage_options(self, store: Store) -> dict[str, Any]:
        return {}

    def test_no_private_files_listed(self, store: Store) -> None:
        v = store.create("o/head.json", b"1")
        assert v is not None
        assert store.replace("o/head.json", b"2", v) is not None
        # the lock file beside the head is the store's, not a key
        assert [e.key for e in store.list_keys()] == ["o/head.json"]

    def test_replace_after_stages_beside_the_key(self, store: Store, tmp_path: Path) -> None:
        """While `first()` runs the new bytes are staged unseen (a temp file
        the listing skips), the key still holds the old ones; a failed
        `first()` leaves no staged file behind."""
        v1 = store.create("o/head.json", b"one")
        assert v1 is not None
        folder = tmp_path / "root" / "o"
        staged: list[list[str]] = []
        old = [b"one"]

        def first() -> None:
            deadline = time.monotonic() + 10
            while not any(n.endswith(".tmp") for n in os.listdir(folder)):
                assert time.monotonic() < deadline, "the head was never staged"
                time.sleep(0.001)
            staged.append(sorted(os.listdir(folder)))
            assert [e.key for e in store.list_keys("o")] == ["o/head.json"]
            assert (folder / "head.json").read_bytes() == old[0]

        v2 = store.replace_after("o/head.json", b"two", v1, first)
        assert v2 is not None and len(staged) == 1
        assert (folder / "head.json").read_bytes() == b"two"
        old[0] = b"two"

        def failing() -> None:
            first()
            raise BackendError("the segment did not land")

        with pytest.raises(BackendError):
            store.replace_after("o/head.json", b"three", v2, failing)
        deadline = time.monotonic() + 10
        while any(n.endswith(".tmp") for n in os.listdir(folder)):  # dropped by the worker
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert store.get("o/head.json") == Blob(b"two", v2)

    def test_replace_after_holds_no_lock_while_first_runs(
        self, store: Store, tmp_path: Path
    ) -> None:
        """The key's lock is taken only once `first()` returned: a publish
        that takes long (a base copied in from another filesystem) never
        holds other writers off (found by attack: 0.12 s of a 104 MB base,
        growing with its size). The compare then sees a replace made
        meanwhile: the new bytes are not written, and none stay staged."""
        v1 = store.create("o/head.json", b"one")
        assert v1 is not None
        folder = tmp_path / "root" / "o"
        probes: list[bool] = []

        def first() -> None:
            deadline = time.monotonic() + 10
            while not any(n.endswith(".tmp") for n in os.listdir(folder)):
                assert time.monotonic() < deadline, "the head was never staged"
                time.sleep(0.001)
            time.sleep(0.1)  # the worker is done staging
            fd = os.open(folder / "head.json.lock", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if held
                probes.append(True)
            finally:
                os.close(fd)

        v2 = store.replace_after("o/head.json", b"two", v1, first)
        assert probes == [True] and v2 is not None
        assert (folder / "head.json").read_bytes() == b"two"

        def another_writer() -> None:
            assert store.replace("o/head.json", b"theirs", v2) is not None

        assert store.replace_after("o/head.json", b"three", v2, another_writer) is None
        assert (folder / "head.json").read_bytes() == b"theirs"
        assert not any(n.endswith(".tmp") for n in os.listdir(folder))

    def test_same_bytes_new_token(self, store: Store) -> None:
        # The token never repeats, even for an identical rewrite.
        v1 = store.create("h", b"same")
        assert v1 is not None
        v2 = store.replace("h", b"same", v1)
        assert v2 is not None and v2 != v1
        assert store.replace("h", b"same", v1) is None
        blob = store.get("h")
        assert blob is not None and blob.version == v2

    def test_token_is_not_mtime(self, store: Store) -> None:
        # Two different contents written within one clock tick still get
        # different tokens, and the stale one never matches.
        v1 = store.create("h", b"a" * 10)
        assert v1 is not None
        v2 = store.replace("h", b"b" * 10, v1)
        assert v2 is not None and v2 != v1
        assert store.replace("h", b"c" * 10, v1) is None

    def test_adopt_moves_a_file_of_the_same_filesystem(self, store: Store, tmp_path: Path) -> None:
        src = tmp_path / "backup.tar"
        src.write_bytes(b"archive" * 1000)
        inode = src.stat().st_ino
        sha = hashlib.sha256(src.read_bytes()).hexdigest()
        version = store.adopt_file("o/checkpoints/1-1-a.tar", str(src), lambda: sha)
        assert version is not None
        stored = tmp_path / "root" / "o" / "checkpoints" / "1-1-a.tar"
        assert stored.stat().st_ino == inode and not src.exists()  # moved, not copied
        blob = store.get("o/checkpoints/1-1-a.tar")
        assert blob is not None and blob.version == version  # the token get() computes
        assert not [p for p in stored.parent.iterdir() if p.name != stored.name]  # no staging

    def test_fetch_links_and_the_reader_cannot_hurt_the_key(
        self, store: Store, tmp_path: Path
    ) -> None:
        assert store.create("o/checkpoints/1-1-a.tar", b"base" * 100) is not None
        dst = tmp_path / "scratch.tar"
        assert store.fetch_file("o/checkpoints/1-1-a.tar", str(dst))
        stored = tmp_path / "root" / "o" / "checkpoints" / "1-1-a.tar"
        assert dst.stat().st_ino == stored.stat().st_ino  # a link, not a copy
        dst.unlink()
        assert stored.read_bytes() == b"base" * 100

    def test_replace_gives_up_on_a_lock_held_by_a_stopped_writer(
        self, store: Store, tmp_path: Path
    ) -> None:
        import signal
        import subprocess
        import sys

        from durable_obj.errors import BackendError

        v1 = store.create("o/head.json", b"one")
        assert v1 is not None
        lock = tmp_path / "root" / "o" / "head.json.lock"
        # another process takes the head's lock, as a writer inside its swap
        # does, and is stopped there (SIGSTOP: it never lets go by itself)
        with subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import fcntl, os, signal, sys\n"
                f"fd = os.open({str(lock)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                "print('held', flush=True)\n"
                "os.kill(os.getpid(), signal.SIGSTOP)\n",
            ],
            stdout=subprocess.PIPE,
            text=True,
        ) as holder:
            try:
                assert holder.stdout is not None and holder.stdout.readline() == "held\n"
                assert isinstance(store, FileStore)
                store.lock_wait = 0.3
                with pytest.raises(BackendError) as caught:
                    store.replace("o/head.json", b"two", v1)
                message = str(caught.value)
                assert "head.json.lock" in message and "over 0.3 s" in message
                assert "nothing was written" in message
                blob = store.get("o/head.json")
                assert blob is not None and (blob.data, blob.version) == (b"one", v1)
            finally:
                holder.send_signal(signal.SIGKILL)  # its lock goes with it
                holder.wait()
        assert store.replace("o/head.json", b"two", v1) is not None

    def test_adopt_and_fetch_copy_across_filesystems(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import errno
        import os

        def no_cross_device(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "rename", no_cross_device)  # one device, two mounts
        src = tmp_path / "backup.tar"
        src.write_bytes(b"archive")
        sha = hashlib.sha256(b"archive").hexdigest()
        assert store.adopt_file("o/checkpoints/x.tar", str(src), lambda: sha) is not None
        monkeypatch.undo()
        assert src.read_bytes() == b"archive"  # copied: the file is still there
        stored = tmp_path / "root" / "o" / "checkpoints" / "x.tar"
        assert stored.read_bytes() == b"archive" and stored.stat().st_ino != src.stat().st_ino
        assert store.create("o/checkpoints/y.tar", b"base") is not None
        monkeypatch.setattr(os, "link", no_cross_device)
        dst = tmp_path / "copy.tar"
        assert store.fetch_file("o/checkpoints/y.tar", str(dst))
        monkeypatch.undo()
        assert dst.read_bytes() == b"base"
        stored = tmp_path / "root" / "o" / "checkpoints" / "y.tar"
        assert dst.stat().st_ino != stored.stat().st_ino  # a copy


class TestFileStoreOddRoot(SharedStoreTests):
    """The same suite under a root reached through a link, whose name has a
    space, non-ASCII, '%', '#' and '?': the child processes of the races open
    it again from `store.url`, which must name this very folder."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        real = tmp_path / "real" / "root"
        real.mkdir(parents=True)
        (tmp_path / "lïnk été 50% #1?").symlink_to(real.parent)
        return FileStore(str(tmp_path / "lïnk été 50% #1?" / "root"))

    def test_url_names_the_folder(self, store: Store, tmp_path: Path) -> None:
        assert store.url.endswith("/l%C3%AFnk%20%C3%A9t%C3%A9%2050%25%20%231%3F/root")
        assert store.create("o/head.json", b"x") is not None
        again = open_store(store.url)
        blob = again.get("o/head.json")
        assert blob is not None and blob.data == b"x"
        assert (tmp_path / "real" / "root" / "o" / "head.json").read_bytes() == b"x"


def test_split_url() -> None:
    assert split_url("memory://ns/a") == ("memory", "ns/a")
    assert split_url("file:///tmp/x") == ("file", "/tmp/x")
    assert split_url("/tmp/x") == ("file", "/tmp/x")
    assert split_url("local:/tmp/x") == ("file", "/tmp/x")


@pytest.mark.parametrize("url", ["http://127.0.0.1/x", "ftp://127.0.0.1/x", "sftp://h/x"])
def test_unsupported_protocol_named(url: str) -> None:
    with pytest.raises(UnsupportedStore) as info:
        open_store(url)
    message = str(info.value)
    assert "file://" in message and "memory://" in message
    assert info.value.category == "invalid_argument"


def test_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_obj.stores import REGISTRY, _Registration

    monkeypatch.setitem(
        REGISTRY,
        "fake",
        _Registration("durable_obj.stores.memory:MemoryStore", "fake", ("no_such_mod_xyz",)),
    )
    with pytest.raises(MissingDependency) as info:
        open_store("fake://bucket/x")
    assert "pip install 'durable_obj[fake]'" in str(info.value)


@pytest.mark.parametrize("create", [True, False])
def test_an_interrupt_while_walking_folders_never_closes_a_descriptor_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, create: bool
) -> None:
    """A Ctrl-C that lands just after a folder's descriptor was closed must
    not close it again: by then the number may be another thread's file."""
    from durable_obj.stores import filepaths

    store = FileStore(str(tmp_path))
    if not create:
        (tmp_path / "a").mkdir()
    closed: list[int] = []
    real = os.close

    def close(fd: int) -> None:
        real(fd)
        closed.append(fd)
        if len(closed) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(filepaths.os, "close", close)
    with pytest.raises(KeyboardInterrupt):
        store._open_folder(("a", "b", "c"), "a/b/c/k", create=create)
    monkeypatch.undo()
    assert len(closed) == len(set(closed)), f"closed twice: {closed}"
