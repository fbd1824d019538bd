"""The SQL and the filters of `DurableStore` (durable_obj.langgraph.store):
the table's DDL, the statements that read, write, refresh and sweep it, the
encoding of a put as a row of literals, and the filter and namespace-match
semantics LangGraph's InMemoryStore applies (run here, in Python, on the
decoded values).

Everything here is a pure function of its arguments (the clock is read by
the store and passed in as `now`, microseconds since the epoch); every
literal goes through `durable_obj.langgraph._common`'s `lit_*`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from numbers import Real
from typing import Any

from langgraph.store.base import MatchCondition, PutOp

from durable_obj.errors import InvalidArgument
from durable_obj.langgraph._common import (
    lit_float,
    lit_float_array,
    lit_int,
    lit_str,
    lit_str_array,
)

COLS = "ns, key, value, created_at, updated_at"


def now_us() -> int:
    """The wall clock in microseconds since the epoch."""
    return time.time_ns() // 1000


def dt(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC)


def ns_key(namespace: tuple[str, ...]) -> str:
    """A namespace as the table's `ns_key` (its JSON array)."""
    return json.dumps(list(namespace), ensure_ascii=False)


# -- filters (InMemoryStore semantics) ---------------------------------------------
def compare(item_value: Any, filter_value: Any) -> bool:
    """LangGraph's JSONB-like filter match (as InMemoryStore applies it)."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(filter_value)
            and all(compare(i, f) for i, f in zip(item_value, filter_value, strict=True))
        )
    return bool(item_value == filter_value)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        a, b = float(value), float(arg)
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise InvalidArgument(f"unsupported filter operator {op!r}")


def matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    """Whether namespace `ns` meets a list_namespaces match condition."""
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    if cond.match_type not in ("prefix", "suffix"):
        raise InvalidArgument(f"unsupported match type {cond.match_type!r}")
    if cond.match_type == "suffix":
        ns, path = ns[len(ns) - len(path) :], path
    return all(p == "*" or k == p for k, p in zip(ns, path, strict=False))


# -- statements --------------------------------------------------------------------
def create_table(table: str) -> str:
    """CREATE TABLE IF NOT EXISTS for the store's table."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (ns_key String, ns Array(String), "
        "key String, value String, created_at Int64, updated_at Int64, "
        "expires_at Nullable(Int64), ttl_minutes Nullable(Float64), "
        "paths Array(String), vectors Array(Array(Float64))) "
        "ENGINE = ReplacingMergeTree ORDER BY (ns_key, key)"
    )


def where_live(now: int) -> str:
    """The rows not expired at `now`."""
    return f"(expires_at IS NULL OR expires_at > {lit_int(now)})"


def keys_in(keys: Sequence[tuple[str, str]]) -> str:
    """`(ns_key, key) IN (...)` for these (ns_key, key) pairs."""
    return "(ns_key, key) IN (" + ", ".join(f"({lit_str(n)}, {lit_str(k)})" for n, k in keys) + ")"


def select_search(table: str, prefix: tuple[str, ...], query: list[float] | None, now: int) -> str:
    """The live items under `prefix`, newest first: COLS, the best field's
    cosine similarity to `query` (NULL without one or without vectors), and
    whether the item has a TTL."""
    where = [where_live(now)]
    if prefix:
        where.append(f"arraySlice(ns, 1, {len(prefix)}) = {lit_str_array(prefix)}")
    score = "NULL"
    if query is not None:
        q = lit_float_array(query)
        score = (
            "if(empty(vectors), NULL, arrayMax(arrayMap(v -> if(L2Norm(v) = 0, 0., "
            f"1 - cosineDistance(v, {q})), vectors)))"
        )
    return (
        f"SELECT {COLS}, {score}, ttl_minutes IS NOT NULL FROM {table} FINAL "
        f"WHERE {' AND '.join(where)} ORDER BY updated_at DESC, ns_key, key"
    )


def item_row(
    ns: tuple[str, ...],
    key: str,
    op: PutOp,
    created: int,
    now: int,
    vecs: list[tuple[str, list[float]]],
) -> str:
    """One table row for a put of a live value, with its embedded paths."""
    nk = ns_key(ns)
    ttl = op.ttl
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, Real | Decimal) or not 0 <= ttl <= 1e9
    ):
        raise InvalidArgument(
            f"ttl of item {key[:60]!r} must be a number of minutes from 0 to 1e9, or None; "
            f"got {type(ttl).__name__}. Nothing of this batch was written."
        )
    expires = "NULL" if ttl is None else lit_int(now + int(ttl * 60_000_000))
    try:
        value = json.dumps(op.value, ensure_ascii=False, allow_nan=False)  # JSON has no NaN
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"the value of item {key[:60]!r} is not JSON ({type(exc).__name__}: "
            f"{str(exc)[:80]}): a store keeps dicts of JSON values. Nothing of this batch "
            "was written."
        ) from None
    return (
        f"({lit_str(nk)}, {lit_str_array(ns)}, {lit_str(key)}, "
        f"{lit_str(value)}, "
        f"{lit_int(created)}, {lit_int(now)}, {expires}, "
        f"{'NULL' if ttl is None else lit_float(float(ttl))}, "
        f"{lit_str_array([p for p, _ in vecs])}, "
        f"[{', '.join(lit_float_array(v) for _, v in vecs)}]::Array(Array(Float64)))"
    )


def refresh(table: str, keys: Sequence[tuple[str, str]], now: int) -> str:
    """Rewrite these live items with a TTL, expiring `now` plus their TTL."""
    return (
        f"INSERT INTO {table} SELECT ns_key, ns, key, value, created_at, updated_at, "
        f"{lit_int(now)} + toInt64(ttl_minutes * 60000000), ttl_minutes, paths, vectors "
        f"FROM {table} FINAL WHERE {keys_in(keys)} "
        f"AND ttl_minutes IS NOT NULL AND {where_live(now)}"
    )


def expired(now: int) -> str:
    """The rows expired at `now`."""
    return f"expires_at IS NOT NULL AND expires_at <= {lit_int(now)}"


def sweep(table: str, now: int) -> str:
    """Delete every row of the items expired at `now` (what sweep_ttl logs).
    Every row of each: deleting only the expired newest version would bring
    back the version before it, and whether one still exists depends on
    when the engine merged, which differs between replicas."""
    return (
        f"DELETE FROM {table} WHERE (ns_key, key) IN "
        f"(SELECT ns_key, key FROM {table} FINAL WHERE {expired(now)})"
    )
