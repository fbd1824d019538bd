"""An object with rows in a Memory table reopens after a checkpoint.

chDB cannot read a Memory table's data out of a backup archive ("getPosition
not supported when reading from archive"), so such a base is unpacked and
restored from the folder (`replica/archives.py`). Here: the rows come back
equal, beside a MergeTree table, under a WAL replayed on top, in an
encrypted object and from chdb.durable's `.tar.gz`; the unpacked folder is
gone after the open; a base with the right digest but an entry that climbs
out, is absolute or is a link is `Corrupt`, and nothing lands outside.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import StaticKey, errors
from durable_obj.errors import Corrupt
from durable_obj.replica.server import engine_root

SCHEMAS = {
    "memory": ["CREATE TABLE m (k UInt32, s String) ENGINE = Memory"],
    "memory+mergetree": [
        "CREATE TABLE m (k UInt32, s String) ENGINE = Memory",
        "CREATE TABLE t (k UInt32, s String) ENGINE = MergeTree ORDER BY k",
    ],
    "compressed memory": [
        "CREATE TABLE m (k UInt32, s String) ENGINE = Memory SETTINGS compress = 1",
    ],
}


def _fill(obj: Any, tables: list[str], start: int) -> None:
    for table in tables:
        obj.execute(
            f"INSERT INTO {table} SELECT number + {start}, concat('r''', toString(number)) "
            "FROM numbers(1000)"
        )
        obj.execute(f"INSERT INTO {table} VALUES ({start + 5000}, 'ü\\n\\tend')")


def _seen(obj: Any, tables: list[str]) -> list[Any]:
    out: list[Any] = [obj.rows("SELECT name, engine FROM system.tables ORDER BY name")]
    out += [obj.rows(f"SELECT k, s FROM {t} ORDER BY k") for t in tables]
    return out


def _unpacked_left() -> list[str]:
    return [p.name for p in Path(engine_root(), "backups").glob("unpacked-*")]


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_rows_of_a_memory_table_come_back_after_a_checkpoint(tmp_path: Path, schema: str) -> None:
    url = str(tmp_path / "o")
    tables = sorted({ddl.split()[2] for ddl in SCHEMAS[schema]})
    with durable_obj.open(url, owner="a") as obj:
        for ddl in SCHEMAS[schema]:
            obj.execute(ddl)
        _fill(obj, tables, 0)
        obj.checkpoint()
        _fill(obj, tables, 10_000)  # a WAL replayed on top of the unpacked base
        obj.flush()
        before = _seen(obj, tables)
    with durable_obj.open(url, owner="a") as obj:
        assert _seen(obj, tables) == before
        obj.checkpoint()  # and round again: a base made from a restored Memory table
    assert _unpacked_left() == []
    with durable_obj.open(url, read_only=True) as obj:
        assert _seen(obj, tables) == before
    assert len(before[1]) == 2002


def test_an_encrypted_object_with_a_memory_table_reopens(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    key = StaticKey(os.urandom(32))
    with durable_obj.open(url, owner="a", encryption=key) as obj:
        obj.execute(SCHEMAS["memory"][0])
        _fill(obj, ["m"], 0)
        obj.checkpoint()
        before = _seen(obj, ["m"])
    with durable_obj.open(url, read_only=True, encryption=key) as obj:
        assert _seen(obj, ["m"]) == before
    assert _unpacked_left() == []


@pytest.mark.slow
def test_a_chdb_durable_base_with_a_memory_table_opens_here(tmp_path: Path) -> None:
    """chdb.durable writes `.tar.gz` bases; one with a Memory table's rows
    (which chdb.durable itself cannot restore) opens here."""
    from tests.integration import _proc

    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "d", owner="v1")
        w.execute("CREATE TABLE m (s String) ENGINE = Memory")
        w.execute("INSERT INTO m VALUES ('from v1'), ('again')")
        w.flush()
        w.checkpoint()
        w.close()
        assert w.exit() == 0
    head = json.loads((tmp_path / "d" / "head.json").read_text())
    assert head["manifest"]["base"]["key"].endswith(".tar.gz")
    with durable_obj.open(f"file://{tmp_path}/d", read_only=True) as obj:
        assert obj.rows("SELECT s FROM m ORDER BY s") == [("again",), ("from v1",)]
    assert _unpacked_left() == []


def _with_entry(path: Path, info: tarfile.TarInfo, data: bytes = b"pwned") -> None:
    """Append `info` to the archive at `path`, as anyone who can write the
    store could."""
    with tarfile.open(path, "a") as tar:
        info.size = len(data) if info.isfile() else 0
        tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


@pytest.mark.parametrize("signed", [True, False], ids=["right-digest", "altered"])
@pytest.mark.parametrize("fmt", [".tar", ".tar.gz"])
@pytest.mark.parametrize("kind", ["climb", "absolute", "symlink"])
def test_a_hostile_base_is_corrupt_and_writes_nothing_outside(
    tmp_path: Path, kind: str, fmt: str, signed: bool
) -> None:
    """With the digest its head names (anyone who can write the store can
    write both), the unpacking refuses it; altered under the head, the
    digest says so first, naming the base."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="a") as obj:
        obj.execute(SCHEMAS["memory"][0])
        _fill(obj, ["m"], 0)
        obj.checkpoint()
    escaped = f"escaped-{uuid.uuid4().hex}"
    outside = tmp_path / "outside"
    outside.mkdir()
    head_path = url / "head.json"
    head = json.loads(head_path.read_text())
    ref = head["manifest"]["base"]
    base = url / ref["key"]
    if kind == "climb":
        _with_entry(base, tarfile.TarInfo(f"data/../../{escaped}"))
    elif kind == "absolute":
        _with_entry(base, tarfile.TarInfo(str(outside / escaped)))
    else:
        link = tarfile.TarInfo("data/out")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        _with_entry(base, link)
        _with_entry(base, tarfile.TarInfo(f"data/out/{escaped}"))
    if fmt == ".tar.gz":  # as chdb.durable names its bases
        body = gzip.compress(base.read_bytes())
        base.unlink()
        ref["key"] += ".gz"
        base = url / ref["key"]
        base.write_bytes(body)
    body = base.read_bytes()
    if signed:
        ref["size"], ref["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    head_path.write_text(json.dumps(head))
    altered = rf"base checkpoint {re.escape(ref['key'])} .*(altered|replaced)"
    # a plain .tar holding a link is refused before anything is read or unpacked
    outside_msg = (
        "nothing was written outside|not a plain tar as an engine writes|not a plain relative path"
    )
    why = outside_msg if signed else altered
    with pytest.raises(Corrupt, match=why) as info:
        durable_obj.open(str(url), read_only=True)
    assert info.value.category == "corrupt"
    for root in (engine_root(), str(tmp_path)):
        # os.walk skips what vanishes meanwhile: scratch is removed in the background
        assert [d for d, dirs, files in os.walk(root) if escaped in dirs + files] == []
    assert list(outside.iterdir()) == []
    assert _unpacked_left() == []


def test_a_checkpoint_never_drops_the_rows_of_a_join_or_set_table(tmp_path: Path) -> None:
    """A RESTORE gives a Join or Set table back empty (chDB 4.4): a
    checkpoint that held one would lose acknowledged rows, so it is
    refused, naming the table; the rows stay durable in the WAL."""
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE j (k UInt32, v String) ENGINE = Join(ANY, LEFT, k)")
        obj.execute("INSERT INTO j VALUES (1, 'a'), (2, 'b')")
        obj.execute("CREATE TABLE s (k UInt32) ENGINE = Set")
        obj.execute("INSERT INTO s VALUES (1)")
        obj.flush()
        with pytest.raises(errors.InvalidArgument, match=r"j \(Join\), s \(Set\)"):
            obj.checkpoint()
    with durable_obj.open(url, owner="w") as obj:
        assert obj.query("SELECT count() FROM j") == "2\n"
        assert obj.query("SELECT 1 IN s") == "1\n"
        obj.execute("DROP TABLE j")
        obj.execute("DROP TABLE s")
        obj.checkpoint()
