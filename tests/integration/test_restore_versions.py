"""A base whose parts carry mutation versions restores tables that count on
past them, and only such a base costs the engine query that finds them.

RESTORE numbers a MergeTree table's parts from block 1 again but keeps
their mutation versions; a table whose parts then carry a version above
its highest block skips its next mutation as applied, unless it is
reattached (`replica/archives._recount_blocks`). Which tables need that is
asked of the engine only when a part in the base's listing is named with a
mutation version (`replica/archive.Contents.versioned`).
"""

from __future__ import annotations

import os
from pathlib import Path

import durable_obj
from durable_obj.replica.archive import contents


def _base(url_root: Path) -> str:
    [name] = os.listdir(url_root / "o" / "checkpoints")
    return str(url_root / "o" / "checkpoints" / name)


def _history(tmp_path: Path, mutate: bool) -> str:
    url = f"file://{tmp_path}/o"
    with durable_obj.open(url, owner="w", fold_segments=0) as obj:
        obj.execute("CREATE TABLE t (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
        for k in range(3):
            obj.execute(f"INSERT INTO t VALUES ({k}, 'a')")
        if mutate:
            obj.execute("ALTER TABLE t UPDATE v = 'u' WHERE k = 0")
            obj.execute("ALTER TABLE t UPDATE v = 'w' WHERE k = 1")
        obj.checkpoint()
    return url


def test_a_mutation_after_opening_a_base_of_mutated_parts_applies(tmp_path: Path) -> None:
    url = _history(tmp_path, mutate=True)
    assert contents(_base(tmp_path), "default").versioned
    with durable_obj.open(url, owner="w2", fold_segments=0) as obj:
        obj.execute("ALTER TABLE t DELETE WHERE k = 0")
        obj.execute("ALTER TABLE t UPDATE v = 'z' WHERE k = 2")
        assert obj.rows("SELECT k, v FROM t ORDER BY k") == [(1, "w"), (2, "z")]
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.rows("SELECT k, v FROM t ORDER BY k") == [(1, "w"), (2, "z")]


def test_a_base_of_parts_no_mutation_rewrote_needs_no_reattaching(tmp_path: Path) -> None:
    url = _history(tmp_path, mutate=False)
    assert not contents(_base(tmp_path), "default").versioned
    with durable_obj.open(url, owner="w2", fold_segments=0) as obj:
        obj.execute("ALTER TABLE t DELETE WHERE k = 0")
        obj.execute("ALTER TABLE t UPDATE v = 'z' WHERE k = 2")
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.rows("SELECT k, v FROM t ORDER BY k") == [(1, "a"), (2, "z")]
