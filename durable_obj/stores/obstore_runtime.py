"""Whether obstore may send requests in this process.

obstore sends its requests on a runtime of its own (tokio's threads), which
a forked child does not have: found by attack, a child forked after its
parent sent a PUT through obstore waited forever on its own first one. So
in a child forked while obstore was loaded (by us or by the program), or
after this process's parent used it, obstore is not used: its stores' PUTs
go through their clients, as with `DURABLE_OBJ_S3_WRITES=client` (S3) or
`DURABLE_OBJ_AZURE_WRITES=client` (Azure)."""

from __future__ import annotations

import os
import sys

#: The process that first used obstore (a forked child inherits the record).
_USED_IN: list[int] = []
#: Set in a child forked while obstore was loaded (`_forked`).
_FORKED_AFTER: list[bool] = []


def claim() -> bool:
    """Whether obstore may be used here; if so, this process is recorded as
    the one that uses it. Call before building or using an obstore client."""
    if _FORKED_AFTER:
        return False
    if not _USED_IN:
        _USED_IN.append(os.getpid())
    return _USED_IN[0] == os.getpid()


def _forked() -> None:
    if _USED_IN or "obstore" in sys.modules:
        _FORKED_AFTER.append(True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
