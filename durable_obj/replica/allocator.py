"""The process's C allocator: glibc's malloc with its thresholds pinned, so
what worker threads free goes back to the system (an idle object's RSS).

Python's buffers over 128 KiB (a fetched base, a WAL segment, a statement's
text) come from the C library's malloc, not from Python's own allocator.
glibc raises its mmap threshold to the size of the largest such buffer freed
so far (up to 32 MiB) and its trim threshold to twice that; after that a
buffer of a few MiB is carved from the arena of the thread that asked for
it, and the arena's free top is handed back only once it exceeds the raised
trim threshold. `malloc_trim` does not shrink the top of a thread's arena.
Measured (issue 39, 200 objects of 1,000 rows opened through a Pool, idle,
the engine's allocator purged): about 4-8 MiB resident at the top of each
of a dozen thread arenas, 0.3 MiB per idle object, all of it free memory.

`pin` sets both thresholds to glibc's own defaults (128 KiB), which also
turns the dynamic raise off: a buffer over 128 KiB is a mapping of its own,
returned to the system when freed. It costs a buffer of that size an mmap, a
munmap and its page faults (tens of microseconds for a MiB). Nothing is
changed off glibc, or where the process chose already (`GLIBC_TUNABLES`
naming a malloc setting, or a `MALLOC_*_` variable): set one of those to
keep glibc's dynamic thresholds.
"""

from __future__ import annotations

import os
from typing import Any

#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc's defaults, which the dynamic raise starts from.
THRESHOLD = 128 * 1024
#: Environment variables through which a process tunes glibc's malloc itself.
_OWN_CHOICE = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

#: What `pin` did, once: "pinned", "chosen" (the process tunes malloc), "not glibc".
STATE: dict[str, str] = {}


def chosen(environ: Any = os.environ) -> bool:
    """Whether the process tunes glibc's malloc thresholds itself."""
    if any(name in environ for name in _OWN_CHOICE):
        return True
    return "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


def glibc() -> bool:
    """Whether this process runs on glibc (its malloc has the dynamic thresholds)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # not a glibc system
        return False


def pin() -> str:
    """Pin glibc's mmap and trim thresholds (once per process); what was done."""
    if "done" in STATE:
        return STATE["done"]
    if chosen():
        STATE["done"] = "chosen"
    elif not glibc():
        STATE["done"] = "not glibc"
    else:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        ok = mallopt(M_MMAP_THRESHOLD, THRESHOLD) == 1
        ok = mallopt(M_TRIM_THRESHOLD, THRESHOLD) == 1 and ok
        STATE["done"] = "pinned" if ok else "refused"
    return STATE["done"]
