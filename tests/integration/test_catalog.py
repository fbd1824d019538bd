"""The namespace catalog on real objects: rows follow open, checkpoint and
close (not flush), list() is one GET, a failed update is dropped and repaired
by a rebuild, gc leaves it, forks and releases are noted, an encrypted
object's row shows only what its head shows. On memory, a folder and S3 (moto)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import StaticKey, errors
from durable_obj.core import catalog
from durable_obj.core.ops import ObjectInfo
from durable_obj.stores.base import Store, Version
from durable_obj.testing import FaultyStore

DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"
#: What a catalog row and a head read agree on.
SHARED = ("oid", "seq", "generation", "owner", "expires_at", "segments", "live_bytes")


@pytest.fixture(params=["memory", "file", "moto_s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "memory":
        return f"memory://catalog-{uuid.uuid4().hex}", {}
    if request.param == "file":
        return str(tmp_path / "ns"), {}
    root, options = request.getfixturevalue(request.param)
    return f"{root}/cat-{uuid.uuid4().hex[:12]}", dict(options)


def shared(infos: list[ObjectInfo]) -> list[tuple[Any, ...]]:
    return [tuple(getattr(i, k) for k in SHARED) for i in infos]


def rows(store: Store) -> dict[str, dict[str, Any]]:
    catalog.settle()  # the rows this process queued are written on a thread of their own
    blob = store.get(catalog.CATALOG_KEY)
    assert blob is not None
    return {r["id"]: r for r in json.loads(blob.data)["rows"]}


def test_rows_follow_open_checkpoint_close_not_flush(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    obj = ns.open("a", description="the first")
    assert shared(ns.list()) == shared(ns.list(verify=True))  # open: leased
    obj.execute(DDL)
    obj.flush()
    assert ns.list()[0].seq == 0 and ns.list(verify=True)[0].seq == 1  # a flush: no update
    obj.checkpoint()
    assert shared(ns.list()) == shared(ns.list(verify=True))
    obj.execute("INSERT INTO m VALUES (1, 'x')")
    obj.close()
    listed = ns.list()
    assert shared(listed) == shared(ns.list(verify=True))
    (a,) = listed
    assert a.from_catalog and a.head is None and a.stored_bytes is None
    assert (a.owner, a.description, a.db, a.timezone) == (None, "the first", "default", "UTC")
    with ns.open("b", read_only=False) as other:
        other.execute(DDL)
    assert [i.oid for i in ns.list()] == ["a", "b"]
    assert shared(ns.list()) == shared(ns.list(verify=True))


def test_list_is_one_get(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    for oid in ("a", "b", "c"):
        with ns.open(oid) as obj:
            obj.execute(DDL)
    counting = FaultyStore(ns.store, seed=0, rate=0.0)
    assert [i.oid for i in durable_obj.Namespace(counting).list()] == ["a", "b", "c"]
    assert counting.calls == [("get", catalog.CATALOG_KEY)]
    counting.calls.clear()
    durable_obj.Namespace(counting).list(verify=True)
    assert ("list_folders", "") in counting.calls and len(counting.calls) > 1


class _NoCatalogWrites(FaultyStore):
    """Every write of the catalog fails; everything else passes."""

    def create(self, key: str, data: bytes) -> Version | None:
        if key == catalog.CATALOG_KEY:
            raise errors.BackendError("catalog writes refused here")
        return super().create(key, data)

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if key == catalog.CATALOG_KEY:
            raise errors.BackendError("catalog writes refused here")
        return super().replace(key, data, version)


def test_a_failed_update_is_dropped_and_a_rebuild_repairs_it(
    target: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    url, options = target
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    with ns.open("a") as obj:
        obj.execute(DDL)
    broken = durable_obj.Namespace(_NoCatalogWrites(ns.store, seed=0, rate=0.0), owner="w")
    with broken.open("a") as obj:  # open and close never fail for the catalog
        obj.execute("INSERT INTO m VALUES (1, 'x')")
        obj.checkpoint()
    with broken.open("b") as obj:
        obj.execute(DDL)
    assert "not written" in caplog.text
    assert [(i.oid, i.seq) for i in ns.list()] == [("a", 1)]  # behind
    truth = ns.list(verify=True)
    assert [(i.oid, i.seq) for i in truth] == [("a", 2), ("b", 1)]
    assert ns.rebuild_catalog() == 2
    assert shared(ns.list()) == shared(truth)
    assert [i.last_write for i in ns.list()] == [
        pytest.approx(i.last_write, abs=1e-3) for i in truth
    ]


def test_a_namespace_with_objects_gets_its_catalog_from_a_rebuild(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    with ns.open("a") as obj:
        obj.execute(DDL)
    catalog.settle()
    ns.store.delete(catalog.CATALOG_KEY)  # as before the catalog existed
    with ns.open("b") as obj:  # one writer among others starts none: it would hide them
        obj.execute(DDL)
    catalog.settle()
    assert ns.store.get(catalog.CATALOG_KEY) is None
    assert [i.from_catalog for i in ns.list()] == [False, False]  # the LIST fallback
    assert ns.rebuild_catalog() == 2
    with ns.open("c") as obj:
        obj.execute(DDL)
    assert [(i.oid, i.from_catalog) for i in ns.list()] == [(o, True) for o in "abc"]
    # a row of a deleted object goes at the next rebuild
    for entry in ns.store.list_keys("c"):
        ns.store.delete(entry.key)
    assert [i.oid for i in ns.list()] == ["a", "b", "c"]
    assert ns.rebuild_catalog() == 2 and [i.oid for i in ns.list()] == ["a", "b"]


def test_gc_fork_release_and_the_reserved_id(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    with ns.open("a") as obj:
        obj.execute(DDL)
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (1, 'x')")
        obj.checkpoint()
    catalog.settle()
    before = ns.store.get(catalog.CATALOG_KEY)
    assert ns.gc("a", grace=0, retention=0).deleted  # it collected something, not the catalog
    catalog.settle()
    after = ns.store.get(catalog.CATALOG_KEY)
    assert before is not None and after is not None and after.data == before.data
    holder = ns.open("a")
    ns.release("a")
    assert rows(ns.store)["a"]["lease"] is None
    holder.close(discard=True)
    ns.fork("a", "copy")
    assert rows(ns.store)["copy"]["seq"] == ns.info("copy").seq
    for call in (lambda: ns.open(catalog.CATALOG_KEY), lambda: ns.gc(catalog.CATALOG_KEY)):
        with pytest.raises(errors.InvalidArgument, match="catalog"):
            call()


def test_an_encrypted_objects_row_holds_what_its_head_shows(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    key = StaticKey(bytes(range(32)))
    ns = durable_obj.Namespace(url, owner="w", storage_options=options, encryption=key)
    with ns.open("vault", description="sealed") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a secret value')")
    catalog.settle()
    blob = ns.store.get(catalog.CATALOG_KEY)
    assert blob is not None and b"a secret value" not in blob.data
    (info,) = durable_obj.Namespace(url, storage_options=options).list()  # no key needed
    assert info.encrypted_with == key.key_id and info.description == "sealed"
    truth = durable_obj.Namespace(url, storage_options=options).list(verify=True)
    assert shared([info]) == shared(truth)
    assert replace(truth[0], head=None, stored_bytes=None, last_write=None) == replace(
        info, from_catalog=False, last_write=None
    )


def test_a_key_rotation_updates_the_row(tmp_path: Path) -> None:
    """rotate_key() writes the row at once: the catalog names the new key,
    as the head does, before any checkpoint or close."""
    old, new = StaticKey(bytes(range(32))), StaticKey(bytes(range(1, 33)))
    ns = durable_obj.Namespace(str(tmp_path / "ns"), owner="w", encryption=old)
    with ns.open("vault") as obj:
        obj.execute(DDL)
        obj.flush()
        assert rows(ns.store)["vault"]["encrypted_with"] == old.key_id
        obj.rotate_key(new)
        assert rows(ns.store)["vault"]["encrypted_with"] == new.key_id
        (info,) = ns.list()
        (truth,) = ns.list(verify=True)
        assert info.encrypted_with == truth.encrypted_with == new.key_id
