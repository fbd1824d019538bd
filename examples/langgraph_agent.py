"""A LangGraph agent whose checkpoints and memories live in a durable object,
interrupted in one process and resumed in another. No API key: every node
is deterministic.

    python examples/langgraph_agent.py                  # a local folder: ./durable-data
    python examples/langgraph_agent.py s3://bucket/agents/triage

It runs itself twice as child processes: the first triages a ticket, asks
a human for approval (an interrupt) and exits; the second opens the same
URL, answers, and finishes. The checkpointer (DurableSaver) and the store
(DurableStore, long-term memory across threads) share one object.
"""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt

from durable_obj.langgraph import DurableSaver, DurableStore


class Ticket(TypedDict):
    text: str
    steps: Annotated[list[str], operator.add]
    priority: str
    approved: bool


def triage(state: Ticket, *, store: BaseStore) -> dict[str, Any]:
    seen = store.search(("tickets",), filter={"priority": "high"})
    words = state["text"].lower().split()
    priority = "high" if {"outage", "down", "urgent"} & set(words) else "low"
    return {"priority": priority, "steps": [f"triaged:{priority} (high before: {len(seen)})"]}


def approve(state: Ticket) -> dict[str, Any]:
    answer = interrupt({"ticket": state["text"], "priority": state["priority"]})
    return {"approved": answer == "yes", "steps": [f"human said {answer}"]}


def file_it(state: Ticket, *, store: BaseStore) -> dict[str, Any]:
    if state["approved"]:
        key = uuid.uuid5(uuid.NAMESPACE_URL, state["text"]).hex
        store.put(("tickets",), key, {"text": state["text"], "priority": state["priority"]})
    return {"steps": ["filed" if state["approved"] else "dropped"]}


def build(saver: DurableSaver, store: DurableStore) -> Any:
    g = StateGraph(Ticket)
    g.add_node("triage", triage)
    g.add_node("approve", approve)
    g.add_node("file", file_it)
    g.add_edge(START, "triage")
    g.add_edge("triage", "approve")
    g.add_edge("approve", "file")
    g.add_edge("file", END)
    return g.compile(checkpointer=saver, store=store)


def step(url: str, phase: str) -> None:
    thread = {"configurable": {"thread_id": "ticket-42"}}
    with DurableSaver(url) as saver, DurableStore(saver.obj) as store:
        graph = build(saver, store)
        if phase == "start":
            out = graph.invoke(
                {"text": "Checkout is DOWN for EU users", "steps": [], "approved": False},
                thread,
            )
            print("paused, waiting for a human:", out["__interrupt__"][0].value)
        else:
            out = graph.invoke(Command(resume="yes"), thread)
            print("resumed and finished:", json.dumps(out["steps"]))
            print("memories:", [i.value for i in store.search(("tickets",))])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[2] in ("start", "resume"):
        step(sys.argv[1], sys.argv[2])
        return
    url = sys.argv[1] if len(sys.argv) > 1 else os.path.abspath("durable-data/triage")
    url = url.rstrip("/") + f"-{uuid.uuid4().hex[:8]}"  # a fresh object each run
    for phase in ("start", "resume"):  # two processes: nothing survives but the object
        subprocess.run([sys.executable, __file__, url, phase], check=True)


if __name__ == "__main__":
    main()
