"""The hand-written head schema (`wire/model.py`, `wire/head.py`) against
the pydantic models it replaced, kept here as the reference.

For any document (a valid head with fields replaced by arbitrary JSON
values, removed, or added), both accept it or both refuse it; what both
accept reads back the same, and what both refuse is refused at the same
field first. Where they differ, on purpose: text with a lone surrogate
(valid JSON escapes, no UTF-8). In a declared field pydantic let some
through (a key, a feature), to fail untyped when used or written back;
ours refuses it as the head is read. In an unknown field, which pydantic
kept but could not write back, ours writes it back escaped.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from durable_obj.wire.head import Head
from durable_obj.wire.model import Invalid
from durable_obj.wire.protocol import MAX_SAFE_INT, check_key, check_sha256

SafeInt = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
Key = Annotated[str, AfterValidator(check_key)]
Sha256 = Annotated[str, AfterValidator(check_sha256)]
NonEmpty = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="allow", strict=True, validate_assignment=True, ser_json_inf_nan="constants"
    )


class RefObjectRef(_Model):
    key: Key
    size: SafeInt
    sha256: Sha256


class RefLease(_Model):
    generation: SafeInt
    owner: NonEmpty | None = None
    instance: NonEmpty | None = None
    expires_at: Annotated[float, Field(allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _all_or_nothing(self) -> RefLease:
        if self.owner is None:
            if self.instance is not None or self.expires_at is not None:
                raise ValueError("released")
        elif self.instance is None or self.expires_at is None:
            raise ValueError("held")
        return self


class RefManifest(_Model):
    db: NonEmpty
    base: RefObjectRef | None = None
    wal: list[RefObjectRef] = Field(default_factory=list)
    seq: SafeInt


class RefEngineInfo(_Model):
    name: NonEmpty = "chdb"
    version: NonEmpty
    backup_format: SafeInt = 1
    min_reader: NonEmpty


class RefProtocolInfo(_Model):
    version: Annotated[int, Field(ge=1, le=MAX_SAFE_INT)] = 1
    reader_features: list[str] = Field(default_factory=list)
    writer_features: list[str] = Field(default_factory=list)


class RefHead(_Model):
    protocol: RefProtocolInfo
    engine: RefEngineInfo
    lease: RefLease
    manifest: RefManifest


SHA = "ab" * 32


def valid_doc() -> dict[str, Any]:
    return {
        "protocol": {"version": 1, "reader_features": ["x"], "writer_features": []},
        "engine": {"name": "chdb", "version": "26.9.0", "backup_format": 1, "min_reader": "26.9"},
        "lease": {"generation": 3, "owner": "w", "instance": "i" * 32, "expires_at": 1.5e9},
        "manifest": {
            "db": "default",
            "base": {"key": "checkpoints/1-1-aa.tar", "size": 10, "sha256": SHA},
            "wal": [{"key": "wal/1-2-bb.jsonl", "size": 5, "sha256": SHA, "durable_obj": {}}],
            "seq": 2,
        },
    }


#: Every place a value sits in `valid_doc()`, as a path of keys and indexes.
PATHS: list[tuple[str | int, ...]] = []


def _walk(value: Any, path: tuple[str | int, ...]) -> None:
    PATHS.append(path)
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, (*path, i))


_walk(valid_doc(), ())
PATHS.remove(())

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, -1, MAX_SAFE_INT, MAX_SAFE_INT + 1, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, 1.0, 2.0, 1e16, -0.0, float("inf"), float("-inf"), float("nan")])
    | st.text(max_size=8)
    | st.sampled_from(["", "wal/x", SHA, "AB" * 32, "/etc", "a/../b", "\ud800", "a\x00"])
)
JSON = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=6,
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    doc = valid_doc()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(JSON)
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=4))] = draw(JSON)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change took the path away
    return doc


def _surrogate(doc: Any, loc: tuple[str | int, ...]) -> bool:
    """Is the value at `loc` text with a lone surrogate? pydantic let such
    text through in a key or a feature (not in `db`, whose length it
    checks): an untyped error at the next write (UnicodeEncodeError, or its
    serializer's), where ours is `Corrupt` when the head is read."""
    for part in loc:
        try:
            doc = doc[part]
        except (KeyError, IndexError, TypeError):
            return False  # a field missing: refused for that, not for text
    if not isinstance(doc, str):
        return False
    try:
        doc.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _ref_loc(exc: ValidationError) -> tuple[str | int, ...]:
    return tuple(exc.errors()[0]["loc"])


@settings(max_examples=600)
@given(documents())
def test_both_accept_and_refuse_the_same_documents(doc: dict[str, Any]) -> None:
    try:
        ref: RefHead | None = RefHead.model_validate(doc)
        ref_loc: tuple[str | int, ...] = ()
    except ValidationError as exc:
        ref, ref_loc = None, _ref_loc(exc)
    try:
        ours: Head | None = Head.model_validate(doc)
        loc: tuple[str | int, ...] = ()
    except Invalid as exc:
        ours, loc = None, exc.problems[0][0]
    if ours is None and _surrogate(doc, loc):
        # refused as text that cannot be written back: on purpose (pydantic
        # let it through, and refused the document at a later field or not)
        return
    if ref is None or ours is None:
        assert ref is None and ours is None, (ref_loc, loc)
        # pydantic numbers a list item as it nests ("wal", 0), as we do
        assert loc == ref_loc
        return
    assert ours.model_dump() == ref.model_dump(mode="json")
    try:
        theirs = json.loads(ref.__pydantic_serializer__.to_json(ref))
    except Exception:  # a lone surrogate pydantic cannot write; we escape it
        return
    written = json.loads(ours.to_bytes())
    written.pop("durable_obj")
    theirs.pop("durable_obj", None)
    assert written == theirs


EDGES: list[Any] = [
    None, True, False, 0, 1, -1, 2, MAX_SAFE_INT, MAX_SAFE_INT + 1, 2**70, 10**400,
    0.0, -0.0, 1.0, 2.5, 1e16, float("inf"), float("-inf"), float("nan"),
    "", "x", "wal/x", "/etc", "a/../b", "a\\b", "a\x00", "\ud800", SHA, "AB" * 32,
    [], ["x"], [1], [None], {}, {"key": "wal/y", "size": 1, "sha256": SHA}, {"x": 1},
]  # fmt: skip


@pytest.mark.parametrize("path", PATHS, ids=lambda p: ".".join(map(str, p)))
def test_every_edge_value_at_every_field(path: tuple[str | int, ...]) -> None:
    """Each value of `EDGES` put at `path`, and `path` removed: both
    implementations agree on each (an exhaustive grid, beside the search)."""
    for edge in [*EDGES, _REMOVE]:
        doc = valid_doc()
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        if edge is _REMOVE:
            if isinstance(parent, list):
                continue
            del parent[path[-1]]
        else:
            parent[path[-1]] = edge
        test_both_accept_and_refuse_the_same_documents.hypothesis.inner_test(doc)  # type: ignore[attr-defined]


_REMOVE = object()


def test_a_lone_surrogate_in_an_unknown_field_is_written_back_escaped() -> None:
    doc = valid_doc()
    doc["future"] = "\ud800x"
    body = Head.model_validate(doc).to_bytes()
    assert b"\\ud800x" in body and json.loads(body)["future"] == "\ud800x"


@pytest.mark.parametrize("field", ["seq", "db"])
def test_assignment_is_checked_as_parsing_is(field: str) -> None:
    head = Head.model_validate(valid_doc())
    with pytest.raises(Invalid):
        setattr(head.manifest, field, -1 if field == "seq" else "")
    with pytest.raises(Invalid):
        head.lease.owner = None  # instance and expires_at are still set
    assert head.lease.owner == "w"  # a refused assignment changes nothing
