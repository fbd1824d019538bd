"""A LangGraph graph with deterministic nodes, and the programs the
LangGraph integration tests run in fresh interpreters:

    python -m tests.integration.langgraph_children NAME '{"url": ...}'

`to_interrupt` runs the graph on a durable object until it stops at its
interrupt, then exits; `resume` opens the same URL in a new process and
finishes the run. Each emits one MARK line of JSON (as
tests/integration/children.py does). `crash` runs it with a LangGraph
`durability` mode and a slow saver put, and dies (exit code 9, nothing
closed or flushed) as the fourth `work` step starts.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
import time
from typing import Annotated, Any, TypedDict

from tests.integration.children import emit

THREAD = {"configurable": {"thread_id": "agent-1"}}


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int
    answer: str


def build(checkpointer: Any, store: Any = None, crash_at: int | None = None) -> Any:
    """plan -> work (x5, a loop) -> ask (interrupt: wait for a human) -> finish;
    `crash_at`: the process dies when `work` starts with that count."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def plan(state: State) -> dict[str, Any]:
        return {"log": ["plan"], "count": 0}

    def work(state: State) -> dict[str, Any]:
        if state["count"] == crash_at:
            os._exit(9)  # a crash: kill -9, a lost machine
        return {"log": [f"work{state['count']}"], "count": state["count"] + 1}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "ship it?", "count": state["count"]})
        return {"log": [f"asked:{answer}"], "answer": answer}

    def finish(state: State) -> dict[str, Any]:
        if store is not None:
            store.put(("runs",), "last", {"answer": state["answer"], "count": state["count"]})
        return {"log": ["done"]}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("ask", ask)
    g.add_node("finish", finish)
    g.add_edge(START, "plan")
    g.add_edge("plan", "work")
    g.add_conditional_edges("work", lambda s: "work" if s["count"] < 5 else "ask")
    g.add_edge("ask", "finish")
    g.add_edge("finish", END)
    return g.compile(checkpointer=checkpointer, store=store)


def to_interrupt(p: dict[str, Any]) -> None:
    """Run to the interrupt and emit; with "crash", then die by SIGKILL with
    the saver open (its lease left live), as a killed worker does."""
    from durable_obj.langgraph import DurableSaver

    options = {"lease_ttl": p["lease_ttl"]} if "lease_ttl" in p else {}
    with DurableSaver(
        p["url"], owner=p.get("owner"), storage_options=p.get("options"), **options
    ) as saver:
        out = build(saver).invoke({"log": [], "count": 0, "answer": ""}, THREAD)
        state = build(saver).get_state(THREAD)
        emit(
            {
                "interrupts": [i.value for i in out.get("__interrupt__", [])],
                "next": list(state.next),
                "values": state.values,
            }
        )
        if p.get("crash"):
            os.kill(os.getpid(), signal.SIGKILL)


def resume(p: dict[str, Any]) -> None:
    from langgraph.types import Command

    from durable_obj.langgraph import DurableSaver

    with DurableSaver(p["url"], storage_options=p.get("options")) as saver:
        out = build(saver).invoke(Command(resume=p["answer"]), THREAD)
        history = [s.values.get("count") for s in build(saver).get_state_history(THREAD)]
        emit({"values": out, "history": history})


def crash(p: dict[str, Any]) -> None:
    from durable_obj.langgraph import DurableSaver

    saver = DurableSaver(p["url"])
    real_put = saver.put

    def slow_put(*args: Any) -> Any:
        time.sleep(p["put_delay"])  # a slow store: the save is still in flight meanwhile
        return real_put(*args)

    saver.put = slow_put  # type: ignore[method-assign]
    graph = build(saver, crash_at=3)
    graph.invoke({"log": [], "count": 0, "answer": ""}, THREAD, durability=p["mode"])
    raise AssertionError("the graph should have crashed in work, count 3")


PROGRAMS = {"to_interrupt": to_interrupt, "resume": resume, "crash": crash}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]](json.loads(sys.argv[2]))
