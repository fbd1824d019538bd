"""head.json: strict validation, unknown fields kept, every write new bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_obj.errors import Corrupt, LimitExceeded
from durable_obj.wire.head import Head, Lease
from durable_obj.wire.protocol import (
    MAX_HEAD_BYTES,
    MAX_SAFE_INT,
    head_key,
    mint_checkpoint_key,
    mint_wal_key,
    object_key,
    seq_of,
)

SHA = "ab" * 32


def valid_doc() -> dict[str, Any]:
    return {
        "protocol": {"version": 1, "reader_features": [], "writer_features": []},
        "engine": {"name": "chdb", "version": "26.9.0", "backup_format": 1, "min_reader": "26.9.0"},
        "lease": {"generation": 3, "owner": "w", "instance": "i" * 32, "expires_at": 1.5e9},
        "manifest": {
            "db": "default",
            "base": {"key": "checkpoints/1-1-aa.tar", "size": 10, "sha256": SHA},
            "wal": [{"key": "wal/1-2-bb.jsonl", "size": 5, "sha256": SHA}],
            "seq": 2,
        },
    }


def encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def test_roundtrip_keeps_unknown_fields_at_every_level() -> None:
    doc = valid_doc()
    doc["future"] = {"x": [1, 2]}
    doc["protocol"]["p_extra"] = 1
    doc["engine"]["e_extra"] = "e"
    doc["lease"]["l_extra"] = None
    doc["manifest"]["m_extra"] = {"deep": True}
    doc["manifest"]["base"]["r_extra"] = 7
    doc["manifest"]["wal"][0]["w_extra"] = "w"
    head = Head.parse(encode(doc))
    out = json.loads(head.to_bytes())
    out.pop("durable_obj")
    assert out == doc


def test_every_write_changes_the_bytes() -> None:
    head = Head.parse(encode(valid_doc()))
    assert head.to_bytes() != head.to_bytes()


def test_serializing_leaves_the_head_alone_and_writes_text_as_it_is() -> None:
    doc = valid_doc()
    doc["durable_obj"] = {"description": "agent é \u2028 \U0001f600", "other": 1}
    doc["future"] = {"big": 2**70, "f": 0.1}
    head = Head.parse(encode(doc))
    before = head.model_dump()
    body = head.to_bytes()
    assert head.model_dump() == before  # the nonce went into the bytes only
    assert "agent é".encode() in body  # UTF-8, not \u escapes
    assert b'": ' not in body and b'", "' not in body  # compact
    out = json.loads(body)
    assert out["durable_obj"]["description"] == doc["durable_obj"]["description"]
    assert out["durable_obj"]["other"] == 1 and len(out["durable_obj"]["nonce"]) == 32
    assert out["future"] == doc["future"]
    assert Head.parse(body).model_dump() == {**before, "durable_obj": out["durable_obj"]}


def test_release_keeps_generation_and_extras() -> None:
    from durable_obj.wire import lease as leases

    doc = valid_doc()
    doc["lease"]["l_extra"] = 1
    head = Head.parse(encode(doc))
    head.lease = leases.release(head.lease)
    out = json.loads(head.to_bytes())["lease"]
    assert out == {
        "generation": 3,
        "owner": None,
        "instance": None,
        "expires_at": None,
        "l_extra": 1,
    }


def test_cold_head() -> None:
    head = Head.cold(
        db="mem",
        engine_version="26.9.0",
        lease=Lease(generation=1, owner="a", instance="b", expires_at=2.0),
    )
    again = Head.parse(head.to_bytes())
    assert again.manifest.db == "mem" and again.manifest.seq == 0 and again.manifest.base is None
    assert again.engine.min_reader == "26.9.0"


Mutation = Callable[[dict[str, Any]], None]

BAD: dict[str, tuple[Mutation, str]] = {
    "missing protocol": (lambda d: d.pop("protocol"), "head.protocol"),
    "string seq": (lambda d: d["manifest"].__setitem__("seq", "2"), "head.manifest.seq"),
    "bool generation": (
        lambda d: d["lease"].__setitem__("generation", True),
        "head.lease.generation",
    ),
    "negative size": (
        lambda d: d["manifest"]["base"].__setitem__("size", -1),
        "head.manifest.base.size",
    ),
    "huge seq": (lambda d: d["manifest"].__setitem__("seq", MAX_SAFE_INT + 1), "head.manifest.seq"),
    "dotdot key": (
        lambda d: d["manifest"]["wal"][0].__setitem__("key", "wal/../../other/head.json"),
        "head.manifest.wal[0].key",
    ),
    "absolute key": (
        lambda d: d["manifest"]["base"].__setitem__("key", "/etc/passwd"),
        "head.manifest.base.key",
    ),
    "empty segment key": (
        lambda d: d["manifest"]["base"].__setitem__("key", "checkpoints//x.tar"),
        "head.manifest.base.key",
    ),
    "backslash key": (
        lambda d: d["manifest"]["base"].__setitem__("key", "..\\x"),
        "head.manifest.base.key",
    ),
    "bad sha": (
        lambda d: d["manifest"]["wal"][0].__setitem__("sha256", "XYZ"),
        "head.manifest.wal[0].sha256",
    ),
    "half released lease": (lambda d: d["lease"].__setitem__("owner", None), "head.lease"),
    "held lease without expiry": (
        lambda d: d["lease"].__setitem__("expires_at", None),
        "head.lease",
    ),
    "nan expiry": (lambda d: d["lease"].__setitem__("expires_at", float("nan")), "expires_at"),
    "wal not a list": (lambda d: d["manifest"].__setitem__("wal", {}), "head.manifest.wal"),
    "empty db": (lambda d: d["manifest"].__setitem__("db", ""), "head.manifest.db"),
    "feature not a string": (
        lambda d: d["protocol"].__setitem__("reader_features", [1]),
        "head.protocol.reader_features[0]",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_invalid_heads_are_corrupt_with_the_field_path(name: str) -> None:
    mutate, path = BAD[name]
    doc = valid_doc()
    mutate(doc)
    with pytest.raises(Corrupt) as info:
        Head.parse(json.dumps(doc).encode())
    assert path in str(info.value)
    assert info.value.category == "corrupt"


@pytest.mark.parametrize(
    "data", [b"", b"not json", b"[]", b'"x"', b"\xff\xfe", b'{"manifest": {"base": "k"}}']
)
def test_garbage_is_corrupt(data: bytes) -> None:
    with pytest.raises(Corrupt):
        Head.parse(data)


def test_oversize_head_is_limit_exceeded() -> None:
    doc = valid_doc()
    doc["pad"] = "x" * MAX_HEAD_BYTES
    with pytest.raises(LimitExceeded):
        Head.parse(encode(doc))


def test_writer_refuses_to_publish_an_oversize_head() -> None:
    head = Head.parse(encode(valid_doc()))
    head.manifest.wal = head.manifest.wal * 12000
    with pytest.raises(LimitExceeded, match="checkpoint"):
        head.to_bytes()


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=20,
    )
)
def test_arbitrary_json_never_raises_anything_but_corrupt(value: object) -> None:
    doc = valid_doc()
    doc["manifest"]["base"] = value
    try:
        head = Head.parse(json.dumps(doc).encode())
    except Corrupt:
        return
    # Whatever parses is a real reference (or none), never a coerced value.
    assert head.manifest.base is None or isinstance(head.manifest.base.size, int)


def test_timezone_extension_is_read_and_written_in_one_place() -> None:
    head = Head.parse(encode(valid_doc()))  # a chdb.durable head records none
    assert head.timezone == "UTC" and not head.records_timezone
    head.set_timezone("Asia/Tokyo")
    again = Head.parse(head.to_bytes())
    assert again.timezone == "Asia/Tokyo" and again.records_timezone
    assert json.loads(head.to_bytes())["durable_obj"]["timezone"] == "Asia/Tokyo"
    doc = valid_doc()
    doc["durable_obj"] = {"timezone": 9}
    with pytest.raises(Corrupt, match=r"head\.durable_obj\.timezone is not a string"):
        _ = Head.parse(encode(doc)).timezone


def test_key_layout() -> None:
    assert head_key("agent-1") == "agent-1/head.json"
    assert object_key("agent-1", "wal/1-2-ab.jsonl") == "agent-1/wal/1-2-ab.jsonl"
    wal, base = mint_wal_key(3, 17), mint_checkpoint_key(3, 18)
    assert wal.startswith("wal/3-17-") and wal.endswith(".jsonl")
    assert base.startswith("checkpoints/3-18-") and base.endswith(".tar")
    assert mint_wal_key(3, 17) != wal  # unique every time
    assert seq_of(wal.removeprefix("wal/")) == 17
    assert seq_of(base.removeprefix("checkpoints/")) == 18
    assert seq_of("0-1-deadbeef.tar.gz") == 1  # chdb.durable's base names too
    for name in ("notes.txt", "x-1-ab.jsonl", "1-2.jsonl", "sub/1-2-ab.jsonl"):
        assert seq_of(name) is None


def test_what_a_head_holds_at_v1s_limits_is_read_typed() -> None:
    """Values the schema accepts but nothing can use: a stamp of 400 digits
    is no time, a version of 5,000 digits is not ordered (Python refuses
    such an int), and a seq at 2**53 - 1 has no next one."""
    from durable_obj.wire.head import ObjectRef, stamp, stamp_of
    from durable_obj.wire.protocol import parse_version, version_lt

    ref = stamp(ObjectRef(key="wal/1-2-ab.jsonl", size=1, sha256=SHA), committed_at=1.0, owner="w")
    ref.model_extra["durable_obj"]["committed_at"] = 10**400
    assert stamp_of(ref) == (None, "w")
    assert parse_version("9" * 5000) is None and version_lt("26.9.0", "9" * 5000) is None
    head = Head.parse(encode(valid_doc()))
    assert head.manifest.next_seq() == 3
    head.manifest.seq = MAX_SAFE_INT
    with pytest.raises(LimitExceeded, match="seq"):
        head.manifest.next_seq()


def test_a_lone_surrogate_read_is_written_back_escaped_everywhere() -> None:
    """Read from a `\\ud800` escape in an unknown field: the head, the
    history archive and the catalog write it back escaped, as read."""
    from durable_obj.core import catalog, history

    doc = valid_doc()
    doc["manifest"]["zz"] = "\ud800"
    head = Head.parse(encode(doc))
    assert json.loads(head.to_bytes())["manifest"]["zz"] == "\ud800"
    body = history.encode_archive(head.manifest, archived_at=1.0, owner="w")
    assert history.parse_archive(body, "history/x.json").manifest.model_extra["zz"] == "\ud800"
    assert json.loads(catalog.dump({"rows": [{"description": "\ud800"}]}))["rows"][0] == {
        "description": "\ud800"
    }


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=3,
    ),
    st.integers(0, 5),
)
def test_a_head_is_written_as_json_dumps_writes_its_document(
    extra: dict[str, Any], refs: int
) -> None:
    """to_bytes splices each ref's kept JSON text into the head's: the bytes
    are json.dumps's of the same document, whatever the unknown fields hold
    (at the head, the manifest and a ref), and a ref changed after it was
    written (a field set, its unknown fields handed out) is written anew."""
    from durable_obj.wire.head import EXTENSION, NONCE, ObjectRef, stamp
    from durable_obj.wire.untrusted import dump_json

    doc = valid_doc()
    doc.update({f"x{k}": v for k, v in extra.items()})
    doc["manifest"].update({f"y{k}": v for k, v in extra.items()})
    doc["manifest"]["wal"][0].update({f"z{k}": v for k, v in extra.items()})
    head = Head.parse(json.dumps(doc).encode())
    wal = head.manifest.wal
    wal += [
        stamp(
            ObjectRef(key=f"wal/1-{i}-ab.jsonl", size=i, sha256=SHA), committed_at=i / 3, owner="wé"
        )
        for i in range(refs)
    ]
    head.manifest.wal = wal

    def expected(body: bytes) -> bytes:
        want = head.document()
        want[EXTENSION] = {**want.get(EXTENSION, {}), NONCE: json.loads(body)[EXTENSION][NONCE]}
        return dump_json(want)

    body = head.to_bytes()
    assert body == expected(body)
    wal[0].size = 7
    wal[-1].model_extra["late"] = [1.5, "é"]
    body = head.to_bytes()
    assert body == expected(body) and b'"late":[1.5,"\xc3\xa9"]' in body and b'"size":7' in body


def test_a_ref_whose_text_is_kept_pickles_and_copies_as_its_fields() -> None:
    import copy
    import pickle

    from durable_obj.wire.head import ObjectRef, stamp

    ref = stamp(ObjectRef(key="wal/1-2-ab.jsonl", size=1, sha256=SHA), committed_at=1.0, owner="w")
    text = ref.json_text()
    for twin in (pickle.loads(pickle.dumps(ref)), copy.deepcopy(ref), copy.copy(ref)):
        assert twin == ref and twin.json_text() == text


def test_a_ref_changed_through_a_shared_reference_is_written_as_it_now_is() -> None:
    """A ref's kept text is compared with the ref on every use: its unknown
    fields changed through a copy that shares them, or through a document
    whose values are shared, are written as they now are."""
    import copy

    from durable_obj.wire.head import EXTENSION, NONCE
    from durable_obj.wire.untrusted import dump_json

    doc = valid_doc()
    doc["manifest"]["wal"][0]["x"] = {"n": 1}
    head = Head.parse(json.dumps(doc).encode())
    ref = head.manifest.wal[0]
    head.to_bytes()  # the ref's text is kept
    copy.copy(ref).model_extra["added"] = 1  # a copy shares the unknown fields
    head.document()["manifest"]["wal"][0]["x"]["n"] = 2  # a document shares their values
    body = head.to_bytes()
    want = head.document()
    want[EXTENSION] = {**want.get(EXTENSION, {}), NONCE: json.loads(body)[EXTENSION][NONCE]}
    assert body == dump_json(want)
    assert json.loads(body)["manifest"]["wal"][0]["x"] == {"n": 2}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "set", "extra", "nested", "delete", "swap", "copy"]),
            st.integers(0, 50),
        ),
        max_size=12,
    )
)
def test_a_wal_list_s_kept_text_follows_every_change(ops: list[tuple[str, int]]) -> None:
    """The manifest keeps its WAL list's text (`Manifest._wal_json`); after
    any change, however made (a ref appended, a field set, an unknown field
    or a value inside one changed in place, a ref removed or replaced in the
    list in place, the head copied), the bytes are json.dumps's of the same
    document."""
    import copy

    from durable_obj.wire.head import EXTENSION, NONCE, ObjectRef, stamp
    from durable_obj.wire.untrusted import dump_json

    head = Head.parse(json.dumps(valid_doc()).encode())

    def new_ref(i: int) -> ObjectRef:
        ref = ObjectRef(key=f"wal/1-{i}-ab.jsonl", size=i, sha256=SHA)
        return stamp(ref, committed_at=i / 3, owner="w")

    for op, n in ops:
        wal = head.manifest.wal
        at = n % len(wal) if wal else 0
        if op == "append" or not wal:
            head.manifest.wal = [*wal, new_ref(n)]
        elif op == "set":
            wal[at].size = n
        elif op == "extra":
            wal[at].model_extra[f"e{n}"] = n
        elif op == "nested":
            wal[at].model_extra.setdefault(EXTENSION, {})["owner"] = f"o{n}"
        elif op == "delete":
            del wal[at]
        elif op == "swap":
            wal[at] = new_ref(n + 100)
        else:
            head = copy.deepcopy(head) if n % 2 else head.model_copy(deep=True)
        body = head.to_bytes()
        want = head.document()
        want[EXTENSION] = {**want.get(EXTENSION, {}), NONCE: json.loads(body)[EXTENSION][NONCE]}
        assert body == dump_json(want), op
