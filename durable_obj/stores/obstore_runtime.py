"""Whether obstore may send requests in this process.

obstore sends its requests on a runtime of its own (tokio's threads), which
a forked child does not have: found by attack, a child forked after its
parent sent a PUT through obstore waited forever on its own first one. So
in a child forked while obstore was loaded (by us or by the program; its
runtime can only have run once it was), obstore is not used: its stores'
PUTs go through their clients, as with `DURABLE_OBJ_S3_WRITES=client` (S3)
or `DURABLE_OBJ_AZURE_WRITES=client` (Azure). A grandchild inherits the
mark (and obstore, loaded)."""

from __future__ import annotations

import os
import sys

#: Set in a child forked while obstore was loaded (`_forked`).
_FORKED_AFTER: list[bool] = []


def usable() -> bool:
    """Whether obstore may be used here: not in a child forked while it was
    loaded. Ask before building or using an obstore client."""
    return not _FORKED_AFTER


def _forked() -> None:
    if "obstore" in sys.modules:
        _FORKED_AFTER.append(True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
