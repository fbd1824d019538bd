"""A Ctrl-C during a commit (durable_obj/core/interrupts.py, and the
proof a commit leaves: `HeadWriter.proven`).

The first SIGINT the main thread gets during a commit is held until the
commit settles; an interrupt that still lands inside one (a second Ctrl-C)
never makes a proven commit count as failed, nor a landed one be written
over (test_commit.py: a commit that raised yet landed).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import durable_obj
from durable_obj import StaticKey, errors
from durable_obj.core import commit, durability, interrupts, units
from durable_obj.stores.base import Store, Version
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import abandon
from durable_obj.wire.head import Head

DDL = "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"


def stored(store: Store) -> Head:
    blob = store.get("o/head.json")
    assert blob is not None
    return Head.parse(blob.data)


def rows(store: Store, **options: Any) -> list[tuple[Any, ...]]:
    with durable_obj.Namespace(store, **options).open("o", read_only=True) as obj:
        return obj.rows("SELECT k FROM m ORDER BY k")


@pytest.fixture
def writer() -> Iterator[tuple[MemoryStore, durable_obj.DurableObject]]:
    """An object with row 1 flushed (seq 1) and row 2 buffered."""
    store = MemoryStore(f"int-{uuid.uuid4().hex}")
    obj = durable_obj.Namespace(store, owner="me", commit_deadline=0.2).open("o")
    try:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")
        obj.flush()
        obj.execute("INSERT INTO m VALUES (2)")
        yield store, obj
    finally:
        abandon(obj)


def once(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, raising KeyboardInterrupt once it returned, the first time."""
    fired: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt
        return result

    return wrapped


# -- settling ---------------------------------------------------------------------
def test_settling_holds_the_first_sigint_until_the_block_ends() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), interrupts.settling("o"):
        signal.raise_signal(signal.SIGINT)
        reached.append("after the signal")
        with interrupts.settling("o"):  # nested: the outer one holds
            reached.append("nested")
    assert reached == ["after the signal", "nested"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_settling_lets_a_second_sigint_through_at_once() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), interrupts.settling("o"):
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        reached.append("never")
    assert reached == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_sigint_in_the_restore_still_puts_the_handler_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second Ctrl-C may come as the block's `finally` restores the
    handler, before the swap: the application's handler is back all the
    same, and gets the next Ctrl-C outside any commit."""
    calls: list[int] = []

    def app(signum: int, frame: object) -> None:
        calls.append(signum)

    real, armed = signal.signal, []

    def swapping(signum: int, handler: Any) -> Any:
        if armed and handler is app:
            armed.clear()
            signal.raise_signal(signal.SIGINT)  # arrives before the real swap
        return real(signum, handler)

    real(signal.SIGINT, app)
    try:
        monkeypatch.setattr(interrupts.signal, "signal", swapping)
        with pytest.raises(KeyboardInterrupt), interrupts.settling("o"):
            signal.raise_signal(signal.SIGINT)  # held
            armed.append(True)
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGINT) is app and calls == []
        signal.raise_signal(signal.SIGINT)
        assert calls == [signal.SIGINT]
    finally:
        real(signal.SIGINT, signal.default_int_handler)


def test_settling_off_the_main_thread_changes_nothing() -> None:
    seen: list[object] = []

    def run() -> None:
        with interrupts.settling("o"):
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


# -- a real SIGINT in a commit ---------------------------------------------------
class SignalsAfterReplace(MemoryStore):
    """Sends this process SIGINT once a head replace has landed (armed)."""

    armed = False

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        new = super().replace(key, data, version)
        if self.armed and new is not None:
            self.armed = False
            signal.raise_signal(signal.SIGINT)
        return new


@pytest.mark.parametrize("call", ["flush", "checkpoint", "close"])
def test_a_sigint_after_the_head_lands_takes_effect_once_the_commit_settled(call: str) -> None:
    store = SignalsAfterReplace(f"int-{uuid.uuid4().hex}")
    obj = durable_obj.Namespace(store, owner="me").open("o")
    try:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1)")
        store.armed = True
        with pytest.raises(KeyboardInterrupt):
            getattr(obj, call)()
        assert obj.pending == 0 and not obj.fenced
        assert stored(store).manifest.seq == 1
        if call != "close":
            obj.execute("INSERT INTO m VALUES (2)")
            obj.flush()
            assert stored(store).manifest.seq == 2
            obj.close()
        assert obj.closed
    finally:
        abandon(obj)
    assert rows(store) == ([(1,), (2,)] if call != "close" else [(1,)])


# -- an interrupt let through after the proof ------------------------------------------
def test_an_interrupt_just_after_the_proof_keeps_the_commit(
    writer: tuple[MemoryStore, durable_obj.DurableObject], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head is proven (its version held) and then the interrupt lands:
    the next flush goes on at the next seq, not over the same one."""
    store, obj = writer
    monkeypatch.setattr(commit.leases, "expiry", once(commit.leases.expiry))
    with pytest.raises(KeyboardInterrupt):
        obj.flush()
    assert obj.seq == 2 == stored(store).manifest.seq and obj.pending == 0
    obj.execute("INSERT INTO m VALUES (3)")
    obj.flush()
    assert stored(store).manifest.seq == 3 and not obj.fenced
    obj.close()
    assert rows(store) == [(1,), (2,), (3,)]


def test_an_interrupt_after_the_segment_committed_drops_its_lines(
    writer: tuple[MemoryStore, durable_obj.DurableObject], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted after the commit returned, before the buffer was told:
    its lines are never committed again."""
    store, obj = writer
    monkeypatch.setattr(units.publishing, "commit_segment", once(units.publishing.commit_segment))
    with pytest.raises(KeyboardInterrupt):
        obj.flush()
    assert obj.pending == 0
    obj.execute("INSERT INTO m VALUES (3)")
    obj.flush()
    obj.close()
    assert rows(store) == [(1,), (2,), (3,)]


def test_an_interrupt_after_the_checkpoint_committed_drops_its_lines(
    writer: tuple[MemoryStore, durable_obj.DurableObject], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, obj = writer
    keep = durability.Durability._keep_listing
    monkeypatch.setattr(durability.Durability, "_keep_listing", once(keep))
    with pytest.raises(KeyboardInterrupt):
        obj.checkpoint()
    assert obj.pending == 0 and stored(store).manifest.wal == []
    obj.execute("INSERT INTO m VALUES (3)")
    obj.flush()
    obj.close()
    assert rows(store) == [(1,), (2,), (3,)]


# -- a key rotation that landed unproven ---------------------------------------------
class LandsThenAmbiguous(MemoryStore):
    """Once armed: a head replace lands, its answer is lost and the reads
    that would settle it fail until the commit deadline."""

    armed = False
    blind = False

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        new = super().replace(key, data, version)
        if self.armed and new is not None:
            self.armed, self.blind = False, True
            raise errors.StoreAmbiguous("the answer was lost")
        return new

    def get(self, key: str) -> Any:
        if self.blind and key.endswith("head.json"):
            raise errors.BackendError("the read-back failed too")
        return super().get(key)


def test_a_key_rotation_that_landed_unproven_is_never_undone() -> None:
    """Its new wrapping is in the head, not the manifest: a renewal that
    wrote the old one back would lock out the new key (and a user who saw
    it open with the new key may have retired the old one)."""
    store = LandsThenAmbiguous(f"int-{uuid.uuid4().hex}")
    old, new = StaticKey(os.urandom(32)), StaticKey(os.urandom(32))
    obj = durable_obj.Namespace(store, owner="me", commit_deadline=0.2, encryption=old).open("o")
    try:
        obj.execute(DDL)
        obj.flush()
        store.armed = True
        with pytest.raises(errors.CommitAmbiguous):
            obj.rotate_key(new)
        store.blind = False
        assert rows(store, encryption=new) == []
        with pytest.raises(errors.LeaseFenced, match="never proven"):
            obj._w.commit()
    finally:
        abandon(obj)
    assert rows(store, encryption=new) == []
    with pytest.raises(errors.KeyRefused):
        rows(store, encryption=old)
