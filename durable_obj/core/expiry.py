"""TTL that every replica agrees on: expiry as logged, pinned deletes.

    obj.set_ttl("events", "ts", 3600)   # rows whose ts is over an hour old expire
    obj.sweep_ttl()                     # -> rows deleted now (a logged DELETE)
    obj.ttl()                           # [TtlPolicy('events', 'ts', 3600.0)]
    obj.remove_ttl("events")

A table `TTL` clause is refused by the gate (`gate/defaults.py`): the engine
applies it during background merges, at a moment no replay can know, so the
writer and every replica would hold different rows. Here expiry is a
statement like any other. A sweep reads the writer's clock once, and for each
policy logs `DELETE FROM <table> WHERE <column> < toDateTime64('<cutoff>', 6,
'UTC')`: the cutoff is a literal in the WAL, so a replay, a follower, a
reopened copy and a fork all delete exactly the rows the writer deleted, at
the same seq. A row whose column is NULL never expires.

The policy lives in the object's own database, in the table `durable_obj_ttl`
(table, column, seconds), written by `set_ttl` / `remove_ttl` as a `write()`
unit: durable on return and replicated exactly as writes are (a fork, time
travel and chdb.durable see it as a table). So every writer that opens the
object later applies the same policy.

Who sweeps: the writer only, every `ttl_sweep_interval` seconds (Options,
default 60; 0 or None: only `sweep_ttl()`) on the heartbeat scheduler
(`heartbeat.py`), which never waits on the object's lock and never runs a
sweep while a transaction is open. A background failure is logged, never
raised. A sweep's deletes are one unit; it commits them by itself when
nothing else was buffered, else they join the buffer and commit with the
next flush: a sweep never makes a caller's unflushed statements durable
behind the caller's back. A policy whose table or column is gone or no
longer a date is skipped with a warning (and still listed by `ttl()`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from durable_obj.core.durability import Durability
from durable_obj.core.heartbeat import BUSY, Heartbeat
from durable_obj.core.surface import _OPEN, refuse_in_transaction
from durable_obj.core.transaction import Transactions
from durable_obj.core.units import _Planned
from durable_obj.errors import DurableError, InvalidArgument, LeaseFenced
from durable_obj.gate.quoting import quote_ident, quote_string

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

log = logging.getLogger("durable_obj")

#: The table, in the object's own database, that holds the TTL policies.
POLICY_TABLE = "durable_obj_ttl"
_POLICY_DDL = (
    f"CREATE TABLE IF NOT EXISTS {POLICY_TABLE} (tbl String, col String, seconds Float64) "
    "ENGINE = MergeTree ORDER BY tbl"
)
#: The longest TTL: its microseconds stay exact in a float's 53 bits (about
#: 285 years, past the end of DateTime64's range from any present clock).
MAX_SECONDS = float(2**53) / 1e6
#: A date type a cutoff compares with, possibly Nullable.
_DATE_TYPE = re.compile(r"^(?:Nullable\()?(?:Date|Date32|DateTime|DateTime64)(?:\(|\)|$)")
#: The earliest instant a DateTime64 holds: a cutoff before it deletes nothing.
_EARLIEST_US = -2_208_988_800 * 1_000_000  # 1900-01-01


@dataclass(frozen=True, slots=True)
class TtlPolicy:
    """Rows of `table` whose `column` is more than `seconds` old expire."""

    table: str
    column: str
    seconds: float


def _seconds(value: object) -> float:
    """A TTL in seconds, checked."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(
            f"set_ttl(): seconds must be a number or a timedelta, not {type(value).__name__}"
        )
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise InvalidArgument(
            f"set_ttl(): seconds must be over 0 and at most {MAX_SECONDS:.0f}, not {value!r}"
        )
    return seconds


def cutoff_literal(now: float, seconds: float) -> str | None:
    """The pinned cutoff `now - seconds` as a literal that means one instant
    in every zone (microseconds, UTC), or None when it is before 1900."""
    cut = round(now * 1e6) - round(seconds * 1e6)
    if cut < _EARLIEST_US:
        return None
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=cut)
    return f"toDateTime64({quote_string(when.strftime('%Y-%m-%d %H:%M:%S.%f'))}, 6, 'UTC')"


def target_problem(engine: Engine, db: str, table: str, column: str) -> str | None:
    """Why rows of `table` cannot expire by `column` (None: they can)."""
    found = engine.json_rows(
        "SELECT engine FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": db, "t": table},
    )
    if not found:
        return f"there is no table {table!r}"
    if not str(found[0][0]).endswith("MergeTree"):
        return (
            f"table {table!r} is a {found[0][0]} table; expiry deletes rows with DELETE FROM, "
            "which needs a MergeTree-family table"
        )
    types = engine.json_rows(
        "SELECT type, default_kind FROM system.columns WHERE database = {db:String} "
        "AND table = {t:String} AND name = {c:String}",
        {"db": db, "t": table, "c": column},
    )
    if not types:
        return f"table {table!r} has no column {column!r}"
    if types[0][1] == "ALIAS":
        return (
            f"column {column!r} of {table!r} is an ALIAS, computed when read; a TTL needs a "
            "stored column (a DELETE that reads a computed one could match other rows on replay)"
        )
    if not _DATE_TYPE.match(str(types[0][0])):
        return (
            f"column {column!r} of {table!r} is {types[0][0]}; a TTL needs a Date, Date32, "
            "DateTime or DateTime64 column (or a Nullable one)"
        )
    return None


class Expiry(Durability, Transactions):
    """`set_ttl()`, `ttl()`, `remove_ttl()` and `sweep_ttl()` of `DurableObject`,
    and the writer's background sweep."""

    #: The background sweep's schedule (a writer with a sweep interval).
    _ttl_hb: Heartbeat | None = None

    def set_ttl(self, table: str, column: str, seconds: float | timedelta) -> str | None:
        """Expire rows of `table` whose `column` (a Date, Date32, DateTime or
        DateTime64, or a Nullable one) is more than `seconds` old: every
        sweep deletes them with a logged DELETE whose cutoff is a literal.
        Replaces the table's policy, if it had one. Durable on return, as a
        `write()` unit (with everything buffered before it); returns its
        commit key. `InvalidArgument` when the table or column is missing or
        of the wrong kind. See `durable_obj.core.expiry`."""
        refuse_in_transaction(self, "set_ttl()")
        secs = _seconds(seconds)
        for what, name in (("table", table), ("column", column)):
            if not isinstance(name, str) or not name:
                raise InvalidArgument(f"set_ttl(): {what} must be a non-empty string")
        if table == POLICY_TABLE:
            raise InvalidArgument(f"set_ttl(): {POLICY_TABLE} holds the policies themselves")
        with self._lock:
            engine = self._require_writable()
            problem = target_problem(engine, self.db, table, column)
        if problem is not None:
            raise InvalidArgument(f"set_ttl() on {self.url}: {problem}. Nothing was changed.")
        return self.write(
            _POLICY_DDL,
            f"DELETE FROM {POLICY_TABLE} WHERE tbl = {quote_string(table)}",
            f"INSERT INTO {POLICY_TABLE} VALUES ({quote_string(table)}, "
            f"{quote_string(column)}, {secs!r})",
        )

    def remove_ttl(self, table: str) -> str | None:
        """Stop expiring rows of `table` (nothing when it has no policy). As
        set_ttl(): a `write()` unit, durable on return."""
        refuse_in_transaction(self, "remove_ttl()")
        if not isinstance(table, str) or not table:
            raise InvalidArgument("remove_ttl(): table must be a non-empty string")
        if not any(p.table == table for p in self.ttl()):
            return None
        return self.write(f"DELETE FROM {POLICY_TABLE} WHERE tbl = {quote_string(table)}")

    def ttl(self) -> list[TtlPolicy]:
        """The object's TTL policies, by table, as this copy holds them (a
        reader sees what its writer flushed)."""
        with self._lock:
            engine = self._require_open()
            if POLICY_TABLE not in self._policy_tables(engine):
                return []
            rows = self.rows(f"SELECT tbl, col, seconds FROM {POLICY_TABLE} ORDER BY tbl, col")
        return [TtlPolicy(str(t), str(c), float(s)) for t, c, s in rows]

    def _policy_tables(self, engine: Engine) -> list[str]:
        return [
            str(r[0])
            for r in engine.json_rows(
                "SELECT name FROM system.tables WHERE database = {db:String} AND name = {t:String}",
                {"db": self.db, "t": POLICY_TABLE},
            )
        ]

    def sweep_ttl(self) -> int:
        """Delete every row its table's policy expires now (the writer's
        clock), as logged DELETEs with a literal cutoff; the number of rows
        deleted. The deletes are committed at once when nothing else was
        buffered, else they commit with the next flush(). Writers only."""
        refuse_in_transaction(self, "sweep_ttl()")
        with self._lock:
            self._require_writable()
            return self._sweep_locked()

    def _sweep_locked(self) -> int:
        """One sweep (lock held, writer open)."""
        policies = self.ttl()
        if not policies:
            return 0
        engine = self._require_writable()
        now = self._w.clock.time()  # once: one instant for every policy of the sweep
        planned: list[_Planned] = []
        total = 0
        for p in policies:
            problem = target_problem(engine, self.db, p.table, p.column)
            if problem is None and not (math.isfinite(p.seconds) and p.seconds > 0):
                problem = f"its seconds ({p.seconds!r}) are not a positive number"
            if problem is not None:
                log.warning("%s: TTL policy of %r skipped: %s", self.url, p.table, problem)
                continue
            cutoff = cutoff_literal(now, min(p.seconds, MAX_SECONDS))
            if cutoff is None:
                continue
            where = f"{quote_ident(p.column)} < {cutoff}"
            count = int(
                self.rows(f"SELECT count() FROM {quote_ident(p.table)} WHERE {where}")[0][0]
            )
            if count:
                planned.append((f"DELETE FROM {quote_ident(p.table)} WHERE {where}", None, False))
                total += count
        if not planned:
            return 0
        alone = not self._buf
        self._run_unit(planned)
        if alone or self._auto_flush_due():
            self._flush_locked()
        log.info("%s: TTL sweep deleted %d row(s)", self.url, total)
        return total

    # -- the background sweep -----------------------------------------------------
    def _start_sweeper(self) -> None:
        every = self._opts.ttl_sweep_interval
        if every and not self._read_only and self._ttl_hb is None:
            self._ttl_hb = Heartbeat(self._sweep_tick, every, name=f"durable_obj-ttl-{self._oid}")
            self._ttl_hb.start()

    def _stop_sweeper(self) -> None:
        hb, self._ttl_hb = self._ttl_hb, None
        if hb is not None:
            hb.stop()

    def _sweep_tick(self) -> bool | Literal["busy"]:
        """One background sweep. Never waits for the lock, never runs inside
        a transaction or beside a commit in flight (BUSY: asked again soon),
        never raises. False: sweep no more (closed or fenced). (A test calls
        it directly.)"""
        if not self._lock.acquire(blocking=False):
            return BUSY
        try:
            if self._state != _OPEN or self._w.fenced:
                return False
            if self._txn is not None or self._group.in_flight:
                return BUSY
            if self._diverged:
                return True  # the next caller's call rebuilds the copy first
            try:
                self._sweep_locked()
            except LeaseFenced as exc:
                self._fenced_by(exc)
                return False
            except DurableError as exc:
                log.warning("%s: TTL sweep failed, will retry: %s", self.url, exc)
            except Exception:  # never kill the scheduler's worker; say what happened
                log.exception("%s: TTL sweep failed, will retry", self.url)
            return True
        finally:
            self._lock.release()
