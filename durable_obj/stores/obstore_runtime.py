"""Whether obstore may send requests in this process.

obstore sends its requests on a runtime of its own (tokio's threads), which
a forked child does not have: found by attack, a child forked after its
parent sent a PUT through obstore waited forever on its own first one. So
the process that first uses obstore is recorded, and in a child forked
after that, obstore is not used: its stores' PUTs go through their clients,
as with `DURABLE_OBJ_S3_WRITES=client` (S3) or `DURABLE_OBJ_AZURE_WRITES=client`
(Azure)."""

from __future__ import annotations

import os

#: The process that first used obstore (a forked child inherits the record).
_USED_IN: list[int] = []


def claim() -> bool:
    """Whether obstore may be used here; if so, this process is recorded as
    the one that uses it. Call before building or using an obstore client."""
    if not _USED_IN:
        _USED_IN.append(os.getpid())
    return _USED_IN[0] == os.getpid()
