"""durable_obj.ray: durable objects hosted in Ray actors, addressed by id,
fenced by our lease (issue 18). Needs the `ray` extra.

    import ray
    from durable_obj.ray import Hosts

    ray.init(address="auto")
    hosts = Hosts("s3://bucket/agents", shards=8, lease_ttl=30)
    h = hosts.get("user-42")               # or "s3://bucket/agents/user-42"
    h.execute("INSERT INTO memories VALUES (...)")
    h.flush()                              # durable on return, wherever it ran
    print(h.query("SELECT count() FROM memories"))

What Ray does: placement (which machine hosts an actor), routing (a handle
reaches the actor wherever it lives) and failure detection (a dead worker or
node is noticed and its actors are restarted elsewhere). What durable_obj
does: the state, in object storage, and one writer per object.

Layout: objects are hashed (crc32 of the id) onto `shards` named, detached
actors; each holds a `durable_obj.Pool` of the objects it serves (opened on
first use, lease kept while cached, flushed and closed when idle or beyond
`max_open`). One actor per object would cost a process (and a chDB engine)
per object; a shard serves many objects from one engine, as the Pool does in
a single process. Pass `shards=` to choose (the benchmark measures both).

Failure handling:

* Each start of an actor is an *incarnation* with its own lease owner name,
  `<owner>/<actor name>#<start time><random>`. A restarted actor (Ray saw its
  worker or node die) takes back at once, with `reclaim=`, the leases an
  earlier incarnation of the same actor held, instead of waiting for them to
  expire: the owner changes, so the generation moves and the earlier
  incarnation is fenced by the head's compare-and-swap at its next commit.
  Every other holder keeps the normal `LeaseHeld` rule.
* Before it serves, a new incarnation takes over every object an earlier
  incarnation of it still holds, so a zombie (an actor whose node Ray
  declared dead, still running) cannot commit to any of them afterwards:
  its next flush, heartbeat or close fails with `LeaseFenced`. An actor that
  finds itself superseded refuses every later call with `LeaseFenced`.
* Every acknowledged flush is in storage (the durability boundary does not
  move); statements executed but not flushed die with their actor, as they
  die with a process. The handle knows which incarnation holds its
  unflushed statements, and never lets a flush on a new incarnation report
  them as committed:

  - `execute()` whose actor died, or that finds its earlier statements lost,
    raises `HostLost` and runs nothing again (at most once): execute them
    again through the same handle (it reaches the new actor), then flush.
  - `flush()` whose actor died during the call, with statements of this
    handle pending, is `CommitAmbiguous` (they may have been committed just
    before the death): read back, then execute what is missing again. With
    nothing pending it is retried once.
  - `write(*statements, params=...)` is `DurableObject.write` on the
    actor, in one call: a unit, all or none. One whose actor died during the
    call is `CommitAmbiguous`, as a flush with statements pending; a unit
    whose commit failed stays buffered there and counts as the handle's.
  - `query()` is retried once: a read is safe to repeat.
  - a call that reached a superseded incarnation raises `LeaseFenced`;
    call again through the handle.

Configure: `ray.init()` / `ray start` (node addresses: pin each node with
`--node-ip-address`), the namespace URL and its storage_options, `shards`,
`lease_ttl` (it bounds how long a crashed writer blocks anyone *else*, not a
restarted actor), `idle_close` and `max_open` per actor, and `actor_options`
(num_cpus, memory, resources, scheduling_strategy). Cross-object analytics
do not go through the actors: export the namespace to Parquet
(`Namespace.export`) and read it with ClickHouse, DuckDB or Spark.

Modules: `host` (the actor, `ObjectHost`: incarnations, take-over, session
tokens), `hosts` (`Hosts`: which shard hosts an object, its named actor) and
`handle` (`Handle`: a caller's calls, and what they do when an actor dies).
"""

from __future__ import annotations

from durable_obj.errors import HostLost
from durable_obj.ray.handle import Handle
from durable_obj.ray.host import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from durable_obj.ray.host import DEFAULT_SHARDS, ObjectHost, shard_of
from durable_obj.ray.host import RAY_NAMESPACE as RAY_NAMESPACE
from durable_obj.ray.host import _incarnation as _incarnation
from durable_obj.ray.host import _ray as _ray
from durable_obj.ray.hosts import Hosts

__all__ = ["DEFAULT_SHARDS", "Handle", "HostLost", "Hosts", "ObjectHost", "shard_of"]
