"""TTL that every replica agrees on: a hypothesis state machine.

Random writes (INSERTs of rows of random age, some with a NULL time that
never expires, and deletes), `set_ttl` / `remove_ttl`, sweeps (on demand, or
the background sweep's tick) at clock times the machine moves, flushes,
checkpoints, kills (the writer abandoned without close, then reopened with
force or after its lease ran out), clean reopens. The writer's wall clock is
frozen and moved only by the machine (as in test_stateful_faults.py), and the
background schedulers are stopped: the machine calls the ticks.

The model holds the rows (id -> time in seconds, or None) the writer's copy
must hold, the rows committed, and the policy; a sweep at time T with a
TTL of S must delete exactly the rows whose time is < T - S. Every state
committed is recorded by seq, and:

* the writer holds exactly the model's rows, always; after a kill its
  reopened copy holds exactly what was committed, at the committed seq;
* a follower (a read-only open that follows, refreshed by the machine),
  a fresh read-only open, a reopened writer and a fork at a recorded seq
  (`Namespace.fork(at=seq)`) each hold exactly the rows and the policy
  recorded for their seq. No replica expires a row on its own: only what
  a sweep logged is deleted anywhere.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _time
import uuid
import warnings

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import durable_obj
import durable_obj.core.object
from durable_obj.core.expiry import TtlPolicy
from durable_obj.stores.base import Store
from durable_obj.stores.file import FileStore
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import abandon

DDL = (
    "CREATE TABLE ev (id UInt32, ts Nullable(DateTime64(3, 'UTC'))) ENGINE = MergeTree ORDER BY id"
)
ROWS = "SELECT id, toUnixTimestamp64Milli(ts) FROM ev ORDER BY id"
LEASE = 30.0
SKEW = 5.0
START = 1_800_000_000

#: Ages, TTLs and clock moves, in steps of 100 s: a row's time often lands
#: exactly on a cutoff (it must stay: a row expires when it is older).
STEPS = st.integers(0, 60).map(lambda n: n * 100)
#: Rows as the model holds them: id -> time (whole seconds since the epoch) or None.
Rows = dict[int, int | None]
#: What a committed seq holds: its rows, and its TTL in seconds (None: no policy).
Point = tuple[Rows, int | None]


class FrozenClock:
    """The `time` module durable_obj.core.object sees: wall clock moved by the machine."""

    def __init__(self) -> None:
        self.now = START

    def time(self) -> float:
        return float(self.now)

    monotonic = staticmethod(_time.monotonic)
    sleep = staticmethod(_time.sleep)


def held(obj: durable_obj.DurableObject) -> Point:
    rows = {int(i): None if ms is None else int(ms) // 1000 for i, ms in obj.rows(ROWS)}
    policies = obj.ttl()
    assert all(p.table == "ev" and p.column == "ts" for p in policies), policies
    assert len(policies) <= 1, policies
    return rows, (int(policies[0].seconds) if policies else None)


class TtlMachine(RuleBasedStateMachine):
    def make_inner(self) -> Store:
        return MemoryStore(f"ttl-{uuid.uuid4().hex}")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FrozenClock()
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(durable_obj.core.object, "time", self.clock)
        self.inner = self.make_inner()
        self.ns = durable_obj.Namespace(
            self.inner, owner="w", lease_ttl=LEASE, clock_skew=SKEW, retention=10**8
        )
        self.obj: durable_obj.DurableObject | None = None
        self.follower: durable_obj.DurableObject | None = None
        self.local: Rows = {}
        self.committed: Rows = {}
        self.ttl: int | None = None  # the policy is a write() unit: always committed
        self.past: dict[int, Point] = {}
        self.next_id = 1
        self.forks = 0

    # -- helpers ---------------------------------------------------------------
    def _open(self, *, force: bool = False) -> durable_obj.DurableObject:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # force takeover warns
            obj = self.ns.open("o", force=force)
        obj._stop_heartbeat()  # the machine calls the ticks: no background calls
        return obj

    def _committed(self) -> None:
        """The writer's buffer is empty: what it holds is committed at its seq."""
        assert self.obj is not None and self.obj.pending == 0
        self.committed = dict(self.local)
        point = (dict(self.committed), self.ttl)
        seq = self.obj.seq
        known = self.past.setdefault(seq, point)
        assert known == point, f"seq {seq} was {known}, now {point}"

    def _expired(self) -> set[int]:
        if self.ttl is None:
            return set()
        cutoff = self.clock.now - self.ttl
        return {i for i, t in self.local.items() if t is not None and t < cutoff}

    @initialize()
    def setup(self) -> None:
        self.obj = self._open()
        self.obj.execute(DDL)
        self.obj.flush()
        self._committed()
        # a follower (`core/follow.py`) whose poll never comes: the machine refreshes it
        following = durable_obj.Namespace(self.inner, follow=3600.0)
        self.follower = following.open("o", read_only=True)
        assert self.follower.following

    # -- writes ------------------------------------------------------------------
    @rule(ages=st.lists(st.one_of(st.none(), STEPS), min_size=1, max_size=5))
    def insert(self, ages: list[int | None]) -> None:
        assert self.obj is not None
        values = []
        for age in ages:
            t = None if age is None else self.clock.now - age
            self.local[self.next_id] = t
            lit = "NULL" if t is None else f"toDateTime64({t}, 3, 'UTC')"
            values.append(f"({self.next_id}, {lit})")
            self.next_id += 1
        self.obj.execute("INSERT INTO ev VALUES " + ", ".join(values))

    @precondition(lambda self: self.local)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        assert self.obj is not None
        victim = data.draw(st.sampled_from(sorted(self.local)))
        self.obj.execute(f"DELETE FROM ev WHERE id = {victim}")
        del self.local[victim]

    @rule(seconds=STEPS.filter(bool))
    def set_ttl(self, seconds: int) -> None:
        assert self.obj is not None
        self.obj.set_ttl("ev", "ts", seconds)
        self.ttl = seconds
        self._committed()

    @precondition(lambda self: self.ttl is not None)
    @rule()
    def remove_ttl(self) -> None:
        assert self.obj is not None
        self.obj.remove_ttl("ev")
        self.ttl = None
        self._committed()

    @rule(seconds=STEPS)
    def time_passes(self, seconds: int) -> None:
        self.clock.now += seconds

    @rule(background=st.booleans())
    def sweep(self, background: bool) -> None:
        assert self.obj is not None
        gone = self._expired()
        before = self.obj.pending
        if background:
            assert self.obj._sweep_tick() is True
        else:
            assert self.obj.sweep_ttl() == len(gone)
        for i in gone:
            del self.local[i]
        if before == 0:  # nothing else buffered: its deletes committed at once
            self._committed()
        else:  # they wait, in one unit, with the caller's statements
            assert self.obj.pending == before + (1 if gone else 0)

    @rule()
    def flush(self) -> None:
        assert self.obj is not None
        self.obj.flush()
        self._committed()

    @rule()
    def checkpoint(self) -> None:
        assert self.obj is not None
        self.obj.checkpoint()
        self._committed()

    # -- kills and reopens -----------------------------------------------------------
    @rule(force=st.booleans())
    def kill(self, force: bool) -> None:
        """The writer's process dies: nothing flushed, nothing released."""
        assert self.obj is not None
        abandon(self.obj)
        if not force:
            self.clock.now += int(LEASE + SKEW) + 1  # its lease runs out
        self.obj = self._open(force=force)
        self.local = dict(self.committed)
        assert self.obj.seq == max(self.past)
        assert held(self.obj) == (self.committed, self.ttl)

    @rule()
    def reopen(self) -> None:
        assert self.obj is not None
        self.obj.flush()
        self._committed()
        self.obj.close()  # may fold the WAL into a checkpoint: a new seq, the same rows
        self.obj = self._open()
        assert held(self.obj) == (self.committed, self.ttl)
        self._committed()

    # -- replicas ----------------------------------------------------------------------
    @rule()
    def replicas_agree(self) -> None:
        """The follower and a fresh reader, at the writer's committed seq."""
        assert self.obj is not None and self.follower is not None
        seq = max(self.past)
        self.follower.refresh()
        assert self.follower.seq == seq
        assert held(self.follower) == self.past[seq]
        with self.ns.open("o", read_only=True) as reader:
            assert reader.seq == seq
            assert held(reader) == self.past[seq]

    @rule(data=st.data())
    def fork_at(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.past)))
        self.forks += 1
        dst = f"fork-{self.forks}"
        self.ns.fork("o", dst, at=seq)
        with self.ns.open(dst, read_only=True) as copy:
            assert held(copy) == self.past[seq]
            assert copy.ttl() == (
                [] if self.past[seq][1] is None else [TtlPolicy("ev", "ts", self.past[seq][1])]
            )

    @invariant()
    def writer_holds_the_model(self) -> None:
        if self.obj is not None:
            assert held(self.obj) == (self.local, self.ttl)

    def teardown(self) -> None:
        try:
            if self.obj is not None:
                abandon(self.obj)
            if self.follower is not None:
                self.follower.close()
            if isinstance(self.inner, FileStore):
                shutil.rmtree(self.inner.url.removeprefix("file://"), ignore_errors=True)
        finally:
            self.patch.undo()


class FileTtlMachine(TtlMachine):
    """The same machine on a local folder."""

    def make_inner(self) -> Store:
        return FileStore(tempfile.mkdtemp(prefix="durable-ttl-"))


_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
_SETTINGS = settings(
    max_examples={"ci": 40, "nightly": 1000}.get(_PROFILE, 10),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTtlMachine = TtlMachine.TestCase
TestTtlMachine.settings = _SETTINGS
TestFileTtlMachine = FileTtlMachine.TestCase
TestFileTtlMachine.settings = settings(_SETTINGS, max_examples=-(-_SETTINGS.max_examples // 2))
