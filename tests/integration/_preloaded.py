"""What the children's forkserver (`_forked`) imports before it forks.

durable_obj (whose import maps chdb's library on a thread, joined here: a
fork must not copy a half-done `dlopen`), the S3, GCS and Azure clients its
stores load, and the children's programs. Not chdb's module: importing it
starts the engine's threads, and a forked copy of a threaded process is not
safe. Nothing here may start a thread that outlives this import.

The exit handlers these imports register are recorded (`REGISTERED`): from
Python 3.13 on, multiprocessing clears a forked child's atexit handlers, and
`_forked` registers them again there, as a fresh import would have.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable
from typing import Any

REGISTERED: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
_register = atexit.register


def _recording(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    REGISTERED.append((func, args, kwargs))
    return _register(func, *args, **kwargs)


atexit.register = _recording
try:
    import durable_obj  # noqa: F401
    from durable_obj.replica import preload
    from tests.integration import children  # noqa: F401

    for _name in ("s3fs", "aiobotocore.session", "obstore", "obstore.store", "gcsfs", "adlfs"):
        with contextlib.suppress(ImportError):
            __import__(_name)
finally:
    atexit.register = _register

for _thread in preload._THREADS:
    _thread.join()
#: How many exit handlers a forked child starts with, when none were cleared.
HANDLERS = atexit._ncallbacks()

if threading.active_count() != 1:
    raise RuntimeError(
        f"the children's forkserver has {threading.active_count()} threads after its "
        "imports: forking it would copy them half-done"
    )
