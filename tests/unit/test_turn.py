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


def _queued(*threads: threading.Thread) -> bool:
    """Whether these threads wait for the turn, in this order (another
    thread of the process, e.g. a worker of an earlier test, may wait too)."""
    ours = {t.ident for t in threads}
    return [t.ident for t in turn._waiting if t.ident in ours] == [t.ident for t in threads]


def test_the_turn_goes_in_the_order_asked_and_nobody_takes_it_twice_in_a_row() -> None:
    order: list[str] = []
    started = threading.Event()
    others: list[threading.Thread] = []

    def first() -> None:
        with turn.hold():
            started.set()
            _until(lambda: len(others) == 3 and _queued(*others), "three workers waiting")
        with turn.hold():  # straight back: behind the three
            order.append("a")

    def worker(name: str) -> None:
        with turn.hold():
            order.append(name)

    a = threading.Thread(target=first)
    a.start()
    assert started.wait(30)
    for name in "bcd":
        t = threading.Thread(target=worker, args=(name,))
        t.start()
        _until(lambda t=t: _queued(*others, t), f"{name} waiting")
        others.append(t)
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
