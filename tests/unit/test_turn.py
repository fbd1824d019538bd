"""The turn (`replica/turn.py`): one local worker at a time, in the order
they asked; a worker that gives the turn back and asks again at once goes
behind those already waiting."""

from __future__ import annotations

import threading
import time

from durable_obj.replica import turn


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.001)


def test_the_turn_goes_in_the_order_asked_and_nobody_takes_it_twice_in_a_row() -> None:
    order: list[str] = []
    started = threading.Event()

    def first() -> None:
        with turn.hold():
            started.set()
            _until(lambda: len(turn._waiting) == 3, "three workers waiting")
        with turn.hold():  # straight back: behind the three
            order.append("a")

    def worker(name: str) -> None:
        with turn.hold():
            order.append(name)

    a = threading.Thread(target=first)
    a.start()
    assert started.wait(30)
    others = []
    for n, name in enumerate("bcd", start=1):
        t = threading.Thread(target=worker, args=(name,))
        t.start()
        others.append(t)
        _until(lambda n=n: len(turn._waiting) == n, f"{name} waiting")
    for t in [a, *others]:
        t.join(30)
    assert order == ["b", "c", "d", "a"]


def test_a_worker_waiting_on_the_engine_lets_the_next_go_beside_it() -> None:
    inside = threading.Event()
    done = threading.Event()
    went_beside = threading.Event()

    def slow() -> None:
        with turn.hold(), turn.released():
            inside.set()
            assert went_beside.wait(30)  # (the engine call "runs" until the other went)
        done.set()

    def other() -> None:
        with turn.hold():
            went_beside.set()

    s = threading.Thread(target=slow)
    s.start()
    assert inside.wait(30)
    o = threading.Thread(target=other)
    o.start()
    o.join(30)
    s.join(30)
    assert went_beside.is_set() and done.is_set()
