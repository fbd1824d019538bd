"""The namespace catalog: every object of a namespace, one row each, in one key.

    <namespace>/_catalog.json  {"format": "durable_obj.catalog/1", "rows": [
        {"id", "seq", "generation", "segments", "live_bytes", "last_write",
         "lease": {"owner", "expires_at"} | null,
         "description"?, "db"?, "timezone"?, "encrypted_with"?, "compressed"?}]}

Listing a thousand objects costs a LIST plus a GET of every head; the catalog
is one GET. It is a navigation hint, never the truth (each head.json is):

* a row is written only by its object's writer, from a head it has just
  proven stored (open, close, a checkpoint; never a flush, whose cost it would
  double), by compare-and-swap on this one key; a lost race re-reads and
  merges (writers touch disjoint rows: a merge replaces one row of the fresh
  copy). The rows of one process are written together, on a thread of
  their own (`Writer`): an open or checkpoint that queued a row does not
  wait for it; a close does (a process may end right after it), and so do
  a listing in the same process (`settle`) and the interpreter's exit;
* a row never goes back: it does not replace a row of a newer (generation,
  seq), so a superseded writer's late update is dropped;
* a failed update (after `ATTEMPTS` tries or `DEADLINE` seconds, or on a
  store error) is logged and dropped, never raised: the catalog is then
  behind its heads, and a rebuild (a LIST and every head,
  `service/catalog.py`) makes it agree again;
* a writer creates the catalog only where no other object is (one folder
  listing, only while there is no catalog): a catalog started by one writer
  among many would hide the others. `Namespace.rebuild_catalog()` starts it
  in a namespace that has objects.

No object id can be `_catalog.json` (`service/addressing.check_oid`), and gc
deletes only below an object's folder, so the key is never an object's.
Rows hold only what an object's head.json shows in the clear (a head is never
sealed, an encrypted object's neither: its lease is read without a key), and
nothing of its data or keys: an encrypted object's row is as readable as its
head, and no more (docs/guides/operations.md, "The catalog").
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from durable_obj.core.ops import ObjectInfo, live_refs
from durable_obj.errors import DurableError
from durable_obj.wire import keyring
from durable_obj.wire.protocol import DEFAULT_TIMEZONE, valid_oid
from durable_obj.wire.untrusted import dump_json, parse_json

if TYPE_CHECKING:
    from durable_obj.core.commit import HeadWriter
    from durable_obj.stores.base import Store
    from durable_obj.wire.head import Head

log = logging.getLogger("durable_obj.catalog")

CATALOG_KEY: Final = "_catalog.json"
FORMAT: Final = "durable_obj.catalog/1"
#: A writer's update gives up after this many tries, or this many seconds
#: (each try that loses a race backs off, jittered, 10 ms doubling up to 160 ms).
ATTEMPTS: Final = 32
DEADLINE: Final = 3.0
#: ... or after this many store errors (a lost race is no error).
ERRORS: Final = 3
_BACKOFF: Final = 0.01

Row = dict[str, Any]


def row_of(oid: str, head: Head, *, head_bytes: int, now: float) -> Row:
    """The row of `oid` as `head` (stored as `head_bytes` bytes) shows it,
    written at `now`. Fields at their default are left out (compact)."""
    lease = head.lease
    row: Row = {
        "id": oid,
        "seq": head.manifest.seq,
        "generation": lease.generation,
        "segments": len(head.manifest.wal),
        "live_bytes": sum(r.size for r in live_refs(head)) + head_bytes,
        "last_write": round(now, 3),
        "lease": None
        if lease.owner is None
        else {"owner": lease.owner, "expires_at": lease.expires_at},
    }
    optional = {
        "description": head.description,
        "db": None if head.manifest.db == "default" else head.manifest.db,
        "timezone": None if head.timezone == DEFAULT_TIMEZONE else head.timezone,
        "encrypted_with": keyring.kek_of(head),
        "compressed": keyring.is_compressed(head) or None,
    }
    row.update({k: v for k, v in optional.items() if v is not None})
    return row


def row_of_writer(writer: HeadWriter) -> Row | None:
    """The row of the head `writer` last proved stored (None: it holds none)."""
    head = writer.head
    if head is None:
        return None
    return row_of(writer.oid, head, head_bytes=len(head.to_bytes()), now=time.time())


def order(row: Row) -> tuple[int, int]:
    """A row's place in its object's history: (generation, seq)."""
    return (int(row["generation"]), int(row["seq"]))


def _whole(value: object) -> bool:
    return type(value) is int and value >= 0


def _real(value: object) -> bool:
    return (type(value) is int or type(value) is float) and value >= 0  # NaN is not >= 0


def _text(value: object) -> bool:
    return value is None or type(value) is str


def info_of(row: object) -> ObjectInfo | None:
    """The `ObjectInfo` (`from_catalog`) of a catalog row; None for a row a
    reader may not show: a field it needs missing, or not of its type. One
    pass, no copies: a listing reads 10,000 rows."""
    if type(row) is not dict:
        return None
    oid, lease, last_write = row.get("id"), row.get("lease"), row.get("last_write")
    seq, generation, segments = row.get("seq"), row.get("generation"), row.get("segments")
    live_bytes, description = row.get("live_bytes"), row.get("description")
    db, timezone, kek = row.get("db"), row.get("timezone"), row.get("encrypted_with")
    if not (
        type(oid) is str
        and _whole(seq)
        and _whole(generation)
        and _whole(segments)
        and _whole(live_bytes)
        and (last_write is None or _real(last_write))
        and _text(description)
        and _text(db)
        and _text(timezone)
        and _text(kek)
        and valid_oid(oid)
    ):
        return None
    if lease is None:
        owner = expires_at = None
    elif type(lease) is dict and type(lease.get("owner")) is str:
        owner, expires_at = lease["owner"], lease.get("expires_at")
        if not (expires_at is None or _real(expires_at)):
            return None
    else:
        return None
    # A frozen dataclass's __init__ sets each field through object.__setattr__:
    # given its fields whole, a listing of 10,000 rows builds its infos 3x faster.
    info = object.__new__(ObjectInfo)
    fields = {
        "oid": oid,
        "seq": seq,
        "generation": generation,
        "owner": owner,
        "expires_at": expires_at,
        "segments": segments,
        "live_bytes": live_bytes,
        "stored_bytes": None,
        "last_write": last_write,
        "db": db or "default",
        "timezone": timezone or "UTC",
        "head": None,
        "description": description,
        "encrypted_with": kek,
        "compressed": bool(row.get("compressed")),
        "from_catalog": True,
    }
    object.__setattr__(info, "__dict__", fields)
    return info


def valid_row(row: object) -> bool:
    """A row a reader may show (`info_of`)."""
    return info_of(row) is not None


def load(data: bytes, where: str) -> dict[str, Any] | None:
    """The catalog document in `data`; None when it is not one this version
    writes (another format, not an object, rows not a list). `Corrupt` for
    bytes that are not JSON."""
    doc = parse_json(data, f"the catalog {where}", safe="it was not used")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    if not isinstance(doc.get("rows"), list):
        return None
    return doc


def dump(doc: dict[str, Any]) -> bytes:
    return dump_json(doc)  # a description read with a lone surrogate, written back escaped


def new_doc(rows: Iterable[Row] = ()) -> dict[str, Any]:
    return {"format": FORMAT, "rows": sorted(rows, key=_by_id)}


def merge(doc: dict[str, Any], rows: Iterable[Row]) -> bool:
    """Put `rows` into `doc` in place, each replacing the row of its id unless
    that row is newer (`order`). Rows of other ids, and fields and rows this
    version does not know, are kept. True if anything changed."""
    current: list[Any] = doc["rows"]
    at = {r["id"]: n for n, r in enumerate(current) if isinstance(r, dict) and "id" in r}
    changed = False
    for row in rows:
        n = at.get(row["id"])
        if n is None:
            at[row["id"]] = len(current)
            current.append(row)
            changed = True
            continue
        old = current[n]
        if valid_row(old) and order(old) > order(row):
            continue  # a newer writer's row: ours is late
        if old != row:
            current[n] = row
            changed = True
    if changed:
        current.sort(key=_by_id)
    return changed


def _by_id(row: object) -> str:
    return str(row.get("id")) if isinstance(row, dict) else ""


class Writer:
    """The catalog updates of one namespace's objects in this process,
    written by a thread of their own: a writer's open or checkpoint queues
    its row (`post`) and goes on, a close waits for its own (`put`), and
    every row queued while a write is in flight goes out in the next one,
    one compare-and-swap for all (a pool that opens a hundred objects
    writes the catalog a few times, not a hundred). The thread ends when
    nothing is queued; the interpreter's exit waits for it. A listing in
    this process waits for it first (`settle`), so it sees what this
    process wrote."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Condition(threading.Lock())
        self._pending: dict[str, Row] = {}
        self._thread: threading.Thread | None = None
        self._started = 0
        self._finished = 0
        self._outcomes: dict[int, bool] = {}

    def post(self, row: Row, store: Store | None = None) -> int:
        """Queue `row` for the next write (with every row queued meanwhile),
        made on this writer's thread with `store` (a client of this
        writer's namespace, made with the same options: the newest given);
        the number of that write (`put`)."""
        inline = False
        with self._lock:
            if store is not None:
                self.store = store
            self._pending[row["id"]] = row
            mine = self._started + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="durable_obj-catalog")
                try:
                    self._thread.start()
                except RuntimeError:  # the interpreter is exiting: no new thread
                    inline = True
        if inline:
            self._drain()
        return mine

    def put(self, row: Row, store: Store | None = None, timeout: float | None = DEADLINE) -> bool:
        """`post` `row` and wait for its write, at most `timeout` seconds:
        True once a catalog holds it; False if it was dropped (logged) or
        still waits."""
        mine = self.post(row, store)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._finished < mine:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._lock.wait(left):
                    return False
            return self._outcomes.get(mine, False)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or being written; False if `timeout`
        seconds passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: self._thread is None, timeout)

    def _drain(self) -> None:
        """Write what is queued, round after round, until nothing is; never raises."""
        with self._lock:
            try:
                while self._pending:
                    batch, self._pending = self._pending, {}
                    self._started += 1
                    ok = False
                    self._lock.release()
                    try:
                        ok = self._write(batch)
                    except BaseException:  # a hint: logged, never raised; this thread goes on
                        log.exception("%s: the catalog update failed", self.store.url)
                    finally:
                        self._lock.acquire()
                        self._finished = self._started
                        self._outcomes[self._finished] = ok
                        self._outcomes.pop(self._finished - 64, None)
                        self._lock.notify_all()
            finally:
                self._thread = None
                self._lock.notify_all()

    def _write(self, rows: dict[str, Row]) -> bool:
        """One catalog update of `rows`: read, merge, compare-and-swap, again
        on a lost race, until `ATTEMPTS` or `DEADLINE`. Never raises."""
        deadline = time.monotonic() + DEADLINE
        store = self.store  # one client for the whole update (`post` may name a newer one)
        where = f"{store.url.rstrip('/')}/{CATALOG_KEY}"
        why, errors = "it kept changing", 0
        for attempt in range(ATTEMPTS):
            try:
                blob = store.get(CATALOG_KEY)
                if blob is None:
                    others = self._others(store, rows)
                    if others:
                        log.debug("%s: no catalog, and %s is not the only object", where, others)
                        return False
                    doc = new_doc()
                else:
                    loaded = load(blob.data, where)
                    if loaded is None:
                        log.warning("%s is not a catalog this version writes: left as is", where)
                        return False
                    doc = loaded
                if not merge(doc, rows.values()):
                    return True
                body = dump(doc)
                if blob is None:
                    done = store.create(CATALOG_KEY, body)
                else:
                    done = store.replace(CATALOG_KEY, body, blob.version)
                if done is not None:
                    return True
            except DurableError as exc:  # StoreAmbiguous included: the next read settles it
                why, errors = f"{type(exc).__name__}: {exc}", errors + 1
            if time.monotonic() >= deadline or errors >= ERRORS:
                break
            time.sleep(random.uniform(0.5, 1.0) * _BACKOFF * 2 ** min(attempt, 4))
        log.warning(
            "%s: %d row(s) not written (%s); the catalog is behind those objects' heads "
            "until their next open, close or checkpoint, or a rebuild",
            where,
            len(rows),
            why,
        )
        return False

    @staticmethod
    def _others(store: Store, rows: dict[str, Row]) -> str | None:
        """An object folder here that none of `rows` is, if any."""
        return next((n for n in store.list_folders() if valid_oid(n) and n not in rows), None)


#: The writer of each namespace while it is in use, by its clients'
#: `client_key` (the URL and the options they were made with): every object
#: of one namespace in this process, whatever its store client (each
#: `durable_obj.open` makes its own), queues its row with the same writer, so
#: a burst of opens is one thread and a few writes, never a race of many
#: compare-and-swaps on the one key (which dropped rows past `ATTEMPTS`).
#: Clients of one URL on other endpoints or credentials (two tenants) never
#: share one; a client with no key has a writer of its own.
_WRITERS: weakref.WeakValueDictionary[str, Writer] = weakref.WeakValueDictionary()
_WRITERS_LOCK = threading.Lock()


def writer_of(store: Store) -> Writer:
    key = store.client_key or f"{store.url}\n{id(store)}"
    with _WRITERS_LOCK:
        found = _WRITERS.get(key)
        if found is None:
            found = _WRITERS[key] = Writer(store)
        return found


def _forked() -> None:
    """In a fork's child: its parent's writer threads are not there."""
    global _WRITERS, _WRITERS_LOCK
    _WRITERS, _WRITERS_LOCK = weakref.WeakValueDictionary(), threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forked)


#: An open's and a checkpoint's rows are queued (True), or waited for to the
#: end as a close's are (False: for a test that replays a seed's store faults
#: call by call, which a write on another thread meanwhile would reorder).
QUEUED = True


def put(store: Store, row: Row | None, *, wait: bool = False) -> None:
    """Queue `row` for `store`'s catalog (module docstring): written on a
    thread of its own, never raised; with `wait`, waited for (at most
    `DEADLINE`): a close, after which a process may end at once
    (`os._exit`, as a multiprocessing child does). None (no head held)
    writes nothing."""
    if row is None:
        return
    try:
        writer = writer_of(store)
        if not QUEUED:
            writer.put(row, store, timeout=None)
        elif wait:
            writer.put(row, store)
        else:
            writer.post(row, store)
    except Exception:  # a hint: nothing here may fail a writer's call
        log.exception("%s: the catalog update failed", store.url)


def settle(timeout: float | None = 2 * DEADLINE) -> None:
    """Wait until every row this process queued is written (or dropped):
    what a listing here reads then shows them. At most `timeout` seconds
    per store."""
    with _WRITERS_LOCK:
        writers = list(_WRITERS.values())
    for writer in writers:
        writer.settle(timeout)


def note_writer(writer: HeadWriter) -> None:
    """`put` the row of the head `writer` last proved stored."""
    put(writer.store, row_of_writer(writer))
