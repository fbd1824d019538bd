"""The async face (`durable_obj.aopen`, `AsyncDurableObject`): every method,
`async with`, the same error classes, per-object call order, many concurrent
coroutines, cancellation that never leaves a half-committed head, and a loop
that keeps running while a long call is in flight. Plain tests around
`asyncio.run` (no pytest plugin needed).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import durable_obj
from durable_obj import AsyncDurableObject, aopen
from durable_obj.aio import FlushOutcome

T = TypeVar("T")

DDL = "CREATE TABLE m (k String, v UInt32) ENGINE = MergeTree ORDER BY k"


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


def count(obj: durable_obj.DurableObject, table: str = "m") -> int:
    return int(obj.query(f"SELECT count() FROM {table}", "TSV").strip())


def stored_count(url: str, table: str = "m") -> int:
    with durable_obj.open(url, read_only=True) as obj:
        return count(obj, table)


def test_every_method(ns_url: str) -> None:
    url = f"{ns_url}/agent"

    async def main() -> None:
        obj = await aopen(url, owner="t")
        assert isinstance(obj, AsyncDurableObject)
        assert isinstance(obj.sync, durable_obj.DurableObject)
        assert obj.sync.url.endswith("agent") and not obj.sync.read_only
        await obj.aexecute(DDL)
        await obj.aexecute("INSERT INTO m VALUES ('a', 1), ('b', 2)")
        assert obj.sync.pending == 2
        assert await obj.aquery("SELECT sum(v) FROM m", fmt="TSV") == "3\n"
        assert await obj.atables() == ["m"]
        key = await obj.aflush()
        assert key is not None and key.startswith("wal/")
        assert await obj.aflush() is None  # nothing executed since it was told
        assert obj.sync.pending == 0
        assert await obj.arefresh() is False  # a writer's copy is the newest
        await obj.aexecute("INSERT INTO m VALUES ('c', 3)")
        base = await obj.acheckpoint()
        assert base.startswith("checkpoints/") and obj.sync.pending == 0
        outcome = await obj.flush_outcome()
        assert outcome == FlushOutcome(ran=True, key=None)
        assert outcome.committed

        reader = await aopen(url, read_only=True)
        assert await reader.aquery("SELECT count() FROM m", "TSV") == "3\n"
        await obj.aexecute("INSERT INTO m VALUES ('d', 4)")
        await obj.aflush()
        assert await reader.arefresh() is True
        assert await reader.aquery("SELECT count() FROM m", "TSV") == "4\n"
        await reader.aclose()
        await obj.aexecute("INSERT INTO m VALUES ('e', 5)")
        await obj.aclose()  # flushes
        assert obj.sync.closed
        await obj.aclose()  # closing a closed object does nothing

    run(main)
    assert stored_count(url) == 5


def test_async_with_and_wrap(ns_url: str) -> None:
    url = f"{ns_url}/agent"

    async def main() -> None:
        async with await aopen(url, owner="t", lease_ttl=9) as obj:
            await obj.aexecute(DDL)
            await obj.aexecute("INSERT INTO m VALUES ('a', 1)")
        assert obj.sync.closed  # closed, and therefore flushed

        sync = durable_obj.open(url)
        async with AsyncDurableObject.wrap(sync) as wrapped:
            assert wrapped.sync is sync
            await wrapped.aexecute("INSERT INTO m VALUES ('b', 2)")
        assert sync.closed

    run(main)
    assert stored_count(url) == 2
    with pytest.raises(durable_obj.InvalidArgument):
        AsyncDurableObject.wrap("not an object")  # type: ignore[arg-type]


def test_errors_are_the_sync_classes(ns_url: str) -> None:
    url = f"{ns_url}/agent"

    async def main() -> None:
        with pytest.raises(durable_obj.NotFound):
            await aopen(f"{ns_url}/missing", create=False)
        with pytest.raises(durable_obj.InvalidArgument):
            await aopen(url, leese_ttl=9)
        obj = await aopen(url, owner="t")
        await obj.aexecute(DDL)
        with pytest.raises(durable_obj.Nondeterministic):
            await obj.aexecute("INSERT INTO m SELECT 'x', rand() FROM numbers(3)")
        with pytest.raises(durable_obj.EngineError):
            await obj.aexecute("INSERT INTO no_such_table VALUES (1)")
        with pytest.raises(durable_obj.LeaseHeld):
            await aopen(url, owner="other")
        await obj.aflush()
        reader = await aopen(url, read_only=True)
        with pytest.raises(durable_obj.ClassificationRefused):
            await reader.aexecute("INSERT INTO m VALUES ('a', 1)")
        await reader.aclose()
        await obj.aclose()
        with pytest.raises(durable_obj.Closed) as info:
            await obj.aquery("SELECT 1")
        assert info.value.category == "closed"
        with pytest.raises(durable_obj.Closed):
            await obj.aexecute("INSERT INTO m VALUES ('a', 1)")

    run(main)


def test_calls_of_one_object_keep_their_order(ns_url: str) -> None:
    """Started together, an object's calls still run in the order started:
    every count sees exactly the inserts started before it."""

    async def main() -> list[Any]:
        async with await aopen(f"{ns_url}/agent", owner="t") as obj:
            await obj.aexecute(DDL)
            calls: list[Awaitable[Any]] = []
            for i in range(40):
                calls.append(obj.aexecute(f"INSERT INTO m VALUES ('k{i}', {i})"))
                calls.append(obj.aquery("SELECT count() FROM m", "TSV"))
            return await asyncio.gather(*calls)

    results = run(main)
    assert [int(r) for r in results[1::2]] == list(range(1, 41))


def test_many_coroutines_on_many_objects(ns_url: str) -> None:
    """8 objects, 6 agents each, remembering and flushing at once: every
    aflush answers with a commit key, and everything is stored."""
    urls = [f"{ns_url}/agent-{n}" for n in range(8)]

    async def agent(obj: AsyncDurableObject, n: int) -> list[str | None]:
        keys = []
        for i in range(4):
            await obj.aexecute(f"INSERT INTO m VALUES ('a{n}-{i}', {i})")
            keys.append(await obj.aflush())
        return keys

    async def main() -> list[list[str | None]]:
        objs = await asyncio.gather(*(aopen(url, owner="t") for url in urls))
        for obj in objs:
            await obj.aexecute(DDL)
        answers = await asyncio.gather(
            *(agent(obj, n) for obj in objs for n in range(6)),
        )
        await asyncio.gather(*(obj.aclose() for obj in objs))
        return answers

    answers = run(main)
    # Each agent's statements were made durable by its own aflush or by
    # another agent's: either way it is told the key of a commit, never None.
    assert all(key is not None for keys in answers for key in keys)
    assert [stored_count(url) for url in urls] == [24] * 8


def test_aflush_answers_per_task(ns_url: str) -> None:
    async def main() -> None:
        async with await aopen(f"{ns_url}/agent", owner="t") as obj:
            await obj.aexecute(DDL)
            await obj.aflush()
            a_ran, b_ran = asyncio.Event(), asyncio.Event()

            async def a() -> str | None:
                await obj.aexecute("INSERT INTO m VALUES ('a', 1)")
                a_ran.set()
                await b_ran.wait()
                return await obj.aflush()

            async def b() -> tuple[str | None, str | None]:
                await a_ran.wait()
                await obj.aexecute("INSERT INTO m VALUES ('b', 2)")
                b_ran.set()
                await asyncio.sleep(0)
                await obj.asettle()  # a's aflush, started first, has run
                return await obj.aflush(), await obj.aflush()

            key_a, (key_b, again) = await asyncio.gather(a(), b())
            assert key_a is not None and key_b == key_a  # a's flush committed b's insert
            assert again is None  # told once
            assert await obj.aflush() is None  # this task executed nothing

    run(main)


def test_cancelled_aflush_committed_or_left_the_buffer(ns_url: str) -> None:
    """Cancel aflush at many points (queued behind a slow call, just started,
    mid-commit, after): each time it either committed every buffered
    statement or none, flush_outcome() says which, and a reopen finds
    exactly the committed statements."""
    url = f"{ns_url}/agent"
    rng = random.Random(15)
    seen = {"ran": 0, "not_run": 0}

    async def main() -> int:
        obj = await aopen(url, owner="t")
        try:
            return await cancel_many(obj)
        finally:
            await obj.aclose(discard=True)

    async def cancel_many(obj: AsyncDurableObject) -> int:
        await obj.aexecute(DDL)
        await obj.aflush()
        committed = 0
        for i in range(40):
            for j in range(3):
                await obj.aexecute(f"INSERT INTO m VALUES ('k{i}-{j}', {j})")
            seq, pending = obj.sync.seq, obj.sync.pending
            if i % 4 == 0:  # queued behind another call: cancelled before its turn
                slow = asyncio.ensure_future(
                    obj.aquery("SELECT sum(cityHash64(number)) FROM numbers(30000000)")
                )
            task = asyncio.ensure_future(obj.aflush())
            for _ in range(1 + rng.randrange(3)):  # once at least: aflush has started
                await asyncio.sleep(0)
            if rng.random() < 0.5:
                await asyncio.sleep(rng.uniform(0, 0.01))
            if task.cancel():
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:  # it had finished: the cancel came too late to matter
                await task
            outcome = await obj.flush_outcome()
            assert outcome is not None and outcome.error is None
            await obj.asettle()
            if i % 4 == 0:
                await slow
            if outcome.committed:
                seen["ran"] += 1
                assert outcome.key is not None
                assert obj.sync.pending == 0 and obj.sync.seq == seq + 1
                committed += pending
            else:
                seen["not_run"] += 1
                assert obj.sync.pending == pending and obj.sync.seq == seq
            if obj.sync.pending:  # left intact: carried into the next flush
                assert obj.sync.pending % 3 == 0
        return committed

    committed = run(main)
    assert seen["not_run"] >= 1  # the queued ones, at least
    assert stored_count(url) == committed
    assert committed % 3 == 0


def test_cancelled_in_the_queue_never_runs_even_if_its_turn_comes_at_once(
    ns_url: str,
) -> None:
    """The call ahead finishes right after task.cancel(), before the loop
    turns again: the cancelled calls still never run (the choice is made
    inside task.cancel(), not on the loop's next turn), the call after them
    does, and the started call that was cancelled finishes. Deterministic:
    the loop thread itself blocks until the lane has passed them all."""

    async def main() -> None:
        async with await aopen(f"{ns_url}/agent", owner="t") as obj:
            await obj.aexecute(DDL)
            await obj.aflush()
            await obj.aexecute("INSERT INTO m VALUES ('a', 1), ('b', 2)")
            seq, pending = obj.sync.seq, obj.sync.pending
            gate, started = threading.Event(), threading.Event()
            ran: list[str] = []

            def blocker() -> None:
                started.set()
                gate.wait(30)
                ran.append("blocker")

            head = asyncio.ensure_future(obj.arun(blocker, io=False))
            flush = asyncio.ensure_future(obj.aflush())
            probe = asyncio.ensure_future(obj.arun(lambda: ran.append("probe"), io=False))
            after = asyncio.ensure_future(obj.arun(lambda: ran.append("after"), io=False))
            await asyncio.sleep(0)  # all four are in the lane, in this order
            assert started.wait(30)  # the head is running, the rest queued
            assert head.cancel() and flush.cancel() and probe.cancel()
            gate.set()
            # No await: the loop cannot turn until the lane has passed the
            # cancelled calls and run the one after them.
            deadline = time.monotonic() + 30
            while "after" not in ran:
                assert time.monotonic() < deadline, "the lane never reached 'after'"
                time.sleep(0.001)
            for task in (head, flush, probe):
                with pytest.raises(asyncio.CancelledError):
                    await task
            await after
            assert ran == ["blocker", "after"]  # started: finished; queued: never ran
            assert await obj.flush_outcome() == FlushOutcome(ran=False)
            assert obj.sync.pending == pending and obj.sync.seq == seq  # buffer intact
            assert await obj.aflush() is not None
            assert count(obj.sync) == 2

    run(main)


def test_loop_keeps_running_during_a_long_call(ns_url: str) -> None:
    """A ticker coroutine makes progress while a long chDB call and a
    checkpoint are in flight (nothing blocks the loop; the benchmark
    measures how much)."""

    async def main() -> tuple[int, int]:
        async with await aopen(f"{ns_url}/agent", owner="t") as obj:
            await obj.aexecute(DDL)
            await obj.aexecute("INSERT INTO m SELECT toString(number), number FROM numbers(50000)")
            ticks = 0

            async def while_running(call: Awaitable[Any]) -> int:
                nonlocal ticks
                fut = asyncio.ensure_future(call)
                ticks = 0
                while not fut.done():
                    await asyncio.sleep(0)
                    ticks += 1
                await fut
                return ticks

            during_query = await while_running(
                obj.aquery("SELECT sum(cityHash64(number)) FROM numbers(100000000)")
            )
            during_checkpoint = await while_running(obj.acheckpoint())
            return during_query, during_checkpoint

    during_query, during_checkpoint = run(main)
    assert during_query > 1 and during_checkpoint > 1


def test_cancelled_aopen_leaves_no_lease(ns_url: str) -> None:
    url = f"{ns_url}/agent"

    async def main() -> None:
        task = asyncio.ensure_future(aopen(url, owner="t", lease_ttl=60))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)
    # The open finishes in its thread and then closes (releasing the lease):
    # a writer gets the object without force, long before the 60 s lease.
    deadline = time.monotonic() + 30
    while True:
        try:
            with durable_obj.open(url, owner="next") as obj:
                assert obj.generation >= 1
            return
        except durable_obj.LeaseHeld:
            assert time.monotonic() < deadline, "the cancelled open kept its lease"
            time.sleep(0.05)


def test_two_faces_over_one_object_share_its_lane(ns_url: str) -> None:
    """Two `AsyncDurableObject`s over one object used to have a lane each,
    and could deadlock on plain reads: a worker holding the turn waited for
    the object's lock while the lock's holder, back from a long engine call,
    waited for the turn. Every face of an object now shares one lane, so its
    calls run one at a time and in order whatever face made them."""

    async def main() -> list[int]:
        a = await aopen(f"{ns_url}/two-faces", owner="w")
        b = AsyncDurableObject.wrap(a.sync)
        assert b._lane is a._lane
        slow = "SELECT sum(sipHash64(number)) FROM numbers(2000000)"  # past the turn's SLOW
        order: list[int] = []

        async def reads(face: AsyncDurableObject, tag: int) -> None:
            for _ in range(6):
                await face.aquery(slow)
                order.append(tag)

        await asyncio.wait_for(
            asyncio.gather(*(reads(face, i) for i, face in enumerate((a, b, a, b)))), 120
        )
        await a.aclose()
        return order

    assert sorted(run(main)) == sorted([0, 1, 2, 3] * 6)
