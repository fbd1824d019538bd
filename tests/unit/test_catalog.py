"""The catalog's rows and merge (core/catalog.py), without an engine."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_obj import errors, stores
from durable_obj.core import catalog
from durable_obj.core.ops import ObjectInfo
from durable_obj.service.addressing import check_oid
from durable_obj.stores import open_store
from durable_obj.stores.base import Version
from durable_obj.stores.memory import MemoryStore


def row(oid: str, generation: int = 1, seq: int = 1, owner: str | None = "w") -> catalog.Row:
    return {
        "id": oid,
        "seq": seq,
        "generation": generation,
        "segments": 0,
        "live_bytes": 10,
        "last_write": 1.0,
        "lease": None if owner is None else {"owner": owner, "expires_at": 2.0},
    }


def test_merge_replaces_only_its_row_and_never_goes_back() -> None:
    doc = catalog.new_doc([row("b"), row("a", 2, 5)])
    assert catalog.merge(doc, [row("c")])
    assert [r["id"] for r in doc["rows"]] == ["a", "b", "c"]
    # an older (generation, seq) of "a" is late: dropped
    assert not catalog.merge(doc, [row("a", 1, 9), row("a", 2, 4)])
    assert doc["rows"][0] == row("a", 2, 5)
    # the same place, a lease released: replaces
    assert catalog.merge(doc, [row("a", 2, 5, owner=None)])
    assert doc["rows"][0]["lease"] is None
    assert not catalog.merge(doc, [row("a", 2, 5, owner=None)])  # nothing new


def test_merge_keeps_what_it_does_not_know() -> None:
    doc = catalog.new_doc([{**row("a"), "future": [1]}, {"not": "a row"}])
    doc["written_by"] = "a newer version"
    catalog.merge(doc, [row("b")])
    assert doc["written_by"] == "a newer version"
    kept = {r.get("id"): r for r in doc["rows"]}
    assert kept[None] == {"not": "a row"} and kept["a"]["future"] == [1] and "b" in kept


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 3), st.integers(0, 5))))
def test_any_order_of_updates_keeps_the_newest_row_of_each_id(
    updates: list[tuple[str, int, int]],
) -> None:
    doc = catalog.new_doc()
    for oid, generation, seq in updates:
        catalog.merge(doc, [row(oid, generation, seq)])
    newest: dict[str, tuple[int, int]] = {}
    for oid, generation, seq in updates:
        newest[oid] = max(newest.get(oid, (0, 0)), (generation, seq))
    assert {r["id"]: catalog.order(r) for r in doc["rows"]} == newest


@pytest.mark.parametrize(
    "bad",
    [
        {**row("a"), "seq": -1},
        {**row("a"), "seq": True},
        {**row("a"), "id": "a/b"},
        {**row("a"), "lease": {"expires_at": 1}},
        {**row("a"), "live_bytes": 1.5},
        {**row("a"), "description": 7},
        {**row("a"), "last_write": float("nan")},
        {**row("a"), "lease": {"owner": "w", "expires_at": -1}},
        {**row("a"), "lease": "w"},
        {**row("a"), "timezone": ["UTC"]},
        {k: v for k, v in row("a").items() if k != "segments"},
        {**row("a"), "id": ".."},
        {**row("a"), "id": "a\x7fb"},
        "a",
    ],
)
def test_valid_row_refuses_what_a_reader_cannot_show(bad: object) -> None:
    assert catalog.valid_row(row("a"))
    assert not catalog.valid_row(bad)


@given(
    seq=st.integers(0, 2**63),
    generation=st.integers(0, 9),
    owner=st.none() | st.text(max_size=5),
    expires_at=st.none() | st.floats(0, 1e10),
    last_write=st.none() | st.floats(0, 1e10) | st.integers(0, 10**10),
    extras=st.fixed_dictionaries(
        {},
        optional={
            "description": st.text(max_size=5),
            "db": st.sampled_from(["memory", ""]),
            "timezone": st.sampled_from(["Europe/Berlin", ""]),
            "encrypted_with": st.text(max_size=5),
            "compressed": st.booleans(),
        },
    ),
)
def test_info_of_a_row_is_the_object_info_it_names(
    seq: int,
    generation: int,
    owner: str | None,
    expires_at: float | None,
    last_write: float | None,
    extras: dict[str, object],
) -> None:
    """The listing's fast build (`info_of`) is field for field the
    `ObjectInfo` its constructor makes, and compares equal to it."""
    lease = None if owner is None else {"owner": owner, "expires_at": expires_at}
    r = {**row("o"), "seq": seq, "generation": generation, "lease": lease, **extras}
    r["last_write"] = last_write
    expected = ObjectInfo(
        oid="o",
        seq=seq,
        generation=generation,
        owner=owner,
        expires_at=None if owner is None else expires_at,
        segments=0,
        live_bytes=10,
        stored_bytes=None,
        last_write=last_write,
        db=str(extras.get("db") or "default"),
        timezone=str(extras.get("timezone") or "UTC"),
        head=None,
        description=extras.get("description"),  # type: ignore[arg-type]
        encrypted_with=extras.get("encrypted_with"),  # type: ignore[arg-type]
        compressed=bool(extras.get("compressed")),
        from_catalog=True,
    )
    got = catalog.info_of(r)
    assert got == expected
    assert got is not None and vars(got) == vars(expected) and repr(got) == repr(expected)


def test_load_reads_its_own_format_only() -> None:
    assert catalog.load(catalog.dump(catalog.new_doc([row("a")])), "x") is not None
    assert catalog.load(json.dumps({"format": "other/9", "rows": []}).encode(), "x") is None
    assert catalog.load(b'{"format": "durable_obj.catalog/1", "rows": {}}', "x") is None
    with pytest.raises(errors.Corrupt):
        catalog.load(b"[" * 100, "x")


def test_the_catalog_key_is_no_object_id() -> None:
    with pytest.raises(errors.InvalidArgument, match="catalog"):
        check_oid(catalog.CATALOG_KEY)


def test_a_writer_starts_a_catalog_only_where_it_is_alone() -> None:
    store = MemoryStore(f"cat-{uuid.uuid4().hex}")
    assert store.create("other/head.json", b"{}") is not None
    assert not catalog.Writer(store).put(row("a"))
    assert store.get(catalog.CATALOG_KEY) is None
    alone = MemoryStore(f"cat-{uuid.uuid4().hex}")
    assert alone.create("a/head.json", b"{}") is not None
    assert catalog.Writer(alone).put(row("a"))
    blob = alone.get(catalog.CATALOG_KEY)
    assert blob is not None and json.loads(blob.data)["rows"] == [row("a")]


class _Racing(MemoryStore):
    """Before each catalog replace, another process's writer puts its row:
    the replace then loses its race, and the writer must merge."""

    def __init__(self, name: str, rivals: list[catalog.Row]) -> None:
        super().__init__(name)
        self.rivals = rivals
        self.other = MemoryStore(name)  # the same keys, through another process's store

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if key == catalog.CATALOG_KEY and self.rivals:
            assert catalog.Writer(self.other)._write({"r": self.rivals.pop()})
        return super().replace(key, data, version)


def test_a_lost_race_merges_and_loses_no_row() -> None:
    name = f"cat-{uuid.uuid4().hex}"
    store = _Racing(name, [row("r", 1, n) for n in (3, 2, 1)])
    assert store.create("a/head.json", b"{}") is not None
    writer = catalog.Writer(store)
    assert writer.put(row("a"))  # created: no race
    assert writer.put(row("a", 1, 2))  # three lost races, then it lands
    blob = store.get(catalog.CATALOG_KEY)
    assert blob is not None
    assert json.loads(blob.data)["rows"] == [row("a", 1, 2), row("r", 1, 3)]


def test_rows_put_at_once_in_one_process_all_land() -> None:
    store = MemoryStore(f"cat-{uuid.uuid4().hex}")
    ids = [f"o{n:02d}" for n in range(50)]
    for oid in ids:
        assert store.create(f"{oid}/head.json", b"{}") is not None
    assert store.create(catalog.CATALOG_KEY, catalog.dump(catalog.new_doc())) is not None
    writer = catalog.writer_of(store)
    results: dict[str, bool] = {}
    threads = [
        threading.Thread(target=lambda o=oid: results.__setitem__(o, writer.put(row(o, 1, 2))))
        for oid in ids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    blob = store.get(catalog.CATALOG_KEY)
    assert blob is not None
    stored = {r["id"]: r for r in json.loads(blob.data)["rows"]}
    # every put that answered True is there; a put still waiting is written by a later round
    assert all(stored[oid] == row(oid, 1, 2) for oid, ok in results.items() if ok)
    assert sum(results.values()) > 0


class _Held(MemoryStore):
    """A store whose catalog writes wait until `release` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = threading.Event()

    def create(self, key: str, data: bytes) -> Version | None:
        if key == catalog.CATALOG_KEY:
            assert self.release.wait(10)
        return super().create(key, data)

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if key == catalog.CATALOG_KEY:
            assert self.release.wait(10)
        return super().replace(key, data, version)


def test_a_queued_row_is_written_on_the_writers_thread_and_a_listing_waits_for_it() -> None:
    """`put` (an open's, a checkpoint's) returns before the write; `settle`
    (what a listing in the process calls first) waits until it is done; a
    close's `put(wait=True)` waits for its own row."""
    store = _Held(f"cat-{uuid.uuid4().hex}")
    assert store.create("a/head.json", b"{}") is not None
    catalog.put(store, row("a"))
    assert store.get(catalog.CATALOG_KEY) is None  # queued; the write waits on the store
    store.release.set()
    catalog.settle()
    blob = store.get(catalog.CATALOG_KEY)
    assert blob is not None and json.loads(blob.data)["rows"] == [row("a")]
    store.release.clear()
    done = threading.Event()

    def close() -> None:
        catalog.put(store, row("a", 1, 2), wait=True)
        done.set()

    closing = threading.Thread(target=close)
    closing.start()
    assert not done.wait(0.2)  # the close waits for its row
    store.release.set()
    closing.join(10)
    assert done.is_set()
    blob = store.get(catalog.CATALOG_KEY)
    assert blob is not None and json.loads(blob.data)["rows"] == [row("a", 1, 2)]


class _Slow(MemoryStore):
    """A client whose catalog requests take a round trip."""

    def get(self, key: str) -> Any:
        if key == catalog.CATALOG_KEY:
            time.sleep(0.01)
        return super().get(key)

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if key == catalog.CATALOG_KEY:
            time.sleep(0.01)
        return super().replace(key, data, version)


def test_the_objects_of_one_namespace_share_one_writer_whatever_their_client() -> None:
    """Each `durable_obj.open` makes its own store client: their rows still
    go through one writer (one thread, a few compare-and-swaps), never a
    race of one writer each on the one key (which dropped rows under
    latency: attack on 53fac9b)."""
    name = f"cat-{uuid.uuid4().hex}"
    clients = [_Slow(name) for _ in range(30)]
    for client in clients:  # as `open_store` keys them: one URL, the same options
        client.client_key = open_store(f"memory://{name}").client_key
    assert clients[0].create(catalog.CATALOG_KEY, catalog.dump(catalog.new_doc())) is not None
    assert catalog.writer_of(clients[0]) is catalog.writer_of(clients[1])
    peak, watching = [0], [True]

    def watch() -> None:
        while watching[0]:
            alive = [t for t in threading.enumerate() if t.name == "durable_obj-catalog"]
            peak[0] = max(peak[0], len(alive))
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    for n, client in enumerate(clients):
        catalog.put(client, row(f"o{n:02d}"))
    catalog.settle()
    watching[0] = False
    watcher.join()
    blob = clients[-1].get(catalog.CATALOG_KEY)
    assert blob is not None
    assert [r["id"] for r in json.loads(blob.data)["rows"]] == [f"o{n:02d}" for n in range(30)]
    assert peak[0] == 1


def test_clients_of_one_url_with_other_options_never_share_a_writer(tmp_path: Path) -> None:
    """Two tenants' clients of one URL on other endpoints or credentials
    (attack on 674af0c: a row of one was written into the other's catalog,
    with the other's credentials): one writer each. A client made with
    equal options shares one; a client with no key (not made by
    `open_store`) has its own."""
    url = str(tmp_path / "ns")
    a, b = open_store(url), open_store(url)
    assert a.client_key is not None and a.client_key == b.client_key
    assert catalog.writer_of(a) is catalog.writer_of(b)
    other = open_store(url, {"fsync": False})
    assert other.client_key != a.client_key
    assert catalog.writer_of(other) is not catalog.writer_of(a)
    key = stores._client_key("s3://b/ns", {"key": "k", "secret": "secret-value"})
    assert key is not None and "secret-value" not in key
    assert key != stores._client_key("s3://b/ns", {"key": "k", "secret": "another"})
    assert stores._client_key("s3://b/ns", {"provider": object()}) is None
    memory = f"cat-{uuid.uuid4().hex}"
    alone, made = MemoryStore(memory), open_store(f"memory://{memory}")
    assert alone.client_key is None and catalog.writer_of(alone) is not catalog.writer_of(made)
