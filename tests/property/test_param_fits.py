"""Query parameters are checked, not converted (issue 26).

For each type, hypothesis draws values inside and outside what the type
holds. A value the gate accepts reads back equal to what was passed; a
value it refuses (`InvalidArgument`) is one the engine, asked directly with
the check switched off, would have read as another value (or refused).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj import errors

UTC = dt.UTC
STATS = {"accepted": 0, "refused": 0}

CASES: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("UInt8", st.integers(-10, 300)),
    ("Int16", st.integers(-40_000, 40_000)),
    ("UInt64", st.integers(-5, 2**64 + 5)),
    ("Int128", st.integers(-(2**127) - 3, 2**127 + 3)),
    ("Date", st.dates(dt.date(1960, 1, 1), dt.date(2200, 12, 31))),
    ("Date32", st.dates()),
    (
        "Date",
        st.sampled_from(["2026-02-30", "2026-13-45", "2026-02-28", "2024-02-29", "2023-02-29"]),
    ),
    (
        "DateTime",
        st.datetimes(dt.datetime(1965, 1, 1), dt.datetime(2110, 1, 1), timezones=st.just(UTC)).map(
            lambda d: d.replace(microsecond=0)
        ),
    ),
    (
        "DateTime64(3)",
        st.datetimes(dt.datetime(1890, 1, 1), dt.datetime(2310, 1, 1), timezones=st.just(UTC)),
    ),
    (
        "Decimal(9, 2)",
        st.decimals(-(10**8), 10**8, places=4, allow_nan=False, allow_infinity=False),
    ),
    ("Array(UInt8)", st.lists(st.integers(-5, 300), max_size=4)),
    ("Nullable(Int8)", st.none() | st.integers(-200, 200)),
    ("Tuple(UInt8, Date)", st.tuples(st.integers(-2, 300), st.dates(dt.date(1960, 1, 1)))),
]


@pytest.fixture(scope="module")
def obj(tmp_path_factory: pytest.TempPathFactory) -> Iterator[durable_obj.DurableObject]:
    root: Path = tmp_path_factory.mktemp("fits")
    with durable_obj.open(str(root / "o"), owner="t") as o:
        yield o


def _expected(value: Any) -> Any:
    """`value` as rows() gives it back when read exactly (a text that is no
    calendar date has no exact reading: None)."""
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, tuple):
        return tuple(value)
    return value


@settings(
    max_examples=int(os.environ.get("DURABLE_FITS_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    case=st.sampled_from(range(len(CASES))).flatmap(lambda i: st.tuples(st.just(i), CASES[i][1]))
)
def test_a_value_is_read_exactly_or_refused(obj: durable_obj.DurableObject, case: Any) -> None:
    index, value = case
    type_name = CASES[index][0]
    sql = f"SELECT {{x:{type_name}}}"
    try:
        got = obj.rows(sql, params={"x": value})
    except errors.InvalidArgument as refused:
        STATS["refused"] += 1
        assert "does not fit" in str(refused)
        with mock.patch("durable_obj.gate.fits.check", lambda *a: None):
            try:
                raw = obj.rows(sql, params={"x": value})
            except errors.DurableError:
                return  # the engine refuses it too
        assert raw[0][0] != _expected(value), f"{type_name} {value!r} was refused but fits"
        return
    STATS["accepted"] += 1
    assert got[0][0] == _expected(value), f"{type_name} {value!r} read back as {got[0][0]!r}"
