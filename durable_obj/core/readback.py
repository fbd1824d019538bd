"""One head write, settled by reading back (`commit.py`'s module docstring):
create or compare-and-swap, and on a lost answer or a failed precondition
a read of the head, judged by the write's own rule (`Verdict`), until it is
proven, lost, or the commit deadline makes it `CommitAmbiguous`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_obj.errors import BackendError, CommitAmbiguous, LeaseHeld, StoreAmbiguous
from durable_obj.wire.head import Head
from durable_obj.wire.protocol import COMMIT_BACKOFF_BASE, COMMIT_BACKOFF_MAX

if TYPE_CHECKING:
    from durable_obj.core.commit import HeadWriter
    from durable_obj.stores.base import Version


@dataclass(frozen=True, slots=True)
class Stored:
    """A head as stored, and the token that replaces exactly it; `body`:
    its bytes as stored, when known (what a writer proved: `HeadWriter.proven`)."""

    head: Head
    version: Version
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class Again:
    """Write again, replacing `version` (None: create again)."""

    version: Version | None


#: What a write's rule makes of a head read back that is not the one written:
#: write again, a settled outcome, or None (lost: someone else's head).
Verdict = Again | Stored | None


def is_ours(current: Head, written: Head) -> bool:
    """Our write, or an equivalent earlier one of ours, is what is stored: the
    same lease (instance, generation, expiry) and manifest (our key, our seq)."""
    return current.lease == written.lease and current.manifest == written.manifest


def write(
    writer: HeadWriter,
    make: Callable[[], Head],
    version: Version | None,
    judge: Callable[[Head | None, Version | None], Verdict],
    *,
    what: str,
    unsettled: str,
    failed: str,
    first: Callable[[], None] | None = None,
) -> Stored | None:
    """The one head write: create (version None) or compare-and-swap,
    settled by reading back (module docstring of `commit.py`). None: lost. `first`
    goes with the first compare-and-swap (`commit`)."""
    deadline = writer.clock.monotonic() + writer.commit_deadline
    ambiguous = False
    attempt = 0
    while True:
        attempt += 1
        head = make()
        body = head.to_bytes()
        new: Version | None = None
        try:
            if version is None:
                assert first is None
                new = writer.store.create(writer.key, body)
            elif first is not None:
                pending, first = first, None  # it runs once, whatever the answer
                new = writer.store.replace_after(writer.key, body, version, pending)
            else:
                new = writer.store.replace(writer.key, body, version)
        except StoreAmbiguous:
            ambiguous = True
        except BackendError:
            if not ambiguous:
                raise  # refused, and no earlier write of this commit can have landed
            # an earlier answer was lost: that write may have landed (read back)
        if new is not None:
            return Stored(head, new, body)
        try:
            blob = writer.store.get(writer.key)
        except BackendError:
            ambiguous = True  # cannot tell: write again, or run out of time
        else:
            if blob is None and version is None and not ambiguous:
                # The store refused the create (a head is there), yet the
                # read does not show it yet: another writer created the
                # object that moment. Its lease holds; nothing of ours landed.
                raise LeaseHeld(
                    f"{writer.url}: another writer created this object's head at the same "
                    "moment (our create was refused; the store does not show its head "
                    "yet), so its lease holds. Nothing was written; open again to see it."
                )
            current = None if blob is None else Head.parse(blob.data, writer.url)
            if blob is not None and current is not None and is_ours(current, head):
                return Stored(head, blob.version, blob.data)
            verdict = judge(current, None if blob is None else blob.version)
            if verdict is None or isinstance(verdict, Stored):
                return verdict
            version = verdict.version
        if writer.clock.monotonic() >= deadline:
            if ambiguous:
                raise CommitAmbiguous(
                    f"{writer.url}: could not prove whether {what} landed after {attempt} "
                    f"attempt(s): the outcome is indeterminate. {unsettled}"
                )
            raise BackendError(
                f"{writer.url}: {what} did not apply after {attempt} attempt(s); {failed}"
            )
        writer.clock.sleep(min(COMMIT_BACKOFF_BASE * 2 ** (attempt - 1), COMMIT_BACKOFF_MAX))
