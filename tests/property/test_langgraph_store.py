"""DurableStore against LangGraph's own InMemoryStore: random sequences of
batches (put, delete, get, search with filters / vector queries / paging,
list_namespaces) applied to both, with the same deterministic embedding,
must give the same results. Where the order is unspecified (search without
a query, ties in score) results are compared as sets; a page that does not
hold every match is checked for size and membership.

Every read in a batch (get, search, list_namespaces) sees the store as it
was before the batch: InMemoryStore.batch answers all reads first, then
applies the batch's puts and deletes (the last op per (namespace, key)
wins). The full match set a search's page is checked against is therefore
asked in the reference's batch itself, right after the search, so it sees
the same state as the search whatever the batch also writes.

A put replaces an item's value but keeps the vectors of the paths it does
not embed again (index=False): InMemoryStore, like PostgresStore, upserts
vectors per (item, path) and drops them only with the item.

One InMemoryStore artifact is normalized away: its defaultdict keeps a
namespace that a get or delete merely touched, or whose items were all
deleted, and lists it; a namespace here exists while it holds an item (as
in LangGraph's Postgres store).
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from durable_obj.langgraph import DurableStore

LABELS = ["a", "b", "c"]
WORDS = ["apple", "banana", "cab", "abba", "zz", "cc b"]


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic, never the zero vector."""
    return [
        [1.0 + t.count("a"), 1.0 + t.count("b"), 0.5 + len(t) / 3.0, 1.0 + t.count(" ")]
        for t in texts
    ]


INDEX: Any = {"dims": 4, "embed": embed, "fields": ["text"]}

namespaces = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3).map(tuple)
values = st.fixed_dictionaries(
    {
        "text": st.sampled_from(WORDS),
        "n": st.integers(-3, 3),
        "tag": st.sampled_from(["x", "y"]),
        "nested": st.fixed_dictionaries({"k": st.integers(0, 2)}),
    }
)
puts = st.builds(
    PutOp,
    namespace=namespaces,
    key=st.sampled_from(["k1", "k2", "k3"]),
    value=st.one_of(st.none(), values),
    index=st.sampled_from([None, False, ["text"]]),
    ttl=st.none(),
)
gets = st.builds(
    GetOp, namespace=namespaces, key=st.sampled_from(["k1", "k2", "k3"]), refresh_ttl=st.booleans()
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"tag": st.sampled_from(["x", "y"])}),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"$ne": st.just("x")})}),
    st.fixed_dictionaries(
        {
            "n": st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"]).flatmap(
                lambda op: st.fixed_dictionaries({op: st.integers(-2, 2)})
            )
        }
    ),
    st.fixed_dictionaries({"nested": st.fixed_dictionaries({"k": st.integers(0, 2)})}),
)
searches = st.builds(
    SearchOp,
    namespace_prefix=st.lists(st.sampled_from(LABELS), max_size=2).map(tuple),
    filter=filters,
    limit=st.integers(1, 12),
    offset=st.integers(0, 3),
    query=st.one_of(st.none(), st.sampled_from(WORDS)),
)
conditions = st.builds(
    MatchCondition,
    match_type=st.sampled_from(["prefix", "suffix"]),
    path=st.lists(st.sampled_from([*LABELS, "*"]), min_size=1, max_size=2).map(tuple),
)
listings = st.builds(
    ListNamespacesOp,
    match_conditions=st.one_of(st.none(), st.lists(conditions, max_size=2).map(tuple)),
    max_depth=st.one_of(st.none(), st.integers(1, 3)),
    limit=st.integers(1, 20),
    offset=st.integers(0, 2),
)
batches = st.lists(
    st.lists(st.one_of(puts, puts, gets, searches, listings), min_size=1, max_size=4),
    min_size=1,
    max_size=8,
)


class Reference(InMemoryStore):
    """InMemoryStore, listing only the namespaces that hold an item, and
    pairing each embedded text with its own vector (1.2's
    `_insertinmem_store` pairs one vector per distinct text with one entry
    per (item, path), and raises when two items in a batch share a text)."""

    def _insertinmem_store(
        self, to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]], embeddings: Any
    ) -> None:
        for places, vector in zip(to_embed.values(), embeddings, strict=True):
            for ns, key, path in places:
                self._vectors[ns][key][path] = vector

    def _handle_list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        for empty in [ns for ns, items in self._data.items() if not items]:
            del self._data[empty]
        return super()._handle_list_namespaces(op)


def _ident(item: Any) -> tuple[Any, ...]:
    return (tuple(item.namespace), item.key, repr(sorted(item.value.items())))


def _full(op: SearchOp) -> SearchOp:
    """Every match of `op`, in one page."""
    return op._replace(limit=10_000, offset=0)


def _check_search(op: SearchOp, full: list[Any], got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    universe = {_ident(i) for i in full}
    assert {_ident(i) for i in want} <= universe  # the reference agrees with itself
    assert {_ident(i) for i in got} <= universe
    if op.query is None:
        if op.offset == 0 and op.limit >= len(full):
            assert {_ident(i) for i in got} == {_ident(i) for i in want}
        return
    g_scores = [None if i.score is None else round(i.score, 6) for i in got]
    w_scores = [None if i.score is None else round(i.score, 6) for i in want]
    assert g_scores == w_scores  # best first, the same scores on every row
    if op.offset == 0 and op.limit >= len(full):
        assert {(*_ident(i), s) for i, s in zip(got, g_scores, strict=True)} == {
            (*_ident(i), s) for i, s in zip(want, w_scores, strict=True)
        }


_V = {"text": "apple", "n": 0, "tag": "x", "nested": {"k": 0}}
_W = {"text": "zz", "n": 1, "tag": "y", "nested": {"k": 1}}


@given(batches=batches)
# A search in the batch that deletes the item still finds it.
@example(
    batches=[
        [PutOp(("a",), "k1", _V)],
        [PutOp(("a",), "k1", None), SearchOp(("a",), None, 10, 0, "apple")],
    ]
)
# An unindexed put over an embedded item keeps the old vector.
@example(
    batches=[
        [PutOp(("a",), "k1", _V)],
        [PutOp(("a",), "k1", _W, index=False)],
        [SearchOp(("a",), None, 10, 0, "zz"), SearchOp(("a",), None, 10, 0, None)],
    ]
)
def test_same_results_as_inmemorystore(batches: list[list[Any]]) -> None:
    ref = Reference(index=INDEX)
    with DurableStore(f"memory://lgstore-{uuid.uuid4().hex}/s", index=INDEX) as store:
        for ops in batches:
            # The reference runs `ops` with each search followed by its full
            # version (a read: it changes nothing the batch does).
            ref_ops: list[Any] = []
            for op in ops:
                ref_ops.append(op)
                if isinstance(op, SearchOp):
                    ref_ops.append(_full(op))
            ref_results = iter(ref.batch(ref_ops))
            want: list[Any] = []
            fulls: dict[int, list[Any]] = {}
            for i, op in enumerate(ops):
                want.append(next(ref_results))
                if isinstance(op, SearchOp):
                    fulls[i] = next(ref_results)
            got = store.batch(ops)
            assert len(got) == len(want)
            for i, (op, g, w) in enumerate(zip(ops, got, want, strict=True)):
                if isinstance(op, PutOp):
                    assert g is None and w is None
                elif isinstance(op, GetOp):
                    assert (g is None) == (w is None)
                    if g is not None:
                        assert _ident(g) == _ident(w)
                elif isinstance(op, SearchOp):
                    _check_search(op, fulls[i], g, w)
                else:
                    assert g == w
