"""The statement gate: what a statement means is what the engine reads.

Every statement from every caller (execute, query, params, the CLI, MCP,
LangGraph, Ray, and every replayed WAL line) passes `pipeline.Gate` (or, on
replay, `replay.gated`): first `reading.engine_text`, whose text is the one
every later step reads, the one that runs and the one logged; then the
checks, in one straight line (the order is drawn in `pipeline`).

    pipeline     the one line: Gate.read, Gate.mutation
    reading      the engine's reading: plain text, or the engine's canonical text
    reach        allow-lists: engines, sources, settings; functions refused
    isolation    one engine, many objects: names mapped, routes out refused
    classify     one statement, read-only vs mutating, V1's categories
    writes       the queries inside a write, resolved by the engine and
                 held to the read's allow-list (VALUES expressions too)
    control      the CONTROL statements that replay the same (DETACH, ATTACH)
    determinism  pin or refuse what would replay differently (defaults: column
                 DEFAULTs; literals: exact literals)
    params       {name:Type} bound to exact literals; fits: checked, not converted
    bounds       time, result and memory bounds a statement cannot raise
    replay       a verified WAL onto the engine, every line through the
                 execute gate (`pipeline.committed`), batched where exact
    sql          the lexer: used only on text the engine vouched for
    quoting      text the engine reads back exactly: literals, names, splices

May import: `durable_obj.errors`, each other, and `durable_obj.replica.engine` for
types only (an `Engine` is passed in). The engine imports back only the pure
parts: `quoting`, `isolation.Scope` (name mapping), `bounds` (data).
"""
