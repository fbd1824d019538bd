"""One object's connection to the process's engine (`server`), and the
entry gates.

What lives here:

* `Engine`: one object's connection to the engine, whose current database
  is the object's internal database (`isolation.Scope`: a random reserved
  name nobody else can choose); statements run as `Scope.localize` maps
  them, catalogue queries name the object's logical database and are mapped
  here, and `backup`/`restore` archive the internal database under the
  logical name (`archives.py` builds and runs them), so the wire format
  stays V1;
* `Analysis` and the gates built on chdb-core's `classify_query`: one
  statement, read-only vs mutating, secrets, writes only the object's
  database, no database lifecycle. No regex over the caller's SQL decides
  what a statement does.

Objects in one process share the engine (its memory and CPU), never data:
each runs in its own database through its own connection, and
`gate/isolation.py` refuses every route out of it. Releasing an object's engine
drops its internal database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from durable_obj.errors import (
    ClassificationRefused,
    DurableError,
    EngineError,
    InvalidArgument,
    Timeout,
)
from durable_obj.gate.bounds import RANGE_PER_SECOND, RESET, Bounds, unstoppable
from durable_obj.gate.isolation import RESERVED_PREFIX, Scope
from durable_obj.gate.known import Known
from durable_obj.gate.quoting import param_text, quote_ident, quote_string, without_format
from durable_obj.replica import archives, server
from durable_obj.replica.messages import (
    FOREIGN_HINT,
    HINT,
    clean,
    describe_syntax_error,
    dropped_hint,
    keywords,
    parser_says,
    without_table_uuids,
)
from durable_obj.replica.server import LIVE, ORPHANS, decoded, engine_paths, engine_root
from durable_obj.replica.turn import Turned
from durable_obj.replica.watchdog import WATCHDOG, Guard

#: The database of each qualified name in an engine hint.
_QUALIFIED = re.compile(r"([A-Za-z_][\w$]*)\.[A-Za-z_`]")
_RESERVED_NAME = re.compile(rf"{RESERVED_PREFIX}[0-9a-f]{{32}}")
#: The time zones the engine has said it knows (`Engine.set_timezone`); UTC,
#: every head's default, is in every build's list.
_ZONES: set[str] = {"UTC"}


def acquire() -> Engine:
    """A new connection to the process's engine (started on first use), for
    one object: any number may be open at once, each in its own database."""
    engine = Engine(server.connect())
    LIVE.add(engine)
    return engine


@dataclass(frozen=True, slots=True)
class Analysis:
    """What chdb-core says a statement would do, without running it."""

    query_class: str
    statement_count: int
    has_secrets: bool
    writes_only_target_database: bool
    changes_database_lifecycle: bool


class Engine:
    """One object's connection to the process's engine, and its database.

    The object's internal database is created by `create_database` or
    `restore` (under the logical name the head records) and becomes the
    connection's current database; `release` drops it. Callers name the
    logical database: catalogue queries with a `db` parameter are mapped to
    the internal one, and the caller's statements run as `localize` maps them.
    """

    def __init__(self, conn: Any) -> None:
        self._conn: Any = Turned(conn)  # gives an async worker's turn up (turn.py)
        self._raw: Any = conn
        self.backups = os.path.join(engine_root(), "backups")
        #: This object's database in the engine: reserved, unguessable, never shown.
        self.database = f"{RESERVED_PREFIX}{uuid.uuid4().hex}"
        self.scope = Scope("default", self.database)
        self.known = Known()  # what the gate's checks last read of the database
        self._localized: tuple[str, frozenset[str], Scope, str] | None = None  # `localize`
        #: When the bounded block running now must end (`bounded`); None: unbounded.
        self._deadline: float | None = None
        #: Whether the bounded block runs a caller's statement (`bounded`).
        self._strict = True

    @property
    def version(self) -> str:
        return server.version()

    @property
    def logical(self) -> str:
        return self.scope.logical

    def localize(self, sql: str, vouched: frozenset[str] = frozenset()) -> str:
        """`sql` as it runs in this object's database (`isolation.Scope`);
        `vouched`: table functions a read's opt-in let through. The last
        answer is kept (the gate, then the run, ask of the same text)."""
        last = self._localized
        if last is not None and last[:3] == (sql, vouched, self.scope):
            return last[3]
        self._localized = (sql, vouched, self.scope, self.scope.localize(sql, vouched))
        return self._localized[3]

    def message(self, exc: BaseException) -> str:
        """The engine's message about this object's statement, as this object
        may see it: its own database under the logical name, no other
        object's database (a "Maybe you meant" hint naming one is dropped),
        no path of the engine's folder."""
        text = HINT.sub(self._own_hint, clean(exc))
        text = text.replace(self.database, self.scope.logical)
        text = FOREIGN_HINT.sub(dropped_hint, text)
        text = _RESERVED_NAME.sub("<another database>", text)
        text = without_table_uuids(text, self._table_named)
        for path in engine_paths():
            text = text.replace(path, "<engine folder>")
        return text

    def _own_hint(self, hint: re.Match[str]) -> str:
        """An engine hint ("Maybe you meant db.t?") as this object may see it:
        dropped when it names a table of any database but the object's own
        (another object's, the engine's `default`, a scratch database)."""
        dbs = _QUALIFIED.findall(hint.group())
        return hint.group() if all(db == self.database for db in dbs) else dropped_hint(hint)

    def _table_named(self, table_uuid: str) -> str | None:
        """`db.name` of this object's table with that UUID (logical names),
        None for no table of this object's (never another object's name)."""
        try:
            out = self._conn.query(
                "SELECT name FROM system.tables WHERE database = {db:String} "
                "AND uuid = toUUIDOrZero({u:String}) LIMIT 1",
                "TSVRaw",
                params={"db": self.database, "u": table_uuid},
            )
        except Exception:  # an error path: say less rather than fail again
            return None
        name = decoded(out).strip()
        return f"{self.scope.logical}.{name}" if name else None

    def _mapped(self, params: dict[str, str]) -> dict[str, str]:
        return {**params, "db": self.database} if params.get("db") == self.scope.logical else params

    # -- statements ------------------------------------------------------
    def text(self, sql: str, fmt: str = "CSV", *, redact: bool = False) -> str:
        """Run `sql` and return its output. `redact` keeps the engine's message
        (which may quote the statement) out of the error."""
        return decoded(self._answer(sql, fmt, redact))

    def output(self, sql: str, fmt: str, *, redact: bool = False) -> bytes:
        """Run `sql` and return its output's bytes (a binary format)."""
        return bytes(self._answer(sql, fmt, redact).bytes())

    def frame(self, sql: str, *, redact: bool = False) -> Any:
        """Run `sql` and return its output as a pandas DataFrame."""
        return self._answer(sql, "DataFrame", redact)

    def rows_text(self, sql: str, fmt: str, *, redact: bool = False) -> str:
        """`text` with NaN and infinities quoted in JSON ("nan"), not null."""
        self._setting("SET output_format_json_quote_denormals = 1")
        try:
            return self.text(sql, fmt, redact=redact)
        finally:
            self._setting("SET output_format_json_quote_denormals = 0")

    def _answer(self, sql: str, fmt: str, redact: bool) -> Any:
        if self._conn is None:
            raise EngineError("the object's engine connection is closed")
        self._due()
        if self._deadline is not None and self._strict and (name := unstoppable(sql)):
            raise ClassificationRefused(
                f"{name}() can spend one call past any time bound (the engine checks the "
                "time only between calls), so a statement under a bound may not call it. "
                "Instead, compute it in the caller, or run it without a bound. Nothing was "
                "run or logged."
            )
        try:
            if fmt == "DataFrame":
                return self._conn.query_df(sql, params={})
            return self._conn.query(sql, fmt)
        except Exception as exc:
            if redact:
                raise EngineError(
                    "the statement failed (engine message withheld: it carries a credential)"
                ) from None
            raise EngineError(f"chDB: {self.message(exc)}") from None

    def run(self, sql: str) -> None:
        self.text(sql, "CSV")

    @contextlib.contextmanager
    def bounded(
        self, bounds: Bounds | None, *, write: bool = False, caller: bool = True
    ) -> Iterator[None]:
        """Run what the block runs under `bounds`: engine settings on this
        connection only (put back after), and one deadline for every engine
        call of the block (the gate's EXPLAIN calls included), kept by the
        watchdog. Past it, the block's call is stopped and the block raises
        `Timeout`. A caller's statement may not call a function the watchdog
        cannot stop (`bounds.UNSTOPPABLE`); `caller=False` for our own checks
        (a restored view's plan), which refuse nothing for it. With `bounds`
        None nothing is set: no engine call added."""
        if bounds is None:
            yield
            return
        token = f"durable_obj-bound-{uuid.uuid4().hex}"
        applied = bounds.settings(write=write)
        self._setting(f"SET {applied}, log_comment = {quote_string(token)}")
        guard = WATCHDOG.arm(token, bounds.seconds) if bounds.seconds > 0 else None
        self._deadline = None if guard is None else guard.deadline
        self._strict = caller
        try:
            yield
        except DurableError as exc:
            stop = _stopped(exc, guard)
            if stop is None:
                raise
            what = "statement" if write else "query"
            raise Timeout(stop.format(what=what, s=bounds.seconds) + "; nothing changed") from None
        finally:
            if guard is not None:
                WATCHDOG.disarm(guard)
            self._deadline = None
            if self._conn is not None:
                self._setting(f"SET {RESET}")

    def _due(self) -> None:
        """Before an engine call of a bounded block: none starts past its deadline."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise Timeout("the bound's time is up")

    def _setting(self, sql: str) -> None:
        """Our own SET (never a caller's): run even past a deadline, so what a
        block set is always put back; a kill never reaches a SET."""
        if self._conn is None:
            raise EngineError("the object's engine connection is closed")
        try:
            self._conn.query(sql, "CSV")
        except Exception as exc:
            raise EngineError(f"chDB: {self.message(exc)}") from None

    def replay(self, sql: str) -> None:
        """Run a committed statement as the object's own: localized, and
        refused (as an `EngineError`, which replay reports as `Corrupt`) if
        it reaches past the object."""
        try:
            local = self.localize(sql)
        except ClassificationRefused as exc:
            raise EngineError(str(exc)) from None
        self.run(local)

    def run_params(self, sql: str, params: dict[str, str]) -> str:
        if self._conn is None:
            raise EngineError("the object's engine connection is closed")
        self._due()
        try:
            result = self._conn.query(sql, "TSV", params=self._mapped(params))
        except Exception as exc:
            raise EngineError(f"chDB: {self.message(exc)}") from None
        return decoded(result)

    def json_rows(self, sql: str, params: dict[str, str] | None = None) -> list[list[Any]]:
        """The rows of `sql` (no FORMAT clause) as lists of JSON values; `params`
        go through query parameters. Rows are split on "\\n" alone: a value may
        hold U+0085 or U+2028, where `str.splitlines()` would cut the row."""
        if params is None:
            out = self.text(sql, "JSONCompactEachRow")
        else:
            out = self.run_params(f"{sql} FORMAT JSONCompactEachRow", params)
        try:
            return [json.loads(line) for line in out.split("\n") if line]
        except ValueError:
            raise EngineError("chDB answered rows that are not JSON") from None

    def use_database(self, db: str) -> None:
        """Make the object's database (logical name `db`) the current one."""
        self._name(db)
        self.run("USE " + quote_ident(self.database))

    def _name(self, db: str) -> None:
        """Record `db` as the object's logical database name."""
        if db.lower().startswith(RESERVED_PREFIX):
            raise ClassificationRefused(f"{db[:60]!r} is a reserved database name")
        self.scope = Scope(db, self.database)

    def set_timezone(self, tz: str) -> None:
        """Pin the session time zone: DateTime literals and functions then mean
        the same instant whatever the process's TZ. A zone the engine knew is
        not asked for again (its list is fixed: 2.5 ms of every open)."""
        if tz not in _ZONES:
            sql = "SELECT count() FROM system.time_zones WHERE time_zone = {tz:String}"
            if self.run_params(sql, {"tz": tz}).strip() != "1":
                raise InvalidArgument(f"unknown time zone {tz!r}; use an IANA name such as 'UTC'")
            _ZONES.add(tz)
        self.run("SET session_timezone = " + quote_string(tz))

    def create_database(self, db: str) -> None:
        """Create the object's (empty) database, under logical name `db`."""
        self._name(db)
        self.run(f"CREATE DATABASE IF NOT EXISTS {quote_ident(self.database)}")

    def analyze(self, sql: str, db: str) -> Analysis:
        """What chDB says `sql` would do (it must already be localized); writes
        are judged against the object's database."""
        target = self.database if db == self.scope.logical else db
        try:
            report = self._raw.classify_query(sql, target)
        except Exception as exc:
            raise EngineError(
                f"chDB could not analyse the statement: {self.message(exc)}"
            ) from None
        qc = report["query_class"]
        return Analysis(
            query_class=str(getattr(qc, "name", qc)),
            statement_count=int(report["statement_count"]),
            has_secrets=bool(report["has_secrets"]),
            writes_only_target_database=bool(report["writes_only_target_database"]),
            changes_database_lifecycle=bool(report["changes_database_lifecycle"]),
        )

    def query_tree(self, sql: str, *, strict: bool = False, redact: bool = False) -> str | None:
        """What the engine resolves of the (localized) SELECT `sql`
        (`EXPLAIN QUERY TREE`: nothing runs), for the gate to check; None
        when it does not analyse. `strict`: the engine's error instead of
        None (`redact`: without its message, which may quote a credential),
        for a caller that must not run what it could not check."""
        try:
            raw = self.output("EXPLAIN QUERY TREE " + without_format(sql), "TSVRaw", redact=redact)
        except EngineError as exc:
            if strict or _stopped(exc, None) is not None:
                raise  # planning ran past a bound: the run must not follow it
            return None
        # A constant the query holds is printed as its bytes, which need not
        # be UTF-8 (unhex('FF')): such a tree is read with those bytes
        # replaced, never taken for one that did not print. Every name the
        # gate allows is plain text, so a replaced byte only ever fails a check.
        tree = raw.decode("utf-8", "replace")
        if not tree.startswith(("QUERY id:", "UNION id:")):
            raise ClassificationRefused(
                "could not check what the query reads (its plan did not print as a query "
                "tree); pass the output format as fmt= rather than in a FORMAT clause. "
                "Nothing was run or logged."
            )
        return tree

    def check_implicit_select(self, sql: str) -> None:
        """`EngineError` with the engine's own message if the (localized,
        secret-free) statement `sql`, which the engine reads as a SELECT
        without the word, would not run. Nothing runs: only the analyzer."""
        self._due()
        try:
            self._conn.query("EXPLAIN QUERY TREE SELECT " + without_format(sql), "TSVRaw")
        except Exception as exc:
            text = self.message(exc)
            raise EngineError(
                f"chDB cannot run this statement: {text} Nothing was run or logged."
            ) from None

    def canonical(self, sql: str) -> str:
        """The engine's own canonical text of one statement
        (`formatQuerySingleLine`, given as a query parameter: nothing is
        spliced): comments dropped, heredocs as quoted literals, an INSERT's
        data dropped. `ClassificationRefused` when it is not one statement
        the engine parses, with where the parser stopped (never the text)."""
        if self._conn is None:
            raise EngineError("the object's engine connection is closed")
        self._due()
        try:
            result = self._conn.query(
                "SELECT formatQuerySingleLine({q:String})", "TSVRaw", params={"q": param_text(sql)}
            )
        except Exception as exc:
            why = describe_syntax_error(str(exc), sql, keywords(self._conn))
            raise ClassificationRefused(
                f"chDB does not parse this as one statement ({why}). Nothing was run or logged."
            ) from None
        return decoded(result).removesuffix("\n")

    def ast(self, sql: str) -> str:
        """The engine's parse of `sql` (`EXPLAIN AST`: nothing is resolved or
        run), for the gate's checks of a definition."""
        try:
            return self.text("EXPLAIN AST " + sql, "TSVRaw")
        except EngineError:
            raise ClassificationRefused(
                f"chDB does not parse the statement ({self.syntax_error(sql)}). "
                "Nothing was run or logged."
            ) from None

    def syntax_error(self, sql: str) -> str:
        """What chDB's parser says of `sql` (where it stops, the word there,
        its suggestion and what it expected), without quoting the statement's
        text beyond a name or keyword: it may carry a credential."""
        self._due()
        return parser_says(self._conn, sql)

    # -- Durable V1 archives (archives.py) --------------------------------------
    def backup(self, db: str, path: str, base: tuple[str, str] | None = None) -> None:
        """A BACKUP of the object's database to `path`, under its logical
        name `db`, full or over `base` (`archives.backup`)."""
        archives.backup(self, db, path, base)

    def restore(
        self, db: str, path: str, chain: Sequence[tuple[str, str]] = (), *, versioned: bool = True
    ) -> None:
        """RESTORE database `db` of the base at `path` (over the links
        `chain`) into the object's database, made first (empty) by
        `create_database`: the archive's own CREATE DATABASE is never run
        (`archives.restore`; `versioned`: see there)."""
        self._name(db)
        archives.restore(self, db, path, chain, versioned=versioned)

    def archive(self, sql: str, what: str) -> None:
        """Run our own BACKUP or RESTORE `sql`; `what` names it in an error."""
        try:
            self._conn.query(sql, "CSV")
        except Exception as exc:
            text = self.message(exc)
            raise EngineError(f"{what} failed: {text}") from None

    def release(self) -> None:
        """Drop the object's database and close the connection: nothing of the
        object is left in the engine for the next one."""
        conn = self._conn
        if conn is not None:
            try:
                conn.query(f"DROP DATABASE IF EXISTS {quote_ident(self.database)} SYNC", "CSV")
            except Exception:
                ORPHANS.append(self.database)  # the next acquire() tries again
        self.close(orphan=False)

    def close(self, *, orphan: bool = True) -> None:
        """Close the connection without a query (from __del__ or at exit); the
        next acquire() drops the database left behind."""
        conn, self._conn = self._conn, None
        LIVE.discard(self)
        if conn is not None:
            if orphan:
                ORPHANS.append(self.database)
            with contextlib.suppress(Exception):  # closing a dead connection: nothing to say
                conn.close()


#: Why a bounded block stopped, by what the engine said (the first found).
_STOPS = (
    ("TIMEOUT_EXCEEDED", "the {what} ran past its bound of {s:g} s and was stopped"),
    (
        "function range would produce",
        "the {what} would build a range() larger than a bound of {s:g} s allows "
        f"(about {RANGE_PER_SECOND:,} elements per block for each second); it was stopped before "
        "building it",
    ),
)


def _stopped(exc: BaseException, guard: Guard | None) -> str | None:
    """The message (a template) of a `Timeout` for `exc`, raised in a bounded
    block, when it means the block was stopped by its bound; else None. The
    watchdog's kill shows as anything (a cancelled query, a statement the
    gate could not read), so once it fired every error is the bound's."""
    if isinstance(exc, Timeout) or (guard is not None and guard.fired):
        return "the {what} ran past its bound of {s:g} s and was stopped"
    text = str(exc)
    return next((why for mark, why in _STOPS if mark in text), None)
