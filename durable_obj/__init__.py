"""durable_obj: a chDB database whose authoritative state lives in object
storage you own, as a base snapshot plus a statement WAL under a head.json
replaced only by compare-and-swap, with a fenced single-writer lease.

    import durable_obj
    obj = durable_obj.open("/tmp/agents/checkout-api", owner="ci-runner-7")
    obj.execute("CREATE TABLE m (k String, v String) ENGINE = MergeTree ORDER BY k")
    obj.execute("INSERT INTO m VALUES ('region', 'eu-central-1')")
    obj.flush()        # the durability boundary: only now has it survived
    print(obj.query("SELECT * FROM m"))
    obj.close()

`execute()` is local and NOT durable; `flush()` is.

The async face (`AsyncDurableObject`, `aopen`, `AsyncPool`) is imported on
first use (`__getattr__` below): it brings asyncio, which a synchronous
cold open never needs.
"""

from typing import TYPE_CHECKING, Any

from durable_obj.replica import preload

# First: chDB's library maps on a thread of its own while the rest imports.
preload.start()

# isort: split
from durable_obj import errors
from durable_obj.core.feed import Change
from durable_obj.core.follow import Update
from durable_obj.core.object import DurableObject, Result
from durable_obj.errors import (
    BackendError,
    ClassificationRefused,
    Closed,
    CommitAmbiguous,
    Corrupt,
    DurableError,
    EngineError,
    EngineIncompatible,
    FeedGap,
    HostLost,
    InvalidArgument,
    KeyRefused,
    LeaseError,
    LeaseFenced,
    LeaseHeld,
    LimitExceeded,
    MissingDependency,
    Nondeterministic,
    NotFound,
    ProtocolUnsupported,
    SecretRefused,
    Timeout,
    UnsupportedStore,
)
from durable_obj.gate.bounds import Bounds
from durable_obj.replica.placement import configure as configure_engine
from durable_obj.service.namespace import Namespace, export, fork, open
from durable_obj.service.pool import Pool
from durable_obj.wire.keys import AwsKms, EnvKey, KeyFile, KeyProvider, StaticKey

if TYPE_CHECKING:
    from durable_obj.aio import AsyncDurableObject, aopen
    from durable_obj.aio.pool import AsyncPool

__version__ = "0.1.0"

#: Names exported from a module imported on first use: name -> module.
_LAZY = {
    "AsyncDurableObject": "durable_obj.aio",
    "aopen": "durable_obj.aio",
    "AsyncPool": "durable_obj.aio.pool",
}


def __getattr__(name: str) -> Any:
    """A name of `_LAZY`, imported now and kept (PEP 562)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AsyncDurableObject",
    "AsyncPool",
    "AwsKms",
    "BackendError",
    "Bounds",
    "Change",
    "ClassificationRefused",
    "Closed",
    "CommitAmbiguous",
    "Corrupt",
    "DurableError",
    "DurableObject",
    "EngineError",
    "EngineIncompatible",
    "EnvKey",
    "FeedGap",
    "HostLost",
    "InvalidArgument",
    "KeyFile",
    "KeyProvider",
    "KeyRefused",
    "LeaseError",
    "LeaseFenced",
    "LeaseHeld",
    "LimitExceeded",
    "MissingDependency",
    "Namespace",
    "Nondeterministic",
    "NotFound",
    "Pool",
    "ProtocolUnsupported",
    "Result",
    "SecretRefused",
    "StaticKey",
    "Timeout",
    "UnsupportedStore",
    "Update",
    "aopen",
    "configure_engine",
    "errors",
    "export",
    "fork",
    "open",
]
