"""The agent-memory workload every benchmark writes: the table, the
vocabulary of the texts, the bulk rows and one single-row INSERT as an agent
writes it. Imports only the standard library: children import it inside
their cold-open timers."""

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

DDL = (
    "CREATE TABLE IF NOT EXISTS memories (id String, version UInt32, "
    "content String CODEC(ZSTD(3)), embedding Array(Float32), "
    "edited_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (id, version)"
)


#: Bulk rows from a hash of (row, position): deterministic (durable_obj's
#: determinism gate accepts it in an INSERT ... SELECT, and every run writes
#: the same bytes) and incompressible like real data: 256 uniform Float32s,
#: ~200 bytes of text drawn from a vocabulary plus a hex tag, spread timestamps.
BULK = (
    (
        "INSERT INTO memories SELECT concat('b', toString(number)), "
        "1 + toUInt32(cityHash64(number, 'v') % 5), "
        "concat(hex(cityHash64(number, 'c')), ' ', arrayStringConcat(arrayMap("
        "i -> [{words}][1 + cityHash64(number, i) % {nwords}], range(28)), ' ')), "
        "arrayMap(i -> toFloat32((cityHash64(number, i) % 2000000) / 1e6 - 1), range(256)), "
        "toDateTime64('2026-01-01 00:00:00', 3, 'UTC') + "
        "toIntervalMillisecond(cityHash64(number, 't') % 31536000000) "
        "FROM numbers({start}, {count})"
    )
    .replace("{words}", ", ".join(f"'{w}'" for w in WORDS))
    .replace("{nwords}", str(len(WORDS)))
)


#: What an agent asks of its memory after an open (`bases`: each timed after
#: one untimed run, by both implementations and on the floor's bare chdb):
#: a scan of every column, and a recall of the newest rows.
QUERIES = {
    "scan": "SELECT count(), sum(length(content)), sum(arraySum(embedding)) FROM memories",
    "recall": "SELECT id, content FROM memories ORDER BY edited_at DESC LIMIT 10",
}
QUERY_RUNS = 5


def values_sql(start: int, count: int) -> str:
    """One INSERT of `count` rows as `row_sql` writes each (~2.3 KB a row:
    a bulk load of an agent's memories, its rows as literals)."""
    rows = [row_sql(i).split(" VALUES ", 1)[1] for i in range(start, start + count)]
    return "INSERT INTO memories VALUES " + ", ".join(rows)


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
