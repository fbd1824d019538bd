"""LangGraph persistence on a durable object: a checkpointer
(`DurableSaver`) and a store (`DurableStore`).

    from durable_obj.langgraph import DurableSaver, DurableStore
    saver = DurableSaver("s3://bucket/agents/bot-1", owner="worker-1")
    store = DurableStore(saver.obj)           # or its own object / URL
    graph = builder.compile(checkpointer=saver, store=store)

Both sit on the public API only, log only literals computed in Python, and
flush every write before it returns unless told otherwise (`flush=`). The
object's lease is LangGraph's write ownership: a second writer gets
`WriteOwnerHeld`, a superseded one `StaleWriteOwner`; both carry
`is_stale_write_owner_error = True`.

Needs the `langgraph` extra: `pip install "durable_obj[langgraph]"`.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base
    import langgraph.store.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from durable_obj.errors import MissingDependency

    raise MissingDependency(
        'durable_obj.langgraph needs LangGraph: pip install "durable_obj[langgraph]"'
    ) from exc

from durable_obj.langgraph._common import StaleWriteOwner, WriteOwnerHeld
from durable_obj.langgraph.checkpoint import DurableSaver
from durable_obj.langgraph.store import DurableStore

__all__ = ["DurableSaver", "DurableStore", "StaleWriteOwner", "WriteOwnerHeld"]
