"""Every error durable_obj raises, as one tree with a stable `category` string.

The categories are the fourteen that chdb.durable V1 freezes, plus
`nondeterministic` (a statement that would replay differently),
`invalid_argument` (a bad URL, object id or option; raised before any storage
is touched), `key_refused` (an encrypted object's key provider cannot unwrap
its data key: the wrong key, or none, or the KMS said no) and `host_lost`
(the process hosting an object for a caller, a Ray actor of
`durable_obj.ray`, died with the caller's unflushed statements). A caller,
or a conformance runner comparing bindings, switches on `category`; Python
code can also catch the classes or the builtin mixed into some of them::

    DurableError                         category
    ├── NotFound (FileNotFoundError)     not_found
    │   └── FeedGap                      not_found
    ├── LeaseError                       (grouping only)
    │   ├── LeaseHeld                    lease_held
    │   └── LeaseFenced                  lease_fenced
    ├── EngineIncompatible               engine_incompatible
    ├── ProtocolUnsupported              protocol_unsupported
    ├── Corrupt                          corrupt
    ├── ClassificationRefused (ValueError)  classification_refused
    ├── SecretRefused (ValueError)       secret_refused
    ├── Nondeterministic (ValueError)    nondeterministic
    ├── EngineError                      engine
    ├── BackendError                     backend
    │   ├── StoreAmbiguous               backend (internal: always reconciled)
    │   └── MissingDependency (ImportError)  backend
    ├── Timeout (TimeoutError)           timeout
    ├── CommitAmbiguous                  commit_ambiguous
    ├── LimitExceeded (ValueError)       limit_exceeded
    ├── Closed                           closed
    ├── HostLost                         host_lost
    ├── KeyRefused                       key_refused
    └── InvalidArgument (ValueError)     invalid_argument
        └── UnsupportedStore             invalid_argument

Messages say what happened, what state is safe, and what to do. They never
contain a credential, nor the text of a statement that carried one.
"""

from __future__ import annotations


class DurableError(Exception):
    """Root of every error raised by durable_obj."""

    category = "durable"


class NotFound(DurableError, FileNotFoundError):
    """A read-only open found no object at the URL."""

    category = "not_found"


class FeedGap(NotFound):
    """The change feed cannot serve every commit after `since`: some fell
    out of the retention window or were collected by gc. `oldest` is the
    oldest seq it can still serve (resume with since=oldest - 1), or None."""

    def __init__(self, message: str, *, since: int | None = None, oldest: int | None = None):
        super().__init__(message)
        self.since = since
        self.oldest = oldest


class LeaseError(DurableError):
    """Grouping type for the two lease categories; never raised directly."""

    category = "lease"


class LeaseHeld(LeaseError):
    """Another writer holds an unexpired lease on the object.

    When the holder is known, `holder` is its owner name, `generation` its
    lease generation and `wait` the seconds until a normal writer open
    succeeds if it does not renew (its expiry plus the clock_skew
    allowance); otherwise they are None. An integration (the CLI, the MCP
    server, the LangGraph saver) reads them to say the same thing in its own
    words, with the flags it really has."""

    category = "lease_held"

    def __init__(
        self,
        message: str,
        *,
        holder: str | None = None,
        generation: int | None = None,
        wait: float | None = None,
    ) -> None:
        super().__init__(message)
        self.holder = holder
        self.generation = generation
        self.wait = wait


class LeaseFenced(LeaseError):
    """This writer lost the lease; its commits are refused by the head's CAS."""

    category = "lease_fenced"


class EngineIncompatible(DurableError):
    """The object needs a newer engine, another engine, or a newer backup format."""

    category = "engine_incompatible"


class ProtocolUnsupported(DurableError):
    """The object declares a protocol version or feature this library lacks."""

    category = "protocol_unsupported"


class Corrupt(DurableError):
    """A head that fails validation, or a base or segment that is missing,
    short, or has the wrong SHA-256. Never skipped, never fallen back from."""

    category = "corrupt"


class ClassificationRefused(DurableError, ValueError):
    """The statement's count, class or write target does not fit the call."""

    category = "classification_refused"


class SecretRefused(DurableError, ValueError):
    """A mutation carries a credential, so it cannot be written to the WAL."""

    category = "secret_refused"


class Nondeterministic(DurableError, ValueError):
    """A statement would replay to a different result than the writer saw."""

    category = "nondeterministic"


class EngineError(DurableError):
    """chDB failed a statement, a backup or a restore."""

    category = "engine"


class BackendError(DurableError):
    """The store failed: network, authentication, missing bucket, permission."""

    category = "backend"


class StoreAmbiguous(BackendError):
    """A conditional write whose outcome is unknown (timeout, 5xx, lost
    connection, S3 409). Internal to the store seam: the object reconciles it
    by reading back, so a caller sees success, `LeaseFenced` or
    `CommitAmbiguous`, never this."""


class MissingDependency(BackendError, ImportError):
    """The store for a URL needs an extra that is not installed."""


class Timeout(DurableError, TimeoutError):
    """An operation passed its deadline and is known not to have committed."""

    category = "timeout"


class CommitAmbiguous(DurableError):
    """Reading back could not prove whether a commit landed. The statements
    stay buffered; the next open shows whether they were committed."""

    category = "commit_ambiguous"


class LimitExceeded(DurableError, ValueError):
    """A statement, segment or head passed a V1 size limit."""

    category = "limit_exceeded"


class Closed(DurableError):
    """An operation on an object that has been closed."""

    category = "closed"


class HostLost(DurableError):
    """The host of an object (a Ray actor, `durable_obj.ray`) died or was
    replaced, and with it the statements this caller executed there since
    its last flush: they were never committed. Nothing was run again; the
    handle now reaches the new host: execute them again, then flush."""

    category = "host_lost"


class KeyRefused(DurableError):
    """An encrypted object's data key could not be unwrapped: no key was
    given, the key given is not the one the head names (the message names
    the key id it needs), or the key service refused. Nothing was changed."""

    category = "key_refused"


class InvalidArgument(DurableError, ValueError):
    """A URL, object id or option is malformed; nothing was touched."""

    category = "invalid_argument"


class UnsupportedStore(InvalidArgument):
    """The URL's protocol has no store with atomic create and compare-and-swap."""


#: Each frozen V1 category, and ours, mapped to the class raised for it.
CATEGORIES: dict[str, type[DurableError]] = {
    "not_found": NotFound,
    "lease_held": LeaseHeld,
    "lease_fenced": LeaseFenced,
    "engine_incompatible": EngineIncompatible,
    "protocol_unsupported": ProtocolUnsupported,
    "corrupt": Corrupt,
    "classification_refused": ClassificationRefused,
    "secret_refused": SecretRefused,
    "engine": EngineError,
    "backend": BackendError,
    "timeout": Timeout,
    "commit_ambiguous": CommitAmbiguous,
    "limit_exceeded": LimitExceeded,
    "closed": Closed,
    "nondeterministic": Nondeterministic,
    "invalid_argument": InvalidArgument,
    "key_refused": KeyRefused,
    "host_lost": HostLost,
}

__all__ = [
    "CATEGORIES",
    "BackendError",
    "ClassificationRefused",
    "Closed",
    "CommitAmbiguous",
    "Corrupt",
    "DurableError",
    "EngineError",
    "EngineIncompatible",
    "FeedGap",
    "HostLost",
    "InvalidArgument",
    "KeyRefused",
    "LeaseError",
    "LeaseFenced",
    "LeaseHeld",
    "LimitExceeded",
    "MissingDependency",
    "Nondeterministic",
    "NotFound",
    "ProtocolUnsupported",
    "SecretRefused",
    "StoreAmbiguous",
    "Timeout",
    "UnsupportedStore",
]
