"""Replay batching: the cheap row splitter against the full lexer, and the
rows a batched replay rebuilds against the writer's own."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import durable_obj
from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import split_rows, tokenize

PREFIX = "INSERT INTO t (a, b) VALUES"


def _lexed_rows(sql: str) -> list[str] | None:
    """Rows as the full lexer delimits them (what replay used before), or None."""
    tokens = tokenize(sql)
    shape = insert_shape(tokens)
    if shape is None or shape.values_at is None or not shape.rows:
        return None
    if any(t.text != ";" for t in tokens[shape.rows[-1][1] + 1 :]):
        return None
    return [sql[tokens[a].start : tokens[b].end] for a, b in shape.rows]


_atoms = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(alphabet="ab)(][}{,;'\"`\\-#/*$\n ", max_size=12).map(
        lambda s: "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"
    ),
    st.sampled_from(["NULL", "now()", "$$)($$", "/* ) */ 1", "1 -- )\n", "`x)`", "-1", "- -2"]),
)
_values = st.recursive(
    _atoms,
    lambda inner: st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
    max_leaves=8,
)
_rows = st.lists(
    st.lists(_values, min_size=1, max_size=4).map(lambda xs: "(" + ", ".join(xs) + ")"),
    min_size=1,
    max_size=5,
)


@given(_rows, st.sampled_from([", ", ",", " ,\n "]), st.sampled_from(["", ";", " ; \n"]))
def test_split_rows_finds_the_rows_the_lexer_finds(rows: list[str], sep: str, end: str) -> None:
    sql = f"{PREFIX} {sep.join(rows)}{end}"
    assert split_rows(sql[len(PREFIX) :]) == rows
    assert _lexed_rows(sql) == rows


@given(st.text(alphabet="(1)[2]{3},; '\"`\\-#/*$\nab", max_size=40))
def test_split_rows_never_claims_rows_the_lexer_would_not(tail: str) -> None:
    got = split_rows(tail)
    if got is not None:
        assert got == _lexed_rows(PREFIX + tail)


@pytest.mark.parametrize(
    "tail",
    [" (1) -- c", " (1) (2)", " ('x", " (1), ", " ((1)", " (1]", " (1);;", " (1) FORMAT x", ""],
)
def test_split_rows_refuses_what_it_cannot_prove(tail: str) -> None:
    assert split_rows(tail) is None


def test_batched_replay_rebuilds_the_writers_rows(caplog: pytest.LogCaptureFixture) -> None:
    url = f"memory://replay-{uuid.uuid4().hex}/o"
    tricky = [
        "INSERT INTO m VALUES (1, 'a), (2, ''b''', [1.5, -2e-3])",
        "INSERT INTO m VALUES (2, 'c', [])",
        "INSERT INTO m VALUES (3, 'x), (9', [3]), (4, 'd', [-4, -4.5])",
        "INSERT INTO m VALUES (5, '/* ), ( */ e -- ', [5]);",
        "INSERT INTO m VALUES (6, 'f', [6]) -- a comment after the rows",
        "INSERT INTO m (k, s) VALUES (7, 'g')",
        "INSERT INTO m VALUES (8, 'h\\')', [8])",
    ]
    store = durable_obj.Namespace(url.rsplit("/", 1)[0], owner="w")
    with store.open("o") as obj:
        obj.execute(
            "CREATE TABLE m (k UInt32, s String, e Array(Float32)) ENGINE = MergeTree ORDER BY k"
        )
        for sql in tricky:
            obj.execute(sql)
            obj.flush()
        written = obj.query("SELECT * FROM m ORDER BY k, s FORMAT TSV")
    caplog.set_level(logging.DEBUG, logger="durable_obj")
    with store.open("o", read_only=True) as obj:
        assert obj.query("SELECT * FROM m ORDER BY k, s FORMAT TSV") == written
    assert written.count("\n") == 8
    replayed = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    # 8 statements: the DDL, a batch of the five plain INSERTs (the comment
    # after the rows is not logged: the gate cuts it), then the one with a
    # column list and the last, each alone.
    assert replayed and "replayed 8 statement(s) in 4 engine call(s)" in replayed[-1], replayed


def test_rows_with_code_are_not_merged_but_pinned_rows_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 36's corpus: a row of `map(...)` calls then a row of `{...}`
    literals, or `toUUID(...)` then DEFAULT, merged into one INSERT no
    longer parsed, and the object did not open. Rows with code replay one
    statement at a time; the gate's pinned CAST rows still merge."""
    url = f"memory://replay-{uuid.uuid4().hex}/o"
    store = durable_obj.Namespace(url.rsplit("/", 1)[0], owner="w")
    with store.open("o") as obj:
        obj.execute(
            "CREATE TABLE mp (k UInt32, m Map(String, UInt8)) ENGINE = MergeTree ORDER BY k"
        )
        obj.execute("INSERT INTO mp VALUES (1, map('a', 1))")
        obj.execute("INSERT INTO mp VALUES (2, {'b': 2})")
        obj.execute(
            "CREATE TABLE u (k UInt32, id UUID DEFAULT "
            "toUUID('00000000-0000-0000-0000-000000000001')) ENGINE = MergeTree ORDER BY k"
        )
        obj.execute("INSERT INTO u VALUES (1, toUUID('00000000-0000-0000-0000-000000000002'))")
        obj.execute("INSERT INTO u VALUES (2, DEFAULT)")
        obj.execute(
            "CREATE TABLE p (k UInt32, at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY k"
        )
        for k in range(3):
            obj.execute(f"INSERT INTO p VALUES ({k}, now64(3))")
        obj.flush()
        written = [obj.query(f"SELECT * FROM {t} ORDER BY k") for t in ("mp", "u", "p")]
    caplog.set_level(logging.DEBUG, logger="durable_obj")
    with store.open("o", read_only=True) as obj:
        assert [obj.query(f"SELECT * FROM {t} ORDER BY k") for t in ("mp", "u", "p")] == written
    replayed = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    # 3 DDL, 4 INSERTs with code one by one, the 3 pinned INSERTs in one call
    assert replayed and "replayed 10 statement(s) in 8 engine call(s)" in replayed[-1], replayed
