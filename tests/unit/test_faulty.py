"""FaultyStore itself: each fault means what its name says (applied or not),
a seed replays exactly, and `get_many` goes through the inner store's own
batched read with the faults of a `get` of each key."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence

import pytest

from durable_obj.errors import BackendError, StoreAmbiguous
from durable_obj.stores import UNCHANGED, Blob, Store
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore, SimulatedCrash


def inner() -> MemoryStore:
    return MemoryStore(f"faulty-{uuid.uuid4().hex}")


def only(fault: Fault, store: Store | None = None, **kw: object) -> FaultyStore:
    """Every call of the chosen ops meets `fault`."""
    return FaultyStore(store or inner(), seed=1, rate=1.0, faults=[fault], **kw)  # type: ignore[arg-type]


class CountingStore(MemoryStore):
    """A memory store that says how its reads were asked for."""

    def __init__(self) -> None:
        super().__init__(f"counting-{uuid.uuid4().hex}")
        self.batches: list[list[str]] = []

    def get_many(self, keys: Sequence[str], concurrency: int = 32) -> list[Blob | None]:
        self.batches.append(list(keys))
        return super().get_many(keys, concurrency)


def test_disabled_or_zero_rate_passes_everything_through() -> None:
    for store in (FaultyStore(inner(), seed=3, rate=0.0), only(Fault.ERROR)):
        store.enabled = store.rate == 0.0
        v1 = store.create("k", b"1")
        assert v1 is not None
        assert store.replace("k", b"2", v1) is not None
        blob = store.get("k")
        assert blob is not None and blob.data == b"2"
        assert store.get_many(["k", "missing"]) == [blob, None]
        assert [e.key for e in store.list_keys()] == ["k"]
        store.delete("k")
        assert store.get("k") is None
        assert store.injected == []


def test_error_and_ambiguous_before_are_not_applied() -> None:
    for fault, raised in ((Fault.ERROR, BackendError), (Fault.AMBIGUOUS_BEFORE, StoreAmbiguous)):
        store = only(fault, ops=["create"])
        with pytest.raises(raised):
            store.create("k", b"x")
        assert store.inner.get("k") is None, fault
        assert store.injected == [("create", "k", fault)]


def test_a_lost_response_was_applied() -> None:
    store = only(Fault.LOST_RESPONSE, ops=["create", "replace"])
    with pytest.raises(StoreAmbiguous):
        store.create("k", b"x")
    landed = store.inner.get("k")
    assert landed is not None and landed.data == b"x"
    with pytest.raises(StoreAmbiguous):
        store.replace("k", b"y", landed.version)
    after = store.inner.get("k")
    assert after is not None and after.data == b"y"


def test_crashes_before_and_after() -> None:
    before = only(Fault.CRASH_BEFORE, ops=["create"])
    with pytest.raises(SimulatedCrash):
        before.create("k", b"x")
    assert before.inner.get("k") is None
    after = only(Fault.CRASH_AFTER, ops=["create"])
    with pytest.raises(SimulatedCrash):
        after.create("k", b"x")
    assert after.inner.get("k") is not None
    # A crash is no Exception: no `except Exception` in the library swallows it.
    assert not issubclass(SimulatedCrash, Exception)


def test_reads_only_meet_read_faults() -> None:
    store = FaultyStore(inner(), seed=5, rate=1.0)
    store.inner.create("k", b"x")
    for _ in range(50):
        with contextlib.suppress(BackendError, SimulatedCrash):
            store.get("k")
    kinds = {fault for op, _, fault in store.injected if op == "get"}
    assert kinds and kinds <= {Fault.ERROR, Fault.LATENCY, Fault.CRASH_BEFORE}


def test_a_seed_replays_the_same_faults() -> None:
    def run(seed: int) -> list[tuple[str, str, Fault]]:
        store = FaultyStore(inner(), seed=seed, rate=0.5)
        for n in range(40):
            for call in (
                lambda n=n: store.create(f"k{n}", b"x"),
                lambda n=n: store.get(f"k{n}"),
                lambda n=n: store.get_many([f"k{n}", f"k{n + 1}"]),
            ):
                with contextlib.suppress(BackendError, SimulatedCrash):
                    call()
        return store.injected

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_ops_limits_the_faults_to_the_named_calls() -> None:
    store = only(Fault.ERROR, ops=["replace"])
    version = store.create("k", b"x")
    assert version is not None and store.get("k") is not None
    with pytest.raises(BackendError):
        store.replace("k", b"y", version)
    assert [op for op, _, _ in store.injected] == ["replace"]


def test_calls_records_every_key_touched() -> None:
    store = FaultyStore(inner(), seed=0, rate=0.0)
    store.create("o/head.json", b"{}")
    store.get("o/head.json")
    store.get_many(["o/wal/1", "o/wal/2"])
    store.list_keys("o")
    assert store.calls == [
        ("create", "o/head.json"),
        ("get", "o/head.json"),
        ("get_many", "o/wal/1"),
        ("get_many", "o/wal/2"),
        ("list_keys", "o"),
    ]


def test_get_if_changed_meets_the_faults_of_get() -> None:
    """A conditional read is forwarded, and faulted as the get it stands
    for: read faults only, decided in the same sequence as the gets."""
    quiet = FaultyStore(inner(), seed=0, rate=0.0)
    version = quiet.create("o/head.json", b"{}")
    assert version is not None
    assert quiet.get_if_changed("o/head.json", version) is UNCHANGED
    assert quiet.get_if_changed("o/head.json", None) == Blob(b"{}", version)
    assert quiet.get_if_changed("o/none.json", version) is None
    assert quiet.calls[-1] == ("get_if_changed", "o/none.json")

    def run(conditional: bool) -> list[Fault]:
        store = FaultyStore(inner(), seed=9, rate=0.5)
        store.enabled = False
        v = store.create("k", b"x")
        store.enabled = True
        for _ in range(40):
            with contextlib.suppress(BackendError, SimulatedCrash):
                store.get_if_changed("k", v) if conditional else store.get("k")
        return [fault for _, _, fault in store.injected]

    faults = run(conditional=True)
    assert faults == run(conditional=False)
    assert set(faults) == {Fault.ERROR, Fault.LATENCY, Fault.CRASH_BEFORE}
    store = only(Fault.ERROR, ops=["get"])
    with pytest.raises(BackendError, match="injected"):
        store.get_if_changed("k", None)
    assert store.injected == [("get", "k", Fault.ERROR)]  # the fault of a get


def test_get_many_uses_the_inner_batched_read() -> None:
    counting = CountingStore()
    for n in range(5):
        counting.create(f"wal/{n}", str(n).encode())
    store = FaultyStore(counting, seed=0, rate=0.0)
    keys = [f"wal/{n}" for n in range(5)] + ["wal/missing"]
    blobs = store.get_many(keys, concurrency=4)
    assert [b.data if b else None for b in blobs] == [b"0", b"1", b"2", b"3", b"4", None]
    assert counting.batches == [keys]


@pytest.mark.parametrize(
    ("fault", "raised"), [(Fault.ERROR, BackendError), (Fault.CRASH_BEFORE, SimulatedCrash)]
)
def test_get_many_fails_before_reading_anything(fault: Fault, raised: type[BaseException]) -> None:
    counting = CountingStore()
    counting.create("a", b"1")
    store = only(fault, counting, ops=["get"])
    with pytest.raises(raised):
        store.get_many(["a", "b"])
    assert counting.batches == []
    assert [(op, key) for op, key, _ in store.injected] == [("get", "a"), ("get", "b")]


def test_get_many_meets_the_faults_of_get_key_by_key() -> None:
    """The same seed gives `get_many([k1..kn])` the faults that n `get`s would meet."""
    keys = [f"k{n}" for n in range(30)]

    def faults(batched: bool) -> list[tuple[str, Fault]]:
        store = FaultyStore(inner(), seed=9, rate=0.3, faults=[Fault.LATENCY], latency=0.0001)
        if batched:
            store.get_many(keys)
        else:
            for key in keys:
                store.get(key)
        return [(key, fault) for _, key, fault in store.injected]

    assert faults(batched=True) == faults(batched=False) != []


def test_latency_slows_but_answers() -> None:
    store = only(Fault.LATENCY, latency=0.001)
    assert store.create("k", b"x") is not None
    blob = store.get("k")
    assert blob is not None and blob.data == b"x"
    assert store.get_many(["k"]) == [blob]
    assert {fault for _, _, fault in store.injected} == {Fault.LATENCY}
