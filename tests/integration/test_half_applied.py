"""What the security review of issue 37's new paths found, each now held.

* A statement that fails in the engine part-way leaves nothing: an INSERT ...
  SELECT that wrote blocks before `throwIf` fired, a mutation that rewrote
  one part of two. The local copy is rebuilt from the committed state and
  the buffer (as after a bound stopped a statement), through `execute()`,
  `write()` and a transaction, so a checkpoint never stores rows the WAL
  does not hold, and no failed mutation stays behind to fail the next one.
* Another object's table is never hinted at: the engine's "Maybe you meant
  <another object's database>.<table>?" is dropped with no trace (a stray
  "." once told a tenant whether another object had such a table), and an
  error carries no raw engine text in its chain.
* `system.databases` shows no folder of the engine and no UUID.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

import durable_obj
from durable_obj.errors import EngineError

#: Fails at its last rows: the blocks before were already written (3M rows, ~1M a block).
HALF_INSERT = (
    "INSERT INTO t SELECT throwIf(number = 2900000, 'boom') + number, 0 FROM numbers(3000000)"
)


def _opened(tmp_path: Path, name: str = "o") -> durable_obj.DurableObject:
    obj = durable_obj.open(str(tmp_path / "ns" / name), owner="w")
    obj.execute("CREATE TABLE t (x UInt64, y UInt64) ENGINE = MergeTree ORDER BY x")
    obj.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    obj.execute("INSERT INTO t VALUES (5, 0), (6, 0)")  # a second part
    obj.flush()
    return obj


def _reopened(tmp_path: Path, name: str = "o") -> list[tuple[int, int]]:
    with durable_obj.open(str(tmp_path / "ns" / name), read_only=True) as obj:
        return [tuple(r) for r in obj.rows("SELECT x, y FROM t ORDER BY x")]


@pytest.mark.parametrize("via", ["execute", "write", "transaction"])
def test_an_insert_that_fails_part_way_leaves_nothing(tmp_path: Path, via: str) -> None:
    obj = _opened(tmp_path)
    with pytest.raises(EngineError, match="boom"):
        if via == "execute":
            obj.execute(HALF_INSERT)
        elif via == "write":
            obj.write(HALF_INSERT, "INSERT INTO t VALUES (7, 0)")
        else:
            with obj.transaction() as tx:
                tx.execute(HALF_INSERT)
    assert obj.rows("SELECT count() FROM t") == [(4,)]
    obj.checkpoint()  # a base holds what the log holds, nothing more
    obj.close()
    assert _reopened(tmp_path) == [(1, 0), (2, 0), (5, 0), (6, 0)]


@pytest.mark.parametrize("via", ["execute", "transaction"])
def test_a_mutation_that_fails_on_one_part_leaves_nothing_behind(tmp_path: Path, via: str) -> None:
    obj = _opened(tmp_path)
    update = "ALTER TABLE t UPDATE y = throwIf(x = 5) + 100 WHERE 1"
    with pytest.raises(EngineError):
        if via == "execute":
            obj.execute(update)
        else:
            with obj.transaction() as tx:
                tx.execute(update)
    assert [tuple(r) for r in obj.rows("SELECT x, y FROM t ORDER BY x")] == [
        (1, 0),
        (2, 0),
        (5, 0),
        (6, 0),
    ]
    obj.execute("ALTER TABLE t DELETE WHERE x = 5")  # no failed mutation stays in the way
    obj.flush()
    expected = [(1, 0), (2, 0), (6, 0)]
    assert [tuple(r) for r in obj.rows("SELECT x, y FROM t ORDER BY x")] == expected
    obj.close()
    assert _reopened(tmp_path) == expected


def test_a_failing_literal_insert_costs_no_rebuild(tmp_path: Path) -> None:
    """A one-block INSERT ... VALUES applies all or nothing: its failure keeps
    the local copy as it is (no rebuild), as before."""
    obj = _opened(tmp_path)
    rebuilds: list[int] = []
    heal = obj._heal
    obj._heal = lambda: (rebuilds.append(1), heal())[1]  # type: ignore[method-assign]
    with pytest.raises(EngineError):
        obj.execute("INSERT INTO t VALUES (9, throwIf(1))")
    with pytest.raises(EngineError):
        obj.execute("ALTER TABLE t UPDATE y = throwIf(x = 5) + 1 WHERE 1")
    assert rebuilds == [1]  # the mutation only
    obj.close()


def test_another_objects_table_leaves_no_trace_in_a_message(tmp_path: Path) -> None:
    a = durable_obj.open(str(tmp_path / "ns" / "a"), owner="w")
    b = durable_obj.open(str(tmp_path / "ns" / "b"), owner="w")
    b.execute("CREATE TABLE bobs_salaries (x UInt64) ENGINE = MergeTree ORDER BY x")
    hidden = b._local.engine.database
    for template in (
        "SELECT * FROM {}",
        "SELECT * FROM default.{}",
        "SHOW CREATE TABLE {}",
        "DESCRIBE TABLE {}",
        "DROP TABLE {}",
        "INSERT INTO {} VALUES (1)",
    ):
        seen = []
        for name in ("bobs_salaries", "nobodys_table"):
            call = a.execute if template.split()[0] in ("DROP", "INSERT") else a.query
            with pytest.raises(durable_obj.DurableError) as caught:
                call(template.format(name))
            chain = "".join(traceback.format_exception(caught.value))
            assert hidden not in chain and "Maybe you meant" not in chain
            seen.append(str(caught.value).replace(name, "NAME"))
        assert seen[0] == seen[1], template
    a.close()
    b.close()


def test_system_databases_shows_no_folder_and_no_uuid(tmp_path: Path) -> None:
    obj = _opened(tmp_path)
    rows = obj.rows("SELECT name, data_path, metadata_path, toString(uuid) FROM system.databases")
    assert rows == [("default", "", "", "00000000-0000-0000-0000-000000000000")]
    everything = obj.query("SELECT * FROM system.databases", "TSV")
    assert "/dev/shm" not in everything and "durable_obj-" not in everything
    obj.close()


def test_export_inside_a_transaction_is_refused(tmp_path: Path) -> None:
    """It would write rows that may still be rolled back (as snapshot() would)."""
    obj = _opened(tmp_path)
    with obj.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (8, 0)")
        with pytest.raises(durable_obj.InvalidArgument, match="export"):
            obj.export(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    obj.close()
