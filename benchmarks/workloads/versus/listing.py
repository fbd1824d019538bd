"""run.py's list figure: Namespace.list() of --list-objects objects, in a
namespace of their own, from the catalog and verified, with its goals."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from harness.procs import IMPLS, run_child
from harness.report import OwnRow, median

if TYPE_CHECKING:
    from workloads.versus.figures import Bench

GOAL_LIST_OBJECTS = 1000  # Namespace.list() of this many objects ...
GOAL_LIST_S = 1.5  # ... in at most this many seconds at 20 ms per request (verify=True)
GOAL_CATALOG_OBJECTS = 10_000  # Namespace.list() from the catalog of this many objects ...
GOAL_CATALOG_S = 0.1  # ... in at most this many seconds at 20 ms per request (issue 40)
LIST_SEGMENTS = 9  # WAL segments per listed object: 11 keys with its head and base


def figure(bench: Bench) -> None:
    """Namespace.list() of --list-objects objects, in a namespace of their own."""
    n = bench.args.list_objects
    start = time.perf_counter()
    if bench.s3 is None:
        store = {**bench.store, "root": os.path.join(bench.store["root"], "listing")}
    else:
        store = {**bench.store, "prefix": f"{bench.store['prefix']}-listing"}
    # Written straight to the server: the latency proxy is for what is timed.
    direct = store if bench.s3 is None else {**store, "endpoint": bench.s3.endpoint}
    spec: dict[str, Any] = {
        "impl": IMPLS[0],
        "phase": "populate",
        "oid": "agent",
        "store": direct,
    }
    got = run_child({**spec, "objects": n, "segments": LIST_SEGMENTS}, bench.env)
    keys = got["keys_per_object"]
    bench.progress(f"{n:,} objects of {keys} keys written", start)
    variants = ("catalog", "verify", "verify_heads")
    for rep in range(bench.args.repeat):
        for variant in variants[rep % 3 :] + variants[: rep % 3]:
            spec = {
                "impl": IMPLS[0],
                "phase": "list",
                "store": store,
                "verify": variant != "catalog",
                "stored": variant != "verify_heads",
            }
            got = run_child(spec, bench.env)
            if got["objects"] != n or got["described"] != n:
                raise RuntimeError(f"list() found {got['objects']} objects, not {n}")
            if variant == "catalog":
                first, warm = got["list_s"]
                bench.keep("list_catalog_first_s", IMPLS[0], [first])
                bench.keep("list_catalog_s", IMPLS[0], [warm])
            else:
                bench.keep(f"list_{variant}_s", IMPLS[0], got["list_s"])
    bench.progress(f"Namespace.list() of {n:,} objects", start)
    at20 = bench.s3 is None or bench.args.latency_ms == 20
    goals = {
        "list_catalog_s": GOAL_CATALOG_S if n == GOAL_CATALOG_OBJECTS and at20 else None,
        "list_verify_s": GOAL_LIST_S if n == GOAL_LIST_OBJECTS and at20 else None,
    }
    for key, call in (
        ("list_catalog_first_s", "list() catalog, 1st call"),
        ("list_catalog_s", "list() catalog, warm"),
        ("list_verify_s", "list(verify=True)"),
        ("list_verify_heads_s", "list(verify, heads only)"),
    ):
        samples = bench.samples[key][IMPLS[0]]
        bench.report.own.append(
            OwnRow(
                bench.label,
                f"{call}, {n:,} objs",
                "s",
                median(samples),
                goals.get(key),
                note=f"best {min(samples):.3f}; {keys} keys per object",
            )
        )
