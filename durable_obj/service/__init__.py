"""Many objects in one process: namespaces, pools, the async lanes.

    addressing  what names an object (`<namespace>/<id>`), checked first
    namespace   Namespace: open, fork, export, scan many objects of a prefix
    forking     a fork's copy, sealed under its own data key when encrypted
    catalog     the namespace catalog: list from it in one read, rebuild it
    pool        Pool: objects opened on first use, closed when idle
    cache       the rules Pool and the async pool keep, decided in one place
    lanes       each object's async calls in order, on shared thread pools
    transactions  atransaction(): other calls parked at a gate until it ends
    rounds      the group commits an async face's units of work wait for

May import: every layer below (`core`, `replica`, `gate`, `stores`, `wire`,
`errors`); never a face above it (`aio`, `cli`, `langgraph`, `mcp`, `ray`,
`testing`).
"""
