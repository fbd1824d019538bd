"""Fork across stores (issue 12 §4): `durable_obj.fork` and `Namespace.fork`
with a destination that is an id beside the source or an object URL on any
store, folder -> S3 server and S3 server -> folder (moto, tests/servers.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fsspec.callbacks import Callback

import durable_obj
from durable_obj import errors
from durable_obj.core import ops
from durable_obj.service.namespace import split_destination
from durable_obj.stores import open_store
from durable_obj.wire.protocol import head_key
from tests import servers

loopback_only_env = servers.loopback_only_env
moto_s3 = servers.moto_s3

DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"
ROWS = "1\ta\n2\tb\n3\tc\n"


class Sizes(Callback):  # type: ignore[misc]  # fsspec ships no types
    """Records each transfer's size."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def set_size(self, size: int) -> None:
        self.sizes.append(size)
        super().set_size(size)


def make_source(url: str, options: dict[str, Any] | None = None) -> None:
    """Rows 1..2 in a checkpoint, row 3 in one WAL segment (seq 2)."""
    with durable_obj.open(url, owner="maker", storage_options=options) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3, 'c')")
        obj.flush()


def rows(url: str, options: dict[str, Any] | None = None) -> str:
    with durable_obj.open(url, read_only=True, storage_options=options) as obj:
        return obj.query("SELECT * FROM m ORDER BY k", "TSV")


def snapshot(namespace: str, oid: str, options: dict[str, Any] | None) -> dict[str, bytes]:
    """Every key under `oid` and its bytes."""
    store = open_store(namespace, options)
    out = {}
    for entry in store.list_keys(oid):
        blob = store.get(entry.key)
        assert blob is not None
        out[entry.key] = blob.data
    return out


def s3_namespace(moto: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    root, options = moto
    return f"{root}/fork-{uuid.uuid4().hex[:8]}", options


@pytest.mark.moto
def test_folder_to_s3(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    s3_ns, options = s3_namespace(request.getfixturevalue("moto_s3"))
    src = str(tmp_path / "ns" / "exp")
    make_source(src)
    sizes = Sizes()
    info = durable_obj.fork(src, f"{s3_ns}/published", dst_storage_options=options, progress=sizes)
    assert (info.oid, info.seq, info.segments, info.owner) == ("published", 1, 0, None)
    assert info.head.extension()["forked_from"] == {"oid": "exp", "seq": 2}
    assert info.head.manifest.base is not None
    assert info.head.manifest.base.size in sizes.sizes  # the upload was reported
    assert rows(f"{s3_ns}/published", options) == ROWS
    # Its own lease: the source's lease is held (by a writer that died
    # holding it), and a writer opens the fork all the same.
    durable_obj.open(src, owner="experimenter")._abandon()
    with durable_obj.open(f"{s3_ns}/published", owner="publisher", storage_options=options) as fork:
        fork.execute("INSERT INTO m VALUES (4, 'only in the fork')")
        fork.flush()
        assert durable_obj.Namespace(s3_ns, storage_options=options).info("published").owner == (
            "publisher"
        )
    assert durable_obj.Namespace(str(tmp_path / "ns")).info("exp").owner == "experimenter"
    assert rows(src) == ROWS
    assert rows(f"{s3_ns}/published", options).endswith("4\tonly in the fork\n")


@pytest.mark.moto
def test_s3_to_folder(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    s3_ns, options = s3_namespace(request.getfixturevalue("moto_s3"))
    make_source(f"{s3_ns}/prod", options)
    before = snapshot(s3_ns, "prod", options)
    local = tmp_path / "debug" / "ns"  # not there yet: the fork makes the folder
    sizes = Sizes()
    info = durable_obj.fork(
        f"{s3_ns}/prod", str(local / "prod-copy"), storage_options=options, progress=sizes
    )
    assert info.oid == "prod-copy" and (local / "prod-copy" / "head.json").is_file()
    assert sizes.sizes  # the source's base came down, the copy went up
    assert rows(str(local / "prod-copy")) == ROWS
    with durable_obj.open(str(local / "prod-copy"), owner="debugger") as fork:
        fork.execute("DELETE FROM m WHERE k = 1")
    assert rows(str(local / "prod-copy")) == "2\tb\n3\tc\n"
    assert snapshot(s3_ns, "prod", options) == before  # the source is only read


@pytest.mark.moto
def test_existing_destination_on_s3_is_refused_untouched(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    s3_ns, options = s3_namespace(request.getfixturevalue("moto_s3"))
    src = str(tmp_path / "ns" / "exp")
    make_source(src)
    with durable_obj.open(f"{s3_ns}/taken", owner="other", storage_options=options) as obj:
        obj.execute("CREATE TABLE t (x UInt8) ENGINE = Memory")
    before = snapshot(s3_ns, "taken", options)
    with pytest.raises(errors.InvalidArgument) as caught:
        durable_obj.fork(src, f"{s3_ns}/taken", dst_storage_options=options)
    message = str(caught.value)
    assert "'taken' already exists" in message and s3_ns in message
    assert "nothing was written" in message
    assert snapshot(s3_ns, "taken", options) == before


def test_existing_destination_folder_is_refused_untouched(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "a" / "o"), str(tmp_path / "b" / "o")
    make_source(src)
    make_source(dst)
    before = snapshot(str(tmp_path / "b"), "o", None)
    with pytest.raises(errors.InvalidArgument, match=r"already exists.*nothing was written"):
        durable_obj.fork(src, dst)
    assert snapshot(str(tmp_path / "b"), "o", None) == before
    with pytest.raises(errors.InvalidArgument, match="already exists"):
        durable_obj.fork(src, src)  # itself


def test_same_namespace_by_id_and_by_url(tmp_path: Path) -> None:
    ns = durable_obj.Namespace(str(tmp_path / "ns"))
    make_source(str(tmp_path / "ns" / "o"))
    assert ns.fork("o", "by-id").oid == "by-id"
    assert ns.fork("o", str(tmp_path / "ns" / "by-url")).oid == "by-url"
    assert durable_obj.fork(str(tmp_path / "ns" / "o"), "by-api-id").oid == "by-api-id"
    assert [i.oid for i in ns.list()] == ["by-api-id", "by-id", "by-url", "o"]
    for oid in ("by-id", "by-url", "by-api-id"):
        assert rows(str(tmp_path / "ns" / oid)) == ROWS


def test_relative_destination_and_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_source("./ns/a1")
    assert durable_obj.fork("./ns/a1", "./ns/a2").oid == "a2"  # the example
    memory = f"memory://fork-{uuid.uuid4().hex}"
    assert durable_obj.fork("./ns/a2", f"{memory}/m").oid == "m"
    assert rows("./ns/a2") == rows(f"{memory}/m") == ROWS


def test_bad_destinations_write_nothing(tmp_path: Path) -> None:
    ns_path = tmp_path / "ns"
    make_source(str(ns_path / "o"))
    ns = durable_obj.Namespace(str(ns_path))
    before = sorted(p for p in tmp_path.rglob("*"))
    for bad in ("a/b", "..", "", "tab\there"):
        with pytest.raises(errors.InvalidArgument, match=r"Nothing was written|non-empty"):
            ns.fork("o", bad)
    with pytest.raises(errors.InvalidArgument, match="go with a destination URL"):
        ns.fork("o", "beside", dst_storage_options={"key": "x"})
    with pytest.raises(errors.NotFound):
        ns.fork("missing", "copy")
    assert sorted(p for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    ("dst", "expected"),
    [
        ("copy", (None, "copy")),
        ("./ns/copy", ("./ns", "copy")),
        ("../ns/copy", ("../ns", "copy")),
        ("/abs/ns/copy", ("/abs/ns", "copy")),
        ("s3://bucket/ns/copy", ("s3://bucket/ns", "copy")),
        ("file:///abs/a%20b/c%20d", ("file:///abs/a%20b", "c d")),
        ("memory://ns/copy", ("memory://ns", "copy")),
    ],
)
def test_split_destination(dst: str, expected: tuple[str | None, str]) -> None:
    assert split_destination(dst) == expected


def test_destination_created_meanwhile_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A creator racing the fork between its check and its head: the
    create-if-absent at the end loses, the racer's head stays, and the
    fork's uploaded base is deleted."""
    make_source(str(tmp_path / "a" / "o"))
    make_source(str(tmp_path / "b" / "racer"))
    dst_store = open_store(str(tmp_path / "b"))
    racer = dst_store.get(head_key("racer"))
    assert racer is not None
    checked = ops.ensure_absent

    def check_then_lose(store: Any, oid: str) -> None:
        checked(store, oid)  # absent when checked ...
        assert store.create(head_key(oid), racer.data) is not None  # ... created right after

    monkeypatch.setattr(ops, "ensure_absent", check_then_lose)
    with pytest.raises(errors.InvalidArgument, match="meanwhile"):
        durable_obj.fork(str(tmp_path / "a" / "o"), str(tmp_path / "b" / "late"))
    assert [e.key for e in dst_store.list_keys("late")] == [head_key("late")]
    blob = dst_store.get(head_key("late"))
    assert blob is not None and blob.data == racer.data
