"""One durable object: its state machine, from open to close.

    object     DurableObject: execute, query, flush, checkpoint, close
    opening    one attempt at open(): head, restore, lease
    durability flush, checkpoint, auto-flush, folding a long WAL
    commit     every head write as a CAS, fenced by generation, read back
    publishing segments and bases: created, settled, committed into the head
    pending    what was executed and not yet durable, and who is owed an answer
    group      group commit: concurrent flushes share one commit in flight
    units      units of work: write(), batch(); whole or not at all
    transaction  transaction(): read, decide, write, no other write between
    admission  backpressure: a bounded number of writes in flight, admitted in order
    rebuild    a writer's copy rebuilt from its committed state and buffer
    surface    identity, state, and the gates every call passes
    queries    the reads: local, nothing logged
    heartbeat  one scheduler renews every writer's lease, runs auto-flush
    expiry     TTL as logged deletes: set_ttl, sweep_ttl, the background sweep
    history    time travel: restorable points and their manifests
    options    every option of an object, with its default
    ops        list, describe, gc, release: on a store, no object open
    catalog    the namespace catalog: a writer's row, by compare-and-swap with merge
    keyed      verify: every reference's digest and, with the key, every tag
    unclosed   objects left open, warned about and closed

May import: `durable_obj.errors`, `wire`, `stores`, `gate`, `replica` and
each other; never `service` or a face above it.
"""
