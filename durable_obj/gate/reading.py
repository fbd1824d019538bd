"""The text the engine reads: the first step of every statement.

Our lexer (`durable_obj.gate.sql`) is a second parser, and a second parser drifts
from the engine's: ClickHouse nests `/* */` comments, takes heredoc tags with
digits (`$a1$ ... $a1$`), reads Unicode quotation marks as quotes and
non-ASCII letters as part of a name. A statement built on such a difference
(`/* /* */ ' */ SELECT file('/etc/passwd') -- '`) looked like one string
literal to the lexer and like a call of `file` to the engine.

So the lexer reads only text on which the two cannot differ: *plain* text,
where outside quoted tokens (strings, quoted names, by the same rules in
both: a backslash escapes the next character, a doubled quote is a quote)
there is nothing but printable ASCII and ASCII white space, no `--`,
`//` (a line comment to ClickHouse too), `/*`, `#`, `$` or backslash, and
no number run into a name's character (the engine reads `1t` as a name
and `0b101`, `1_000` as one number, ours a number, then a name). Both
lexers then open and close every quoted token at the same places, so
every token is the same token in both. Plain
text is used as it is (no engine call: the common statement costs nothing).

Anything else is handed to the engine's own formatter,
`formatQuerySingleLine` (as a query parameter: nothing is spliced): the
engine parses it and prints it back canonically, comments dropped,
heredocs turned into quoted literals, names quoted as it reads them
(`1t` as `` `1t` ``), numbers as it reads them (`0b101` as 5). That
text must be plain itself, or the statement is refused: whatever the gate
cannot read the way the engine reads it is never run. The text returned is
the text every later check reads, the text that runs and the text logged.

An INSERT's data (after `VALUES`, or after `FORMAT <name>`) is not SQL to
the formatter, which drops it: the canonical head is joined to the data as
written, and `VALUES` data (whose rows the engine may evaluate as
expressions; comments dropped and heredocs made quoted literals, when the
engine proves that means the same), in any spelling of the format's name, must be plain too, so
that `writes.check` reads its expressions as the engine does. Other
formats' data is never read as SQL (Values is the one input format in
`system.formats` that evaluates expressions).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused, InvalidArgument
from durable_obj.gate.quoting import quote_string
from durable_obj.gate.shapes import insert_shape
from durable_obj.gate.sql import NUMBER as _NUMBER
from durable_obj.gate.sql import Token, tokenize, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Printable ASCII but the characters that open a quoted token, a comment, a
#: heredoc or an escape (' " ` # $ \ and the - and / of --, // and /*), and
#: ASCII white space.
_SAFE_CHARS = r"\t\n\x0b\x0c\r\x20\x21\x25\x26\x28-\x2c\x2e\x30-\x5b\x5d-\x5f\x61-\x7e"
#: A quoted token as both lexers read it (the lexer's `_STRING` / `_QUOTED`,
#: unrolled so a long string costs one scan): a backslash escapes the next
#: character, a doubled quote is a quote.
_QUOTED = {q: rf"{q}[^{q}\\]*(?:(?:\\.|{q}{q})[^{q}\\]*)*{q}" for q in ("'", '"', "`")}
_QUOTED_TOKEN = "|".join(_QUOTED.values())
#: Plain text up to its first `;` outside a quoted token; and outside a
#: single-quoted string only (`writes._one_statement` reads rows both ways).
TO_SEMICOLON = re.compile(rf"(?:[^'\"`;]+|{_QUOTED_TOKEN})*", re.DOTALL)
_STRING_TOKEN = _QUOTED["'"]
TO_SEMICOLON_OUTSIDE_STRINGS = re.compile(rf"(?:[^';]+|{_STRING_TOKEN})*", re.DOTALL)
#: Of those, the ones that never start or end a number: no digit, no `.`.
_SAFE_WORDS = r"\t\n\x0b\x0c\r\x20\x21\x25\x26\x28-\x2c\x3a-\x5b\x5d-\x5f\x61-\x7e"
#: A number where our lexer starts one (a digit no name character comes
#: before; a `.` before a digit), whole (atomic: the lexer's own number,
#: never a shorter one), that no name character follows: the engine reads
#: `1t`, `0xAt`, `1e5t` as one name and `1_000`, `0b101` as one number,
#: where ours reads a number, then a name.
_LONE_NUMBER = (
    rf"(?<![A-Za-z0-9_])(?>{_NUMBER})(?![A-Za-z0-9_$])|(?>\.\d+(?:[eE][+-]?\d+)?)(?![A-Za-z0-9_$])"
)
_PLAIN = re.compile(
    rf"(?:[{_SAFE_WORDS}]+|(?<=[A-Za-z0-9_])[0-9]+|{_LONE_NUMBER}|\.(?![0-9])|{_QUOTED_TOKEN}"
    r"|-(?!-)|/(?![*/]))*",
    re.DOTALL | re.ASCII,  # `\d` is an ASCII digit only
)
#: `FORMAT <name>` at the end of the engine's canonical INSERT: it prints
#: `VALUES` as `FORMAT Values`, and a format name as written, unquoted (the
#: engine reads `FORMAT values`, `FORMAT "VALUES"` as Values: any case); the
#: WAL (and V1) write `VALUES`.
_CANONICAL_DATA = re.compile(r" FORMAT (\w+)$")


def is_plain(text: str) -> bool:
    """Whether our lexer and the engine's read `text` token for token alike."""
    # match, not fullmatch: the star stops at the first character it cannot
    # take and never backtracks (fullmatch of `(?:[a]+)*` fails exponentially)
    found = _PLAIN.match(text)
    return found is not None and found.end() == len(text)


#: Line comments and white space, to the end: both lexers read `--` (and
#: `//`) to the end of its line.
_TRAILING = re.compile(r"(?:\s*(?:--|//)[^\n]*(?:\n|$))*\s*")


def _without_trailing_comments(data: str) -> str:
    """VALUES rows without `-- ...` line comments after the last one (the
    rows are cut where our lexer, on text plain so far, leaves code)."""
    found = _PLAIN.match(data)
    end = found.end() if found is not None else 0
    if end < len(data) and _TRAILING.fullmatch(data, end):
        return data[:end]
    return data


def _refuse(why: str) -> ClassificationRefused:
    return ClassificationRefused(
        f"{why}; the gate refuses what it cannot read exactly as the engine does. "
        "Nothing was run or logged."
    )


def _split_data(sql: str) -> tuple[str, str, str]:
    """(head, the word that starts the data, data) of an INSERT whose data
    follows `VALUES` or `FORMAT <name>`, by our lexer's reading; (sql, '', '')
    for anything else. A misreading here cannot open a hole: the head is
    given to the engine, and the data must pass on its own."""
    tokens = tokenize_head(sql)
    if not tokens or tokens[0].word != "insert":
        return sql, "", ""
    last = tokens[-1]
    if last.kind == "ident" and last.word == "values":
        return sql[: last.end], "values", sql[last.end :]
    if last.kind == "ident" and last.word == "format":
        # the engine reads a format name quoted or not, in any case
        fmt = re.match(
            r"\s+(?:[A-Za-z_][A-Za-z0-9_]*|\"[A-Za-z_]\w*\"|`[A-Za-z_]\w*`)", sql[last.end :]
        )
        if fmt is not None:
            end = last.end + fmt.end()
            return sql[:end], "format", sql[end:]
    return sql, "", ""


#: A number the engine prints (`5`, `1000.`, `-1e-7`).
_NUMBER_ALONE = re.compile(r"-?[0-9]+\.?[0-9]*(?:e[+-]?[0-9]+)?", re.ASCII)
_HEREDOC_BODY = re.compile(r"\$(\w*)\$(.*)\$\1\$", re.DOTALL)


def _number_as_read(engine: Engine, run: str) -> str:
    """`run` (a number run into letters) as the engine prints the number it
    reads (`0b101` as 5, `1_000` as 1000); `run` itself when it is not
    one number (then the rows are not plain, and refused)."""
    try:
        canonical = engine.canonical("SELECT " + run)
    except ClassificationRefused:
        return run
    number = canonical.removeprefix("SELECT ")
    return number if _NUMBER_ALONE.fullmatch(number) else run


def _rows_as_literals(engine: Engine, data: str) -> str:
    """VALUES rows that are not plain, in plain text the engine reads as the
    same expressions: comments dropped, each heredoc (`$$it's$$`) written as
    the quoted literal it is. Our lexer makes the text; the engine proves
    it means what the caller wrote (its canonical text of both as one
    SELECT list is the same), and the plain text is the one checked, run
    and logged. Anything else is refused."""
    out: list[str] = []
    pos = 0
    tokens = tokenize(data)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        gap = data[pos : tok.start]
        out.append(gap if not gap or gap.isspace() else " ")
        body = _HEREDOC_BODY.fullmatch(tok.text) if tok.text.startswith("$") else None
        out.append(quote_string(body.group(2)) if body is not None else tok.text)
        pos = tok.end
        i += 1
        if tok.kind == "number":
            # a number run into letters (`0b101`, `1_000`): one token to the
            # engine, two to our lexer; written as the engine reads it
            j = i
            while j < len(tokens) and tokens[j].start == tokens[j - 1].end:
                if tokens[j].kind not in ("number", "ident"):
                    break
                j += 1
            if j > i:
                out[-1] = _number_as_read(engine, data[tok.start : tokens[j - 1].end])
                pos, i = tokens[j - 1].end, j
    plain = "".join(out)
    same = False
    if is_plain(plain):
        wrote, plain_rows = data.strip().rstrip(";"), plain.strip().rstrip(";")
        try:
            same = engine.canonical("SELECT " + wrote) == engine.canonical("SELECT " + plain_rows)
        except ClassificationRefused:
            same = False  # one of them is not rows the engine reads: not the same
    if not same:
        raise _refuse(
            "the VALUES rows hold a backslash outside a string, a character that is not "
            "ASCII outside a string, a number run into letters (1_000, 0b101, 1e5x: the "
            "engine reads one token where the gate reads two), or a comment or heredoc the "
            "engine reads otherwise; write each value as a plain literal instead (1000, 5)"
        )
    return plain


def engine_text(engine: Engine, sql: str) -> str:
    """The text of `sql` that the gate's checks read, that runs and that is
    logged: `sql` itself when it is plain (or its rows are `unread`), else
    the engine's canonical form of it (`ClassificationRefused` when that is
    not plain either, or when the engine cannot parse it as one statement)."""
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:
        # the engine takes UTF-8 text: chDB's binding would refuse it with a
        # message that quotes the statement (it may carry a credential)
        raise InvalidArgument(
            "the statement is not valid Unicode text (it holds a lone surrogate, such as "
            "'\\ud800', which no UTF-8 text can); nothing was run or logged"
        ) from None
    if unread(sql) is not None or is_plain(sql):
        return sql
    head, kind, data = _split_data(sql)
    canonical = engine.canonical(head)
    found = _CANONICAL_DATA.search(canonical) if canonical.startswith("INSERT ") else None
    if bool(kind) != (found is not None):
        raise _refuse("the engine does not read the INSERT's data where the gate found it")
    if found is not None and found.group(1).lower() == "values":
        canonical = canonical[: found.start()] + " VALUES"
        if unread(canonical + data) is not None:
            return canonical + data  # rows the engine reads as literals only
        data = _without_trailing_comments(data)
        if data and not is_plain(data):
            data = _rows_as_literals(engine, data)
    if not is_plain(canonical):
        raise _refuse("the statement holds a name or character outside plain ASCII")
    return canonical + data if data else canonical


# -- rows the engine reads as literals only ---------------------------------------

#: The settings under which the engine's Values reader parses each field of a
#: row as data of its column's type and nothing else: any expression, a call
#: as much as `1 + 1` or a subquery, fails the INSERT (`SUPPORT_IS_DISABLED`,
#: measured), before a row is written.
LITERAL_ROWS = (
    "input_format_values_interpret_expressions",
    "input_format_values_deduce_templates_of_expressions",
)
#: An INSERT ... VALUES shorter than this is read and written as one block
#: (the engine cuts blocks at 1,048,449 rows, `max_insert_block_size`, which
#: no statement may set; a row takes at least 3 bytes, `(1)`, so this many
#: bytes hold at most 1,000,000 rows). Longer ones are read by the gate.
ONE_BLOCK_BYTES = 3_000_000
#: Rows shorter than this are read by the gate: reading them costs less than
#: the engine's second try when a row holds an expression.
UNREAD_BYTES = 1 << 16
#: A call in the first or last rows: the engine would refuse them as literals.
_CALL = re.compile(r"[A-Za-z0-9_]\s*\(")
#: Where rows start: white space, then the first row's parenthesis.
_ROWS = re.compile(r"\s*\(")


def unread(text: str) -> tuple[str, str] | None:
    """(head, rows) of `INSERT INTO t [(cols)] SETTINGS ... VALUES rows` when
    the engine reads its rows as literals only, so nothing in them is code:
    the head is plain (both lexers read it token for token alike), ends at
    the VALUES the engine's data starts after, and its SETTINGS set both
    `LITERAL_ROWS` to 0 and name neither again. None for anything else.

    And no `;` anywhere: the engine runs every statement of a text, and where
    an INSERT's rows end is decided by its Values reader, while chdb-core's
    statement count (the gate's) skips rows by parentheses and single
    quotes. A `Dynamic` column reads `["x("]`, so the count saw one
    statement where the engine ran the `; INSERT ... file(...)` after the
    rows (found by attack before it landed). With no `;`, there is no second
    statement to run, whatever the reader makes of the rows; rows holding
    one (in a string) are read by the gate the usual way."""
    if len(text) < UNREAD_BYTES or text[:6].lower() != "insert":
        return None
    global _last_unread
    last = _last_unread
    if last is not None and last[0] is text:
        return last[1]  # the gate's steps ask of the same text in turn
    found = _unread(text)
    _last_unread = (text, found)  # one reference: atomic
    return found


#: The last text `unread` judged (by identity, so by value) and its answer.
_last_unread: tuple[str, tuple[str, str] | None] | None = None


def _unread(text: str) -> tuple[str, str] | None:
    if ";" in text:
        return None
    tokens = tokenize_head(text)
    shape = insert_shape(tokens)
    if shape is None or shape.values_at != len(tokens) - 1 or shape.settings_at is None:
        return None
    head = text[: tokens[-1].end]
    if not is_plain(head) or not _ROWS.match(text, len(head)):
        return None
    pairs = _settings(tokens[shape.settings_at + 1 : shape.values_at])
    if pairs is None or any(pairs.count((n, "0")) != 1 for n in LITERAL_ROWS):
        return None
    if sum(name in LITERAL_ROWS for name, _ in pairs) != len(LITERAL_ROWS):
        return None
    return head, text[len(head) :]


def _settings(tokens: list[Token]) -> list[tuple[str, str]] | None:
    """[(name, value)] of a SETTINGS list `a = 1, b = 'x'`; None when it is
    not exactly such a list."""
    pairs: list[tuple[str, str]] = []
    for i in range(0, len(tokens), 4):
        name, eq, value = tokens[i : i + 3] if i + 3 <= len(tokens) else (None, None, None)
        if name is None or eq is None or value is None:
            return None
        if name.kind != "ident" or eq.text != "=" or value.kind not in ("number", "string"):
            return None
        if i + 3 < len(tokens) and tokens[i + 3].text != ",":
            return None
        pairs.append((name.word, value.text))
    return pairs


def code_of(text: str) -> str:
    """What of `text` is SQL to the engine: the head of an INSERT whose rows
    it reads as literals only (`unread`), else all of it."""
    found = unread(text)
    return text if found is None else found[0]


def with_literal_rows(sql: str, timezone: str) -> str | None:
    """`sql` with the settings that make its rows `unread` (and the time
    zone every logged INSERT carries), when it is a long INSERT ... VALUES
    of plain head and no SETTINGS of its own whose first rows hold no call;
    None otherwise. The engine still refuses a row with an expression then
    (`expression_refused`), before it writes a row, and the caller runs the
    statement again the usual way (the caller also keeps this to INSERTs
    that run no view and leave no column to a non-deterministic DEFAULT)."""
    if not UNREAD_BYTES <= len(sql) < ONE_BLOCK_BYTES or sql[:6].lower() != "insert":
        return None
    tokens = tokenize_head(sql)
    shape = insert_shape(tokens)
    if shape is None or shape.values_at != len(tokens) - 1 or shape.settings_at is not None:
        return None
    at, end = tokens[-1].start, tokens[-1].end
    if _CALL.search(sql, end, end + 4096) or _CALL.search(sql, len(sql) - 4096):
        return None
    if any(t.word == "settings" for t in tokens):
        return None
    settings = ", ".join(f"{n} = 0" for n in LITERAL_ROWS)
    settings += f", session_timezone = {quote_string(timezone)}"
    text = f"{sql[:at]}SETTINGS {settings} {sql[at:]}"
    return text if unread(text) is not None else None


def expression_refused(error: str) -> bool:
    """Whether the engine's `error` is its Values reader's refusal of a row
    that is not a literal under `LITERAL_ROWS`: raised while it reads the
    rows, before it writes any (a view's `throwIf` may say the same words,
    never with this code; the caller keeps this to INSERTs that run no view)."""
    return (
        "Code: 344." in error
        and "Interpreting expressions is disabled" in error
        and "ValuesBlockInputFormat" in error
    )
