"""A bound value is data, exactly: whatever Python value `params=` carries
(any text, any bytes, any float, any integer of the column's range,
nested lists and maps of them), the row the writer reads back, and the
row a fresh reader replays from the logged literal statement, hold exactly
that value; and no value ever changes what the statement does."""

from __future__ import annotations

import math
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import durable_obj

DDL = (
    "CREATE TABLE p (id UInt32, s String, b String, f Float64, i Int64, "
    "a Array(Float64), m Map(String, Array(Nullable(Int32)))) ENGINE = MergeTree ORDER BY id"
)
INSERT = (
    "INSERT INTO p VALUES ({id:UInt32}, {s:String}, {b:String}, {f:Float64}, {i:Int64}, "
    "{a:Array(Float64)}, {m:Map(String, Array(Nullable(Int32)))})"
)
READ = "SELECT s, hex(b), f, i, a, m FROM p WHERE id = {id:UInt32}"

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
floats = st.floats(allow_nan=True, allow_infinity=True)
int32 = st.integers(-(2**31), 2**31 - 1)
rows = st.fixed_dictionaries(
    {
        "s": text,
        "b": st.binary(max_size=24),
        "f": floats,
        "i": st.integers(-(2**63), 2**63 - 1),
        "a": st.lists(floats, max_size=5),
        "m": st.dictionaries(text, st.lists(st.none() | int32, max_size=3), max_size=3),
    }
)


def _same(got: Any, want: Any) -> bool:
    """Equal, with NaN equal to NaN at any depth."""
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(want, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return bool(got == want)


def _expected(row: dict[str, Any]) -> list[Any]:
    return [row["s"], row["b"].hex().upper(), row["f"], row["i"], row["a"], row["m"]]


@settings(max_examples=15)
@given(st.lists(rows, min_size=1, max_size=8))
def test_bound_values_round_trip_through_the_wal(batch: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        with durable_obj.open(f"{root}/o", owner="w") as obj:
            obj.execute(DDL)
            for n, row in enumerate(batch):
                obj.execute(INSERT, params={"id": n, **row})
            obj.flush()
            for n, row in enumerate(batch):
                (got,) = obj.rows(READ, params={"id": n})
                assert _same(list(got), _expected(row)), (got, row)
        with durable_obj.open(f"{root}/o", read_only=True) as reader:
            assert reader.rows("SELECT count() FROM p") == [(len(batch),)]
            for n, row in enumerate(batch):
                (got,) = reader.rows(READ, params={"id": n})
                assert _same(list(got), _expected(row)), (got, row)
