"""durable_obj.langgraph.DurableSaver: the LangGraph checkpointer.

The proof is langgraph-checkpoint-conformance 0.0.2 reporting FULL (all 8
capabilities) on a local folder and on S3 (moto), plus a real graph run to
an interrupt in one process and resumed in another, which must end in the
state an uninterrupted run reaches.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import ERROR, INTERRUPT
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

import durable_obj
from durable_obj.langgraph import DurableSaver, StaleWriteOwner, WriteOwnerHeld
from tests.integration import _proc
from tests.integration.children import MARK
from tests.integration.langgraph_children import THREAD, build

CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
}


def _conformance(root: str, options: dict[str, Any] | None) -> None:
    @checkpointer_test(name="DurableSaver")
    async def factory() -> Any:
        saver = DurableSaver(f"{root}/{uuid.uuid4().hex}", storage_options=options)
        yield saver
        await saver.aclose()

    report = asyncio.run(validate(factory))
    failures = {k: r.failures for k, r in report.results.items() if r.failures}
    assert failures == {}
    assert report.conformance_level() == "FULL"
    assert {k for k, r in report.results.items() if r.detected and r.passed} == CAPABILITIES


@pytest.mark.slow
def test_conformance_full_on_a_folder(tmp_path: Path) -> None:
    _conformance(str(tmp_path / "ns"), None)


@pytest.mark.slow
def test_conformance_full_on_s3(moto_s3: tuple[str, dict[str, Any]]) -> None:
    root, options = moto_s3
    _conformance(f"{root}/lg-{uuid.uuid4().hex[:8]}", options)


def _put(saver: DurableSaver, tid: str, parent: dict[str, Any] | None = None) -> Any:
    config = generate_config(tid)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    return saver.put(config, generate_checkpoint(), generate_metadata(), {})


def test_a_second_saver_is_refused_with_the_write_owner_flag(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "bot")
    with DurableSaver(url, owner="a") as first:
        with pytest.raises(WriteOwnerHeld) as info:
            DurableSaver(url, owner="b")
        assert info.value.is_stale_write_owner_error is True
        assert info.value.category == "lease_held"
        assert isinstance(info.value, durable_obj.DurableError)
        # the LeaseHeld's detail is kept: who holds it, and when an open succeeds
        assert info.value.holder == "a" and "('a')" in str(info.value)
        assert "succeeds in" in str(info.value) and "force=True only when" in str(info.value)
        with pytest.raises(WriteOwnerHeld, match="reclaim=True takes only a lease held under"):
            DurableSaver(url, owner="b", reclaim=True)  # another owner: never reclaimed
        with pytest.raises(WriteOwnerHeld, match=r"has no owner=.*stable owner= and pass reclaim"):
            DurableSaver(url)
        _put(first, "t")  # the first keeps writing


def test_a_fenced_saver_never_writes_again(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "bot")
    first = DurableSaver(url, owner="a")
    kept = _put(first, "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        second = DurableSaver(url, owner="b", force=True)
    for _ in range(2):
        with pytest.raises(StaleWriteOwner) as info:
            _put(first, "t", kept)
        assert info.value.is_stale_write_owner_error is True
        assert info.value.category == "lease_fenced"
    with pytest.raises(StaleWriteOwner):
        first.put_writes(kept, [("ch", 1)], "task")
    with pytest.raises(StaleWriteOwner):
        first.delete_thread("t")
    first.close()
    after = _put(second, "t", kept)
    second.close()
    with DurableSaver(url, read_only=True) as reader:
        ids = [t.config["configurable"]["checkpoint_id"] for t in reader.list(None)]
    assert ids == [after["configurable"]["checkpoint_id"], kept["configurable"]["checkpoint_id"]]


def test_pending_writes_first_wins_and_special_channels_replace(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "bot")
    with DurableSaver(url) as saver:
        cfg = _put(saver, "t")
        saver.put_writes(cfg, [("a", 1), ("b", 2)], "task1")
        saver.put_writes(cfg, [("a", 10), ("b", 20), ("c", 30)], "task1")
        saver.put_writes(cfg, [(ERROR, "first")], "task1")
        saver.put_writes(cfg, [(ERROR, "second")], "task1")
        saver.put_writes(cfg, [(INTERRUPT, "i1")], "task2")
        saver.put_writes(cfg, [(INTERRUPT, "i2")], "task2")
    with DurableSaver(url, read_only=True) as reader:  # as replayed from storage
        tup = reader.get_tuple(cfg)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == sorted(
        [
            ("task1", "a", 1),
            ("task1", "b", 2),
            ("task1", "c", 30),
            ("task1", ERROR, "second"),
            ("task2", INTERRUPT, "i2"),
        ]
    )


def test_an_unchanged_channel_is_stored_once(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "bot")
    with DurableSaver(url) as saver:
        graph = build(saver)
        graph.invoke({"log": [], "count": 0, "answer": ""}, THREAD)
        graph.invoke(Command(resume="yes"), THREAD)
        checkpoints = int(saver.obj.query("SELECT count() FROM lg_checkpoints FINAL").strip())
        answers = int(
            saver.obj.query("SELECT count() FROM lg_blobs FINAL WHERE channel = 'answer'").strip()
        )
        blobs = int(saver.obj.query("SELECT count() FROM lg_blobs FINAL").strip())
        referenced = sum(len(t.checkpoint["channel_versions"]) for t in saver.list(None))
    # "answer" changed twice (the input, then the human's answer) in ~10 checkpoints.
    assert checkpoints >= 9
    assert answers == 2
    assert blobs < referenced * 2 // 3


def test_flush_policies(tmp_path: Path) -> None:
    every = DurableSaver(str(tmp_path / "ns" / "every"))
    cfg = _put(every, "t")
    every.put_writes(cfg, [("a", 1)], "task")
    assert every.obj.pending == 0
    every.close()

    step = DurableSaver(str(tmp_path / "ns" / "step"), flush="step")
    cfg = _put(step, "t")
    step.put_writes(cfg, [("a", 1)], "task")
    assert step.obj.pending == 1  # rides with the next put
    _put(step, "t", cfg)
    assert step.obj.pending == 0
    step.close()

    batch = DurableSaver(
        str(tmp_path / "ns" / "batch"), flush="batch", batch_puts=3, batch_seconds=None
    )
    cfg = _put(batch, "t")
    cfg = _put(batch, "t", cfg)
    assert batch.obj.pending == 2
    _put(batch, "t", cfg)
    assert batch.obj.pending == 0
    _put(batch, "t", cfg)
    assert batch.obj.pending == 1
    batch.flush()
    assert batch.obj.pending == 0
    batch.close()


def test_a_shared_object_is_left_open(tmp_path: Path) -> None:
    obj = durable_obj.open(str(tmp_path / "ns" / "shared"))
    with DurableSaver(obj) as saver:
        _put(saver, "t")
    assert not obj.closed
    assert "lg_checkpoints" in obj.tables()
    obj.close()


def _child(name: str, params: dict[str, Any]) -> Any:
    argv = [sys.executable, "-m", "tests.integration.langgraph_children", name, json.dumps(params)]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=180,
        env=_proc.child_env(),
        cwd=_proc.REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    return json.loads(lines[-1][len(MARK) :])


@pytest.mark.slow
def test_interrupted_in_one_process_resumed_in_another(tmp_path: Path) -> None:
    url = str(tmp_path / "ns" / "agent")
    stopped = _child("to_interrupt", {"url": url})
    assert stopped["interrupts"] == [{"question": "ship it?", "count": 5}]
    assert stopped["next"] == ["ask"]
    finished = _child("resume", {"url": url, "answer": "yes"})

    reference = InMemorySaver()  # one process, no restart
    graph = build(reference)
    graph.invoke({"log": [], "count": 0, "answer": ""}, THREAD)
    expected = graph.invoke(Command(resume="yes"), THREAD)
    history = [s.values.get("count") for s in graph.get_state_history(THREAD)]
    assert finished["values"] == expected
    assert finished["history"] == history
    assert expected["log"][-2:] == ["asked:yes", "done"]


@pytest.mark.slow
def test_a_restarted_worker_reclaims_its_saver_at_once(tmp_path: Path) -> None:
    """A worker stops at the interrupt and is killed (SIGKILL) holding a live
    60 s lease; its replacement, same owner name, reclaim=True, takes over
    at once and finishes the run as one uninterrupted process would."""
    url = str(tmp_path / "ns" / "agent")
    params = {"url": url, "owner": "worker-1", "lease_ttl": 60, "crash": True}
    argv = [
        sys.executable,
        "-m",
        "tests.integration.langgraph_children",
        "to_interrupt",
        json.dumps(params),
    ]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env=_proc.child_env(), cwd=_proc.REPO
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    marked = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    stopped = json.loads(marked[-1][len(MARK) :])
    assert stopped["next"] == ["ask"]
    # Not waiting: without reclaim the live lease is refused, saying what would work.
    with pytest.raises(WriteOwnerHeld) as held:
        DurableSaver(url, owner="worker-1")
    assert "succeeds in" in str(held.value) and "pass reclaim=True" in str(held.value)
    with DurableSaver(url, owner="worker-1", reclaim=True, lease_ttl=60) as saver:
        finished = build(saver).invoke(Command(resume="yes"), THREAD)
    reference = InMemorySaver()
    graph = build(reference)
    graph.invoke({"log": [], "count": 0, "answer": ""}, THREAD)
    assert finished == graph.invoke(Command(resume="yes"), THREAD)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_a_crash_loses_what_the_durability_mode_says(tmp_path: Path, mode: str) -> None:
    """The README's table of LangGraph's durability modes: a process killed
    as step 5 starts (plan, work0..2 done), with a slow store (each put
    0.3 s). "sync": every finished step is there; "async" (LangGraph's
    default): the steps whose saves were still in flight are lost; "exit":
    the whole run is."""
    url = str(tmp_path / "ns" / "agent")
    params = {"url": url, "mode": mode, "put_delay": 0.3}
    argv = [sys.executable, "-m", "tests.integration.langgraph_children", "crash"]
    proc = subprocess.run(
        [*argv, json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=180,
        env=_proc.child_env(),
        cwd=_proc.REPO,
        check=False,
    )
    assert proc.returncode == 9, proc.stderr
    with DurableSaver(url, read_only=True) as saver:
        state = build(saver).get_state(THREAD)
        saved = saver.get_tuple(THREAD)
    done = ["plan", "work0", "work1", "work2"]
    if mode == "sync":
        assert state.values == {"log": done, "count": 3, "answer": ""}
        assert state.next == ("work",)  # resumes at the step that crashed
    elif mode == "async":
        log = state.values.get("log", [])
        assert log == done[: len(log)] and len(log) < len(done), state.values
    else:
        assert state.values == {} and saved is None


class _WatchedSerde(JsonPlusSerializer):
    """Records the thread of every dumps_typed; can hold one call in it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()
        self.hold_next = False
        self.held = threading.Event()
        self.go = threading.Event()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.threads.add(threading.get_ident())
        if self.hold_next:
            self.hold_next = False
            self.held.set()
            self.go.wait(30)
        return super().dumps_typed(obj)


def test_async_twins_are_calls_of_the_objects_lane(tmp_path: Path) -> None:
    """aput & co. run as one call of the object's async face: off the loop,
    in order with the caller's calls on that face; cancelled in the queue
    they never run, cancelled once started they finish and commit."""
    url = str(tmp_path / "ns" / "lane")
    serde = _WatchedSerde()

    async def run() -> tuple[int, bool]:
        loop_thread = threading.get_ident()
        aobj = await durable_obj.aopen(url)
        saver = DurableSaver(aobj, serde=serde)
        gate, blocking = threading.Event(), threading.Event()

        def block() -> bool:
            blocking.set()
            return gate.wait(30)

        blocker = asyncio.create_task(aobj.arun(block, io=False))
        queued = asyncio.create_task(saver.aput(generate_config("never"), *_fresh()))
        after = asyncio.create_task(saver.aput(generate_config("after"), *_fresh()))
        await asyncio.sleep(0)  # the three calls are in the lane, in this order
        await asyncio.to_thread(blocking.wait, 30)  # the blocker runs: both puts queued
        # Decided inside cancel(): the put never runs, although the blocker
        # ends at once and its worker takes the next call before the loop turns.
        queued.cancel()
        gate.set()
        await blocker
        with pytest.raises(asyncio.CancelledError):
            await queued
        await after
        serde.hold_next = True
        started = asyncio.create_task(saver.aput(generate_config("started"), *_fresh()))
        await asyncio.to_thread(serde.held.wait, 30)
        started.cancel()
        serde.go.set()
        with pytest.raises(asyncio.CancelledError):
            await started
        await aobj.asettle()
        pending = aobj.sync.pending
        await aobj.aclose()
        return pending, loop_thread in serde.threads

    pending, on_loop = asyncio.run(run())
    assert pending == 0  # the started put was flushed although its task was cancelled
    assert not on_loop  # no serde work on the event loop
    with DurableSaver(url, read_only=True) as reader:
        assert reader.get_tuple(generate_config("never")) is None
        assert reader.get_tuple(generate_config("after")) is not None
        assert reader.get_tuple(generate_config("started")) is not None


def _fresh() -> tuple[Any, Any, Any]:
    return generate_checkpoint(), generate_metadata(), {}
