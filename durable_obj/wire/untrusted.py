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
import re
from itertools import accumulate
from typing import Any, Final

from durable_obj.errors import Corrupt

#: The deepest nesting of `[` and `{` accepted in a stored JSON document.
MAX_JSON_DEPTH: Final = 64

# A JSON string (escapes included): its brackets are text, not nesting. The
# unrolled form matches in linear time, whatever the string holds.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Everything but brackets, deleted before counting.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# A bracket's change of depth, indexed by byte value.
_DELTA = [0] * 256
_DELTA[ord("[")] = _DELTA[ord("{")] = 1
_DELTA[ord("]")] = _DELTA[ord("}")] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in `data`, strings skipped.

    Counted in C-level loops (regex, translate, accumulate), never by
    recursion, so a hostile document costs time linear in its size. A
    malformed document may be miscounted; the parser refuses it anyway."""
    if b"[" not in data and b"{" not in data:
        return 0
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


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
