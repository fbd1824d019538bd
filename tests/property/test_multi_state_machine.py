"""The state machine of test_stateful_faults.py, over two or three objects
open at once in this process (issue 14), each on a store of its own.

Each object has its own MemoryStore behind its own FaultyStore, with a seed
of its own. Some stores are armed from the start, and a rule arms (a rate
and a set of faults drawn by hypothesis) or disarms one object's store at
any step, so an error, an ambiguous answer, a lost response or a crash
point only ever happens to that object. Rules pick an
object and execute statements on it, flush, checkpoint, close, crash
(abandon) or reopen it, read it with a fresh read-only opener, or let a
rival writer in this same process take it over by force (fencing it).

Checked:

* per object, as in the one-object machine: a reopen, a fresh reader and a
  rival's open see exactly the acknowledged state, or it with exactly one
  whole failed attempt since the last acknowledgement, followed by what a
  rival committed; a fenced writer never gets a commit in;
* an object whose store is not armed never fails: every flush, checkpoint,
  close and reopen of it succeeds, whatever the others' stores do;
* after every step, every object the step did not touch is unchanged: its
  stored keys and head bytes, the calls its store saw, and its local copy
  (which still answers queries);
* the engine holds exactly one internal database per open object: nothing
  of a closed, crashed or fenced object, or of a failed open, is left.
"""

from __future__ import annotations

import os
import uuid
import warnings
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import durable_obj
from durable_obj import errors
from durable_obj.core import catalog
from durable_obj.gate.isolation import RESERVED_PREFIX
from durable_obj.replica.engine import Engine
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore, SimulatedCrash, abandon
from durable_obj.wire.head import Head
from tests.property.test_stateful_faults import DDL, State, Stmt, apply, sql_of, table

#: Long enough that no lease runs out within a sequence on the real clock:
#: a crashed writer's lease is taken back by force, never by waiting.
TTL = 600.0
#: Short: an armed store's faults surface as failures instead of being
#: retried away, and a sequence spends little time in backoff.
COMMIT_DEADLINE = 0.1
#: (rate, faults) of an armed store
FaultPlan = tuple[float, frozenset[Fault]]
FAULT_PLANS = st.tuples(
    st.sampled_from([0.1, 0.3, 0.6]), st.frozensets(st.sampled_from(list(Fault)), min_size=1)
)
#: Counted across the run: what a run covered (not printed by the CI log).
STATS: dict[str, int] = {}


def _count(name: str, n: int = 1) -> None:
    STATS[name] = STATS.get(name, 0) + n


@dataclass
class Slot:
    """One object of the machine, its store, and what the model says of it."""

    oid: str
    inner: MemoryStore
    store: FaultyStore
    ns: durable_obj.Namespace
    obj: durable_obj.DurableObject | None = None
    #: the state every acknowledged statement leads to ...
    model: State = field(default_factory=dict)
    #: ... unless one of these failed attempts (each the whole buffer at the
    #: time) landed; at most one did ...
    attempts: list[tuple[Stmt, ...]] = field(default_factory=list)
    #: ... followed by what a rival committed since.
    after: list[Stmt] = field(default_factory=list)
    pending: list[Stmt] = field(default_factory=list)
    #: what the writer's local copy holds (its view, rivals not included)
    local: State = field(default_factory=dict)
    next_id: int = 1
    #: a rival took the lease since the last (re)open, or (`landed`) the writer stopped
    fenced: bool = False
    #: a failed attempt landed all the same: the writer's next commit stops
    #: it (lease_fenced), never writes over that seq
    landed: bool = False

    @property
    def armed(self) -> bool:
        return self.store.enabled

    def candidates(self) -> list[list[tuple[int, int]]]:
        out: list[list[tuple[int, int]]] = []
        for attempt in [(), *self.attempts]:
            rows = sorted(apply(apply(self.model, attempt), self.after).items())
            if rows not in out:
                out.append(rows)
        return out

    def stored_head(self) -> Head | None:
        blob = self.inner.get(f"{self.oid}/head.json")
        return None if blob is None else Head.parse(blob.data)

    def footprint(self) -> tuple[object, ...]:
        """Everything of this object outside this process's memory."""
        blob = self.inner.get(f"{self.oid}/head.json")
        keys = sorted((e.key, e.size) for e in self.inner.list_keys())
        return (None if blob is None else blob.data, keys, len(self.store.calls))


def _maybe_landed(slot: Slot, obj: durable_obj.DurableObject) -> None:
    """After a failed attempt: whether its head landed all the same."""
    stored = slot.stored_head()
    assert stored is not None and obj.head is not None
    if stored.lease.instance == obj.head.lease.instance and stored.manifest.seq > obj.seq:
        _count("landed_unproven")
        slot.landed = True


def _engine_databases(engine: Engine) -> set[str]:
    rows = engine.json_rows(
        f"SELECT name FROM system.databases WHERE startsWith(name, '{RESERVED_PREFIX}')"
    )
    return {str(name) for (name,) in rows}


def _local_rows(obj: durable_obj.DurableObject) -> list[tuple[int, int]]:
    """`table(obj)` straight from the object's own connection: the same rows
    at half the cost (no read check), for the check after every step."""
    engine = obj._local.engine
    assert engine is not None
    text = engine.text("SELECT id, v FROM t ORDER BY id, v", "TSV")
    return [(int(a), int(b)) for a, b in (line.split("\t") for line in text.splitlines())]


class MultiObjectMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # the catalog's rows written before each call returns: no store call of
        # one object's catalog row lands while a rule acts on another
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(catalog, "QUEUED", False)
        self.slots: list[Slot] = []
        #: the object(s) the last rule acted on; every other one must be unchanged
        self.touched: set[int] = set()
        self.footprints: list[tuple[object, ...]] = []
        #: internal databases that existed before this sequence (other tests')
        self.baseline: set[str] | None = None
        #: an object was opened, closed or dropped since the last check
        self.lifecycle = True

    @initialize(
        n=st.integers(2, 3),
        seeds=st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3),
        armed=st.lists(st.one_of(st.none(), FAULT_PLANS), min_size=3, max_size=3),
    )
    def setup(self, n: int, seeds: list[int], armed: list[FaultPlan | None]) -> None:
        """n objects, each created, and then the stores of some armed."""
        _count("sequences")
        for i in range(n):
            inner = MemoryStore(f"msm-{uuid.uuid4().hex}")
            store = FaultyStore(inner, seed=seeds[i], rate=0.0)
            store.enabled = False
            ns = durable_obj.Namespace(
                store, owner=f"w{i}", commit_deadline=COMMIT_DEADLINE, lease_ttl=TTL
            )
            slot = Slot(oid=f"o{i}", inner=inner, store=store, ns=ns)
            self.slots.append(slot)
            slot.obj = self._adopt(ns.open(slot.oid))
            if self.baseline is None:
                engine = slot.obj._local.engine
                assert engine is not None
                self.baseline = _engine_databases(engine) - {engine.database}
            slot.obj.execute(DDL)
            slot.obj.flush()
        for slot, plan in zip(self.slots, armed, strict=False):
            if plan is not None:
                self._arm(slot, plan)
        self.touched = set(range(n))

    # -- helpers ------------------------------------------------------------
    @staticmethod
    def _adopt(obj: durable_obj.DurableObject) -> durable_obj.DurableObject:
        """No background renewals: every storage call comes from a rule."""
        obj._stop_heartbeat()
        return obj

    def _slot(
        self, pick: int, *, open_only: bool = True, lifecycle: bool = False
    ) -> tuple[int, Slot]:
        choices = [i for i, s in enumerate(self.slots) if s.obj is not None or not open_only]
        i = choices[pick % len(choices)]
        self.touched = {i}
        self.lifecycle = self.lifecycle or lifecycle
        return i, self.slots[i]

    def _any_open(self) -> bool:
        return any(s.obj is not None for s in self.slots)

    def _crashed(self, slot: Slot) -> None:
        _count("crashes")
        assert slot.armed, f"{slot.oid}: a crash point on a store with no faults armed"
        assert slot.obj is not None
        abandon(slot.obj)
        slot.obj = None

    def _execute(self, slot: Slot, stmt: Stmt) -> bool:
        assert slot.obj is not None
        try:
            slot.obj.execute(sql_of(stmt))
        except errors.LeaseFenced:
            # a rival's, or the writer's heartbeat met its landed attempt
            assert slot.fenced or slot.landed, f"{slot.oid}: execute fenced without a rival"
            slot.fenced = True
            return False
        slot.pending.append(stmt)
        slot.local = apply(slot.local, [stmt])
        return True

    def _target(self, slot: Slot, pick: int) -> int:
        seen = sorted(slot.local)
        if pick % 5 == 4 or not seen:
            return 1 + pick % slot.next_id
        return seen[pick % len(seen)]

    def _durable_call(self, slot: Slot, fn_name: str) -> None:
        obj = slot.obj
        assert obj is not None
        batch = tuple(slot.pending)
        _count(fn_name)
        if slot.fenced:
            try:
                key = getattr(obj, fn_name)()
            except SimulatedCrash:
                self._crashed(slot)
                return
            except errors.LeaseFenced:
                return
            except errors.DurableError:
                assert slot.armed, f"{slot.oid}: a fenced writer failed other than lease_fenced"
                return
            # flush() of an empty buffer commits nothing
            assert fn_name == "flush" and not batch and key is None, (
                f"{slot.oid}: {fn_name}() committed {key} for a fenced writer"
            )
            return
        try:
            getattr(obj, fn_name)()
        except SimulatedCrash:
            slot.attempts.append(batch)
            self._crashed(slot)
            return
        except (errors.CommitAmbiguous, errors.BackendError):
            assert slot.armed, f"{slot.oid}: {fn_name}() failed with no fault armed"
            _count("failed_" + fn_name)
            slot.attempts.append(batch)
            assert obj.pending == len(slot.pending)
            _maybe_landed(slot, obj)
            return
        except errors.LeaseFenced:
            assert slot.landed, f"{slot.oid}: {fn_name}() fenced without a rival"
            _count("landed_fenced")
            slot.fenced = True
            return
        slot.model = apply(slot.model, batch)
        slot.pending = []
        slot.attempts = []
        assert obj.pending == 0
        stored = slot.stored_head()
        assert stored is not None and obj.head is not None
        assert stored.lease.instance == obj.head.lease.instance, "acknowledged, yet not our head"
        assert stored.manifest.seq == obj.seq

    def _open_writer(self, slot: Slot) -> durable_obj.DurableObject:
        """Open `slot`'s object as its writer, by force if a crashed or fenced
        holder still has the lease; an armed store may fail the open, and
        then it must open once its faults stop."""
        obj = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # force takeover warns
            head = slot.stored_head()
            force = head is not None and not head.lease.released
            try:
                obj = slot.ns.open(slot.oid, force=force)
            except SimulatedCrash:
                assert slot.armed, f"{slot.oid}: a crash point with no fault armed"
                _count("crashes")
            except errors.Corrupt:
                raise
            except errors.DurableError:
                assert slot.armed, f"{slot.oid}: open failed with no fault armed"
                _count("failed_open")
            if obj is None:
                slot.store.enabled = False
                head = slot.stored_head()
                force = head is not None and not head.lease.released
                obj = slot.ns.open(slot.oid, force=force)
                slot.store.enabled = True
        return self._adopt(obj)

    # -- rules: statements ----------------------------------------------------
    @precondition(_any_open)
    @rule(pick=st.integers(0, 5), n=st.integers(1, 3), v=st.integers(0, 50))
    def insert(self, pick: int, n: int, v: int) -> None:
        _, slot = self._slot(pick)
        for _ in range(n):
            if not self._execute(slot, ("ins", slot.next_id, v)):
                return
            slot.next_id += 1

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5), row=st.integers(0, 100), x=st.integers(0, 50))
    def update(self, pick: int, row: int, x: int) -> None:
        _, slot = self._slot(pick)
        self._execute(slot, ("set", self._target(slot, row), x))

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5), m=st.integers(1, 3), r=st.integers(0, 2), x=st.integers(1, 9))
    def update_many(self, pick: int, m: int, r: int, x: int) -> None:
        """Not idempotent: a segment applied twice shows."""
        _, slot = self._slot(pick)
        self._execute(slot, ("add", m, r % m, x))

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5), row=st.integers(0, 100), lightweight=st.booleans())
    def delete(self, pick: int, row: int, lightweight: bool) -> None:
        _, slot = self._slot(pick)
        self._execute(slot, ("ldel" if lightweight else "del", self._target(slot, row)))

    # -- rules: durability ------------------------------------------------------
    @precondition(_any_open)
    @rule(pick=st.integers(0, 5))
    def flush(self, pick: int) -> None:
        _, slot = self._slot(pick, lifecycle=True)
        self._durable_call(slot, "flush")

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5))
    def checkpoint(self, pick: int) -> None:
        _, slot = self._slot(pick, lifecycle=True)
        self._durable_call(slot, "checkpoint")

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5))
    def close(self, pick: int) -> None:
        _, slot = self._slot(pick, lifecycle=True)
        obj = slot.obj
        assert obj is not None
        _count("close")
        batch = tuple(slot.pending)
        try:
            obj.close()
        except SimulatedCrash:
            # close() reopened the object (and its heartbeat) before raising
            if not slot.fenced:
                slot.attempts.append(batch)
            self._crashed(slot)
            return
        except errors.LeaseFenced:
            # a fenced writer is closed all the same; its buffer is gone
            assert slot.fenced or slot.landed, f"{slot.oid}: close() fenced without a rival"
            assert obj.closed
            slot.obj = None
            return
        except errors.DurableError:
            assert slot.armed, f"{slot.oid}: close() failed with no fault armed"
            _count("failed_close")
            assert not obj.closed, "a failed close() keeps the object open"
            if obj.pending:
                # the flush failed: nothing was released, the writer goes on
                self._adopt(obj)  # a failed close() restarts the heartbeat
                if not slot.fenced:
                    slot.attempts.append(batch)
                    _maybe_landed(slot, obj)
                return
            # The flush (if any) was committed, proven; the release was not.
            assert not (batch and slot.fenced), f"{slot.oid}: a fenced writer committed"
            if batch:
                slot.model = apply(slot.model, batch)
                slot.pending = []
                slot.attempts = []
            # The writer goes on, holding the lease it held; a release that
            # landed all the same fences its next commit (the lease reads
            # released), as a rival's takeover would.
            self._adopt(obj)  # a failed close() restarts the heartbeat
            head = slot.stored_head()
            assert head is not None
            if head.lease.released:
                _count("release_landed_unproven")
                slot.fenced = True
            return
        assert obj.closed
        slot.obj = None
        if slot.fenced:
            return
        slot.model = apply(slot.model, batch)
        slot.pending = []
        slot.attempts = []
        head = slot.stored_head()
        assert head is not None and head.lease.released, "close() kept the lease"

    # -- rules: faults and failures -----------------------------------------------
    @staticmethod
    def _arm(slot: Slot, plan: FaultPlan) -> None:
        rate, faults = plan
        slot.store.rate = rate
        slot.store.faults = tuple(sorted(faults, key=str))
        slot.store.enabled = True
        _count("armed")

    @rule(pick=st.integers(0, 5), plan=FAULT_PLANS)
    def arm(self, pick: int, plan: FaultPlan) -> None:
        """Faults on one object's store only, from now until disarm."""
        _, slot = self._slot(pick, open_only=False)
        self._arm(slot, plan)

    @rule(pick=st.integers(0, 5))
    def disarm(self, pick: int) -> None:
        _, slot = self._slot(pick, open_only=False)
        slot.store.enabled = False

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5))
    def crash(self, pick: int) -> None:
        """The object's writer stops as a SIGKILL would stop it (alone)."""
        _, slot = self._slot(pick, lifecycle=True)
        assert slot.obj is not None
        _count("abandoned")
        abandon(slot.obj)
        slot.obj = None

    @precondition(_any_open)
    @rule(pick=st.integers(0, 5), rows=st.integers(0, 2))
    def rival(self, pick: int, rows: int) -> None:
        """Another writer in this process takes the object by force, commits
        `rows` inserts and closes: the object's writer is fenced."""
        _, slot = self._slot(pick, lifecycle=True)
        _count("rivals")
        ns = durable_obj.Namespace(
            slot.inner, owner="rival", commit_deadline=COMMIT_DEADLINE, lease_ttl=TTL
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            other = ns.open(slot.oid, force=True)
        try:
            other._stop_heartbeat()
            seen = table(other)
            assert seen in slot.candidates(), f"{slot.oid}: a rival opened to {seen}"
            stmts: list[Stmt] = [("ins", slot.next_id + k, 1000 + k) for k in range(rows)]
            slot.next_id += rows
            for stmt in stmts:
                other.execute(sql_of(stmt))
        finally:
            other.close()
        if slot.attempts:
            slot.after.extend(stmts)
        else:
            slot.model = apply(slot.model, stmts)
        slot.fenced = True

    @rule(pick=st.integers(0, 5))
    def reopen(self, pick: int) -> None:
        """Abandon the writer if it is open (as a kill would) and reopen it;
        it opens to exactly the acknowledged state."""
        _, slot = self._slot(pick, open_only=False, lifecycle=True)
        _count("reopens")
        if slot.obj is not None:
            abandon(slot.obj)
            slot.obj = None
        obj = slot.obj = self._open_writer(slot)
        present = table(obj)
        cands = slot.candidates()
        assert present in cands, (
            f"{slot.oid} reopened to {present}; expected one of {cands} "
            f"(attempts {slot.attempts}, rivals after them {slot.after})"
        )
        slot.model = slot.local = dict(present)
        slot.pending, slot.attempts, slot.after = [], [], []
        slot.fenced = slot.landed = False

    @rule(pick=st.integers(0, 5))
    def fresh_reader(self, pick: int) -> None:
        """A read-only open beside everything else open sees the acknowledged state."""
        _, slot = self._slot(pick, open_only=False, lifecycle=True)
        _count("fresh_reads")
        with durable_obj.Namespace(slot.inner, owner="reader").open(
            slot.oid, read_only=True
        ) as reader:
            seen = table(reader)
        assert seen in slot.candidates(), f"{slot.oid}: a fresh reader saw {seen}"
        if not slot.attempts:
            assert seen == sorted(apply(slot.model, slot.after).items())

    # -- invariants -----------------------------------------------------------------
    @invariant()
    def others_unchanged(self) -> None:
        """Whatever the last rule did to one object, the others' stores saw no
        call and changed in nothing, and their local copies hold what they held."""
        if not self.slots:
            return
        now = [s.footprint() for s in self.slots]
        for i, slot in enumerate(self.slots):
            if i not in self.touched:
                assert now[i] == self.footprints[i], (
                    f"acting on {sorted(self.touched)} changed {slot.oid}'s storage"
                )
        self.footprints = now
        self.touched = set()
        for slot in self.slots:
            if slot.obj is not None:
                assert _local_rows(slot.obj) == sorted(slot.local.items()), (
                    f"{slot.oid}'s local copy is not what it executed"
                )

    @invariant()
    def one_database_per_open_object(self) -> None:
        """Exactly the open objects' internal databases are in the engine."""
        live = [s.obj for s in self.slots if s.obj is not None]
        if not live or self.baseline is None or not self.lifecycle:
            return
        self.lifecycle = False
        engines = [o._local.engine for o in live]
        assert all(e is not None for e in engines)
        mine = {e.database for e in engines if e is not None}
        assert len(mine) == len(live), "two objects share a database"
        assert engines[0] is not None
        extra = _engine_databases(engines[0]) - self.baseline
        assert extra == mine, f"left in the engine: {sorted(extra - mine)}; missing: {mine - extra}"

    def teardown(self) -> None:
        """Faults off; every object reopens to its acknowledged state."""
        try:
            for slot in self.slots:
                slot.store.enabled = False
                if slot.obj is not None:
                    abandon(slot.obj)
                    slot.obj = None
            for slot in self.slots:
                with self._open_writer(slot) as obj:
                    present = table(obj)
                assert present in slot.candidates(), f"{slot.oid}: at the end {present}"
        finally:
            for slot in self.slots:
                if slot.obj is not None:
                    abandon(slot.obj)
                for entry in slot.inner.list_keys():
                    slot.inner.delete(entry.key)
            self.patch.undo()


_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
MultiObjectMachine.TestCase.settings = settings(
    max_examples={"ci": 60, "nightly": 3000}.get(_PROFILE, 20),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMultiObjectMachine = MultiObjectMachine.TestCase
