"""The agent-memory workload every benchmark writes: the vocabulary of the
texts, and one single-row INSERT as an agent writes it. Imports only the
standard library: children import it inside their cold-open timers."""

from __future__ import annotations

import datetime
import random

EPOCH_2026 = datetime.datetime(2026, 1, 1)

# fmt: off
WORDS = (
    "agent", "user", "memory", "checkout", "api", "retry", "timeout", "friday", "deploy",
    "rollback", "invoice", "customer", "refund", "latency", "cache", "index", "shard",
    "replica", "query", "plan", "budget", "alert", "pager", "incident", "review", "merge",
    "branch", "release", "ticket", "owner", "region", "quota", "error", "warning", "limit",
)
# fmt: on


def row_sql(i: int) -> str:
    """One single-row INSERT like an agent writes: 256-dim embedding, ~200-byte text."""
    rng = random.Random(i)
    emb = ",".join(f"{rng.uniform(-1, 1):.6f}" for _ in range(256))
    text = " ".join(rng.choice(WORDS) for _ in range(30))[:200]
    at = EPOCH_2026 + datetime.timedelta(milliseconds=rng.randrange(31_536_000_000))
    return (
        f"INSERT INTO memories VALUES ('m{i}', 1, '{text}', [{emb}], "
        f"'{at.isoformat(sep=' ', timespec='milliseconds')}')"
    )
