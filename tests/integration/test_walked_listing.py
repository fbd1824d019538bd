"""The listing a checkpoint keeps for the next increment, read as BACKUP
writes the archive (`links.stub_walked`, `core.durability`): kept once the
base is committed, dropped when it is not, and read from the stored archive
as before when the walk leaves it to tarfile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.core import durability
from durable_obj.core.commit import HeadWriter
from durable_obj.errors import BackendError
from durable_obj.replica import links
from tests.integration.test_chains import COUNT, _base, _chain, _grow, _head


def _count(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(links, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(links, name, counted)
    return calls


def test_the_listing_is_read_as_backup_writes_and_chains_the_next_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tmp_path / "o"
    walked, read_again = _count(monkeypatch, "stub_walked"), _count(monkeypatch, "stub")
    with durable_obj.open(str(url), owner="w") as obj:
        _base(obj)
        keys = [obj.checkpoint()]
        for n in range(1, 3):
            _grow(obj, n)
            keys.append(obj.checkpoint())
        expected = obj.query(COUNT)
        work = obj._local.work
        assert work is not None
        assert not (Path(work) / durability._NEXT_STUB).exists()
    assert len(walked) == 3 and not read_again  # never read back from the store
    assert _chain(_head(url)) == keys[:-1]
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected


def test_a_walk_left_to_tarfile_reads_the_stored_archive_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tmp_path / "o"
    monkeypatch.setattr(links, "stub_walked", lambda read, into: False)
    read_again = _count(monkeypatch, "stub")
    with durable_obj.open(str(url), owner="w") as obj:
        _base(obj)
        keys = [obj.checkpoint()]
        _grow(obj, 1)
        keys.append(obj.checkpoint())
        expected = obj.query(COUNT)
    assert len(read_again) == 2
    assert _chain(_head(url)) == keys[:1]
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected


def test_a_base_not_committed_keeps_the_listing_of_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit of the second base fails: the listing read from its
    archive is dropped, and the next checkpoint is an increment over the
    first base (its listing kept), which reopens whole."""
    url = tmp_path / "o"
    with durable_obj.open(str(url), owner="w") as obj:
        _base(obj)
        first = obj.checkpoint()
        _grow(obj, 1)
        obj.flush()
        real = HeadWriter.commit

        def failing(self: HeadWriter, *args: Any, **kwargs: Any) -> Any:
            raise BackendError("injected: the head was not replaced")

        monkeypatch.setattr(HeadWriter, "commit", failing)
        with pytest.raises(BackendError, match="injected"):
            obj.checkpoint()
        monkeypatch.setattr(HeadWriter, "commit", real)
        work = obj._local.work
        assert work is not None
        assert not (Path(work) / durability._NEXT_STUB).exists()
        _grow(obj, 2)
        last = obj.checkpoint()
        expected = obj.query(COUNT)
    head = _head(url)
    assert head["manifest"]["base"]["key"] == last
    assert _chain(head) == [first]
    with durable_obj.open(str(url), read_only=True) as obj:
        assert obj.query(COUNT) == expected
