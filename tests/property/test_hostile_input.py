"""Hostile heads and segments: every open fails typed, reads only its own
prefix, and changes nothing in storage beyond taking and releasing the lease.

A valid object (a base and two segments) is built once; each example copies
it into a fresh memory namespace, mutates head.json or a segment, and opens
it read-only or as a writer.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_obj
from durable_obj import errors
from durable_obj.head import Head
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import FaultyStore

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
        for entry in store.list_keys():
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
        outside = [key for _, key in store.calls if key and not key.startswith("o/")]
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
