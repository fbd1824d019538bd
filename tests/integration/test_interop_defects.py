"""A defect of chdb.durable (chdb 4.4.0) that durable_obj does not share.

RESTORE numbers a MergeTree table's parts from their blocks but keeps their
mutation versions, and the table then counts on from its highest block. A
mutation replayed after opening from a base whose parts carry a newer
mutation version than that gets a version they already have and is skipped
as applied. chdb.durable reads its own objects so: an UPDATE, a checkpoint,
then a DELETE, and its reader still shows the deleted row. durable_obj
reattaches such a table after RESTORE (`replica/archives._recount_blocks`)
and reads the same object right. The alternating-writers property test
(tests/property/test_interop_alternating.py) holds chdb.durable's reader to
what it reads of the same history written by itself alone, where this
defect shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import durable_obj
from tests.integration import _proc

pytestmark = pytest.mark.slow

HISTORY = [
    "INSERT INTO t VALUES (0, 'a'), (1, 'b')",
    "ALTER TABLE t UPDATE v = 'u' WHERE k = 0",
    None,  # checkpoint
    "ALTER TABLE t DELETE WHERE k = 0",
]


def test_chdb_durable_skips_a_mutation_after_its_own_checkpoint(tmp_path: Path) -> None:
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "o", owner="v1", db="shop")
        w.execute("CREATE TABLE t (k UInt32, v String) ENGINE = ReplacingMergeTree ORDER BY k")
        w.flush()
        w.close()
        for n, sql in enumerate(HISTORY):
            w.open(f"local:{tmp_path}", "o", owner=f"v1-{n}")
            if sql is None:
                w.checkpoint()
            else:
                w.execute(sql)
            w.flush()
            w.close()
        w.open(f"local:{tmp_path}", "o", read_only=True)
        # the DELETE replayed after the base did nothing
        assert w.query("SELECT k, v FROM t FINAL ORDER BY k", "CSV") == '0,"u"\n1,"b"\n'
        w.close()
        assert w.exit() == 0
    with durable_obj.open(f"file://{tmp_path}/o", read_only=True) as obj:
        assert obj.rows("SELECT k, v FROM t FINAL ORDER BY k") == [(1, "b")]
