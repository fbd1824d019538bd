"""Pure ClickHouse lexing: tokens, the INSERT shape, rows, calls.

No engine here and no policy: this module reads SQL text the way ClickHouse's
lexer does (strings, heredocs, quoted identifiers and comments are data, so
`'now()'`, `` `now()` `` and `-- now()` hold no call); `quoting.py` builds
text that ClickHouse reads back exactly (`quote_string`, `quote_ident`,
`splice`). `determinism.py` decides what a statement means for replay,
`replay.py` batches INSERTs; both read statements only through the functions
here.

The lexer (`tokenize`) and its two fast scans (`code_words`, `split_rows`)
are built from the same rule fragments, so what one skips as data the
others skip too. Brackets are counted by one iterator, `depth_zero`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# The lexer's rules, one fragment each: _TOKEN, and the two fast scans
# that must skip exactly what it skips (_CODE_SCAN, _ROW_SKIP), are built
# from these, so they cannot drift apart.
_COMMENT = r"--[^\n]*|//[^\n]*|\#[^\n]*|/\*.*?\*/"  # `//` too: ClickHouse's Lexer.cpp
_STRING = r"'(?:[^'\\]|\\.|'')*'"
_HEREDOC = r"\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$"
_QUOTED = r'"(?:[^"\\]|\\.|"")*"|`(?:[^`\\]|\\.|``)*`'
_NUMBER = r"0[xX][0-9A-Fa-f]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
_IDENT = r"[A-Za-z_][A-Za-z0-9_$]*"
#: A number as the lexer reads it (`reading.is_plain` holds it unglued).
NUMBER = _NUMBER

_TOKEN = re.compile(
    rf"""
    (?P<ws>\s+)
  | (?P<comment>{_COMMENT})
  | (?P<string>{_STRING})
  | (?P<heredoc>{_HEREDOC})
  | (?P<quoted>{_QUOTED})
  | (?P<number>(?:{_NUMBER}))
  | (?P<ident>{_IDENT})
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_OPEN = frozenset({"(", "["})
_CLOSE = frozenset({")", "]"})


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # string, quoted, number, ident or punct
    text: str
    start: int
    end: int

    @property
    def name(self) -> str:
        """An identifier as the engine sees it: unquoted, case kept."""
        if self.kind == "quoted":
            # only the delimiting quote is doubled: `""` is two quotes
            mark = self.text[0]
            body = self.text[1:-1]
            return re.sub(r"\\(.)|" + mark * 2, lambda m: m.group(1) or mark, body)
        return self.text

    @property
    def word(self) -> str:
        """An identifier's name, unquoted and lower-cased; '' for others."""
        if self.kind == "ident":
            return self.text.lower()
        if self.kind == "quoted":
            return self.text[1:-1].lower()
        return ""


#: Statements up to this long are lexed once for the gate's steps, which ask in turn.
_CACHED_LEN = 64 * 1024


def tokenize(sql: str) -> list[Token]:
    """The significant tokens of `sql` (a new list: the caller may change it).
    The last 32 statements up to 64 KiB are lexed once (tokens are frozen):
    the gate's steps lex the same text in turn (two to four times a statement)."""
    return list(_cached_tokens(sql)) if len(sql) <= _CACHED_LEN else list(_tokens(sql))


@functools.lru_cache(maxsize=32)
def _cached_tokens(sql: str) -> tuple[Token, ...]:
    return tuple(_tokens(sql))


def _tokens(sql: str) -> Iterator[Token]:
    """Significant tokens (no whitespace or comments). An unterminated
    string or comment ends as one punct token, which never matches a name."""
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "punct"
        if kind == "tag":
            kind = "heredoc"
        if kind in ("ws", "comment"):
            continue
        if kind == "heredoc":
            kind = "string"
        yield Token(kind, m.group(), m.start(), m.end())


def depth_zero(tokens: Iterable[Token], start: int = 0) -> Iterator[tuple[int, Token]]:
    """(index, token) of each token outside every `(...)` and `[...]`, from
    index `start` (counted as depth 0). The brackets themselves are never
    yielded; after an unmatched closer nothing is at depth 0 any more."""
    depth = 0
    for i, tok in enumerate(tokens):
        if i < start:
            continue
        if tok.text in _OPEN:
            depth += 1
        elif tok.text in _CLOSE:
            depth -= 1
        elif depth == 0:
            yield i, tok


def match_parens(tokens: list[Token]) -> dict[int, int]:
    """Index of each opening bracket -> index of the bracket that closes it."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, tok in enumerate(tokens):
        if tok.text in _OPEN:
            stack.append(i)
        elif tok.text in _CLOSE and stack:
            pairs[stack.pop()] = i
    return pairs


# -- fast scans ---------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Numbers one after another, apart only by what the lexer skips (white
#: space, `,`, brackets, a `-` that starts no comment): one match for a
#: whole vector of them, where each was a match (256 floats a row).
_NUMBERS = rf"(?:{_NUMBER})(?:(?:[\s,()\[\]]|-(?!-))+(?:{_NUMBER}))*"
#: What `_TOKEN` skips as data, its numbers and identifiers: matched from the same
#: positions as the lexer (an identifier is consumed whole, so a `$` in it
#: never opens a heredoc), so text the lexer reads as code is never skipped.
_CODE_SCAN = re.compile(
    rf"{_COMMENT}|{_STRING}|{_HEREDOC}|(?P<quoted>{_QUOTED})|{_NUMBERS}|(?P<ident>{_IDENT})",
    re.DOTALL,
)


def code_words(sql: str) -> frozenset[str]:
    """Lower-cased identifiers of `sql` outside strings and comments (quoted
    ones by their words): a superset of the names the lexer's tokens carry,
    at the cost of a regex scan instead of a full lexing. The last 16
    statements up to 256 KiB are cached: the gate's steps ask in turn."""
    return _cached_words(sql) if len(sql) <= 256 * 1024 else _cached_long(sql)


@functools.lru_cache(maxsize=16)
def _cached_words(sql: str) -> frozenset[str]:
    return _code_words(sql)


@functools.lru_cache(maxsize=2)  # a long INSERT's, asked by each step in turn
def _cached_long(sql: str) -> frozenset[str]:
    return _code_words(sql)


_CODE_SHAPES = re.compile(
    rf"{_COMMENT}|{_STRING}|{_HEREDOC}|(?P<quoted>{_QUOTED})|{_NUMBERS}"
    rf"|(?P<dot>\.\s*)?(?P<ident>{_IDENT})(?P<call>\s*\()?",
    re.DOTALL,
)


def code_shapes(sql: str) -> tuple[bool, frozenset[tuple[str, bool, bool]]]:
    """(whether `sql` holds a quoted name, the distinct (identifier, called:
    a `(` follows it, qualified: a `.` comes before it) of its code), in one
    regex scan: what `writes` asks of many VALUES rows at once."""
    found = _CODE_SHAPES.findall(sql)  # one C loop over every token
    quoted = any(q for _tag, q, _dot, _ident, _call in found)
    return quoted, frozenset(
        (ident, bool(call), bool(dot)) for _tag, _q, dot, ident, call in found if ident
    )


def _code_words(sql: str) -> frozenset[str]:
    words: set[str] = set()
    for _tag, quoted, ident in _CODE_SCAN.findall(sql):  # one C loop over every token
        if ident:
            words.add(ident.lower())
            if "$" in ident:
                words.update(w.lower() for w in _WORD.findall(ident))
        elif quoted:
            words.add(quoted[1:-1].lower())  # as Token.word has it
            words.update(w.lower() for w in _WORD.findall(quoted))
    return frozenset(words)


_BODY = frozenset({"values", "select", "with", "format"})


def tokenize_head(sql: str) -> list[Token]:
    """Tokens up to and including the first VALUES / SELECT / WITH / FORMAT
    at depth 0: an INSERT's head, without lexing its (maybe huge) body. A new
    list; the heads of the last 32 statements are kept (as `tokenize`'s)."""
    return list(_cached_head(sql)) if len(sql) <= _CACHED_LEN else _head(sql)


@functools.lru_cache(maxsize=32)
def _cached_head(sql: str) -> tuple[Token, ...]:
    return tuple(_head(sql))


def _head(sql: str) -> list[Token]:
    out: list[Token] = []

    def kept() -> Iterator[Token]:
        for tok in _tokens(sql):
            out.append(tok)
            yield tok

    for _, tok in depth_zero(kept()):
        if tok.kind == "ident" and tok.text.lower() in _BODY:
            break
    return out


_ROW_PLAIN = re.compile(r"[^'\"`()\[\]{}\-/#$]+")
_ROW_SKIP = re.compile(rf"{_STRING}|{_QUOTED}|{_HEREDOC}|{_COMMENT}", re.DOTALL)
_SPACE = re.compile(r"\s*")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]


def split_rows(tail: str) -> list[str] | None:
    """The row texts of a VALUES tail `(..), (..) [;]`, exactly as written, or
    None if the tail is anything else (a comment between rows, data after
    them, an unterminated string or bracket). Strings, quoted names,
    heredocs and comments are skipped by the same rules as `tokenize`, so a
    bracket inside them is never counted. Linear, and far cheaper than
    lexing every number of a long row."""
    rows: list[str] = []
    n = len(tail)
    pos = _skip_space(tail, 0)
    while pos < n and tail[pos] == "(":
        start, open_ = pos, []
        while True:
            pos = m.end() if (m := _ROW_PLAIN.match(tail, pos)) else pos
            if pos >= n:
                return None
            ch = tail[pos]
            if ch in _CLOSER:
                open_.append(_CLOSER[ch])
                pos += 1
            elif ch in ")]}":
                if not open_ or open_.pop() != ch:
                    return None
                pos += 1
                if not open_:
                    break
            elif (skip := _ROW_SKIP.match(tail, pos)) is not None:
                pos = skip.end()
            elif ch in "'\"`" or tail.startswith(("/*", "--", "//"), pos):
                return None  # unterminated
            else:
                pos += 1  # a lone '-', '/' or '$'
        rows.append(tail[start:pos])
        pos = _skip_space(tail, pos)
        if pos >= n or tail[pos] != ",":
            break
        pos = _skip_space(tail, pos + 1)
        if pos >= n or tail[pos] != "(":
            return None
    if pos < n and tail[pos] == ";":
        pos = _skip_space(tail, pos + 1)
    return rows if rows and pos == n else None


_LEADING_INSERT = re.compile(rf"(?:\s+|{_COMMENT})*insert\b", re.IGNORECASE | re.DOTALL)


def is_insert(sql: str) -> bool:
    """Whether the statement's first word (after space and comments) is INSERT."""
    return _LEADING_INSERT.match(sql) is not None


# -- calls ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """A function call: its name and the [start, end) span of `name(...)`."""

    name: str  # lower-cased, for matching
    start: int
    end: int
    first: int  # token index of the name
    last: int  # token index of the closing parenthesis
    shown: str = ""  # as written, for messages
    bare: bool = False  # a word evaluated without parentheses (`BARE_CALLS`)


#: Words the engine evaluates without parentheses, as calls of the function
#: of that name (`SELECT now`, `DEFAULT CURRENT_TIMESTAMP`), unless the
#: scope has a column or an alias of that name (`Call.bare`).
BARE_CALLS = frozenset(
    {
        "now", "today", "yesterday", "current_timestamp", "localtimestamp", "current_date",
        "localtime", "current_user", "current_database",
    }
)  # fmt: skip


#: Words before the name a CREATE, ATTACH or REPLACE defines.
_DEFINES = frozenset({"or", "replace", "temporary", "table", "materialized", "view", "dictionary"})


def defined_name(tokens: list[Token]) -> int | None:
    """The index of the name that `INSERT INTO [TABLE] [db.]name (` writes,
    or that `CREATE|ATTACH|REPLACE [OR REPLACE] [TEMPORARY] TABLE|[MATERIALIZED]
    VIEW|DICTIONARY [IF NOT EXISTS] [db.]name (` defines, when a `(` (its
    columns) follows it: a name, not a call (a table may be named `cluster`)."""
    words = [t.word if t.kind == "ident" else "" for t in tokens[:12]]
    if len(words) < 3:
        return None
    i = 1
    if words[0] == "insert" and words[1] == "into":
        i = 3 if words[2] == "table" else 2
        if i < len(words) and words[i] == "function":
            return None
    elif words[0] in ("create", "attach", "replace"):
        defining = False
        while i < len(words) and words[i] in _DEFINES:
            defining = defining or words[i] in ("table", "view", "dictionary")
            i += 1
        if not defining:
            return None
        if words[i : i + 3] == ["if", "not", "exists"]:
            i += 3
    else:
        return None
    if i + 2 < len(tokens) and tokens[i + 1].text == ".":
        i += 2
    if i + 1 < len(tokens) and tokens[i].kind in ("ident", "quoted") and tokens[i + 1].text == "(":
        return i
    return None


def find_calls(tokens: list[Token]) -> list[Call]:
    """Every `name(` ... `)` in the statement, nested ones included (but the
    name a statement writes or defines, `defined_name`), and every bare word
    of `BARE_CALLS` (not after a `.`: a qualified name)."""
    closing = match_parens(tokens)
    calls = []
    defined = defined_name(tokens)
    for i, tok in enumerate(tokens):
        after = tokens[i + 1].text if i + 1 < len(tokens) else ""
        if i == defined:
            continue
        if tok.kind in ("ident", "quoted") and after == "(":
            # `a.b(` is still a call of b (a qualified name, e.g. a table function)
            j = closing.get(i + 1)
            if j is not None:
                calls.append(Call(tok.word, tok.start, tokens[j].end, i, j, tok.name))
        elif (
            tok.kind == "ident"
            and tok.word in BARE_CALLS
            and after != "."
            and (i == 0 or tokens[i - 1].text != ".")
        ):
            calls.append(Call(tok.word, tok.start, tok.end, i, i, tok.name, bare=True))
        if tok.kind == "ident" and tok.word == "apply":
            # `* APPLY f` and `COLUMNS(...) APPLY(f)` call f on each column
            at = i + 2 if after == "(" else i + 1
            named = tokens[at] if at < len(tokens) else None
            if named is not None and named.kind in ("ident", "quoted"):
                nxt = tokens[at + 1].text if at + 1 < len(tokens) else ""
                if nxt != "(":  # `APPLY(f(...))` is a call found as any other
                    calls.append(
                        Call(named.word, named.start, named.end, at, at, named.name, bare=True)
                    )
    return calls


def outermost(calls: list[Call]) -> list[Call]:
    """The calls not nested in another of `calls`, in text order."""
    out: list[Call] = []
    for call in sorted(calls, key=lambda c: (c.start, -c.end)):
        if out and call.start < out[-1].end:
            continue
        out.append(call)
    return out
