"""The local copy of an object: the chDB engine and what runs on it.

    server    the one chDB engine of the process: chdb loaded, started, shut down
    placement where the engine keeps its files: in memory within a budget, or on disk
    engine    one object's connection to it: its database, statements
    archives  BACKUP and RESTORE of V1 bases (a .tar.gz, or a Memory table's rows: unpacked)
    local     one open object's local side: its database, scratch, gates
    restore   from a head to a local database: fetch, verify, restore, replay
    results   a query's answer as text, bytes, rows, dicts, Arrow, pandas
    messages  the engine's messages made safe to show
    turn      one async local worker at a time, unless one waits on the engine
    watchdog  stops a bounded call past its deadline (KILL QUERY of its own tag)
    export    an object's tables as files on any fsspec location

May import: `durable_obj.errors`, `wire`, `stores`, `gate` and each other;
never `core`, `service` or a face above them.
"""
