"""chDB's shared library mapped while durable_obj's own modules import.

Loading chdb starts by mapping and relocating its 0.5 GiB library (chdb's
package calls `dlopen` through ctypes, holding the interpreter's lock for
60-90 ms of a cold open, during which no Python runs). `start`, called
first thing by `import durable_obj`, makes that same `dlopen` call on a
thread of its own through a ctypes foreign call, which releases the lock:
the mapping then overlaps the Python of durable_obj's imports, and chdb's
own call, when the engine starts, finds the library loaded and returns at
once.

Nothing else changes: the same file chdb would load first, with the same
flags (the interpreter's dlopen flags plus RTLD_DEEPBIND, as chdb's package
passes them), so the one copy in the process is the one chdb would have
made. The engine's zone is not fixed by the mapping (it is read when the
engine starts, `server._chdb`, still under TZ=UTC). Skipped when chdb is
imported already, off Linux, when the file is not where chdb looks first,
and with DURABLE_OBJ_PRELOAD=0. A `fork()` waits for the mapping first (a
child forked in the middle of a `dlopen` would inherit the loader's lock,
held), and so does the interpreter's exit (the thread is not a daemon).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading

#: glibc's RTLD_DEEPBIND, which chdb's package adds to the interpreter's flags.
RTLD_DEEPBIND = 0x8
#: The library chdb's package loads first, in its own folder.
LIBRARY = "_chdb.abi3.so"

_THREADS: list[threading.Thread] = []
#: The paths the preload's thread mapped.
_MAPPED: list[str] = []

#: The interpreter's own extension modules (each a small shared library)
#: that `import durable_obj` loads, loaded first: glibc's loader holds one
#: lock for a whole `dlopen`, so each of them imported while chdb's library
#: maps waited for it (the first, `_opcode`, 12-18 ms). Loading them costs
#: about 10 ms (measured in a fresh interpreter, under load), time the
#: import spends on them anyway; one left out only waits as before.
EXTENSIONS = (
    "_typing", "_ctypes", "_struct", "_opcode", "math", "_datetime", "_json", "_hashlib", "_blake2",
    "mmap", "_uuid", "_heapq", "_queue", "_decimal", "_zoneinfo", "zlib", "_bz2", "_lzma",
    "grp", "pyexpat", "_elementtree", "binascii", "_bisect", "_random", "_sha512",
    "_contextvars", "fcntl", "unicodedata",
)  # fmt: skip


def library() -> str | None:
    """The path of the library chdb would load first, or None (no such
    file, chdb not installed); chdb itself is not imported."""
    try:
        spec = importlib.util.find_spec("chdb")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        return None
    path = os.path.join(folders[0], LIBRARY)
    return path if os.path.isfile(path) else None


def start() -> None:
    """Map chdb's library on a thread of its own, once, where it helps."""
    if _THREADS or sys.platform != "linux" or "chdb" in sys.modules:
        return
    if os.environ.get("DURABLE_OBJ_PRELOAD", "").strip() == "0":
        return
    path = library()
    if path is None:
        return
    flags = sys.getdlopenflags() | RTLD_DEEPBIND
    for name in EXTENSIONS:  # before the loader's lock is held for the library
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    thread = threading.Thread(target=_map, args=(path, flags), name="durable_obj-preload")
    _THREADS.append(thread)
    os.register_at_fork(before=wait)
    thread.start()


def wait() -> None:
    """Until the mapping is done (if one was started)."""
    for thread in _THREADS:
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join()


def mapped(path: str) -> None:
    """Until `path` (`library()`) is mapped as chdb's package maps it: by
    the preload's thread if it started, else now. OSError if it cannot be."""
    wait()
    if path not in _MAPPED:
        import ctypes

        ctypes.CDLL(path, mode=sys.getdlopenflags() | RTLD_DEEPBIND)


def _map(path: str, flags: int) -> None:
    """dlopen(path, flags) as a foreign call (the interpreter's lock let go
    meanwhile). The handle is kept open: chdb's own dlopen of the file
    returns it. A failure is left for chdb's import to meet and report."""
    try:
        import ctypes

        dlopen = ctypes.CDLL(None).dlopen
        dlopen.restype = ctypes.c_void_p
        dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
        if dlopen(os.fsencode(path), flags):
            _MAPPED.append(path)
    except Exception:  # only a head start
        return
