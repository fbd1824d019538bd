"""JSON read from a store: bounded in depth before the parser sees it.

Anything read back from storage may have been written by someone else, so its
shape is not ours to trust. Python's `json` module recurses once per nested
`[` or `{`: a head.json of 100,000 `[` makes it raise `RecursionError`, an
untyped error that would escape `open()`. Even a nesting the parser survives
(a few hundred levels inside an unknown extension field) would make the next
head write fail, because pydantic's serializer stops at a depth of its own.
So the depth is counted first, by a scan that never recurses, and a document
nested deeper than `MAX_JSON_DEPTH` is `Corrupt` without being parsed.

V1's own documents nest five levels deep at most (head -> manifest -> wal ->
ref -> an extension); 64 leaves room for any extension field a writer keeps
and stays far below both the parser's and the serializer's limits.
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any, Final

from durable_obj.errors import Corrupt

#: The deepest nesting of `[` and `{` accepted in a stored JSON document.
MAX_JSON_DEPTH: Final = 64

# Everything but brackets and quotes, deleted before strings are skipped.
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'[]{}"')
# A bracket's change of depth, indexed by byte value.
_DELTA = [0] * 256
_DELTA[ord("[")] = _DELTA[ord("{")] = 1
_DELTA[ord("]")] = _DELTA[ord("}")] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in `data`, strings skipped.

    Counted in C-level loops (replace, translate, split, accumulate), never
    by recursion, so a hostile document costs time linear in its size (a
    catalog of 10,000 rows, 2 MB, in about 3 ms). In valid JSON a backslash
    is only in a string: `\\\\` pairs go first (left to right, as escapes
    pair), then every `\\"` is an escaped quote. What is left of the
    document's brackets and quotes alternates outside and inside strings at
    each quote; `""` (an empty string, or one string's end and the next one's
    start with nothing of the syntax between) is dropped first, so only
    strings that hold brackets are split out. A malformed document may be
    miscounted; the parser refuses it anyway, and its recursion is caught."""
    if b"[" not in data and b"{" not in data:
        return 0
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    syntax = data.translate(None, _NOT_SYNTAX).replace(b'""', b"")
    if b'"' in syntax:
        syntax = b"".join(syntax.split(b'"')[::2])
    return max(accumulate(map(_DELTA.__getitem__, syntax)), default=0)


def dump_json(doc: Any) -> bytes:
    """`doc` as compact UTF-8 JSON, text as it is (not as escapes). Text
    holding a lone surrogate (read from a document's `\\ud800` escape: valid
    JSON, no UTF-8) makes the whole document be written with escapes, as
    it was read, instead of failing (UnicodeEncodeError) where it is written."""
    try:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, separators=(",", ":")).encode("ascii")


def parse_json(data: bytes | str, what: str, *, safe: str = "nothing was changed") -> Any:
    """`data` parsed as UTF-8 JSON, or `Corrupt` naming `what` (e.g.
    "head.json of object 'a'") and saying what is still safe (`safe`).

    Never `RecursionError` or any other untyped error: the depth is bounded
    before parsing, and every parser failure becomes `Corrupt`."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # Fast path (a WAL line, a head of a few hundred refs): too few brackets
    # in all to nest too deep, so the strings need not be skipped.
    openers = raw.count(b"[") + raw.count(b"{")
    depth = json_depth(raw) if openers > MAX_JSON_DEPTH else openers
    if depth > MAX_JSON_DEPTH:
        raise Corrupt(
            f"{what} nests arrays or objects {depth} levels deep, more than the "
            f"{MAX_JSON_DEPTH} a stored document may; it was not parsed and {safe}"
        )
    try:
        return json.loads(raw.decode("utf-8") if isinstance(data, bytes) else data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Corrupt(f"{what} is not valid UTF-8 JSON ({exc}); {safe}") from None
