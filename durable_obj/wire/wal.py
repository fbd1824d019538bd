"""The statement WAL: segments of JSONL, one `{"sql": ...}` object per line.

`flush()` publishes the buffered statements as one immutable segment, so the
recovery point is the last flush. A segment is UTF-8, every line ends with a
newline, and it is parsed strictly: a segment that passed its size and
SHA-256 check but does not parse is `Corrupt`, never skipped.

Limits are checked before a statement runs: running a statement the WAL could
not hold would leave local state that storage can never be made to match.
"""

from __future__ import annotations

import json

from durable_obj.errors import Corrupt, LimitExceeded
from durable_obj.wire.protocol import MAX_SQL_BYTES, MAX_WAL_SEGMENT_BYTES
from durable_obj.wire.untrusted import parse_json

_UNREPLAYED = "it was not replayed and nothing was changed"


#: The bytes a WAL line adds around its statement, at least: `{"sql": ""}\n`.
_FRAME = len(b'{"sql": ""}\n')


def _utf8_size(sql: str) -> int:
    """The statement's size in UTF-8; `LimitExceeded` over the V1 cap or for
    text that is not valid Unicode (a lone surrogate)."""
    try:
        size = len(sql) if sql.isascii() else len(sql.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise LimitExceeded(
            "the statement is not valid Unicode (lone surrogate); it was not run"
        ) from exc
    if size > MAX_SQL_BYTES:
        raise LimitExceeded(
            f"the statement is {size} bytes of UTF-8, over the V1 limit of {MAX_SQL_BYTES}; "
            "it was not run and nothing was logged. Split it into smaller INSERTs."
        )
    return size


def encode_statement(sql: str) -> bytes:
    """One WAL line. `LimitExceeded` for a statement over the V1 cap."""
    _utf8_size(sql)
    return json.dumps({"sql": sql}, ensure_ascii=False).encode("utf-8") + b"\n"


class WalBuffer:
    """Statements executed locally and not yet published by `flush()`."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._bytes = 0

    def admit(self, sql: str, extra: int = 0) -> bytes:
        """The encoded line for `sql` if the buffer can take it (beside
        `extra` bytes of a unit's earlier lines), else raise. Call before
        running the statement; `append` the line after."""
        line = encode_statement(sql)
        self._check(extra + len(line))
        return line

    def fits(self, sql: str, extra: int = 0) -> None:
        """Raise as `admit` would when `sql` is sure to fail it (its line is
        at least its UTF-8 and a frame); costs an encode, not a JSON dump.
        For a statement's own text before the gate rewrites it."""
        self._check(extra + _utf8_size(sql) + _FRAME)

    def _check(self, size: int) -> None:
        if self._bytes + size > MAX_WAL_SEGMENT_BYTES:
            raise LimitExceeded(
                f"the pending WAL segment holds {self._bytes} bytes and this statement would "
                f"take it over the V1 limit of {MAX_WAL_SEGMENT_BYTES}; it was not run. "
                "flush() first."
            )

    def append(self, line: bytes) -> None:
        self._lines.append(line)
        self._bytes += len(line)

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._lines = []
        self._bytes = 0

    def drop_first(self, count: int) -> None:
        """Forget the first `count` lines (a commit published them)."""
        gone, self._lines = self._lines[:count], self._lines[count:]
        self._bytes -= sum(len(line) for line in gone)

    def lines(self) -> list[bytes]:
        """The buffered lines, in order (a copy)."""
        return list(self._lines)


def parse_segment(segment: bytes, key: str) -> list[str]:
    """The statements of one verified segment, in replay order."""
    if not segment:
        return []
    if not segment.endswith(b"\n"):
        raise Corrupt(f"WAL segment {key} does not end with a newline; it was not replayed")
    statements: list[str] = []
    for lineno, line in enumerate(segment[:-1].split(b"\n"), start=1):
        # Depth-bounded before parsing: a hostile line is Corrupt, never a
        # RecursionError escaping replay.
        record = parse_json(line, f"WAL segment {key} line {lineno}", safe=_UNREPLAYED)
        if not isinstance(record, dict):
            raise Corrupt(f"WAL segment {key} line {lineno} is not a JSON object")
        sql = record.get("sql")
        if not isinstance(sql, str):
            raise Corrupt(f"WAL segment {key} line {lineno} has no string 'sql' field")
        statements.append(sql)
    return statements
