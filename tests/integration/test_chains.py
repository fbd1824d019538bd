"""Incremental checkpoints: a base that is an increment over the ones
before it (`core/chains.py`, `replica/links.py`).

Each test reads back what it wrote through a fresh open (the chain is
downloaded, verified and restored), and looks at what the store holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import StaticKey
from durable_obj.errors import Corrupt
from durable_obj.wire.protocol import INCREMENTAL_FEATURE
from tests.integration import _proc

#: No background merge: a merge since the base makes the next base full
#: (the policy), and a test of chain lengths must not depend on its timing.
DDL = (
    "CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k SETTINGS "
    "max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1"
)
COUNT = "SELECT count(), sum(k) FROM t"


def _head(url: Path) -> dict[str, Any]:
    return json.loads((url / "head.json").read_bytes())  # type: ignore[no-any-return]


def _chain(head: dict[str, Any]) -> list[str]:
    return [r["key"] for r in head["manifest"].get("durable_obj", {}).get("chain", [])]


def _grow(obj: durable_obj.DurableObject, n: int, rows: int = 100) -> None:
    obj.execute(f"INSERT INTO t SELECT number + {n * 1_000_000}, 'x' FROM numbers({rows})")


def _base(obj: durable_obj.DurableObject) -> None:
    """A table and a first base large enough that an increment of a few
    rows (a part and the listing) is far below `chain_ratio` of it."""
    obj.execute(DDL)
    obj.execute("INSERT INTO t SELECT number, repeat('v', 50) FROM numbers(20000)")


def _size(url: Path, key: str) -> int:
    return (url / key).stat().st_size


def test_increments_hold_what_changed_and_reopen_whole(tmp_path: Path) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO t SELECT number, repeat('v', 50) FROM numbers(50000)")
        full = obj.checkpoint()
        keys = [full]
        for n in range(1, 4):
            _grow(obj, n)
            keys.append(obj.checkpoint())
        expected = obj.query(COUNT)
    head = _head(url)
    assert head["manifest"]["base"]["key"] == keys[-1]
    assert _chain(head) == keys[:-1]
    assert INCREMENTAL_FEATURE in head["protocol"]["reader_features"]
    assert INCREMENTAL_FEATURE in head["protocol"]["writer_features"]
    for key in keys[1:]:  # each increment: the new rows' part, not the 50,000 rows
        assert _size(url, key) * 10 < _size(url, full)
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected
    # A writer reopening continues the chain, from the listing it keeps.
    with durable_obj.open(str(url), owner="w2", force=True) as obj:
        _grow(obj, 9)
        obj.checkpoint()
        expected = obj.query(COUNT)
    assert len(_chain(_head(url))) == 4
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected


def test_the_policy_takes_a_full_base_by_length_by_bytes_on_request_and_when_it_must(
    tmp_path: Path,
) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w", chain_links=3) as obj:
        _base(obj)
        obj.checkpoint()
        for n in range(1, 3):
            _grow(obj, n)
            obj.checkpoint()
        assert len(_chain(_head(url))) == 2  # three links: the next is full
        _grow(obj, 3)
        obj.checkpoint()
        head = _head(url)
        assert _chain(head) == []
        assert INCREMENTAL_FEATURE not in head["protocol"]["reader_features"]
        _grow(obj, 4)
        obj.checkpoint(full=True)
        assert _chain(_head(url)) == []
        # A definition that grew since the base (an ALTER appends a setting):
        # the engine cannot pack its tail into an increment, so the base is full.
        obj.execute("ALTER TABLE t MODIFY SETTING parts_to_throw_insert = 3001")
        obj.checkpoint()
        assert _chain(_head(url)) == []
        _grow(obj, 5)
        obj.checkpoint()
        assert len(_chain(_head(url))) == 1
        # A table whose files change in place (Log) makes every base full.
        obj.execute("CREATE TABLE l (x UInt8) ENGINE = Log")
        obj.execute("INSERT INTO l VALUES (1)")
        obj.checkpoint()
        assert _chain(_head(url)) == []
        expected = obj.query(COUNT)
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected
    # By bytes: increments that add up past chain_ratio of the full base ...
    other = tmp_path / "p"
    with durable_obj.open(str(other), owner="w", chain_ratio=0.3, chain_links=64) as obj:
        _base(obj)
        obj.checkpoint()
        lengths = []
        for n in range(1, 40):
            _grow(obj, n)
            obj.checkpoint()
            lengths.append(len(_chain(_head(other))))
            if lengths[-1] == 0:
                break
        assert lengths[-1] == 0 and len(lengths) > 2, lengths  # several, then full
        assert lengths[:-1] == list(range(1, len(lengths)))
        # ... or one that would on its own: full at once, no large increment first.
        _grow(obj, 50)
        obj.checkpoint()
        assert len(_chain(_head(other))) == 1
        obj.execute("INSERT INTO t SELECT number, repeat('w', 50) FROM numbers(20000)")
        obj.checkpoint()
        assert _chain(_head(other)) == []


def test_full_checkpoints_only_keep_the_object_v1(tmp_path: Path) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w", incremental_checkpoints=False) as obj:
        obj.execute(DDL)
        for n in range(3):
            _grow(obj, n)
            obj.checkpoint()
    head = _head(url)
    assert _chain(head) == [] and head["protocol"]["reader_features"] == []


@pytest.mark.slow
def test_chdb_durable_refuses_a_chain_cleanly_and_reads_a_full_base_again(
    tmp_path: Path,
) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        _base(obj)
        obj.checkpoint()
        _grow(obj, 1)
        obj.checkpoint()
    assert _chain(_head(url))
    with _proc.Worker("chdb.durable") as w:
        with pytest.raises(_proc.OpFailed) as refused:
            w.open(f"local:{tmp_path}", "o", read_only=True)
        assert refused.value.category == "protocol_unsupported"
        assert INCREMENTAL_FEATURE in str(refused.value)
        assert w.exit() == 0
    with durable_obj.open(str(url), owner="w") as obj:
        obj.checkpoint(full=True)
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "o", read_only=True)
        assert w.query("SELECT count() FROM t") == "20100\n"
        w.close()
        assert w.exit() == 0


def _chained(url: Path, **options: Any) -> dict[str, Any]:
    with durable_obj.open(str(url), owner="w", **options) as obj:
        _base(obj)
        obj.checkpoint()
        _grow(obj, 1)
        obj.checkpoint()
        _grow(obj, 2)
        obj.checkpoint()
    head = _head(url)
    assert len(_chain(head)) == 2
    return head


def test_a_lost_or_altered_link_is_corrupt_and_named(tmp_path: Path) -> None:
    url = tmp_path / "o"
    head = _chained(url)
    link = _chain(head)[1]
    (url / link).rename(url / "aside")
    with pytest.raises(Corrupt, match=link):
        durable_obj.open(str(url), read_only=True)
    data = bytearray((url / "aside").read_bytes())
    data[1000] ^= 1
    (url / link).write_bytes(bytes(data))
    with pytest.raises(Corrupt, match=link):
        durable_obj.open(str(url), read_only=True)


def _resign(url: Path, head: dict[str, Any], index: int, data: bytes) -> None:
    """Replace link `index` of the chain with `data`, fixing its size and
    SHA-256 in the head, as anyone who can write the store could."""
    ref = head["manifest"]["durable_obj"]["chain"][index]
    (url / ref["key"]).write_bytes(data)
    ref["size"], ref["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (url / "head.json").write_text(json.dumps(head))


def test_a_chain_whose_links_do_not_record_each_other_is_corrupt(tmp_path: Path) -> None:
    """A link swapped for another real base (right digest in the head) is
    refused before RESTORE reads anything: each increment must record the
    link beneath it by path and uuid."""
    url = tmp_path / "o"
    head = _chained(url)
    other = tmp_path / "other"
    with durable_obj.open(str(other), owner="w") as obj:
        _base(obj)
        key = obj.checkpoint()
    _resign(url, head, 0, (other / key).read_bytes())
    with pytest.raises(Corrupt, match="does not record link 1"):
        durable_obj.open(str(url), read_only=True)


def test_a_chain_named_under_a_full_base_is_refused_by_the_full_base(tmp_path: Path) -> None:
    """The head names links under a base that is not an increment: the
    first link must record no base, and the top must record the one below."""
    url = tmp_path / "o"
    head = _chained(url)
    top = head["manifest"]["base"]
    chain = head["manifest"]["durable_obj"]["chain"]
    head["manifest"]["durable_obj"]["chain"] = chain[1:]  # an increment named as the full base
    (url / "head.json").write_text(json.dumps(head))
    with pytest.raises(Corrupt, match="incremental archive but the head names no links"):
        durable_obj.open(str(url), read_only=True)
    with tarfile.open(url / top["key"]) as tar:  # and an increment does record a base
        listing = tar.extractfile(".backup")
        assert listing is not None and b"<base_backup>File('links/" in listing.read()


def test_gc_keeps_every_link_and_time_travel_crosses_chains(tmp_path: Path) -> None:
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w", retention=3600) as obj:
        _base(obj)
        obj.checkpoint()
        _grow(obj, 1)
        obj.checkpoint()
        mid_seq, mid = obj.seq, obj.query(COUNT)
        _grow(obj, 2)
        obj.checkpoint(full=True)  # the chain is now history only
        _grow(obj, 3)
        obj.flush()
        now = obj.query(COUNT)
    ns = durable_obj.Namespace(str(tmp_path))
    ns.gc("o", grace=0)
    with durable_obj.open(str(url), read_only=True, at=mid_seq) as past:
        assert past.query(COUNT) == mid
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == now
    # Without a window, the old chain is collected whole.
    ns.gc("o", grace=0, retention=0)
    stored = {p.name for p in (url / "checkpoints").iterdir()}
    assert stored == {_head(url)["manifest"]["base"]["key"].rsplit("/", 1)[-1]}


def test_a_fork_of_a_chain_is_a_full_base(tmp_path: Path) -> None:
    url = tmp_path / "o"
    _chained(url)
    durable_obj.fork(str(url), "copy")
    head = _head(tmp_path / "copy")
    assert _chain(head) == [] and INCREMENTAL_FEATURE not in head["protocol"]["reader_features"]
    with (
        durable_obj.open(str(tmp_path / "copy"), read_only=True) as a,
        durable_obj.open(str(url), read_only=True) as b,
    ):
        assert a.query(COUNT) == b.query(COUNT)


def test_an_encrypted_chain_shares_its_data_key_and_reopens(tmp_path: Path) -> None:
    key = StaticKey(os.urandom(32))
    url = tmp_path / "o"
    head = _chained(url, encryption=key)
    section = head["durable_obj"]["encryption"]
    with durable_obj.open(str(url), read_only=True, encryption=key) as obj:
        assert obj.query("SELECT count() FROM t") == "20200\n"
    with durable_obj.open(str(url), owner="w", encryption=key) as obj:
        obj.checkpoint(full=True)
    after = _head(url)["durable_obj"]["encryption"]
    assert after["active"] != section["active"]  # a full base: a new data key
    with durable_obj.open(str(url), read_only=True, encryption=key) as obj:
        assert obj.query("SELECT count() FROM t") == "20200\n"


def test_a_follower_and_the_default_database_follow_a_chain(tmp_path: Path) -> None:
    """The `default` database's V1-shaped definition (v1base.py) is stored
    whole in each increment; a follower refreshes across increments."""
    url = tmp_path / "o"
    with (
        durable_obj.open(str(url), owner="w") as obj,
        durable_obj.open(str(url), read_only=True) as reader,
    ):
        assert obj.db == "default"
        _base(obj)
        obj.checkpoint()
        for n in range(1, 4):
            _grow(obj, n)
            obj.checkpoint()
            reader.refresh()
            assert reader.query(COUNT) == obj.query(COUNT)
    assert len(_chain(_head(url))) == 3


def _retar(path: Path, listing: bytes) -> bytes:
    """The archive at `path` with its `.backup` listing replaced."""
    import io

    out = io.BytesIO()
    with tarfile.open(path) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            if member.name == ".backup":
                member.size = len(listing)
                dst.addfile(member, io.BytesIO(listing))
            else:
                dst.addfile(member, src.extractfile(member))
    return out.getvalue()


def test_an_increment_whose_definition_is_in_no_link_is_corrupt(tmp_path: Path) -> None:
    """The gate reads each definition where RESTORE will (by size and
    checksum, in the link beneath): one that is in no link is refused
    before RESTORE runs."""
    import re

    url = tmp_path / "o"
    head = _chained(url)
    top = head["manifest"]["base"]
    with tarfile.open(url / top["key"]) as tar:
        handle = tar.extractfile(".backup")
        assert handle is not None
        listing = handle.read()
    entry = re.compile(
        rb"(<name>metadata/default/t\.sql</name><size>\d+</size><checksum>)[0-9a-f]{32}"
    )
    assert entry.search(listing)
    data = _retar(url / top["key"], entry.sub(rb"\g<1>" + b"0" * 32, listing))
    (url / top["key"]).write_bytes(data)
    top["size"], top["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (url / "head.json").write_text(json.dumps(head))
    with pytest.raises(Corrupt, match="in none of the links"):
        durable_obj.open(str(url), read_only=True)


def test_a_merge_since_the_base_makes_a_full_base_and_a_delete_an_increment(
    tmp_path: Path,
) -> None:
    """The policy estimates what an increment would carry before taking it:
    a merge that rewrote the parts is a full base at once; a DELETE's
    mutated (wide) parts share their files with the base, so it stays small."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        obj.execute(
            "CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k "
            "SETTINGS min_bytes_for_wide_part = 0"
        )
        for n in range(2):
            obj.execute(
                f"INSERT INTO t SELECT number + {n * 100000}, repeat('v', 50) FROM numbers(20000)"
            )
        obj.checkpoint()
        obj.execute("DELETE FROM t WHERE k < 10")
        obj.checkpoint()
        head = _head(url)
        assert len(_chain(head)) == 1
        assert _size(url, head["manifest"]["base"]["key"]) * 5 < _size(url, _chain(head)[0])
        obj.execute("OPTIMIZE TABLE t FINAL")
        obj.checkpoint()
        assert _chain(_head(url)) == []  # full at once: no increment of the merged part
        expected = obj.query(COUNT)
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected


def test_a_chain_that_names_one_archive_twice_is_corrupt(tmp_path: Path) -> None:
    url = tmp_path / "o"
    head = _chained(url)
    chain = head["manifest"]["durable_obj"]["chain"]
    head["manifest"]["durable_obj"]["chain"] = [chain[0], chain[0], chain[1]]
    (url / "head.json").write_text(json.dumps(head))
    with pytest.raises(Corrupt, match="twice"):
        durable_obj.open(str(url), read_only=True)


def test_an_increment_that_shares_nothing_with_its_base_is_whole_and_reopens(
    tmp_path: Path,
) -> None:
    """The engine records no base for an increment that takes no file from
    it (every table dropped since): such a link needs nothing beneath it."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        _base(obj)
        obj.checkpoint()
        obj.execute("DROP TABLE t")
        obj.checkpoint()
        head = _head(url)
        assert len(_chain(head)) == 1
        with tarfile.open(url / head["manifest"]["base"]["key"]) as tar:
            listing = tar.extractfile(".backup")
            assert listing is not None and b"<base_backup>" not in listing.read()
        obj.execute("CREATE TABLE u (k UInt64) ENGINE = MergeTree ORDER BY k")
        obj.execute("INSERT INTO u VALUES (1), (2), (3)")
        obj.checkpoint()  # an increment over the whole one
        assert len(_chain(_head(url))) == 2
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query("SELECT count(), sum(k) FROM u") == "3,6\n"
