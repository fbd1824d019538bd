"""The determinism gate's fast scan never misses a name the lexer sees."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from durable_obj.gate.sql import code_words, tokenize

_pieces = st.sampled_from(
    [
        "now()", "rand", "a$", "$$", "$t$", "'", "''", "\\", '"', "`", "--", "#", "/*", "*/",
        "\n", " ", "(", ")", ",", "1e5", "0x1F", "x", "system", ".", "VALUES", "user",
    ]
)  # fmt: skip


@given(st.lists(_pieces, max_size=30).map("".join))
def test_every_lexed_name_is_among_the_code_words(sql: str) -> None:
    lexed = {t.word for t in tokenize(sql) if t.kind in ("ident", "quoted")}
    assert lexed <= code_words(sql)


def test_strings_and_comments_are_data() -> None:
    sql = "INSERT INTO m VALUES ('a user merges now()', 1) -- rand()\n"
    assert code_words(sql) == {"insert", "into", "m", "values"}
    assert "now" in code_words("INSERT INTO t VALUES (a$$ now() $$)")
    assert "now" in code_words('SELECT "now"()')
