"""The one module that imports chdb: a managed connection and the entry gates.

What lives here:

* `Engine`: a chDB connection in a private scratch directory with the
  synchronous-write settings a durable object promises (an `execute()` that
  returned has been applied, nothing completes behind the call), the current
  database pinned, and BACKUP/RESTORE through chdb-core's own ABI
  (`backup_database` / `restore_database`), so no BACKUP SQL is built here;
* `Analysis` and the gates built on chdb-core's `classify_query`: one
  statement, read-only vs mutating, secrets, writes only the object's
  database, no database lifecycle. No regex over the caller's SQL decides
  what a statement does.

chDB runs one engine (one data path) per process. A second live object in the
same process is refused with a message that says so; use a subprocess.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from durable_obj.errors import (
    ClassificationRefused,
    DurableError,
    EngineError,
    EngineIncompatible,
    InvalidArgument,
    SecretRefused,
)
from durable_obj.protocol import BACKUP_FORMAT, ENGINE_NAME, version_lt
from durable_obj.sql import quote_string

#: Pinned on every managed connection: nothing may complete asynchronously.
SYNCHRONOUS_SETTINGS = {
    "async_insert": "0",
    "wait_for_async_insert": "1",
    "mutations_sync": "2",
    "alter_sync": "2",
}

_REQUIRED_ABI = ("backup_database", "restore_database", "classify_query")
_LIVE: list[Engine] = []
_IDLE: list[Engine] = []
_VERSION: str | None = None
_ROOT: list[str] = []
_KEEP = frozenset({"system", "information_schema", "INFORMATION_SCHEMA"})


def engine_root() -> str:
    """This process's private engine directory: `data/` is the engine's data
    path, `backups/` the only place BACKUP and RESTORE may touch (each open
    gets its own folder in it). Removed when the process exits."""
    if not _ROOT:
        root = tempfile.mkdtemp(prefix=f"durable_obj-{os.getpid()}-")
        os.makedirs(os.path.join(root, "backups"))
        _ROOT.append(root)
        atexit.register(_shutdown)
    return _ROOT[0]


def _shutdown() -> None:
    for engine in [*_IDLE, *_LIVE]:
        engine.close()
    for root in _ROOT:
        shutil.rmtree(root, ignore_errors=True)


_STARTING: list[threading.Thread] = []
_START_LOCK = threading.Lock()


def prestart() -> None:
    """Start the process's first engine in the background, if none exists yet.

    An open calls this before its first network round trip, so the engine
    start (~0.1 s) overlaps the head read. If the background start fails,
    `acquire` starts one itself and reports that failure."""
    with _START_LOCK:
        if _IDLE or _LIVE or _STARTING:
            return
        root = engine_root()

        def start() -> None:
            try:
                engine = Engine(root)
            except Exception:
                return  # acquire() will try again and raise it
            with _START_LOCK:
                _IDLE.append(engine)

        thread = threading.Thread(target=start, name="durable_obj-engine-start", daemon=True)
        _STARTING.append(thread)
        thread.start()


def acquire() -> Engine:
    """The process's engine, emptied; started on first use.

    chDB runs one engine per process, and each engine start costs ~25 ms and
    leaks a few file descriptors inside chdb-core, so objects opened one
    after another share one engine, wiped between them."""
    with _START_LOCK:
        starting = list(_STARTING)
    for thread in starting:
        thread.join()
    with _START_LOCK:
        for thread in starting:
            if thread in _STARTING:
                _STARTING.remove(thread)
    if _LIVE:
        raise EngineError(
            "chDB runs one engine per process and another durable object is open here; "
            "close it first, or open this object in a subprocess"
        )
    engine = _IDLE.pop() if _IDLE else Engine(engine_root())
    _LIVE.append(engine)
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
    """A chDB connection in this process's private engine directory."""

    def __init__(self, root: str) -> None:
        global _VERSION
        # A data path of its own: if this engine is ever closed instead of
        # emptied, the next one must not find its tables on disk.
        data_path = tempfile.mkdtemp(prefix="data-", dir=root)
        backups_path = os.path.join(root, "backups")
        self._data = data_path
        self.backups = backups_path
        try:
            # The raw extension, not chdb.state.sqlitelike: the wrapper imports
            # pyarrow (~0.1 s of every cold open) for features we never use.
            chdb_raw: Any = importlib.import_module("chdb._chdb")
        except ImportError as exc:  # pragma: no cover - chdb is a hard dependency
            raise EngineIncompatible(f"chdb is not importable: {exc}") from exc
        args = dict(SYNCHRONOUS_SETTINGS)
        # BACKUP/RESTORE may only touch this object's own scratch.
        args["backups.allowed_path"] = backups_path
        conn_str = data_path + "?" + "&".join(f"{k}={v}" for k, v in args.items())
        try:
            self._conn: Any = chdb_raw.connect(conn_str)
        except Exception as exc:
            raise EngineError(f"could not start the chDB engine: {exc}") from exc
        self._raw: Any = self._conn
        missing = [name for name in _REQUIRED_ABI if not hasattr(self._raw, name)]
        if missing:
            self._conn.close()
            raise EngineIncompatible(
                f"the loaded chdb-core lacks {', '.join(missing)} (needs 26.7.2 or newer); "
                "run: pip install -U chdb-core"
            )
        if _VERSION is None:
            _VERSION = self.text("SELECT chdb()", "TSV").strip()

    @property
    def version(self) -> str:
        assert _VERSION is not None
        return _VERSION

    # -- statements ------------------------------------------------------
    def text(self, sql: str, fmt: str = "CSV", *, redact: bool = False) -> str:
        """Run `sql` and return its output. `redact` keeps the engine's message
        (which may quote the statement) out of the error."""
        try:
            result = self._conn.query(sql, fmt)
        except Exception as exc:
            if redact:
                raise EngineError(
                    "the statement failed (engine message withheld: it carries a credential)"
                ) from None
            raise EngineError(f"chDB: {_clean(exc)}") from exc
        return _decoded(result)

    def run(self, sql: str) -> None:
        self.text(sql, "CSV")

    def run_params(self, sql: str, params: dict[str, str]) -> str:
        try:
            result = self._conn.query(sql, "TSV", params=params)
        except Exception as exc:
            raise EngineError(f"chDB: {_clean(exc)}") from exc
        return _decoded(result)

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
        """Pin the current database; the name goes through a parameter."""
        self.run_params("USE {db:Identifier}", {"db": db})

    def set_timezone(self, tz: str) -> None:
        """Pin the session time zone: DateTime literals and functions then mean
        the same instant whatever the process's TZ."""
        known = self.run_params(
            "SELECT count() FROM system.time_zones WHERE time_zone = {tz:String}", {"tz": tz}
        ).strip()
        if known != "1":
            raise InvalidArgument(f"unknown time zone {tz!r}; use an IANA name such as 'UTC'")
        self.run("SET session_timezone = " + quote_string(tz))

    def create_database(self, db: str) -> None:
        self.run_params("CREATE DATABASE IF NOT EXISTS {db:Identifier}", {"db": db})

    def analyze(self, sql: str, db: str) -> Analysis:
        try:
            report = self._raw.classify_query(sql, db)
        except Exception as exc:
            raise EngineError(f"chDB could not analyse the statement: {_clean(exc)}") from None
        qc = report["query_class"]
        return Analysis(
            query_class=str(getattr(qc, "name", qc)),
            statement_count=int(report["statement_count"]),
            has_secrets=bool(report["has_secrets"]),
            writes_only_target_database=bool(report["writes_only_target_database"]),
            changes_database_lifecycle=bool(report["changes_database_lifecycle"]),
        )

    def syntax_error(self, sql: str) -> str:
        """Where chDB's parser stops on `sql`, without quoting any of it."""
        try:
            self._conn.query("SELECT formatQuery({q:String})", "TSV", params={"q": sql})
        except Exception as exc:
            match = re.search(r"failed at position (\d+)", str(exc))
            if match:
                return f"syntax error at position {match.group(1)}"
            return "it does not parse"
        return "it parses but is not a statement chDB can classify"

    # -- Durable V1 ABI ---------------------------------------------------
    def backup(self, db: str, path: str) -> None:
        """A full backup (never incremental: an incremental archive records its
        base by local path, which does not survive object storage)."""
        try:
            self._raw.backup_database(db, path)
        except Exception as exc:
            raise EngineError(f"backup of database {db!r} failed: {_clean(exc)}") from exc

    def restore(self, db: str, path: str) -> None:
        try:
            self._raw.restore_database(db, path)
        except Exception as exc:
            raise EngineError(f"restore of database {db!r} failed: {_clean(exc)}") from exc
        self._recount_blocks(db)

    def _recount_blocks(self, db: str) -> None:
        """RESTORE numbers a MergeTree table's parts from block 1 again but
        keeps their mutation versions, so the table's next mutation can get a
        version its parts already carry and be skipped as applied: an UPDATE
        or DELETE after opening from a checkpoint silently did nothing, here
        and on every replay. Reattaching such a table makes it count on from
        its parts' highest block or mutation version."""
        stale = self.json_rows(
            "SELECT table FROM system.parts WHERE database = {db:String} AND active "
            "GROUP BY table HAVING max(data_version) > max(max_block_number)",
            {"db": db},
        )
        for (table,) in stale:
            params = {"db": db, "t": table}
            self.run_params("DETACH TABLE {db:Identifier}.{t:Identifier}", params)
            self.run_params("ATTACH TABLE {db:Identifier}.{t:Identifier}", params)

    def release(self) -> None:
        """Hand the engine back, empty, for the next object; close it if it
        cannot be emptied."""
        if self in _LIVE:
            _LIVE.remove(self)
        if self._conn is None:
            return
        try:
            for (name,) in self.json_rows("SELECT name FROM system.tables WHERE is_temporary"):
                self.run_params("DROP TEMPORARY TABLE {t:Identifier}", {"t": name})
            for (db,) in self.json_rows("SELECT name FROM system.databases"):
                if db not in _KEEP and db != "default":
                    self.run_params("DROP DATABASE {db:Identifier} SYNC", {"db": db})
            # `default` itself stays: RESTORE compares its definition with the
            # archive's, and only the engine's own `default` matches. Views
            # and dictionaries first, so no table is dropped from under one.
            listing = self.json_rows(
                "SELECT name, engine FROM system.tables WHERE database = 'default' "
                "ORDER BY engine NOT LIKE '%View', engine != 'Dictionary'"
            )
            for name, kind in listing:
                drop = "DICTIONARY" if kind == "Dictionary" else "TABLE"
                self.run_params(f"DROP {drop} default.{{t:Identifier}} SYNC", {"t": name})
            self.run("USE default")
        except DurableError:
            self.close()
            return
        _IDLE.append(self)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if self in _LIVE:
            _LIVE.remove(self)
        if self in _IDLE:
            _IDLE.remove(self)
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection: nothing to say
                conn.close()
            shutil.rmtree(self._data, ignore_errors=True)


def _decoded(result: Any) -> str:
    """A query result as text. chDB decodes it as UTF-8 and raises a bare
    RuntimeError when it is not (a String holding arbitrary bytes)."""
    try:
        data = result.data() if hasattr(result, "data") else result
    except Exception:
        raise EngineError(
            "the result is not valid UTF-8 text (a String holding arbitrary bytes, such as "
            "randomString() or unhex() give); select hex(...) of such a value instead"
        ) from None
    return data if isinstance(data, str) else str(data)


def _clean(exc: BaseException) -> str:
    """The engine's message without its stack trace."""
    text = str(exc).split("Stack trace", 1)[0].strip()
    return text[:2000]


def check_compatible(*, name: str, backup_format: int, min_reader: str, running: str) -> None:
    """The V1 open gate: engine name, archive generation, reader version."""
    if name != ENGINE_NAME:
        raise EngineIncompatible(
            f"the object was written by engine {name!r}, not {ENGINE_NAME!r}; not opened"
        )
    if backup_format > BACKUP_FORMAT:
        raise EngineIncompatible(
            f"the object uses backup format {backup_format}; this engine restores up to "
            f"{BACKUP_FORMAT}. Upgrade chdb to open it; nothing was changed."
        )
    older = version_lt(running, min_reader)
    if older is None:
        raise EngineIncompatible(
            f"cannot order the running engine {running!r} against the object's min_reader "
            f"{min_reader!r}; refusing rather than assuming compatibility"
        )
    if older:
        raise EngineIncompatible(
            f"the object needs chDB {min_reader} or newer; this engine is {running}. "
            "Upgrade chdb-core; nothing was changed."
        )


def check_read(analysis: Analysis, syntax: str) -> None:
    """query() takes exactly one read-only statement."""
    if analysis.query_class == "UNKNOWN":
        raise ClassificationRefused(f"query() could not classify the statement: {syntax}")
    if analysis.statement_count != 1:
        raise ClassificationRefused(
            f"query() takes exactly one statement; chDB counted {analysis.statement_count}"
        )
    if analysis.query_class != "READ_ONLY":
        raise ClassificationRefused(
            f"query() takes a read-only statement; this one is {analysis.query_class}. "
            "Use execute() for a change, which logs it to the WAL."
        )


def check_mutation(analysis: Analysis, db: str, syntax: str) -> None:
    """execute() takes one statement that changes only the object's database.

    The checks run in chdb.durable V1's order: what kind of statement it is
    (control, global) is judged before its secrets, so both libraries give a
    statement the same category. Messages never quote the statement: it may
    carry a credential.
    """
    if analysis.query_class == "UNKNOWN":
        raise ClassificationRefused(
            f"execute() could not classify the statement ({syntax}); refusing rather than "
            "logging something whose effect is unknown. Nothing was run or logged."
        )
    if analysis.statement_count != 1:
        raise ClassificationRefused(
            f"execute() takes exactly one statement; chDB counted {analysis.statement_count}. "
            "Nothing was run or logged; call execute() once per statement."
        )
    if analysis.query_class == "READ_ONLY":
        raise ClassificationRefused(
            "this statement changes nothing; use query(), which does not write the WAL"
        )
    if analysis.query_class == "CONTROL":
        raise ClassificationRefused(
            "control statements (USE, SET, SYSTEM, BACKUP, RESTORE, per-statement settings "
            "or writes outside the engine) are managed by the durable object; not run"
        )
    if analysis.query_class == "MUTATING_GLOBAL":
        raise ClassificationRefused(
            "this statement changes state outside every database (users, settings "
            "profiles, ...), which a checkpoint cannot carry; not run"
        )
    if analysis.has_secrets:
        raise SecretRefused(
            "this mutation carries a credential, and WAL segments are stored as plain text; "
            "it was not run or logged. Load the data in the caller and INSERT literals."
        )
    if analysis.changes_database_lifecycle:
        raise ClassificationRefused(
            "creating, dropping or renaming a database changes the object's own container; "
            "the durable object manages that. Not run."
        )
    if not analysis.writes_only_target_database:
        raise ClassificationRefused(
            f"chDB could not prove that every write lands in the object's database {db!r}; "
            "a write to another database, system, a table function or a file is not part "
            "of the object. Not run."
        )
