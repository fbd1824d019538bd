"""Hostile heads and segments: every open fails typed, reads only its own
prefix, and changes nothing in storage beyond taking and releasing the lease.

A valid object (a base and two segments) is built once; each example copies
it into a fresh memory namespace, mutates head.json or a segment, and opens
it read-only or as a writer.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj import errors
from durable_obj.core.catalog import CATALOG_KEY as CATALOG
from durable_obj.stores.file import FileStore
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore
from durable_obj.wire.head import Head

ALLOWED = {"corrupt", "protocol_unsupported", "limit_exceeded", "engine_incompatible"}
STATS = {"heads": 0, "segments": 0, "opened": 0, "refused": 0}
_TEMPLATE: dict[str, bytes] = {}


def template() -> dict[str, bytes]:
    if not _TEMPLATE:
        store = MemoryStore(f"hostile-src-{uuid.uuid4().hex}")
        with durable_obj.Namespace(store).open("o") as obj:
            obj.execute("CREATE TABLE t (id UInt32, s String) ENGINE = MergeTree ORDER BY id")
            obj.execute("INSERT INTO t VALUES (1, 'one')")
            obj.checkpoint()
            obj.execute("INSERT INTO t VALUES (2, 'two')")
            obj.flush()
            obj.execute("INSERT INTO t VALUES (3, 'three'), (4, 'four')")
            obj.flush()
        for entry in store.list_keys("o"):  # the object's keys (not the namespace's catalog)
            blob = store.get(entry.key)
            assert blob is not None
            _TEMPLATE[entry.key] = blob.data
    return dict(_TEMPLATE)


def install(files: dict[str, bytes]) -> FaultyStore:
    inner = MemoryStore(f"hostile-{uuid.uuid4().hex}")
    for key, data in files.items():
        assert inner.create(key, data) is not None
    # a neighbour whose keys a hostile head might try to reach
    inner.create("other/wal/1-1-secret.jsonl", b'{"sql": "DROP TABLE t"}\n')
    store = FaultyStore(inner, seed=0, rate=0.0)
    return store


def snapshot(store: FaultyStore) -> dict[str, bytes]:
    out = {}
    for entry in store.inner.list_keys():
        blob = store.inner.get(entry.key)
        assert blob is not None
        out[entry.key] = blob.data
    return out


def check_open(files: dict[str, bytes], read_only: bool) -> None:
    store = install(files)
    before = snapshot(store)
    try:
        obj = durable_obj.Namespace(store, lease_ttl=30).open("o", read_only=read_only)
    except errors.DurableError as exc:
        STATS["refused"] += 1
        assert exc.category in ALLOWED, f"{type(exc).__name__}: {exc}"
    else:
        STATS["opened"] += 1
        obj.query("SELECT count() FROM t")
        obj.close(discard=True)
        return
    finally:
        # the namespace's catalog is read (a writer's row), nothing a head names
        outside = [
            key for _, key in store.calls if key and not key.startswith("o/") and key != CATALOG
        ]
        assert not outside, f"touched keys outside the object: {outside}"
    after = snapshot(store)
    assert set(after) == set(before)
    for key in before:
        if key == "o/head.json" and before[key] != after[key]:
            # only the lease may have moved (taken, then released); compare the
            # meaning, since a writer spells out defaults such as "base": null
            old, new = Head.parse(before[key]), Head.parse(after[key])
            assert old.model_dump(exclude={"lease", "durable_obj"}) == new.model_dump(
                exclude={"lease", "durable_obj"}
            )
            ours = ("timezone", "nonce")  # a writer records these two
            assert {k: v for k, v in old.extension().items() if k not in ours} == {
                k: v for k, v in new.extension().items() if k not in ours
            }
        else:
            assert before[key] == after[key], key


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["../other/wal/1-1-secret.jsonl", "/etc/passwd", "wal/../../x", "a" * 64]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated_heads(draw: st.DrawFn) -> bytes:
    head = template()["o/head.json"]
    kind = draw(st.sampled_from(["set", "delete", "add", "bytes", "truncate", "oversize"]))
    if kind == "bytes":
        data = bytearray(head)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "truncate":
        return head[: draw(st.integers(0, len(head) - 1))]
    doc = json.loads(head)
    if kind == "oversize":
        doc["pad"] = "x" * (1024 * 1024)
        return json.dumps(doc).encode()
    path = draw(st.sampled_from(paths(doc)[1:]))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if kind == "set":
        parent[path[-1]] = draw(json_values)
    elif kind == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    else:
        parent.append(draw(json_values))
    return json.dumps(doc).encode()


@st.composite
def mutated_segments(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    files = template()
    key = draw(st.sampled_from(sorted(k for k in files if k.startswith("o/wal/"))))
    data = bytearray(files[key])
    kind = draw(st.sampled_from(["truncate", "flip", "utf8", "not-object", "append"]))
    if kind == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "utf8":
        data[draw(st.integers(0, len(data) - 1))] = 0xFF
    elif kind == "not-object":
        data = bytearray(draw(st.sampled_from([b"[1]\n", b'"sql"\n', b"null\n", b'{"sql": 1}\n'])))
    else:
        data += draw(st.binary(max_size=16))
    # rehash: also exercise the parser, not only the SHA-256 check
    return key, bytes(data), draw(st.booleans())


_SETTINGS = settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(head=mutated_heads(), read_only=st.booleans())
def test_hostile_heads(head: bytes, read_only: bool) -> None:
    STATS["heads"] += 1
    files = template()
    files["o/head.json"] = head
    check_open(files, read_only)


@settings(_SETTINGS, max_examples=400)
@given(segment=mutated_segments(), read_only=st.booleans())
def test_hostile_segments(segment: tuple[str, bytes, bool], read_only: bool) -> None:
    STATS["segments"] += 1
    key, data, rehash = segment
    files = template()
    files[key] = data
    if rehash:
        import hashlib

        doc = json.loads(files["o/head.json"])
        for ref in doc["manifest"]["wal"]:
            if f"o/{ref['key']}" == key:
                ref["size"], ref["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        files["o/head.json"] = json.dumps(doc).encode()
    check_open(files, read_only)


def test_regression_failed_open_rewrote_engine_version() -> None:
    """Found by test_hostile_heads: a writer open took the lease (writing its
    own engine version into the head), then failed to replay, and released
    the lease by writing that rewritten head back, so a failed open changed
    more than the lease. Failing example: a head whose manifest "base" key is
    misspelled (base missing, WAL replayed onto nothing) and whose engine
    version is " 6.9.0"."""
    files = template()
    doc = json.loads(files["o/head.json"])
    doc["engine"]["version"] = "0.0.1-other-writer"
    doc["manifest"]["base"] = None  # the segments' INSERTs now have no table
    files["o/head.json"] = json.dumps(doc).encode()
    check_open(files, read_only=False)


def test_regression_manifest_db_not_in_base() -> None:
    """Found by test_hostile_heads: a head whose manifest.db (" efault") is not
    the database its (intact) base holds was answered `engine` ("not found in
    backup"); the head and its base disagree, which is `corrupt`."""
    files = template()
    doc = json.loads(files["o/head.json"])
    assert doc["manifest"]["base"] is not None
    doc["manifest"]["db"] = " efault"
    files["o/head.json"] = json.dumps(doc).encode()
    for read_only in (True, False):
        store = install(files)
        with pytest.raises(durable_obj.Corrupt, match="holds no database"):
            durable_obj.Namespace(store, lease_ttl=30).open("o", read_only=read_only)
        check_open(files, read_only)  # and nothing but the lease moved


# -- symbolic links in a folder namespace ---------------------------------------
# A folder store follows a link only while it stays inside the namespace root
# and, below an object folder, inside that object folder (chdb.durable's rule).
# Anything else is refused with invalid_argument before a byte moves, and
# nothing is ever written outside the root, whatever the link and the race.
# The reference is chdb.durable's local backend: `make_backend(url, oid)` then
# `LocalFSBackend._p(key)`; the differential test below holds us to it.

STATS.update({"link_layouts": 0, "link_ops": 0, "link_refused": 0, "link_swaps": 0})
#: Where a link is planted in (or for) the object "o" built from template().
LINK_SITES = ["object", "wal", "checkpoints", "head", "segment", "base", "lock"]
#: What it points to: a copy outside the root, a neighbour object's copy inside
#: the root, a copy inside the object's own folder, a missing file outside,
#: or itself (a loop).
LINK_TARGETS = ["outside", "neighbour", "own", "dangling", "loop"]


def tree(top: Path) -> dict[str, object]:
    """Everything below `top`, links not followed: path -> bytes, link target, or "dir"."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = str(path.relative_to(top))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


def plant_object(root: Path, oid: str = "o") -> FileStore:
    store = FileStore(str(root))
    for key, data in template().items():
        assert store.create(f"{oid}/{key.partition('/')[2]}", data) is not None
    return store


def refs(root: Path, oid: str = "o") -> tuple[str, str]:
    """(the base key, the first segment key) named by the object's head."""
    doc = json.loads((root / oid / "head.json").read_bytes())
    return doc["manifest"]["base"]["key"], doc["manifest"]["wal"][0]["key"]


def relink(path: Path, target: Path) -> None:
    """Replace `path` (a file or a folder) with a link to `target`."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def copy_to(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


def plant_link(tmp: Path, site: str, target: str) -> tuple[Path, str, bool]:
    """A namespace at tmp/root holding "o" (and "n", a neighbour), with one
    link planted; (root, the id to open, whether the open may succeed)."""
    root, outside = tmp / "root", tmp / "outside"
    plant_object(root, "o")
    plant_object(root, "n")
    outside.mkdir()
    base, segment = refs(root)
    rel = {
        "object": "link",
        "wal": "o/wal",
        "checkpoints": "o/checkpoints",
        "head": "o/head.json",
        "segment": f"o/{segment}",
        "base": f"o/{base}",
        "lock": "o/head.json.lock",
    }[site]
    source = root / ("o" if site == "object" else rel)
    here = root / rel
    if site == "lock":
        source = root / "o" / "head.json"  # some file to copy; the lock holds no data
    if target == "outside":
        to = outside / "copy"
        copy_to(source, to)
    elif target == "neighbour":
        to = root / ("n" if site == "object" else "n" + rel[1:])
        if not to.exists():
            copy_to(source, to)
    elif target == "own":
        to = root / ("o" if site == "object" else rel + ".real")
        if site != "object":
            copy_to(source, to)
    elif target == "dangling":
        to = outside / "missing"
    else:
        to = here
    relink(here, to)
    # a relative link as often as an absolute one; both must be resolved
    if target != "loop" and (LINK_SITES.index(site) + LINK_TARGETS.index(target)) % 2:
        relink(here, Path(os.path.relpath(to, here.parent)))
    oid = "link" if site == "object" else "o"
    inside_own = target == "own" or (site == "object" and target == "neighbour")
    return root, oid, inside_own and site != "lock"


def unchanged_but_the_lease(before: dict[str, object], after: dict[str, object]) -> None:
    for rel in set(before) | set(after):
        if rel.endswith(".lock"):
            continue  # the store's own lock files may appear
        if rel.endswith("head.json") and isinstance(before.get(rel), bytes):
            old, new = before[rel], after.get(rel)
            assert isinstance(old, bytes) and isinstance(new, bytes), rel
            assert Head.parse(old).manifest == Head.parse(new).manifest, rel
            continue
        assert before.get(rel) == after.get(rel), rel


@pytest.mark.parametrize("mode", ["read", "write"])
@pytest.mark.parametrize(
    ("site", "target"),
    [
        (site, target)
        for site in LINK_SITES
        for target in LINK_TARGETS
        if not (site == "object" and target == "own")  # "own" is "neighbour" there
    ],
)
def test_symlinks_through_the_public_api(tmp_path: Path, site: str, target: str, mode: str) -> None:
    root, oid, may_open = plant_link(tmp_path, site, target)
    outside = tmp_path / "outside"
    before_out, before_root = tree(outside), tree(root)
    if site == "lock" and mode == "read":
        may_open = True  # a reader never takes the lock
    try:
        if mode == "read":
            obj = durable_obj.open(str(root / oid), read_only=True)
        else:
            obj = durable_obj.Namespace(str(root), owner="w").open(oid)
    except errors.DurableError as exc:
        STATS["link_refused"] += 1
        assert not may_open, f"{type(exc).__name__}: {exc}"
        assert exc.category == "invalid_argument", f"{type(exc).__name__}: {exc}"
        assert "refusing key" in str(exc) and "link" in str(exc)
        unchanged_but_the_lease(before_root, tree(root))
    else:
        assert may_open, f"{site} -> {target} was followed"
        with obj:
            assert obj.query("SELECT count() FROM t", "CSV").strip() == "4"
            if mode == "write":
                obj.execute("INSERT INTO t VALUES (5, 'five')")
                obj.flush()
                obj.checkpoint()
                obj.execute("INSERT INTO t VALUES (6, 'six')")
                obj.flush()
        if mode == "write":
            with durable_obj.open(str(root / oid), read_only=True) as again:
                assert again.query("SELECT count() FROM t", "CSV").strip() == "6"
    assert tree(outside) == before_out
    assert sorted(os.listdir(tmp_path)) == ["outside", "root"]


def test_symlinks_planted_in_a_new_object_refuse_its_first_writes(tmp_path: Path) -> None:
    """No head yet, so nothing is refused at open: the first flush and the
    first checkpoint are, and they write nothing outside the root."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "fresh").mkdir(parents=True)
    (outside / "wal").mkdir(parents=True)
    (outside / "checkpoints").mkdir()
    (root / "fresh" / "wal").symlink_to(outside / "wal")
    (root / "fresh" / "checkpoints").symlink_to("../../outside/checkpoints")
    with durable_obj.Namespace(str(root), owner="w").open("fresh") as obj:
        obj.execute("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x")
        with pytest.raises(errors.InvalidArgument, match=r"'fresh/wal' -> .*outside"):
            obj.flush()
        with pytest.raises(errors.InvalidArgument, match=r"'fresh/checkpoints' -> "):
            obj.checkpoint()
        obj.close(discard=True)
    assert tree(outside) == {"wal": "dir", "checkpoints": "dir"}


def test_symlinked_namespace_root_is_resolved_once(tmp_path: Path) -> None:
    """The root itself may be a link (chdb.durable resolves it too): objects
    live in the folder it names when the namespace is made."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    ns = durable_obj.Namespace(f"file://{link}", owner="w")
    with ns.open("o") as obj:
        obj.execute("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x")
        obj.flush()
    assert (real / "o" / "head.json").is_file()
    assert [info.oid for info in ns.list()] == ["o"]


def test_symlinked_object_folder_through_namespace_operations(tmp_path: Path) -> None:
    """info, verify, gc, release and fork refuse a linked-out object too, and
    list does not show it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    plant_object(root, "o")
    copy_to(root / "o", outside / "o")
    (root / "link").symlink_to(outside / "o")
    before = tree(outside)
    ns = durable_obj.Namespace(str(root), owner="w")
    assert [info.oid for info in ns.list()] == ["o"]
    calls = [
        lambda: ns.info("link"),
        lambda: ns.verify("link"),
        lambda: ns.gc("link", grace=0),
        lambda: ns.release("link"),
        lambda: ns.fork("o", "link"),
        lambda: ns.scan("SELECT 1", ["link"]),
    ]
    for call in calls:
        with pytest.raises(errors.InvalidArgument, match="'link' -> "):
            call()
    assert tree(outside) == before


# -- the store directly --------------------------------------------------------
#: Places a link may replace (in this order; one below a link is skipped).
STORE_SITES = ["o", "n", "x", "o/wal", "o/checkpoints", "o/head.json", "o/wal/s1", "o/new", "n/wal"]
#: Where a link may point, relative to the test folder ("." is the folder itself).
STORE_TARGETS = [
    "root",
    "outside",
    "outside/wal",
    "outside/file",
    "root/o",
    "root/n",
    "root/o/wal",
    "root/o/keep",
    "root/n/wal",
    "root/o/head.json",
    "root/missing",
    "outside/missing",
    "self",
    ".",
]
STORE_KEYS = [
    "o/head.json",
    "o/wal/s1",
    "o/wal/new",
    "o/checkpoints/c",
    "o/checkpoints/new/deep",
    "o/keep/k",
    "o/new/x",
    "n/head.json",
    "n/wal/s1",
    "x/head.json",
    "x/wal/s1",
]


def store_layout(tmp: Path, links: list[tuple[str, str, bool]]) -> Path:
    """root/{o,n} and outside/ with a few files, then the given links (site,
    target, relative?) planted; returns the root."""
    root = tmp / "root"
    for top in (root / "o", root / "n", tmp / "outside"):
        (top / "wal").mkdir(parents=True)
        (top / "checkpoints").mkdir()
        (top / "head.json").write_bytes(b"head of " + top.name.encode())
        (top / "wal" / "s1").write_bytes(b"s1 of " + top.name.encode())
    (root / "o" / "keep").mkdir()
    (tmp / "outside" / "file").write_bytes(b"outside file")
    planted: list[str] = []
    for site, target, relative in links:
        if any(site == p or site.startswith(p + "/") for p in planted):
            continue
        here = root / site
        to = here if target == "self" else tmp / target
        relink(here, Path(os.path.relpath(to, here.parent)) if relative else to)
        planted.append(site)
    return root


link_layouts = st.lists(
    st.tuples(st.sampled_from(STORE_SITES), st.sampled_from(STORE_TARGETS), st.booleans()),
    max_size=4,
)


def chdb_verdict(root: Path, key: str) -> str | None:
    """The path chdb.durable's local backend reads `key` at, or None if it refuses."""
    from chdb.durable.backends import make_backend

    oid, _, rest = key.partition("/")
    try:
        backend = make_backend(f"local:{root}", oid)
        path: str = backend._p(rest)  # type: ignore[attr-defined]
    except ValueError:
        return None
    return path


@settings(_SETTINGS, max_examples=300)
@given(links=link_layouts)
@example(links=[("o", "root/o/wal", False), ("n", "root/o/keep", False)])  # realpath of a loop
def test_store_containment_matches_chdb_durable(links: list[tuple[str, str, bool]]) -> None:
    """For every key: we refuse exactly where chdb.durable refuses, and read
    the same bytes where both follow. We are stricter only where chdb.durable's
    path is degenerate or unusable: an object folder that is the root itself,
    a key that is its object folder, or a path through a link loop."""
    STATS["link_layouts"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(os.path.realpath(tmp))
        root = store_layout(base, links)
        store = FileStore(str(root))
        for key in STORE_KEYS:
            theirs = chdb_verdict(root, key)
            try:
                blob = store.get(key)
            except errors.InvalidArgument as exc:
                assert key in str(exc)
                if theirs is None:
                    continue
                top = os.path.realpath(root / key.partition("/")[0])
                assert top == str(root) or theirs == top or loops(theirs), (key, theirs)
            except errors.BackendError:
                assert theirs is not None, key  # a file where a folder should be
            else:
                assert theirs is not None, f"{key} was followed where chdb.durable refuses"
                assert (None if blob is None else blob.data) == read_or_none(theirs), key


def loops(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


STORE_OPS = ["get", "create", "replace", "download", "list", "delete", "create_file"]


@settings(_SETTINGS, max_examples=200)
@given(
    links=link_layouts,
    ops=st.lists(st.tuples(st.sampled_from(STORE_OPS), st.sampled_from(STORE_KEYS)), max_size=12),
)
def test_store_never_touches_anything_outside(
    links: list[tuple[str, str, bool]], ops: list[tuple[str, str]]
) -> None:
    """Whatever the links and the operations: nothing outside the root is
    written, replaced or deleted, a refusal is invalid_argument naming the
    key, and no exception but a DurableError leaves the store."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(os.path.realpath(tmp))
        root = store_layout(base, links)
        store = FileStore(str(root))
        before = tree(base / "outside")
        local = base / "local.bin"
        local.write_bytes(b"local file")
        for op, key in ops:
            STATS["link_ops"] += 1
            try:
                if op == "get":
                    store.get(key)
                elif op == "create":
                    store.create(key, b"new " + key.encode())
                elif op == "create_file":
                    store.create_file(key, str(local))
                elif op == "replace":
                    blob = store.get(key)
                    if blob is not None:
                        store.replace(key, blob.data + b"+", blob.version)
                elif op == "download":
                    store.download(key, str(base / "downloaded.bin"))
                elif op == "list":
                    for entry in store.list_keys(key.partition("/")[0]):
                        assert entry.key.startswith(key.partition("/")[0] + "/")
                else:
                    store.delete(key)
            except errors.InvalidArgument as exc:
                STATS["link_refused"] += 1
                assert key in str(exc) or key.partition("/")[0] in str(exc)
            except errors.BackendError:
                pass  # e.g. a folder where a file should be: not an escape
        assert tree(base / "outside") == before
        assert sorted(os.listdir(base)) in (
            ["local.bin", "outside", "root"],
            ["downloaded.bin", "local.bin", "outside", "root"],
        )


def test_store_refuses_a_fifo_without_hanging(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "root"))
    (tmp_path / "root" / "o").mkdir(parents=True)
    os.mkfifo(tmp_path / "root" / "o" / "head.json")
    with pytest.raises(errors.InvalidArgument, match="not a regular file"):
        store.get("o/head.json")
    with pytest.raises(errors.InvalidArgument, match="not a regular file"):
        store.download("o/head.json", str(tmp_path / "x"))
    assert store.list_keys() == []


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE), so that o/wal
    always exists, as a folder or as a link, and a create cannot make it."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def test_store_race_swapping_a_folder_for_a_link(tmp_path: Path) -> None:
    """TOCTOU: while one thread keeps swapping o/wal between a real folder and
    a link to outside/, another creates, replaces, reads, lists and deletes
    keys below it. Each operation either works on the real folder or is
    refused; none ever lands outside. (A check-then-open store fails this.)"""
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    store = FileStore(str(root))
    head = store.create("o/wal/h", b"0")
    assert head is not None
    wal, link = root / "o" / "wal", root / "o" / "wal.link"
    link.symlink_to(outside)
    done = threading.Event()

    def swap() -> None:
        for _ in range(500_000):  # bounded; pairs, so it ends as it began
            if done.is_set():
                break
            exchange(wal, link)
            exchange(wal, link)
            STATS["link_swaps"] += 2

    def work() -> None:
        try:
            for n in range(1500):
                one_round(n)
        finally:
            done.set()

    def one_round(n: int) -> None:
        key = f"o/wal/k{n % 7}"
        with contextlib.suppress(errors.DurableError):
            store.create(key, b"x")
        with contextlib.suppress(errors.DurableError):
            blob = store.get("o/wal/h")
            if blob is not None:
                store.replace("o/wal/h", str(n).encode(), blob.version)
        with contextlib.suppress(errors.DurableError):
            store.list_keys("o")
        with contextlib.suppress(errors.DurableError):
            store.delete(key)

    threads = [threading.Thread(target=swap), threading.Thread(target=work)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert os.listdir(outside) == []
    assert sorted(os.listdir(root / "o")) == ["wal", "wal.link"]
