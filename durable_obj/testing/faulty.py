"""FaultyStore: wrap any store and make its calls fail, the way networks do.

Chosen by a seed, so a failing sequence replays exactly. Per call it may:

* fail before the inner store is reached (`BackendError`: known not applied);
* answer ambiguously before (`StoreAmbiguous`, not applied) or after the
  inner call succeeded (`StoreAmbiguous`, applied: the lost response);
* apply a conditional write, then answer "precondition failed" (`None`): a
  client that resent the request after a dropped connection (aiohttp resends
  an idempotent PUT on a reused connection) meets its own write;
* add latency;
* stop the "process" there (`SimulatedCrash`, before or after the inner call):
  the caller must abandon the object without closing it, as a SIGKILL would.

`interrupt` (not a seeded fault: a test arms it) makes the next write that
lands of a key ending so raise `KeyboardInterrupt` after it, once: a Ctrl-C
just after a head's rename, and the process goes on with the object.

`get_if_changed` meets the faults of `get` (one read of one key), counted
and logged in `injected` as gets; `calls` names it. `get_many` is forwarded
to the inner store's own `get_many` (S3's batched reads stay the path under
test) and meets the faults a `get` of each of its keys would, decided in key
order: the first error or crash among them is raised before any key is read.

    store = FaultyStore(open_store("memory://t"), seed=7, rate=0.2)
    store.enabled = False   # pass every call through, e.g. to check recovery
"""

from __future__ import annotations

import enum
import random
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from durable_obj.errors import BackendError, StoreAmbiguous
from durable_obj.stores.base import Blob, Entry, Sink, Store, Unchanged, Version

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from fsspec.callbacks import Callback

    from durable_obj.stores.growing import GrowingFile

T = TypeVar("T")


class SimulatedCrash(BaseException):
    """The process stopped at this storage call. A BaseException, so no
    `except Exception` in the library can swallow it."""


class Fault(enum.Enum):
    ERROR = "error"  # BackendError before the call: not applied
    AMBIGUOUS_BEFORE = "ambiguous_before"  # StoreAmbiguous, not applied
    LOST_RESPONSE = "lost_response"  # applied, then StoreAmbiguous
    RESENT = "resent"  # applied, then the resend's answer: precondition failed (None)
    LATENCY = "latency"
    CRASH_BEFORE = "crash_before"
    CRASH_AFTER = "crash_after"


#: Faults that make sense for a read (nothing to apply or lose).
_READ_FAULTS = (Fault.ERROR, Fault.LATENCY, Fault.CRASH_BEFORE)
WRITE_OPS = ("create", "create_file", "replace", "delete")
#: Writes with a precondition, whose "failed" answer is None.
CONDITIONAL_OPS = ("create", "create_file", "replace")


class FaultyStore(Store):
    """Forwards every call to `inner`, injecting faults chosen by `seed`."""

    def __init__(
        self,
        inner: Store,
        *,
        seed: int,
        rate: float = 0.1,
        faults: Sequence[Fault] = tuple(Fault),
        latency: float = 0.0,
        ops: Sequence[str] | None = None,
    ) -> None:
        self.inner = inner
        self.protocol = inner.protocol
        self.streams_reads = inner.streams_reads
        self.rate = rate
        self.faults = tuple(faults)
        self.latency = latency
        self.ops = None if ops is None else frozenset(ops)
        self.enabled = True
        self.injected: list[tuple[str, str, Fault]] = []
        #: Every call as (op, key), faulted or not: lets a test check that
        #: nothing outside an object's prefix was ever read or written.
        self.calls: list[tuple[str, str]] = []
        #: The next landed write of a key ending so raises KeyboardInterrupt (once).
        self.interrupt: str | None = None
        self._seed = seed
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.inner.url

    def _pick(self, op: str, key: str) -> Fault | None:
        if not self.enabled or (self.ops is not None and op not in self.ops):
            return None
        allowed = (
            self.faults if op in WRITE_OPS else tuple(f for f in self.faults if f in _READ_FAULTS)
        )
        with self._lock:
            # Decided by (seed, op, the key's folder, how many such calls came
            # before), not by one shared stream: parallel fetches may run in
            # any order and still meet the same faults, and so may the calls
            # of a checkpoint's threads (its base and its history file, each
            # with its read-back), which go to folders of their own: a seed
            # replays.
            stream = f"{op}:{key.rpartition('/')[0]}"
            count = self._calls.get(stream, 0)
            self._calls[stream] = count + 1
            rng = random.Random(f"{self._seed}:{stream}:{count}")
            if not allowed or rng.random() >= self.rate:
                return None
            fault = rng.choice(allowed)
            self.injected.append((op, key, fault))
            return fault

    def _call(self, op: str, key: str, fn: Callable[[], T], *, like: str | None = None) -> T:
        """`fn()` as the call `op` of `key`, meeting the faults of the op
        `like` names (default: `op` itself)."""
        with self._lock:
            self.calls.append((op, key))
        fault = self._pick(like or op, key)
        if fault is Fault.LATENCY:
            time.sleep(self.latency or 0.01)
        elif fault is Fault.ERROR:
            raise BackendError(f"injected failure before {op} {key!r}")
        elif fault is Fault.AMBIGUOUS_BEFORE:
            raise StoreAmbiguous(f"injected timeout before {op} {key!r} (not applied)")
        elif fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"crash before {op} {key!r}")
        if self.latency and fault is None and self.enabled:
            time.sleep(self.latency)
        result = fn()
        interrupt = self.interrupt
        if (
            interrupt is not None
            and op in WRITE_OPS
            and result is not None
            and key.endswith(interrupt)
        ):
            self.interrupt = None
            raise KeyboardInterrupt(f"interrupted after {op} {key!r} (applied)")
        if fault is Fault.RESENT and op in CONDITIONAL_OPS:
            return None  # type: ignore[return-value]  # T is Version | None for these ops
        if fault is Fault.LOST_RESPONSE:
            raise StoreAmbiguous(f"injected lost response after {op} {key!r} (applied)")
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"crash after {op} {key!r}")
        return result

    def get(self, key: str) -> Blob | None:
        return self._call("get", key, lambda: self.inner.get(key))

    def get_if_changed(self, key: str, version: Version | None) -> Blob | Unchanged | None:
        # a read of one key: the faults of get, decided in the same sequence
        return self._call(
            "get_if_changed", key, lambda: self.inner.get_if_changed(key, version), like="get"
        )

    def get_many(self, keys: Sequence[str], concurrency: int = 32) -> list[Blob | None]:
        keys = list(keys)
        with self._lock:
            self.calls.extend(("get_many", key) for key in keys)
        picked = [self._pick("get", key) for key in keys]
        slow = Fault.LATENCY in picked or (self.latency and self.enabled)
        for key, fault in zip(keys, picked, strict=True):
            if fault is Fault.ERROR:
                raise BackendError(f"injected failure before get_many of {key!r}")
            if fault is Fault.CRASH_BEFORE:
                raise SimulatedCrash(f"crash before get_many of {key!r}")
        if slow:
            time.sleep(self.latency or 0.01)
        return self.inner.get_many(keys, concurrency)

    def create(self, key: str, data: bytes) -> Version | None:
        return self._call("create", key, lambda: self.inner.create(key, data))

    def create_file(self, key: str, path: str, callback: Callback | None = None) -> Version | None:
        return self._call("create_file", key, lambda: self.inner.create_file(key, path, callback))

    def adopt_file(
        self,
        key: str,
        path: str,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        # the same faults as create_file: the same store call, taking the file
        return self._call(
            "create_file", key, lambda: self.inner.adopt_file(key, path, sha256, callback)
        )

    def adopt_growing(
        self,
        key: str,
        source: GrowingFile,
        sha256: Callable[[], str],
        callback: Callback | None = None,
    ) -> Version | None:
        # the same faults as create_file; a crash or error before the call
        # leaves the archive to its producer, which the caller joins
        return self._call(
            "create_file", key, lambda: self.inner.adopt_growing(key, source, sha256, callback)
        )

    def replace(self, key: str, data: bytes, version: Version) -> Version | None:
        return self._call("replace", key, lambda: self.inner.replace(key, data, version))

    def replace_after(
        self, key: str, data: bytes, version: Version, first: Callable[[], None]
    ) -> Version | None:
        """The inner store's own `replace_after` (a folder writes the head
        beside `first()`), meeting replace's faults. A fault before the call
        runs `first()` first and is then raised (or `first()`'s error), as
        the contract says of any answer but `first()`'s own error."""
        started: list[bool] = []

        def counted() -> None:
            started.append(True)
            first()

        try:
            return self._call(
                "replace", key, lambda: self.inner.replace_after(key, data, version, counted)
            )
        except BaseException:
            if not started:
                first()
            raise

    def download(self, key: str, path: str, callback: Callback | None = None) -> bool:
        return self._call("download", key, lambda: self.inner.download(key, path, callback))

    def fetch_file(self, key: str, path: str, callback: Callback | None = None) -> bool:
        return self._call("download", key, lambda: self.inner.fetch_file(key, path, callback))

    def read_into(self, key: str, sink: Sink, callback: Callback | None = None) -> bool:
        return self._call("download", key, lambda: self.inner.read_into(key, sink, callback))

    def list_keys(self, prefix: str = "") -> list[Entry]:
        return self._call("list_keys", prefix, lambda: self.inner.list_keys(prefix))

    def list_folders(self, prefix: str = "") -> list[str]:
        return self._call("list_folders", prefix, lambda: self.inner.list_folders(prefix))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def prepare(self) -> None:
        self.inner.prepare()

    def close(self) -> None:
        self.inner.close()
