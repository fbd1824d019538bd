from __future__ import annotations

import json

import pytest

from durable_obj.errors import Corrupt, LimitExceeded
from durable_obj.wire.protocol import MAX_SQL_BYTES, MAX_WAL_SEGMENT_BYTES
from durable_obj.wire.wal import WalBuffer, encode_statement, parse_segment


def test_roundtrip_unicode_and_newlines() -> None:
    buf = WalBuffer()
    sqls = [
        "INSERT INTO t VALUES ('a\nb')",
        "INSERT INTO t VALUES ('ü€😀')",
        "DELETE FROM t WHERE 1",
    ]
    for sql in sqls:
        buf.append(buf.admit(sql))
    seg = b"".join(buf.lines())
    assert seg.count(b"\n") == 3
    assert parse_segment(seg, "k") == sqls
    assert len(buf) == 3 and buf.nbytes == len(seg)


def test_v1_line_format() -> None:
    assert json.loads(encode_statement("SELECT 1")) == {"sql": "SELECT 1"}
    assert encode_statement("x").endswith(b"\n")


def test_statement_over_limit_refused() -> None:
    with pytest.raises(LimitExceeded, match="not run"):
        encode_statement("x" * (MAX_SQL_BYTES + 1))


def test_segment_over_limit_refused_before_append() -> None:
    buf = WalBuffer()
    big = "x" * (MAX_SQL_BYTES - 100)
    buf.append(buf.admit(big))
    with pytest.raises(LimitExceeded, match="flush"):
        for _ in range(MAX_WAL_SEGMENT_BYTES // MAX_SQL_BYTES + 1):
            buf.append(buf.admit(big))
    assert buf.nbytes <= MAX_WAL_SEGMENT_BYTES


@pytest.mark.parametrize(
    "segment",
    [
        b'{"sql": "x"}',  # no trailing newline
        b'{"sql": "x"}\n{"sql": "y"',
        b"[1]\n",
        b'{"sq": "x"}\n',
        b'{"sql": 1}\n',
        b"\xff\n",
        b"\n",
    ],
)
def test_bad_segments_are_corrupt(segment: bytes) -> None:
    with pytest.raises(Corrupt):
        parse_segment(segment, "wal/x.jsonl")


def test_empty_segment_is_empty() -> None:
    assert parse_segment(b"", "k") == []
