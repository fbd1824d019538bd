"""What a statement may reach: allow-lists of table engines, dictionary
sources and layouts, settings, and the functions refused for every object.

Checked on the text `reading.engine_text` returned (the text that runs),
for every statement and whatever flag is set (`allow_nondeterministic`
lifts determinism refusals only). A refusal names what was refused, never
the statement (it may carry a credential).

* Table engines: an allow-list of engines whose data lives in the object's
  own database (the MergeTree family, Memory, the Log family, Set, Join,
  Null, EmbeddedRocksDB without a path of its own, GenerateRandom).
* Dictionary sources: CLICKHOUSE (a table of the object's own database,
  `isolation.Scope` checks which) and NULL; layouts that keep a file
  (SSD_CACHE) are refused.
* Functions and table functions: every table function but the pure
  generators, and every function that reads the host, the network, the
  engine's configuration or its other sessions (`file`, `getServerSetting`,
  `hostName`, `currentUser`, the AI, introspection and model functions,
  ...), by the engine's catalogue and aliases. A read is further held to
  an allow-list on the engine's own resolution (`allowed_in_tree`).
* Settings: a statement's SETTINGS may only shape its output and plan
  (`output_format_*`, `join_algorithm`, `max_threads`, ...), never raise a
  bound or name a disk, a path or a policy.

DDL (CREATE, ALTER, ATTACH) is also checked on the engine's parse
(`EXPLAIN AST`): the engine a table gets, the source a dictionary reads and
every function named anywhere in the definition are the engine's reading.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused
from durable_obj.gate import aggregates, settings, shipped
from durable_obj.gate.isolation import PURE_TABLE_FUNCTIONS
from durable_obj.gate.reading import code_of
from durable_obj.gate.sql import Call, Token, code_words, find_calls, tokenize, tokenize_head

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: Table engines whose data lives in the object's own database.
ALLOWED_ENGINES = frozenset(
    {"MergeTree", "ReplacingMergeTree", "SummingMergeTree", "AggregatingMergeTree"}
    | {"CollapsingMergeTree", "VersionedCollapsingMergeTree", "CoalescingMergeTree"}
    | {"Memory", "Log", "TinyLog", "StripeLog", "Set", "Join", "Null", "GenerateRandom"}
    | {"EmbeddedRocksDB"}
)
#: Dictionary sources that read the object's own database (or nothing).
ALLOWED_SOURCES = frozenset({"clickhouse", "null"})
#: Dictionary layouts that keep data in a file of their own.
REFUSED_LAYOUTS = frozenset({"ssd_cache", "complex_key_ssd_cache"})
#: Function categories (system.functions.categories) refused whole: calls
#: to a model over the network, the engine's own binary and threads, model files.
REFUSED_CATEGORIES = frozenset({"AI", "Introspection", "Machine Learning"})
#: Functions of other categories that read the host, the engine's
#: configuration, its sessions and users, or a file.
REFUSED_FUNCTIONS = frozenset(
    {"file", "fqdn", "hostname", "filesystemavailable", "filesystemcapacity"}
    | {"filesystemunreserved", "getserversetting"}
    | {"getmergetreesetting", "getmacro", "getoskernelversion", "getserverport", "tcpport"}
    | {"getclienthttpheader", "globalvariable", "hascolumnintable"}
    | {"getmaxtablenamelengthfordatabase"}
    | {"authenticateduser", "currentuser", "currentroles", "enabledroles", "defaultroles"}
    | {"currentprofiles", "enabledprofiles", "defaultprofiles", "currentschemas"}
    | {"currenthandler", "currentrequesturl", "currentqueryid", "queryid", "initialqueryid"}
    | {"initialquerystarttime", "connectionid", "displayname", "serveruuid", "shardnum"}
    | {"shardcount", "showcertificate", "transactionid", "transactionlatestsnapshot"}
    | {"transactionoldestsnapshot", "zookeepersessionuptime", "pggetuserbyid"}
    | {"pgtableisvisible", "buildid", "uptime", "hasthreadfuzzer", "generateserialid"}
    | {"catboostevaluate", "mergetreepartinfo", "ismergetreepartcoveredby"}
)
_DDL = frozenset({"create", "alter", "attach", "replace"})
#: Words whose absence from a statement's code lets `check` return at once.
_TRIGGERS = frozenset({"settings", "setting", "source", "layout", "engine"})
#: Aggregate-function combinators (a call `sumIf` is `sum` with `If`).
_COMBINATORS = re.compile(
    r"(?:if|array|map|state|merge|mergestate|foreach|distinct|ordefault|ornull|resample"
    r"|argmin|argmax|simplestate)$"
)


def refuse_refresh() -> ClassificationRefused:
    """A refreshable materialized view (`REFRESH EVERY|AFTER ...`, or ALTER
    ... MODIFY REFRESH): the engine runs its SELECT on a timer of its own."""
    return ClassificationRefused(
        "a refreshable materialized view (REFRESH ...): the engine would run its SELECT in the "
        "background on a timer of its own, outside every statement and the object's bounds, "
        "and a replica replaying the log would refresh at other times to other rows. Use a "
        "plain materialized view (CREATE MATERIALIZED VIEW ... TO t AS SELECT ..., which runs "
        "inside each INSERT into its source), or run INSERT INTO t SELECT ... yourself when "
        "the data should be refreshed. Nothing was run or logged."
    )


def refuse(what: str, instead: str = "") -> ClassificationRefused:
    advice = f" Instead, {instead}." if instead else ""
    return ClassificationRefused(
        f"{what}: an object's statements reach only its own database (another object's "
        "data, the host's files, the network and the engine's configuration are out of "
        f"reach, whatever flag is set).{advice} Nothing was run or logged."
    )


#: What to write instead of a table function or engine that reads elsewhere.
OWN_TABLES = (
    "read the object's own tables (a view, or UNION ALL of them), and load outside "
    "data in the caller and insert it as literals"
)
OWN_ENGINE = (
    "use a MergeTree-family, Memory or Log table of the object's own and insert into it directly"
)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The engine's functions, sorted into what an object may call."""

    refused: frozenset[str]  # lower-cased names and aliases, table functions included
    table_functions: frozenset[str]  # lower-cased: the refused ones
    allowed: frozenset[str]  # lower-cased: every other function, for a read's tree
    aggregates: frozenset[str]  # lower-cased aggregate functions, for combinators
    table_settings: frozenset[str]  # lower-cased names a table's SETTINGS may take
    #: The refused aggregate functions' names, found anywhere in a text:
    #: with a combinator (`...If`, `...State`), as arrayReduce's or
    #: initializeAggregation's string, inside an AggregateFunction type.
    refused_aggregates: re.Pattern[str] | None

    @classmethod
    def load(cls, engine: Engine) -> Catalog:
        """Sorted from the engine's lists (`shipped.lists`: read once per
        process, or the copy shipped for the pinned build)."""
        found = shipped.lists(engine)
        rows = found.functions
        refused = {
            name
            for name, _alias, categories, *_ in rows
            if name in REFUSED_FUNCTIONS
            or any(c.strip() in REFUSED_CATEGORIES for c in categories.split(","))
        }
        refused |= {name for name, alias, *_ in rows if alias and alias in refused}
        outside = frozenset(found.table_functions) - PURE_TABLE_FUNCTIONS
        refused |= outside
        # `format` is a string function too (`format('{} {}', a, b)`): allowed
        # as one; as a table function it is refused (`_format_pattern`)
        allowed = {name for name, *_ in rows} - refused | {"format"}
        folding = {name for name, _al, _c, agg, _d in rows if agg}
        barred = sorted(folding & refused, key=len, reverse=True)
        return cls(
            frozenset(refused),
            outside,
            frozenset(allowed),
            frozenset(folding),
            frozenset(found.table_settings),
            re.compile("|".join(map(re.escape, barred)), re.IGNORECASE) if barred else None,
        )

    def allowed_in_tree(self, name: str) -> bool:
        """Whether a read may call `name`, as the engine resolved it (an
        allow-list: a name the catalogue does not hold is refused, unless it
        is an allowed aggregate function with combinators)."""
        lowered = name.lower()
        if lowered in self.allowed:
            return True
        while (m := _COMBINATORS.search(lowered)) is not None and m.start() > 0:
            lowered = lowered[: m.start()]
            if lowered in self.aggregates:
                return lowered in self.allowed
        return False

    def refused_aggregate(self, text: str) -> str | None:
        """The first refused aggregate function named anywhere in `text` (an
        engine's tree or parse, a call's name), or None. The engine's names
        are case-sensitive and never trimmed, so a name it would resolve is
        this exact run of letters; a text that merely mentions one (a
        literal) is refused too."""
        found = self.refused_aggregates.search(text) if self.refused_aggregates else None
        return found.group(0) if found else None


_CATALOGS: dict[str, Catalog] = {}
#: Catalogues being read ahead (`claim_read_ahead`), by engine version: a
#: reader waits for that reading instead of doing it again. Only such a
#: reading is ever waited for: it runs on a thread that never holds the
#: async turn (`replica/turn.py`), so it always finishes. Two readers that
#: may hold turns never wait for each other (one holding the turn, waiting
#: for one that needs it back, would never wake): each reads for itself.
_AHEAD: dict[str, threading.Event] = {}
_AHEAD_LOCK = threading.Lock()


def catalog(engine: Engine) -> Catalog:
    """The catalogue of this engine version, read once per process."""
    found = _CATALOGS.get(engine.version)
    if found is None:
        ahead = _AHEAD.get(engine.version)
        if ahead is not None:
            ahead.wait()
            found = _CATALOGS.get(engine.version)
        if found is None:
            found = _CATALOGS[engine.version] = Catalog.load(engine)
    return found


def claim_read_ahead(version: str) -> bool:
    """Claim the reading of engine `version`'s catalogue for a thread of its
    own that never takes the async turn (`read_ahead`, then always
    `end_read_ahead`); False when it is read already or claimed."""
    with _AHEAD_LOCK:
        if version in _CATALOGS or version in _AHEAD:
            return False
        _AHEAD[version] = threading.Event()
        return True


def read_ahead(engine: Engine) -> None:
    """Read the claimed catalogue of `engine`'s version."""
    _CATALOGS[engine.version] = Catalog.load(engine)


def end_read_ahead(version: str) -> None:
    """Let the readers waiting for a claimed reading go (read or failed)."""
    with _AHEAD_LOCK:
        ahead = _AHEAD.pop(version, None)
    if ahead is not None:
        ahead.set()


def check(engine: Engine, text: str, external: tuple[str, ...] = ()) -> None:
    """`ClassificationRefused` if the statement `text` (as `engine_text`
    returned it) names a function, table function, engine, dictionary source
    or layout, or a setting, that reaches past the object. `external` (a
    read's opt-in, `Options.external_reads`) lets url(), s3() and file()
    under the folders it names through."""
    known = catalog(engine)
    text = code_of(text)  # rows the engine reads as literals only are no code
    head = tokenize_head(text)
    first = head[0].word if head else ""
    if (barred := known.refused_aggregate(text)) is not None:
        # anywhere in the code: an expression the engine folds only as it
        # runs (a mutation's, a definition's) is never resolved here
        raise aggregates.refuse(barred)
    words = code_words(text)
    ddl = first in _DDL
    # what the engine parses, not resolves: a definition, and a mutation's
    # expressions (a lightweight DELETE's, UPDATE's; an ALTER is DDL here)
    parsed = ddl or first in ("delete", "update")
    if not parsed and not (words & (known.refused | _TRIGGERS)):
        return
    tokens = tokenize(text)
    for call in find_calls(tokens):
        if external and external_call(tokens, call, external):
            continue
        if call.name == "format" and _format_pattern(tokens, call):
            continue  # the string function, not the table function
        if call.name in known.table_functions:
            raise refuse(f"the table function {call.shown[:60]}()", OWN_TABLES)
        if call.name in known.refused:
            raise refuse(f"{call.shown[:60]}()")
        if known.refused_aggregate(call.name) is not None:
            raise aggregates.refuse(call.shown)
    settings.check(tokens, ddl, known.table_settings)
    if ddl:
        _check_layouts(tokens)
    if ddl:
        _check_tree(engine.ast(text), known)
    elif parsed:
        try:
            ast = engine.ast(text)
        except ClassificationRefused:
            return  # not a DELETE or UPDATE the parser reads: it runs as none (chDB's
            # implicit SELECT reads "DELETE m WHERE ..." as a query), and is judged as that
        _check_tree(ast, known)


#: Table functions an opt-in may let a read call, by the word that allows each.
EXTERNAL_FUNCTIONS = {"url": "url", "s3": "s3", "file": "file"}


def external_call(tokens: list[Token], call: Call, external: tuple[str, ...]) -> bool:
    """Whether `call` is one `external` allows: url() or s3() when named, or
    file() of a plain string path (maybe with a glob) inside a named folder."""
    kind = EXTERNAL_FUNCTIONS.get(call.name)
    if kind in ("url", "s3"):
        return kind in external
    if kind != "file":
        return False
    arg = tokens[call.first + 2] if call.first + 2 < len(tokens) else None
    if arg is None or arg.kind != "string" or "\\" in arg.text or "''" in arg.text:
        return False
    return file_allowed(arg.text[1:-1], [f for f in external if f.startswith("/")])


def file_allowed(path: str, folders: list[str]) -> bool:
    """Whether `path` (absolute, no glob: a glob would follow a link out of
    the folder) lies inside one of `folders`, after resolving `..` and
    symbolic links."""
    if not path.startswith("/") or not folders or any(ch in path for ch in "*?{}[]"):
        return False
    real = os.path.realpath(path)
    return any(
        real == os.path.realpath(folder) or real.startswith(os.path.realpath(folder) + "/")
        for folder in folders
    )


def _format_pattern(tokens: list[Token], call: Call) -> bool:
    """Whether a `format(...)` call is the string function: its first
    argument one string literal holding `{`, a pattern. The table function
    `format(Values, ..., '<data>')` evaluates its data as SQL the gate never
    reads (`file()`, another database, `url()`), and its format name may be
    computed (`concat('Val', 'ues')`): as a table function it is refused."""
    at = call.first + 2
    arg = tokens[at] if at < len(tokens) else None
    after = tokens[at + 1].text if at + 1 < len(tokens) else ""
    return arg is not None and arg.kind == "string" and "{" in arg.text and after in (",", ")")


def _check_layouts(tokens: list[Token]) -> None:
    for i, tok in enumerate(tokens[:-2]):
        named = tokens[i + 2].word
        if tok.word == "layout" and tokens[i + 1].text == "(" and named in REFUSED_LAYOUTS:
            raise refuse(f"the dictionary layout {tokens[i + 2].text[:40]} (it keeps a file)")


_AST_LINE = re.compile(r"^( *)(\S.*?)(?: \(children \d+\))?(?: \(alias [^)]*\))?$")


def _check_tree(ast: str, known: Catalog) -> None:
    """The engine's parse of a DDL statement or a mutation: its engines,
    sources and every function it names."""
    if (barred := known.refused_aggregate(ast)) is not None:
        raise aggregates.refuse(barred)
    # lines end at "\n" alone: a literal may hold \x0b, \x85 or another
    # character `splitlines` would end a line at (a forged line, then)
    lines = [(len(m.group(1)), m.group(2)) for m in map(_AST_LINE.match, ast.split("\n")) if m]
    for k, (depth, node) in enumerate(lines):
        kind, _, name = node.partition(" ")
        name = name.strip()
        if kind == "Function":
            # its name alone: `_AST_LINE` leaves " (alias w)" on a call
            # that has arguments too ("Function f (alias w) (children 1)")
            name = name.split(" ", 1)[0]
        nxt = lines[k + 1] if k + 1 < len(lines) else (-1, "")
        if node == "Storage definition" and nxt[0] == depth + 1 and nxt[1].startswith("Function "):
            engine = nxt[1].split(" ", 1)[1].strip()
            if engine not in ALLOWED_ENGINES:
                raise refuse(f"a table with ENGINE = {engine[:60]}", OWN_ENGINE)
            args = lines[k + 2] if k + 2 < len(lines) else (-1, "")
            if engine == "EmbeddedRocksDB" and args[0] == depth + 2 and _arg_count(ast, k + 2) > 1:
                raise refuse("an EmbeddedRocksDB table with a folder of its own")
        elif kind == "FunctionWithKeyValueArguments" and name.lower() not in ALLOWED_SOURCES:
            raise refuse(f"a dictionary SOURCE({name.upper()[:40]})")
        elif kind == "Function" and name.lower() in known.refused:
            raise refuse(f"{name[:60]}()")
        elif kind == "Function" and name.lower() in aggregates.NAMED_CALLS:
            aggregates.check_named(lines, k, name)
        elif node == "Refresh strategy definition":
            raise refuse_refresh()


def _arg_count(ast: str, line: int) -> int:
    found = re.search(r"ExpressionList \(children (\d+)\)", ast.split("\n")[line])
    return int(found.group(1)) if found else 0


_RESOLVED_FUNCTION = re.compile(r"(?<!\w)function_name: (\w+)")


def check_resolved(engine: Engine, tree: str) -> None:
    """Every function the engine resolved in a read's `EXPLAIN QUERY TREE`
    is on the allow-list (`Catalog.allowed_in_tree`)."""
    known = catalog(engine)
    if (barred := known.refused_aggregate(tree)) is not None:
        raise aggregates.refuse(barred)
    for name in set(_RESOLVED_FUNCTION.findall(tree)):
        if not known.allowed_in_tree(name):
            raise refuse(f"{name[:60]}()")
