"""durable_obj beside chdb.durable and beside the floor (the same bytes with
nothing of durable_obj in the way), run.py's own groups: `figures` (the
parent: which children, which rows) and `child` (one measurement in a fresh
process, `python -m workloads.versus.child SPEC`)."""
