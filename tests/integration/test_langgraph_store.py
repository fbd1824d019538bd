"""durable_obj.langgraph.DurableStore beyond the differential property test
(tests/property/test_langgraph_store.py): TTL and its sweep, embeddings
logged once and never recomputed, the async face, sharing one object with
the checkpointer, and the lease as write ownership."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

import durable_obj
from durable_obj.langgraph import DurableSaver, DurableStore, WriteOwnerHeld

CALLS: list[str] = []


def embed(texts: list[str]) -> list[list[float]]:
    CALLS.extend(texts)
    return [[1.0 + t.count("a"), 1.0 + t.count("b"), 1.0] for t in texts]


INDEX: Any = {"dims": 3, "embed": embed, "fields": ["text"]}


def test_ttl_expired_items_are_omitted_and_swept(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "mem")
    with DurableStore(url) as store:
        store.put(("u",), "gone", {"v": 1}, ttl=0.0)
        store.put(("u",), "kept", {"v": 2}, ttl=60.0)
        store.put(("u",), "forever", {"v": 3})
        assert store.get(("u",), "gone") is None
        assert {i.key for i in store.search(("u",))} == {"kept", "forever"}
        assert store.sweep_ttl() == 1
        assert store.sweep_ttl() == 0
    with durable_obj.open(url, read_only=True) as obj:  # replayed from storage
        assert obj.query("SELECT key FROM lg_store FINAL ORDER BY key").split() == [
            '"forever"',
            '"kept"',
        ]


@pytest.mark.parametrize("ttl", ["5", True, float("nan"), -1.0, 1e10, [1]])
def test_a_put_with_a_bad_ttl_is_refused_and_writes_nothing(tmp_path: Path, ttl: Any) -> None:
    """Before, a ttl that was not an int or a float (`"5"`) was dropped: the
    item was stored with no TTL at all, silently."""
    with DurableStore(str(tmp_path / "ns" / "mem")) as store:
        store.put(("u",), "old", {"v": 0})
        with pytest.raises(durable_obj.InvalidArgument, match="ttl of item 'k'"):
            store.batch(
                [
                    PutOp(("u",), "old", None),  # a delete in the same batch: not run either
                    PutOp(("u",), "k", {"v": 1}, ttl=ttl),
                ]
            )
        assert [i.key for i in store.search(("u",))] == ["old"]


def test_a_value_that_is_not_json_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    with DurableStore(str(tmp_path / "ns" / "mem")) as store:
        for bad in ({1, 2}, float("nan"), float("inf")):
            with pytest.raises(durable_obj.InvalidArgument, match="not JSON"):
                store.put(("u",), "k", {"v": bad})
        assert store.get(("u",), "k") is None
        store.put(("u",), "k", {"v": [1, 2]}, ttl=1)  # an int of minutes is a number too
        store.put(("u",), "d", {"v": 1}, ttl=Decimal("1.5"))  # and a Decimal
        assert store.get(("u",), "d") is not None
        assert store.get(("u",), "k") is not None


def test_refresh_on_read_moves_the_expiry(tmp_path: Path) -> None:
    with DurableStore(str(tmp_path / "ns" / "mem")) as store:
        store.put(("u",), "k", {"v": 1}, ttl=1.0)
        first = int(store.obj.query("SELECT expires_at FROM lg_store FINAL").strip())
        assert store.get(("u",), "k", refresh_ttl=True) is not None
        second = int(store.obj.query("SELECT expires_at FROM lg_store FINAL").strip())
        assert second > first


def test_embeddings_are_computed_once_and_replayed_as_literals(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "mem")
    CALLS.clear()
    with DurableStore(url, index=INDEX) as store:
        store.put(("docs",), "a", {"text": "banana"})
        store.put(("docs",), "b", {"text": "cab"})
        store.put(("docs",), "c", {"text": "no vector"}, index=False)
    assert CALLS == ["banana", "cab"]
    with DurableStore(url, index=INDEX, read_only=True) as reader:
        assert CALLS == ["banana", "cab"]  # the replay did not embed
        hits = reader.search(("docs",), query="aaa", limit=3)
    assert CALLS == ["banana", "cab", "aaa"]
    assert [h.key for h in hits] == ["a", "b", "c"]
    assert hits[0].score is not None and hits[1].score is not None
    assert hits[0].score > hits[1].score
    assert hits[2].score is None


def test_async_face(tmp_path: Path) -> None:
    async def run() -> Any:
        async with DurableStore(str(tmp_path / "ns" / "mem")) as store:
            await store.aput(("u", "1"), "k", {"n": 5, "deep": {"x": 1}})
            await store.aput(("u", "2"), "k", {"n": 9, "deep": {"x": 2}})
            found = await store.asearch(("u",), filter={"n": {"$gte": 6}})
            nested = await store.asearch(("u",), filter={"deep": {"x": 1}})
            spaces = await store.alist_namespaces(prefix=("u",), max_depth=2)
            await store.adelete(("u", "1"), "k")
            return found, nested, spaces, await store.aget(("u", "1"), "k")

    found, nested, spaces, gone = asyncio.run(run())
    assert [i.namespace for i in found] == [("u", "2")]
    assert [i.namespace for i in nested] == [("u", "1")]
    assert spaces == [("u", "1"), ("u", "2")]
    assert gone is None


def test_saver_and_store_share_one_object(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "agent")
    with DurableSaver(url) as saver:
        with DurableStore(saver.obj) as store:
            store.put(("prefs",), "theme", {"v": "dark"})
        assert not saver.obj.closed
        assert {"lg_checkpoints", "lg_store"} <= set(saver.obj.tables())
    with DurableStore(url, read_only=True) as reader:
        item = reader.get(("prefs",), "theme")
    assert item is not None and item.value == {"v": "dark"}


def test_a_second_store_is_refused(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "mem")
    with DurableStore(url, owner="a"):
        with pytest.raises(WriteOwnerHeld) as info:
            DurableStore(url, owner="b")
        assert info.value.is_stale_write_owner_error is True


def test_a_restarted_store_reclaims_its_own_owner_name_at_once(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "mem")
    first = DurableStore(url, owner="worker-1", lease_ttl=60)
    first.put(("users", "alice"), "prefs", {"theme": "dark"})
    first.obj._abandon()  # killed: its live lease stays behind
    with pytest.raises(WriteOwnerHeld, match="pass reclaim=True") as held:
        DurableStore(url, owner="worker-1")
    assert "succeeds in" in str(held.value)
    with DurableStore(url, owner="worker-1", reclaim=True, lease_ttl=60) as store:
        item = store.get(("users", "alice"), "prefs")
        assert item is not None and item.value == {"theme": "dark"}
        store.put(("users", "alice"), "prefs", {"theme": "light"})
    first.close()  # its object is gone already: nothing to do
    with DurableStore(url, read_only=True) as reader:
        item = reader.get(("users", "alice"), "prefs")
        assert item is not None and item.value == {"theme": "light"}


def test_hostile_text_round_trips(tmp_path: Path) -> None:
    text = "quote ' backslash \\ nul \x00 tab \t newline \n emoji \U0001f600 $$ -- /*"
    label = text.replace("\x00", "")  # LangGraph refuses NUL in a namespace label
    with DurableStore(str(tmp_path / "ns" / "mem")) as store:
        store.put((label, "ns"), text, {text: text})
    with DurableStore(str(tmp_path / "ns" / "mem"), read_only=True) as reader:
        item = reader.get((label, "ns"), text)
        assert reader.list_namespaces() == [(label, "ns")]
    assert item is not None and item.value == {text: text}


def test_async_face_with_an_index_embeds_once_off_the_loop(tmp_path: Path) -> None:
    """abatch with an IndexConfig: the texts are picked in a worker, the
    embedding function's async face is awaited, the rows written in one lane
    call; a search by query ranks as the sync path does."""
    CALLS.clear()

    async def run() -> list[Any]:
        aobj = await durable_obj.aopen(str(tmp_path / "ns" / "amem"))
        store = DurableStore(aobj, index=INDEX)
        await store.aput(("docs",), "a", {"text": "banana"})
        await store.aput(("docs",), "b", {"text": "cab"})
        await store.aput(("docs",), "c", {"text": "none"}, index=False)
        hits = await store.asearch(("docs",), query="aaa", limit=3)
        await store.aclose()
        await aobj.aclose()
        return hits

    hits = asyncio.run(run())
    assert CALLS == ["banana", "cab", "aaa"]
    assert [h.key for h in hits] == ["a", "b", "c"]
    assert hits[0].score is not None and hits[1].score is not None
    assert hits[0].score > hits[1].score
    assert hits[2].score is None


def test_a_sweep_forgets_every_version_of_an_expired_item(tmp_path: Path) -> None:
    """A put over an item is a new row (ReplacingMergeTree): the sweep
    deletes the item's every row, or the version before the expired one
    would come back (on some replicas only: whether it still exists depends
    on when the engine merged)."""
    url = str(tmp_path / "ns" / "mem")
    with DurableStore(url) as store:
        store.put(("u",), "k", {"v": 1})
        store.put(("u",), "k", {"v": 2}, ttl=0.0)
        assert store.get(("u",), "k") is None
        assert store.sweep_ttl() == 1
        assert store.get(("u",), "k") is None
        assert store.obj.rows("SELECT count() FROM lg_store") == [(0,)]
    with DurableStore(url, read_only=True) as reader:
        assert reader.get(("u",), "k") is None


def test_the_sweeper_follows_langgraphs_contract(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "mem")
    with DurableStore(url, ttl={"sweep_interval_minutes": 60}) as store:
        running = store.start_ttl_sweeper()
        assert not running.done() and store._sweeper is not None
        again = store.start_ttl_sweeper()  # one sweeper: cancelling this one stops it
        assert again.cancel() and store._stop.is_set()
        assert store.stop_ttl_sweeper(timeout=None) is True
        assert running.result(timeout=0) is None and store._sweeper is None
        assert store.stop_ttl_sweeper() is True  # none running
    with DurableStore(url, read_only=True) as reader:
        done = reader.start_ttl_sweeper()  # a reader never sweeps
        assert done.done() and reader._sweeper is None


@pytest.mark.parametrize("name", ["1abc", "1e5", "0x1", "", "a-b", "\u00e9t\u00e9", 123])
def test_a_table_name_the_engine_would_not_take_is_refused_before_opening(
    tmp_path: Path, name: Any
) -> None:
    url = str(tmp_path / "o")
    with pytest.raises(durable_obj.InvalidArgument, match="table"):
        DurableStore(url, owner="s", table=name)
    with pytest.raises(durable_obj.InvalidArgument, match="table_prefix"):
        DurableSaver(url, owner="s", table_prefix=name)
    assert not (tmp_path / "o").exists()  # nothing was opened or created


def test_a_failing_constructor_closes_what_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose table cannot be made releases the object it opened: the
    corrected retry under the same owner opens at once."""
    from durable_obj.langgraph import _store_sql

    url = str(tmp_path / "o")
    monkeypatch.setattr(_store_sql, "create_table", lambda t: "CREATE TABLE x AS url('u')")
    with pytest.raises(durable_obj.ClassificationRefused):
        DurableStore(url, owner="s")
    monkeypatch.undo()
    with DurableStore(url, owner="s") as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k") is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_puts": "5"},
        {"batch_puts": True},
        {"batch_seconds": "x"},
        {"batch_seconds": float("nan")},
    ],
)
def test_batching_takes_numbers_only(tmp_path: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(durable_obj.InvalidArgument, match="batch_"):
        DurableStore(str(tmp_path / "o"), owner="s", flush="batch", **bad)
    assert not (tmp_path / "o").exists()
