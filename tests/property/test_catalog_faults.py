"""The namespace catalog under faults: many writers, interleaved, on a FaultyStore.

Up to 50 objects are opened, written, checkpointed, closed and taken over
(a second process, with its own store client and its own catalog writer,
forces the lease) in any order, with faults at every storage call (errors,
lost responses, ambiguous answers, a resent write that meets itself),
and a rival process's catalog update lands just before a writer's
compare-and-swap when a rule says so (the writer loses the race and must
merge). A recording store under the faults keeps every head that was
ever stored. After every step the catalog is *sound*:

* every row names an object that has a head, and is the row of a head that
  object really had (`row_of` of a recorded head, all but `last_write`),
  never newer than its current head (generation, seq);
* no row goes back to an older (generation, seq), and no row disappears;
* *agreeing* where nothing failed: after a step that opened, checkpointed or
  closed an object and met no fault on the catalog key, that object's row
  is its current head's (so the catalog is behind only where an update was
  dropped, or where a flush came after the last update: by design);

and *repairable*: `rebuild_catalog()` once faults stop makes every row its
object's current head's, and every object has one.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import durable_obj
from durable_obj import errors
from durable_obj.core import catalog
from durable_obj.core.object import DurableObject
from durable_obj.stores.base import Version
from durable_obj.stores.memory import MemoryStore
from durable_obj.testing import Fault, FaultyStore, abandon
from durable_obj.wire.head import Head

DDL = "CREATE TABLE IF NOT EXISTS t (id UInt32) ENGINE = MergeTree ORDER BY id"
IDS = [f"o{n:02d}" for n in range(50)]
#: Faults that leave the process running (a crash is the stateful fault test's).
FAULTS = (Fault.ERROR, Fault.AMBIGUOUS_BEFORE, Fault.LOST_RESPONSE, Fault.RESENT)
OPTS: dict[str, Any] = {"lease_ttl": 3600.0, "commit_deadline": 2.0, "fold_segments": 0}


def state(row: dict[str, Any]) -> str:
    """A row without its write time, comparable."""
    return json.dumps({k: v for k, v in row.items() if k != "last_write"}, sort_keys=True)


class Recording(MemoryStore):
    """Keeps every head stored (as the row it makes); and, when armed, writes
    a rival process's catalog row just before a catalog compare-and-swap."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: dict[str, set[str]] = {}
        self.rival: dict[str, Any] | None = None
        #: Rival rows that landed (each must outlive the writer's merge).
        self.fired: list[dict[str, Any]] = []
        self._other = MemoryStore(name)

    def _note(self, key: str, data: bytes) -> None:
        oid, _, rest = key.partition("/")
        if rest == "head.json":
            row = catalog.row_of(oid, Head.parse(data), head_bytes=len(data), now=0.0)
            self.seen.setdefault(oid, set()).add(state(row))

    def create(self, key: str, data: bytes) -> Version | None:
        done = super().create(key, data)
        if done is not None:
            self._note(key, data)
        return done

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        if key == catalog.CATALOG_KEY and self.rival is not None:
            rival, self.rival = self.rival, None
            assert catalog.Writer(self._other)._write({rival["id"]: rival})
            self.fired.append(rival)
        done = super().replace(key, data, version)
        if done is not None:
            self._note(key, data)
        return done


class CatalogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Recording(f"catalog-{uuid.uuid4().hex}")
        self.open: dict[str, DurableObject] = {}
        self.expected: dict[str, str] = {}
        self.last: dict[str, tuple[int, int]] = {}
        self.stores: list[FaultyStore] = []
        self.acting = ""

    @initialize(seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.0, 0.05, 0.2]))
    def faults(self, seed: int, rate: float) -> None:
        self.stores = [
            FaultyStore(self.inner, seed=seed + n, rate=rate, faults=FAULTS) for n in range(2)
        ]
        self.spaces = [
            durable_obj.Namespace(s, owner=f"process-{n}", **OPTS)
            for n, s in enumerate(self.stores)
        ]

    def _catalog_faults(self) -> int:
        return sum(
            1 for s in self.stores for _, key, _ in s.injected if key in (catalog.CATALOG_KEY, "")
        )

    def _head_row(self, oid: str) -> str | None:
        blob = self.inner.get(f"{oid}/head.json")
        if blob is None:
            return None
        head = Head.parse(blob.data)
        return state(catalog.row_of(oid, head, head_bytes=len(blob.data), now=0.0))

    def _step(self, oid: str, action: Any) -> None:
        """Run `action`; when it returns and no catalog fault was met, the
        row of `oid` must agree with its head (`expected`)."""
        before = self._catalog_faults()
        self.acting = oid
        try:
            action()
        except errors.DurableError:
            self.expected.pop(oid, None)
            return
        finally:
            catalog.settle()  # the row is written on a thread of its own
        if self._catalog_faults() == before:
            row = self._head_row(oid)
            if row is not None:
                self.expected[oid] = row
        else:
            self.expected.pop(oid, None)

    @rule(n=st.sampled_from(range(len(IDS))), process=st.integers(0, 1))
    def open_object(self, n: int, process: int) -> None:
        oid = IDS[n]
        if oid in self.open:
            return

        def go() -> None:
            with warnings.catch_warnings():  # a forced takeover warns of the holder's loss
                warnings.simplefilter("ignore")
                obj = self.spaces[process].open(oid, force=True)
            self.open[oid] = obj
            obj.execute(DDL)

        self._step(oid, go)

    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        if not self.open:
            return
        oid = data.draw(st.sampled_from(sorted(self.open)))
        try:
            self.open[oid].execute("INSERT INTO t VALUES (1)")
            self.open[oid].flush()  # no catalog update: `expected` stays
        except errors.DurableError:
            pass

    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        if not self.open:
            return
        oid = data.draw(st.sampled_from(sorted(self.open)))
        self._step(oid, lambda: self.open[oid].checkpoint())

    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        if not self.open:
            return
        oid = data.draw(st.sampled_from(sorted(self.open)))
        obj = self.open.pop(oid)
        fenced = obj.fenced
        self._step(oid, obj.close)
        if not obj.closed:
            abandon(obj)
        if fenced:
            self.expected.pop(oid, None)  # it wrote nothing; the row is the holder's

    @rule(data=st.data(), process=st.integers(0, 1))
    def take_over(self, data: st.DataObject, process: int) -> None:
        """Another process forces the lease of an open object: the holder is
        fenced at its next commit, and any late row of it is older."""
        if not self.open:
            return
        oid = data.draw(st.sampled_from(sorted(self.open)))
        old = self.open.pop(oid)
        self.open_object(IDS.index(oid), process)
        try:
            old.close(discard=True)  # fenced if the takeover landed: it writes no row
        except errors.DurableError:
            abandon(old)
        if oid not in self.open:
            self.expected.pop(oid, None)  # the takeover failed: the old holder released

    @rule(n=st.sampled_from(range(len(IDS))))
    def arm_rival(self, n: int) -> None:
        """The next catalog compare-and-swap loses a race to another
        process's row of object `n`, as that object's head shows it now."""
        oid = IDS[n]
        blob = self.inner.get(f"{oid}/head.json")
        if blob is not None:
            rival = catalog.row_of(oid, Head.parse(blob.data), head_bytes=len(blob.data), now=0)
            self.inner.rival = rival
            self.expected.pop(oid, None)

    @invariant()
    def sound(self) -> None:
        catalog.settle()
        blob = self.inner.get(catalog.CATALOG_KEY)
        rows = {} if blob is None else {r["id"]: r for r in json.loads(blob.data)["rows"]}
        assert set(self.last) <= set(rows), "a row disappeared"
        for oid, row in rows.items():
            assert catalog.valid_row(row)
            head = self._head_row(oid)
            assert head is not None, f"a row of {oid}, which has no head"
            assert state(row) in self.inner.seen[oid], f"{oid}: a row no head ever had"
            place = catalog.order(row)
            assert place <= catalog.order(json.loads(head)), f"{oid}: a row ahead of its head"
            assert place >= self.last.get(oid, (0, 0)), f"{oid}: a row went back"
            self.last[oid] = place
            if oid in self.expected:
                assert state(row) == self.expected[oid], f"{oid}: behind with no fault"
        for rival in self.inner.fired:  # no row lost to a race: the merge kept it
            row = rows[rival["id"]]
            if rival["id"] == self.acting:  # its own writer may write a row of that place too
                assert catalog.order(row) >= catalog.order(rival), "a raced row went back"
            else:
                assert state(row) == state(rival), f"{rival['id']}: a raced row was lost"
        self.inner.fired.clear()
        self.acting = ""
        if blob is not None:
            for oid in self.expected:
                assert oid in rows, f"{oid}: no row though nothing failed"

    def teardown(self) -> None:
        try:
            for s in self.stores:
                s.enabled = False
            for obj in self.open.values():
                try:
                    obj.close(discard=True)
                except errors.DurableError:
                    abandon(obj)
            if self.stores:
                ns = durable_obj.Namespace(self.inner)
                ns.rebuild_catalog()
                blob = self.inner.get(catalog.CATALOG_KEY)
                assert blob is not None
                rows = {r["id"]: state(r) for r in json.loads(blob.data)["rows"]}
                heads = {o: self._head_row(o) for o in IDS if self._head_row(o) is not None}
                assert rows == heads, "a rebuild did not repair the catalog"
        finally:
            self.inner.close()


_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
TestCatalogMachine = CatalogMachine.TestCase
TestCatalogMachine.settings = settings(
    max_examples={"ci": 100, "nightly": 2000}.get(_PROFILE, 10),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
