"""The process's chDB engine: the one module that imports chdb.

One engine per process (one data path in a private folder, removed at
exit), started once, in the background while the first open reads its
head (`prestart`), with the synchronous-write settings a durable object
promises (an `execute()` that returned has been applied, nothing completes
behind the call). chDB is loaded with the engine's zone pinned to UTC.
`connect` gives a new connection to it, for one object (`engine.acquire`
wraps it in an `Engine`), on pages the allocator has handed back (`_purge`:
an idle object's RSS); the internal databases of objects closed without a
query are dropped by the next one.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import importlib
import logging
import os
import shutil
import sys
import threading
import time
import zoneinfo
from typing import TYPE_CHECKING, Any

from durable_obj.errors import EngineError, EngineIncompatible
from durable_obj.gate.quoting import quote_ident
from durable_obj.replica import extension
from durable_obj.replica import placement as placement_mod
from durable_obj.replica.placement import Placement

if TYPE_CHECKING:
    from collections.abc import Callable

    from durable_obj.replica.engine import Engine

#: Pinned on every managed connection: nothing may complete asynchronously.
SYNCHRONOUS_SETTINGS = {
    "async_insert": "0",
    "wait_for_async_insert": "1",
    "mutations_sync": "2",
    "alter_sync": "2",
}

_REQUIRED_ABI = ("backup_database", "restore_database", "classify_query")
_VERSION: str | None = None
_PLACED: list[Placement] = []
#: The process's engine: its connection string and the connection that keeps
#: it running (also used to drop what a collected object left behind), and
#: "purge": False once the engine refused a purge (`_purge`).
_SERVER: dict[str, Any] = {}
#: Internal databases of engines closed without a query (from __del__ or at
#: exit), dropped by the next acquire().
ORPHANS: list[str] = []
#: Every open connection of an object (`Engine`), closed at exit.
LIVE: set[Engine] = set()


def placement() -> Placement:
    """Where this process's engine keeps its files (`placement.py`), decided
    on first use; its folders are removed when the process exits."""
    if not _PLACED:
        _PLACED.append(placement_mod.decide())
    return _PLACED[0]


def engine_root() -> str:
    """This process's private engine folder on disk: `backups/` is the only
    place BACKUP and RESTORE may touch (each open gets its own folder in it);
    the engine's data path is `placement().data` (in memory, or here)."""
    return placement().root


def engine_paths() -> tuple[str, ...]:
    """Every folder of this process's engine (for messages to hide)."""
    placed = placement()
    return (placed.root, os.path.dirname(placed.data))


def _shutdown() -> None:
    """At exit (registered below, at import, so it runs after every handler
    registered later). A background engine start still running is waited
    for first: a daemon thread inside chDB's start-up while the interpreter
    tears down crashed the process (SIGSEGV after an open refused before
    the engine was needed, e.g. `durable-obj mcp` on a held lease). Then
    the helpers (`HELPERS`): one a background start began may have started
    after the interpreter stopped waiting for its threads."""
    for thread in list(_STARTING):
        thread.join(timeout=_START_EXIT_WAIT)
    for thread in list(HELPERS):
        if thread.is_alive():
            thread.join(timeout=_START_EXIT_WAIT)
    for engine in list(LIVE):
        engine.close()
    anchor = _SERVER.pop("anchor", None)
    if anchor is not None:
        with contextlib.suppress(Exception):
            anchor.close()
    for placed in _PLACED:
        shutil.rmtree(os.path.dirname(placed.data), ignore_errors=True)
        shutil.rmtree(placed.root, ignore_errors=True)
    placement_mod.release()


_STARTING: list[threading.Thread] = []
#: Threads that run queries on the engine without an object of their own
#: (the gate's catalogue read ahead): the exit waits for them before it
#: closes the engine.
HELPERS: list[threading.Thread] = []
#: Seconds the exit handler waits for a background engine start.
_START_EXIT_WAIT = 60.0
atexit.register(_shutdown)
#: Held while the engine starts, and by a later `import chdb` while chdb's
#: package initialises (`extension`); reentrant for a start that loads it.
_START_LOCK = threading.RLock()
#: Held while the engine module loads; reentrant for a package whose
#: import that load sets off on the same thread (`extension`).
_IMPORT_LOCK = threading.RLock()
log = logging.getLogger("durable_obj")


def _chdb() -> Any:
    """The raw extension, not chdb.state.sqlitelike: the wrapper imports
    pyarrow (~0.1 s of every cold open) for features we never use; and
    loaded without chdb's package where it can be (`extension`: about 80
    ms of a cold open, and no change of the working folder).

    Imported with TZ=UTC: ClickHouse runs mutations (`ALTER ... UPDATE`,
    `DELETE`) in the engine's default zone, not the session's, and fixes
    that zone from TZ when the library loads. Loaded here, it is UTC in
    every durable_obj process, so a mutation that reads a DateTime without a
    zone replays to the same value in every process, whatever its TZ (the
    process's own TZ is put back at once)."""
    loaded = sys.modules.get("chdb._chdb")
    if loaded is not None:
        return loaded
    with _IMPORT_LOCK:
        # The C environment only (putenv), never `os.environ`: another thread
        # may be iterating that mapping (botocore reads proxies from it while
        # the head is fetched), and a key deleted under it is a KeyError there.
        saved = os.environ.get("TZ")
        os.putenv("TZ", "UTC")
        try:
            loaded = extension.load()
            return loaded if loaded is not None else importlib.import_module("chdb._chdb")
        except ImportError as exc:  # pragma: no cover - chdb is a hard dependency
            raise EngineIncompatible(f"chdb is not importable: {exc}") from exc
        finally:
            if saved is None:
                os.unsetenv("TZ")
            else:
                os.putenv("TZ", saved)
            time.tzset()


def _check_zone(anchor: Any) -> None:
    """Warn once when chdb was loaded before durable_obj could pin the
    engine's zone (`_chdb`): mutations then read zone-less DateTimes in the
    process's zone, and replay elsewhere may differ."""
    zone = decoded(anchor.query("SELECT serverTimezone()", "TSV")).strip()
    if not _is_utc(zone):
        log.warning(
            "chdb was imported before durable_obj started its engine, so the engine's zone "
            "is this process's (%s), not UTC: an ALTER ... UPDATE or DELETE that reads a "
            "DateTime without a zone (toDateTime('2026-01-01 00:00:00'), a string compared "
            "with a DateTime column) runs in %s here and may replay to other values in another "
            "zone. Import durable_obj (and open an object) before chdb, or run with TZ=UTC.",
            zone,
            zone,
        )


def _is_utc(zone: str) -> bool:
    """Whether `zone` is UTC under another name (Etc/UTC, GMT, Zulu, ...):
    no offset from UTC at any time of year from 1900 to 2100."""
    if zone == "UTC":
        return True
    try:
        info = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return all(
        datetime.datetime(year, month, 15, tzinfo=info).utcoffset() == datetime.timedelta(0)
        for year in range(1900, 2101)
        for month in (1, 7)
    )


def _start() -> None:
    """Start the process's engine (under `_START_LOCK`), once."""
    global _VERSION
    if "anchor" in _SERVER:
        return
    placed = placement()
    args = dict(SYNCHRONOUS_SETTINGS)
    # BACKUP/RESTORE may only touch this process's own scratch.
    args["backups.allowed_path"] = os.path.join(placed.root, "backups")
    if placed.config is not None:
        args["config-file"] = placed.config
    if placement_mod.ram_backed(placed.data):
        # A tmpfs refuses the engine's default read (pread_threadpool first
        # tries preadv2 with RWF_NOWAIT: EOPNOTSUPP), so every read of a
        # part went through its thread pool: a scan of 100k rows took 130
        # ms against 57 with plain pread, and BACKUP 33 against 20 ms.
        args["local_filesystem_read_method"] = "pread"
    conn_str = placed.data + "?" + "&".join(f"{k}={v}" for k, v in args.items())
    try:
        anchor = _chdb().connect(conn_str)
    except Exception as exc:
        raise EngineError(f"could not start the chDB engine: {exc}") from exc
    missing = [name for name in _REQUIRED_ABI if not hasattr(anchor, name)]
    if missing:
        anchor.close()
        raise EngineIncompatible(
            f"the loaded chdb-core lacks {', '.join(missing)} (needs 26.7.2 or newer); "
            "run: pip install -U chdb-core"
        )
    _VERSION = decoded(anchor.query("SELECT chdb()", "TSV")).strip()
    _check_zone(anchor)
    _SERVER.update(anchor=anchor, conn_str=conn_str)


def prestart(then: Callable[[], None] | None = None) -> None:
    """Start the process's engine in the background, if it is not running,
    and once it runs call `then` on that thread (best effort: an open uses
    it to start reading the gate's catalogue, engine time that then
    overlaps what the open does meanwhile).

    An open calls this before its first network round trip, so the engine
    start (~0.1 s) overlaps the head read. If the background start fails,
    `acquire` starts it itself and reports that failure."""
    with _START_LOCK:
        if "anchor" in _SERVER or _STARTING:
            return

        def start() -> None:
            with _START_LOCK, contextlib.suppress(Exception):  # acquire() reports it
                _start()
            if then is not None and "anchor" in _SERVER:
                with contextlib.suppress(Exception):  # only a head start: done again if needed
                    then()

        thread = threading.Thread(target=start, name="durable_obj-engine-start", daemon=True)
        _STARTING.append(thread)
        thread.start()


def started() -> bool:
    """Is the process's engine running?"""
    return "anchor" in _SERVER


def start() -> None:
    """Load chDB and start the process's engine now, if it is not running
    (waiting for a background start); `EngineError` if it cannot start."""
    with _START_LOCK:
        starting = list(_STARTING)
    for thread in starting:
        thread.join()
    with _START_LOCK:
        _start()


def connect() -> Any:
    """A new raw connection to the process's engine (started on first use),
    for one object: any number may be open at once, each in its own
    database. Drops what objects closed without a query left behind."""
    with _START_LOCK:
        starting = list(_STARTING)
    for thread in starting:
        thread.join()
    with _START_LOCK:
        for thread in starting:
            if thread in _STARTING:
                _STARTING.remove(thread)
        _start()
        anchor = _SERVER["anchor"]
        while ORPHANS:
            db = ORPHANS.pop()
            with contextlib.suppress(Exception):  # best effort: it holds nobody's data now
                anchor.query(f"DROP DATABASE IF EXISTS {quote_ident(db)} SYNC", "CSV")
        _purge(anchor)
        try:
            conn = _chdb().connect(_SERVER["conn_str"])
        except Exception as exc:
            raise EngineError(f"could not connect to the chDB engine: {exc}") from exc
    return conn


def _purge(anchor: Any) -> None:
    """Hand the allocator's freed pages back to the system before a new
    connection takes its memory.

    A connection allocates about 1.3 MiB at once (one 1.25 MiB block; it
    touches about 0.1 MiB of it). On fresh pages the rest is never resident;
    on pages a RESTORE, a query or an INSERT just freed (jemalloc keeps
    them, resident, for seconds) all of it is, for as long as the
    connection lives: an idle object cost 1.2 MiB instead of 0.2. A purge
    first costs about 0.5 ms per connect. Best effort: an engine without
    jemalloc refuses it, once, and is not asked again."""
    if _SERVER.get("purge", True):
        try:
            anchor.query("SYSTEM JEMALLOC PURGE", "CSV")
        except Exception:  # no jemalloc in this build: the connection costs more, no harm
            _SERVER["purge"] = False


def version() -> str:
    """The running engine's chDB version."""
    assert _VERSION is not None
    return _VERSION


def decoded(result: Any) -> str:
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


# A caller's own `import chdb` from now on initialises chdb's package on the
# engine module `_chdb` loads, never beside this engine's start (`extension`).
extension.install(_chdb, lambda: _SERVER.get("conn_str"), _START_LOCK)
