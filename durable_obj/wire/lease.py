"""Lease arithmetic as pure functions of (lease, who, now).

No I/O and no clock of its own: the state machine passes `now`, so every rule
here is tested without sleeping. The fence itself is the head's
compare-and-swap, not this arithmetic; these functions only decide what a
writer may *attempt*.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_obj.errors import LeaseHeld, LimitExceeded
from durable_obj.wire.head import Lease
from durable_obj.wire.protocol import MAX_SAFE_INT


@dataclass(frozen=True, slots=True)
class Holder:
    """One live writer: a display name and a unique instance id."""

    owner: str
    instance: str


def held_by_other(lease: Lease, me: Holder, now: float, clock_skew: float) -> bool:
    """Does someone else hold `lease` at `now`, allowing for their clock?

    A lease with the same owner name but another instance is someone else:
    it may be a second live process that happens to share the name.
    """
    if lease.released or lease.instance == me.instance:
        return False
    assert lease.expires_at is not None  # validated: a held lease has an expiry
    return now <= lease.expires_at + clock_skew


def check_free(
    lease: Lease, me: Holder, now: float, *, clock_skew: float, reclaiming: bool = False
) -> None:
    """Raise `LeaseHeld` if someone else holds `lease` at `now` (allowing for
    their clock); a writer checks this before it does anything else.
    `reclaiming`: the open passed reclaim=True (only for the message: it
    did not apply, since the holder has another owner name)."""
    if not held_by_other(lease, me, now, clock_skew):
        return
    # The real wait: a normal takeover also waits out the skew allowance.
    wait = max((lease.expires_at or now) + clock_skew - now, 0.0)
    if lease.owner == me.owner:
        what = (
            f"It carries this writer's own owner name: if it is an earlier process of "
            f"{me.owner!r} (killed or restarted), open with reclaim=True to take it at once "
            "(that process, if it still runs, is fenced at its next commit). Otherwise, open "
            "it read_only=True, wait for the lease to expire, "
        )
    elif reclaiming:
        what = (
            f"reclaim=True takes only a lease held under this writer's own owner name "
            f"({me.owner!r}), and this one is another owner's. Open it read_only=True, wait "
            "for the lease to expire, "
        )
    else:
        what = "Open it read_only=True, wait for the lease to expire, "
    raise LeaseHeld(
        f"the object is held by {lease.owner!r} (instance {str(lease.instance)[:8]}, "
        f"generation {lease.generation}); a writer open succeeds in {wait:.1f} s "
        f"if it is not renewed (its expiry plus the {clock_skew:g} s clock_skew allowance); "
        f"nothing was changed. {what}or pass force=True if that writer is known to be gone "
        "(its unflushed writes are lost).",
        holder=lease.owner,
        generation=lease.generation,
        wait=wait,
    )


def acquire(
    lease: Lease, me: Holder, now: float, ttl: float, *, clock_skew: float, force: bool
) -> tuple[Lease, bool]:
    """The lease `me` may CAS into the head, and whether that is a forced
    takeover of a live holder. Raises `LeaseHeld` when it may not.

    Every change of owner moves the generation, which is what fences the
    previous holder: its next commit no longer matches.
    """
    forced = held_by_other(lease, me, now, clock_skew)
    if forced and not force:
        check_free(lease, me, now, clock_skew=clock_skew)
    if lease.generation >= MAX_SAFE_INT:
        raise LimitExceeded(
            f"the lease's generation is {lease.generation}, the largest V1 allows, so no "
            "writer can take the object over (a head with the next one would not be read "
            "again); nothing was changed. Open it read-only and export it."
        )
    taken = lease.model_copy(
        update={
            "generation": lease.generation + 1,
            "owner": me.owner,
            "instance": me.instance,
            "expires_at": now + ttl,
        }
    )
    return taken, forced


def cold(me: Holder, now: float, ttl: float) -> Lease:
    """The first lease of a new object: generation 1."""
    return Lease(generation=1, owner=me.owner, instance=me.instance, expires_at=now + ttl)


def renew(lease: Lease, now: float, ttl: float) -> Lease:
    """Same owner, same generation, a later expiry: a heartbeat moves nothing else."""
    if lease.released:
        raise ValueError("a released lease cannot be renewed: take it again")
    return lease.model_copy(update={"expires_at": now + ttl})


def release(lease: Lease) -> Lease:
    """Null owner, instance and expiry together; keep the generation."""
    return lease.model_copy(update={"owner": None, "instance": None, "expires_at": None})


def owns(lease: Lease, me: Holder, generation: int) -> bool:
    """Is `lease` still ours: our instance, at the generation we took?"""
    return lease.instance == me.instance and lease.generation == generation


def expiry(lease: Lease) -> float:
    """When a lease just committed runs out (0 for a released one): the
    moment from which a writer that has not renewed must stop."""
    return 0.0 if lease.expires_at is None else lease.expires_at


def must_self_fence(local_expiry: float, now: float) -> bool:
    """A writer that could not renew before its own lease ran out stops writing:
    from that instant another writer may legally take over."""
    return now >= local_expiry


def describe(lease: Lease | None) -> str:
    """What became of a lease, for the message of a writer that lost it."""
    if lease is None:
        return "the head is gone"
    if lease.released:
        return f"the lease was released at generation {lease.generation}"
    return (
        f"the lease was taken by {lease.owner!r} (instance {str(lease.instance)[:8]}) "
        f"at generation {lease.generation}"
    )
