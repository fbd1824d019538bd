"""A column an INSERT carries may still fall back to its DEFAULT: the engine
computes a column's DEFAULT for a row that gives the keyword `DEFAULT`,
for NULL into a column that is not Nullable (`input_format_null_as_default`
and `insert_null_as_default`, both on by default), and for a field that
FORMAT data leaves out. Each was measured to log the statement as written,
so a replay computed `now64(6)` or `rand()` again and a replica read other
rows than the writer (`gate.defaults.ColumnRules.carried`)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj.errors import EngineError, Nondeterministic

_TABLE = (
    "CREATE TABLE t (k UInt64, at DateTime64(6) DEFAULT now64(6), r UInt32 DEFAULT rand(), "
    "n UInt8 DEFAULT 7, z Nullable(UInt32) DEFAULT rand()) ENGINE = MergeTree ORDER BY k"
)
_ALL = "SELECT * FROM t ORDER BY k"


def _replica(url: str) -> str:
    with durable_obj.open(url, read_only=True) as replica:
        return replica.query(_ALL)


def test_refused_forms_log_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        with pytest.raises(Nondeterministic, match=r"'at' of t is DEFAULT now64.*keyword DEFAULT"):
            obj.execute("INSERT INTO t VALUES (1, DEFAULT, 5, 1, 1)")
        with pytest.raises(Nondeterministic, match="'r' of t is DEFAULT rand"):
            obj.execute("INSERT INTO t (k, r) VALUES (2, DEFAULT)")
        with pytest.raises(Nondeterministic, match="FORMAT data may"):
            obj.execute('INSERT INTO t FORMAT JSONEachRow {"k": 3}')
        with pytest.raises(Nondeterministic, match="FORMAT data may"):
            obj.execute("INSERT INTO t (k, at, r, z) FORMAT CSV 4,\\N,1,1")
        # NULL into a column that is not Nullable: the engine's error, not its DEFAULT
        with pytest.raises(EngineError, match="NULL"):
            obj.execute("INSERT INTO t VALUES (5, NULL, 1, 1, 1)")
        with pytest.raises(EngineError, match="NULL"):
            obj.execute("INSERT INTO t SELECT 6, '2024-01-01', NULL, 1, 1")
        with pytest.raises(EngineError, match="NULL"):
            obj.execute("INSERT INTO t (k, r) VALUES (7, nullIf(1, 1))")
        with pytest.raises(Nondeterministic, match="SETTINGS of its own"):
            obj.execute(
                "INSERT INTO t (k, at, r) SETTINGS input_format_null_as_default = 1 "
                "VALUES (8, NULL, 1)"
            )
        with pytest.raises(EngineError, match="NULL"):  # added after the caller's own
            obj.execute("INSERT INTO t (k, at, r) SETTINGS max_threads = 1 VALUES (9, NULL, 1)")
        obj.flush()
        assert obj.query(_ALL) == ""
    assert _replica(url) == ""


def test_kept_forms_replay_alike(tmp_path: Path) -> None:
    """What stays allowed: a value given, a column left out of the list (it
    is pinned), NULL into a Nullable column, and DEFAULT, NULL and FORMAT
    data into a table with no such column. (DEFAULT in a row is refused
    whenever the table has such a column, whichever column it is for.)"""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        obj.execute("CREATE TABLE plain (k UInt64, n UInt8 DEFAULT 7) ENGINE = Memory")
        obj.execute("INSERT INTO t VALUES (1, '2024-01-01', 5, 7, NULL)")
        obj.execute("INSERT INTO t (k) VALUES (2), (3)")
        obj.execute("INSERT INTO t (k, at, r, n) VALUES (4, now64(6), rand(), 9)")
        obj.execute("INSERT INTO t (k, r, z) SELECT number + 10, 3, NULL FROM numbers(3)")
        obj.execute("INSERT INTO t (k, at, r) SETTINGS max_threads = 1 VALUES (5, now64(6), 1)")
        obj.execute("INSERT INTO plain VALUES (1, DEFAULT), (2, NULL)")
        obj.execute('INSERT INTO plain FORMAT JSONEachRow {"k": 3}')
        assert obj.query("SELECT * FROM plain ORDER BY k") == "1,7\n2,7\n3,7\n"  # NULL: the DEFAULT
        assert obj.query("SELECT n, z FROM t WHERE k = 1") == "7,\\N\n"
        mine = obj.query(_ALL)
    assert mine.count("\n") == 8
    assert _replica(url) == mine


_FORMS = st.sampled_from(
    [
        "INSERT INTO t VALUES ({k}, DEFAULT, 1, 1, 1)",
        "INSERT INTO t VALUES ({k}, NULL, 1, 1, 1)",
        "INSERT INTO t (k, r) VALUES ({k}, DEFAULT)",
        "INSERT INTO t (k, r) VALUES ({k}, NULL)",
        "INSERT INTO t (k, r) SELECT {k}, NULL",
        "INSERT INTO t (k, at) SELECT {k}, CAST(NULL, 'Nullable(DateTime64(6))')",
        'INSERT INTO t FORMAT JSONEachRow {{"k": {k}}}',
        'INSERT INTO t (k, at) FORMAT JSONEachRow {{"k": {k}, "at": null}}',
        "INSERT INTO t (k, r) FORMAT TSV {k}\t\\N",
        "INSERT INTO t (k) VALUES ({k})",
        "INSERT INTO t (k, z) VALUES ({k}, NULL)",
        "INSERT INTO t VALUES ({k}, '2024-01-01', 2, DEFAULT, NULL)",
        "INSERT INTO t VALUES ({k}, '2024-01-01', 2, 7, NULL)",
        "INSERT INTO t (k) SELECT {k}",
    ]
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(forms=st.lists(_FORMS, min_size=1, max_size=6))
def test_a_replica_reads_what_the_writer_stored(
    tmp_path_factory: pytest.TempPathFactory, forms: list[str]
) -> None:
    """Whatever mix of forms is tried, each is run or refused whole, and a
    replica (its own engine, later on the clock) reads the writer's rows."""
    url = str(tmp_path_factory.mktemp("carried") / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute(_TABLE)
        for k, form in enumerate(forms):
            with contextlib.suppress(Nondeterministic, EngineError):
                obj.execute(form.format(k=k))
        mine = obj.query(_ALL)
    assert _replica(url) == mine
