from __future__ import annotations

import pytest

from durable_obj.errors import LeaseHeld
from durable_obj.wire import lease as leases
from durable_obj.wire.head import Lease

ME = leases.Holder("me", "i-me")
OTHER = leases.Holder("other", "i-other")


def held(by: leases.Holder, until: float, gen: int = 4) -> Lease:
    return Lease(generation=gen, owner=by.owner, instance=by.instance, expires_at=until)


def test_released_lease_is_free_and_moves_generation() -> None:
    taken, forced = leases.acquire(Lease(generation=4), ME, 100.0, 30.0, clock_skew=5, force=False)
    assert not forced
    assert (taken.generation, taken.owner, taken.instance, taken.expires_at) == (
        5,
        "me",
        "i-me",
        130.0,
    )


def test_live_lease_of_other_is_held_even_with_same_owner_name() -> None:
    twin = leases.Holder("me", "i-twin")
    with pytest.raises(LeaseHeld, match="force=True"):
        leases.acquire(held(twin, 200.0), ME, 100.0, 30.0, clock_skew=5, force=False)


def test_clock_skew_allowance() -> None:
    lease = held(OTHER, 100.0)
    with pytest.raises(LeaseHeld):
        leases.acquire(lease, ME, 104.0, 30.0, clock_skew=5, force=False)
    taken, forced = leases.acquire(lease, ME, 105.5, 30.0, clock_skew=5, force=False)
    assert not forced and taken.generation == 5


def test_force_takes_live_lease_and_says_so() -> None:
    taken, forced = leases.acquire(held(OTHER, 200.0), ME, 100.0, 30.0, clock_skew=5, force=True)
    assert forced and taken.generation == 5 and taken.instance == "i-me"


def test_renew_moves_only_expiry() -> None:
    lease = held(ME, 100.0)
    renewed = leases.renew(lease, 150.0, 30.0)
    assert renewed.generation == 4 and renewed.expires_at == 180.0 and renewed.owner == "me"


def test_owns_and_self_fence() -> None:
    lease = held(ME, 100.0, gen=7)
    assert leases.owns(lease, ME, 7)
    assert not leases.owns(lease, ME, 6)
    assert not leases.owns(lease, OTHER, 7)
    assert leases.must_self_fence(100.0, 100.0)
    assert not leases.must_self_fence(100.0, 99.9)


def test_own_instance_is_never_held_against_us() -> None:
    assert not leases.held_by_other(held(ME, 1e12), ME, 0.0, 0.0)


def test_check_free_refuses_only_a_live_lease_of_another() -> None:
    leases.check_free(Lease(generation=4), ME, 100.0, clock_skew=5)
    leases.check_free(held(ME, 200.0), ME, 100.0, clock_skew=5)
    leases.check_free(held(OTHER, 100.0), ME, 105.5, clock_skew=5)
    with pytest.raises(LeaseHeld, match="'other'"):
        leases.check_free(held(OTHER, 100.0), ME, 104.0, clock_skew=5)


def test_expiry_and_what_became_of_a_lease() -> None:
    assert leases.expiry(held(ME, 130.0)) == 130.0
    assert leases.expiry(leases.release(held(ME, 130.0))) == 0.0
    assert leases.describe(None) == "the head is gone"
    assert leases.describe(leases.release(held(ME, 1.0, gen=7))) == (
        "the lease was released at generation 7"
    )
    assert leases.describe(held(OTHER, 1.0, gen=8)) == (
        "the lease was taken by 'other' (instance i-other) at generation 8"
    )


def test_lease_held_carries_the_holder_and_the_wait_and_names_reclaim_for_a_namesake() -> None:
    twin = leases.Holder("me", "i-twin")
    with pytest.raises(LeaseHeld) as same:
        leases.check_free(held(twin, 130.0), ME, 100.0, clock_skew=5)
    assert (same.value.holder, same.value.generation, same.value.wait) == ("me", 4, 35.0)
    assert "succeeds in 35.0 s" in str(same.value)
    assert "open with reclaim=True" in str(same.value)  # the same name: maybe an earlier self
    assert "force=True" in str(same.value)
    with pytest.raises(LeaseHeld) as other:
        leases.check_free(held(OTHER, 130.0), ME, 100.0, clock_skew=5)
    assert "reclaim" not in str(other.value)  # another owner: reclaim does not apply
    with pytest.raises(LeaseHeld) as tried:
        leases.check_free(held(OTHER, 130.0), ME, 100.0, clock_skew=5, reclaiming=True)
    assert "reclaim=True takes only a lease held under this writer's own" in str(tried.value)
    assert "'other'" in str(tried.value) and "'me'" in str(tried.value)


def test_no_takeover_past_the_largest_generation() -> None:
    """A head may hold V1's largest generation (2**53 - 1): taking it over
    would write one no reader accepts, so it is refused, typed."""
    from durable_obj.errors import LimitExceeded
    from durable_obj.wire.protocol import MAX_SAFE_INT

    with pytest.raises(LimitExceeded, match="generation"):
        leases.acquire(Lease(generation=MAX_SAFE_INT), ME, 100.0, 30.0, clock_skew=5, force=True)
    taken, _ = leases.acquire(
        Lease(generation=MAX_SAFE_INT - 1), ME, 1.0, 3.0, clock_skew=0, force=False
    )
    assert taken.generation == MAX_SAFE_INT
