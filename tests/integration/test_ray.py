"""durable_obj.ray on a local multi-node Ray cluster (issue 18): every node
on 127.0.0.1, started and stopped here.

* SIGKILL chaos: 20 objects on 4 actors, writers in a loop, actor worker
  processes SIGKILLed at random moments; every flush that returned is in
  storage afterwards, read with durable_obj directly, and no batch is half
  there (the handle never lets a restarted actor flush half of one).
* A frozen node: its raylet and workers SIGSTOPped until Ray declares it dead
  and restarts its actor on the other node; the new incarnation takes the
  objects over at once. Then the workers are thawed (the raylet stays
  stopped: a zombie cut off from Ray that still reaches storage): every
  flush the zombie tries fails with lease_fenced, and none of its
  statements reaches a committed head. This one runs on the S3 server, the
  store of a deployment across machines: there the compare-and-swap is the
  server's. On a folder store the swap is a flock held by the writer, and a
  writer frozen inside it (its loop flushes every 50 ms, so now and then it
  is) keeps every other process from committing until it runs again or
  dies; the folder store then says so after FileStore.lock_wait (a
  BackendError naming the lock) instead of taking the object over.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Before Ray is imported anywhere: it reads these once. Without the first, Ray
# resolves 127.0.0.1 to the machine's own address; the second keeps it quiet.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest

import durable_obj
from durable_obj import CommitAmbiguous, EngineError, HostLost, LeaseFenced
from tests import servers

pytestmark = [
    pytest.mark.slow,
    # one Ray cluster at a time: every Ray test on the same xdist worker
    pytest.mark.xdist_group("ray"),
]

moto_s3 = servers.moto_s3
REPO = Path(__file__).resolve().parents[2]
#: Node death in about 2 s instead of Ray's default 30 s.
FAST_HEALTH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}
OBJECTS = 20
KILLS = 5


class Cluster:
    """A Ray cluster of a head (no CPU: no actor lands there) and two worker
    nodes, all on 127.0.0.1; the driver connected to it."""

    def __init__(self) -> None:
        import ray
        from ray.cluster_utils import Cluster as RayCluster

        self.ray = ray
        self._env = os.environ.get("PYTHONPATH")
        # the workers import tests.integration.ray_host
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), self._env]))
        self.cluster = RayCluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "node_ip_address": "127.0.0.1",
                "include_dashboard": False,
                "_system_config": FAST_HEALTH,
            },
        )
        self.nodes = [
            self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1") for _ in range(2)
        ]
        ray.init(address=self.cluster.address, _node_ip_address="127.0.0.1")
        #: every process this test froze or whose pid it learnt: killed at the end
        self.pids: set[int] = set()

    def node(self, node_id: str) -> Any:
        (node,) = [n for n in self.nodes if n.node_id == node_id]
        return node

    def shutdown(self) -> None:
        try:
            self.ray.shutdown()
            self.cluster.shutdown()
        finally:
            for pid in self.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if self._env is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = self._env


@pytest.fixture(scope="module")
def cluster(loopback_only_env: None) -> Iterator[Cluster]:
    """One cluster for the module (Ray allows one per driver); each test
    uses actors of its own names, and the freeze test adds the node it may
    freeze, so the others keep two live worker nodes whatever the order."""
    started = Cluster()
    try:
        yield started
    finally:
        started.shutdown()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: the raylet's workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _namespace(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any]:
    if store == "file":
        return str(tmp_path / "ns"), None
    root, options = request.getfixturevalue(store)
    return f"{root}/ray-{uuid.uuid4().hex[:8]}", options


def _stats(hosts: Any, index: int, timeout: float = 5.0) -> dict[str, Any] | None:
    import ray

    try:
        result: dict[str, Any] = ray.get(
            hosts.actor_by_index(index).stats.remote(), timeout=timeout
        )
        return result
    except (ray.exceptions.RayError, TimeoutError):
        return None


@pytest.mark.parametrize("store", ["file", "moto_s3"])
def test_sigkill_of_actor_workers_keeps_every_acknowledged_flush(
    cluster: Cluster, store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from durable_obj.ray import Hosts

    url, options = _namespace(store, request, tmp_path)
    hosts = Hosts(
        url,
        shards=4,
        name=f"kill-{uuid.uuid4().hex[:6]}",
        storage_options=options,
        lease_ttl=10,
        actor_options={"scheduling_strategy": "SPREAD"},
    )
    oids = [f"agent-{i:02d}" for i in range(OBJECTS)]
    for oid in oids:
        handle = hosts.get(oid)
        handle.execute(
            "CREATE TABLE t (oid String, n UInt32, i UInt8) ENGINE = MergeTree ORDER BY n"
        )
        handle.flush()
    acked: dict[str, list[int]] = {oid: [] for oid in oids}
    failures: Counter[str] = Counter()
    stop = threading.Event()
    last_kill = [0.0]
    acked_after_last_kill = [0]

    def writer(mine: list[str]) -> None:
        handles = [hosts.get(oid) for oid in mine]
        n = 0
        while not stop.is_set():
            for handle in handles:
                try:
                    # a batch of two statements: never half committed
                    handle.execute(f"INSERT INTO t VALUES ('{handle.oid}', {n}, 0)")
                    handle.execute(f"INSERT INTO t VALUES ('{handle.oid}', {n}, 1)")
                    handle.flush()
                except (HostLost, CommitAmbiguous, LeaseFenced) as exc:
                    failures[exc.category] += 1
                    continue
                acked[handle.oid].append(n)  # the flush returned: acknowledged
                if last_kill[0] and time.monotonic() > last_kill[0]:
                    acked_after_last_kill[0] += 1
            n += 1

    threads = [threading.Thread(target=writer, args=(oids[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    rng = random.Random()
    killed = []
    try:
        while len(killed) < KILLS:
            time.sleep(rng.uniform(0.3, 1.2))
            stats = _stats(hosts, rng.randrange(4))
            if stats is None:  # restarting: try another moment
                continue
            cluster.pids.add(stats["pid"])
            os.kill(stats["pid"], signal.SIGKILL)
            killed.append(stats["name"])
        last_kill[0] = time.monotonic() + 0.5
        deadline = time.monotonic() + 60
        while acked_after_last_kill[0] < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert acked_after_last_kill[0] >= 20, "the writers did not resume after the kills"
    hosts.shutdown()

    ns = durable_obj.Namespace(url, storage_options=options)
    for oid in oids:
        with ns.open(oid, read_only=True) as obj:
            rows = obj.query("SELECT n, count(), uniqExact(i) FROM t GROUP BY n", "TSV")
        stored = {}
        for line in rows.splitlines():
            n, count, distinct = (int(x) for x in line.split("\t"))
            stored[n] = (count, distinct)
        missing = sorted(set(acked[oid]) - set(stored))
        assert not missing, f"{oid}: acknowledged batches lost: {missing}"
        assert all(v == (2, 2) for v in stored.values()), f"{oid}: a batch is not whole: {stored}"
    assert sum(len(v) for v in acked.values()) > OBJECTS
    print(f"kills {killed}; acknowledged {sum(len(v) for v in acked.values())}; {dict(failures)}")


def test_handle_write_is_one_unit_with_params_on_the_actor(
    cluster: Cluster, tmp_path: Path
) -> None:
    from durable_obj.ray import Hosts

    url = str(tmp_path / "ns")
    hosts = Hosts(url, shards=1, name=f"write-{uuid.uuid4().hex[:6]}", lease_ttl=10)
    handle = hosts.get("agent")
    try:
        handle.write("CREATE TABLE t (n UInt32, kind String) ENGINE = MergeTree ORDER BY n")
        key = handle.write(
            ("INSERT INTO t VALUES ({n:UInt32}, 'memory')", {"n": 1}),
            "INSERT INTO t VALUES ({n:UInt32}, 'log')",
            params={"n": 2},
        )
        assert key is not None
        # a statement refused on the actor: none of the unit is kept there
        with pytest.raises(EngineError):
            handle.write("INSERT INTO t VALUES (3, 'memory')", "INSERT INTO missing VALUES (3)")
        assert handle.pending == 0
        assert handle.flush() is None
    finally:
        hosts.shutdown()
    with durable_obj.Namespace(url).open("agent", read_only=True) as obj:
        assert obj.query("SELECT n, kind FROM t ORDER BY n", "CSV").split() == [
            '1,"memory"',
            '2,"log"',
        ]


def test_frozen_node_thawed_is_fenced_and_writes_nothing(
    cluster: Cluster, moto_s3: servers.Server, tmp_path: Path
) -> None:
    import ray

    from durable_obj.ray import Hosts, shard_of
    from durable_obj.stores import open_store
    from tests.integration.ray_host import JournalingHost

    # a third worker node: after the freeze two live ones remain
    cluster.nodes.append(cluster.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1"))
    cluster.cluster.wait_for_nodes()
    root, options = moto_s3
    url = f"{root}/freeze-{uuid.uuid4().hex[:8]}"
    hosts = Hosts(
        url,
        shards=2,
        name=f"freeze-{uuid.uuid4().hex[:6]}",
        storage_options=options,
        host_class=JournalingHost,
        lease_ttl=4,
        actor_options={"scheduling_strategy": "SPREAD"},
    )
    # two objects on each shard
    oids: list[str] = []
    for i in range(100):
        oid = f"obj-{i}"
        if sum(shard_of(o, 2) == shard_of(oid, 2) for o in oids) < 2:
            oids.append(oid)
        if len(oids) == 4:
            break
    for oid in oids:
        handle = hosts.get(oid)
        handle.execute("CREATE TABLE t (tag String, n UInt32) ENGINE = MergeTree ORDER BY n")
        handle.flush()
    before = {i: _stats(hosts, i) for i in range(2)}
    assert all(before.values())
    victim_index = 0
    victim = before[victim_index]
    assert victim is not None
    looped, buffered = [oid for oid in oids if shard_of(oid, 2) == victim_index]
    journal = tmp_path / "journal.jsonl"
    pid = ray.get(hosts.actor(looped).start_loop.remote(looped, str(journal), 0.05))
    assert pid == victim["pid"]
    late = hosts.get(buffered)
    late.execute("INSERT INTO t VALUES ('buffered', 1)")  # never flushed by the zombie

    def entries() -> list[dict[str, Any]]:
        if not journal.exists():
            return []
        return [json.loads(line) for line in journal.read_text().splitlines() if line]

    def wait(predicate: Any, what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    wait(lambda: sum("ok" in e for e in entries()) >= 3, "the loop's first flushes")

    # Freeze the victim's node: its raylet and every worker under it.
    raylet = cluster.node(victim["node_id"]).all_processes["raylet"][0].process.pid
    frozen = [raylet, *descendants(raylet)]
    assert victim["pid"] in frozen
    cluster.pids.update(frozen)
    for p in frozen:
        os.kill(p, signal.SIGSTOP)
    t_freeze = time.time()

    # Ray declares the node dead and restarts the actor on the other node.
    def restarted() -> bool:
        stats = _stats(hosts, victim_index, timeout=2)
        return stats is not None and stats["incarnation"] != victim["incarnation"]

    wait(restarted, "Ray to restart the frozen actor elsewhere", 90)
    after = _stats(hosts, victim_index)
    assert after is not None and after["node_id"] != victim["node_id"]
    assert sorted(after["reclaimed"]) == sorted([looped, buffered])
    # The new incarnation serves at once; the statement buffered in the
    # zombie is reported lost, not flushed as if it were there.
    with pytest.raises(HostLost):
        late.flush()
    now = hosts.get(looped)
    now.execute("INSERT INTO t VALUES ('after', 1)")
    assert now.flush() is not None

    # Thaw the workers, not the raylet: cut off from Ray, still reaching storage.
    t_thaw = time.time()
    for p in frozen[1:]:
        os.kill(p, signal.SIGCONT)
    wait(
        lambda: sum(e["started"] > t_thaw for e in entries()) >= 3,
        "the thawed zombie's writer loop",
        60,
    )
    for p in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)

    journaled = entries()
    thawed = [e for e in journaled if e["started"] > t_thaw]
    assert thawed and all(e.get("error") == "lease_fenced" for e in thawed), thawed
    ok = {e["n"] for e in journaled if e.get("ok")}
    in_flight = {e["n"] for e in journaled if e["started"] < t_freeze < e["ended"]}
    after_thaw = {e["n"] for e in thawed}

    # Storage, read directly: every acknowledged loop flush is there, nothing
    # the zombie ran after the thaw is, nor its buffered statement.
    ns = durable_obj.Namespace(url, storage_options=options)
    store = open_store(url, options)
    with ns.open(looped, read_only=True) as obj:
        stored = {int(x) for x in obj.query("SELECT n FROM t WHERE tag = 'loop'", "TSV").split()}
        assert obj.query("SELECT count() FROM t WHERE tag = 'after'", "TSV").strip() == "1"
    assert ok <= stored
    assert stored <= ok | in_flight
    assert not stored & after_thaw
    with ns.open(buffered, read_only=True) as obj:
        assert obj.query("SELECT count() FROM t WHERE tag = 'buffered'", "TSV").strip() == "0"
    for oid in (looped, buffered):
        head = ns.info(oid).head
        assert head.lease.owner == after["owner"], head.lease
        # no committed WAL segment holds a statement only the zombie ran
        for ref in head.manifest.wal:
            blob = store.get(f"{oid}/{ref.key}")
            assert blob is not None, ref.key
            text = blob.data.decode()
            assert "'buffered'" not in text
            assert not any(f"'loop', {n})" in text for n in after_thaw)
    hosts.shutdown()
