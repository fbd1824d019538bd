"""`core.admission.Admission` alone: first come first admitted, across tasks
and threads; a slot granted to a task cancelled before it woke is passed on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from durable_obj.core.admission import Admission, exempt


def test_a_slot_granted_to_a_task_cancelled_before_it_woke_goes_to_the_next() -> None:
    async def main() -> None:
        a = Admission(1)
        await a.aacquire()
        first = asyncio.ensure_future(a.aacquire())
        second = asyncio.ensure_future(a.aacquire())
        await asyncio.sleep(0)
        assert a.waiting == 2
        a.release()  # granted to `first`, which has not run since
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 30)  # the slot went on
        assert a.in_flight == 1 and a.waiting == 0
        a.release()
        assert a.in_flight == 0

    asyncio.run(main())


def test_a_newcomer_never_passes_those_waiting() -> None:
    async def main() -> None:
        a = Admission(2)
        await a.aacquire()
        await a.aacquire()
        order: list[str] = []

        async def task(name: str) -> None:
            await a.aacquire()
            order.append(name)

        def thread(name: str) -> None:
            a.acquire()
            order.append(name)

        waiting = [asyncio.ensure_future(task("t1"))]
        await asyncio.sleep(0)
        worker = threading.Thread(target=thread, args=("s2",))
        worker.start()
        while a.waiting < 2:
            await asyncio.sleep(0.005)
        waiting.append(asyncio.ensure_future(task("t3")))
        await asyncio.sleep(0)
        a.release()  # one slot free, three waiting: t1 gets it
        await asyncio.sleep(0.01)
        newcomer = asyncio.ensure_future(task("late"))
        await asyncio.sleep(0)
        assert order == ["t1"] and a.waiting == 3  # s2, t3, late: nobody jumped the queue
        for n in range(2, 5):
            a.release()
            while len(order) < n:
                await asyncio.sleep(0.005)
        await asyncio.wait_for(asyncio.gather(*waiting, newcomer), 30)
        await asyncio.to_thread(worker.join, 30)
        assert order == ["t1", "s2", "t3", "late"]

    asyncio.run(main())


def test_exempt_threads_take_no_slot() -> None:
    a = Admission(1)
    assert a.acquire()
    with exempt():
        assert a.acquire() is False  # would wait forever otherwise
    assert a.in_flight == 1
    a.release()
    assert a.in_flight == 0


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError):
        Admission(0)
