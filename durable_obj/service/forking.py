"""A fork's copy: a new object whose base is a source object's state.

`Namespace.fork` checks the destination and opens the source read-only;
`fork_into` makes the copy from it: the source's snapshot uploaded as the
copy's base (sealed under a data key of the copy's own when the copy is
encrypted, so a plain object forks into an encrypted one and an encrypted
one into another key), then the copy's head, created only if absent.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING

from durable_obj.core.commit import HeadWriter
from durable_obj.core.options import Options, make_options
from durable_obj.core.publishing import publish
from durable_obj.errors import DurableError, InvalidArgument
from durable_obj.wire import keyring
from durable_obj.wire.digest import CHUNK, file_digest
from durable_obj.wire.head import FORKED_FROM, RETENTION, Head, Lease, ObjectRef
from durable_obj.wire.protocol import mint_checkpoint_key, object_key

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.core.object import DurableObject
    from durable_obj.stores.base import Store
    from durable_obj.wire.keys import KeyProvider


class SameKey:
    """`dst_encryption`'s default: the copy is encrypted as the namespace's
    `encryption` option says (the source's key, under a new data key)."""

    def __repr__(self) -> str:
        return "SAME_KEY"


SAME_KEY = SameKey()


def fork_into(
    obj: DurableObject,
    store: Store,
    oid: str,
    *,
    provider: KeyProvider | None,
    zstd: bool,
    options: Options,
    progress: Callback | None,
) -> None:
    """Create `oid` on `store` as a copy of the open source `obj`."""
    if provider is not None:
        make_options({"encryption": provider})  # the check open() makes
    writer = HeadWriter(store, oid, commit_deadline=options.commit_deadline, encryption=provider)
    source = obj.head
    assert source is not None
    src = obj.oid
    head = Head.cold(
        db=source.manifest.db,
        engine_version=source.engine.version,
        lease=Lease(generation=0),
    )
    # a data key of the copy's own, bound to its id
    keyring.start(
        head,
        oid,
        provider=provider,
        zstd=zstd or keyring.is_compressed(source),
        now=time.time(),
    )
    key = mint_checkpoint_key(0, 1)
    path = obj.snapshot()
    codec = writer.codec(head)
    if codec.encrypted:
        with open(path, "rb") as plain, open(path + ".sealed", "wb") as out:
            codec.seal_file(key, iter(lambda: plain.read(CHUNK), b""), out)
        os.replace(path + ".sealed", path)
    size, sha256 = file_digest(path)
    ref = ObjectRef(key=key, size=size, sha256=sha256)
    publish(
        writer,
        ref,
        lambda key: store.create_file(key, path, progress),
        scratch=os.path.dirname(path),
    )
    head.engine.min_reader = source.engine.min_reader
    head.manifest.base = ref
    head.manifest.seq = 1
    head.set_timezone(source.timezone)
    if source.description is not None:
        head.set_description(source.description)
    head.set_extension(FORKED_FROM, {"oid": src, "seq": source.manifest.seq})
    head.set_extension(RETENTION, options.retention)
    if not writer.create(head):
        with contextlib.suppress(DurableError):  # an orphan, at worst: never the answer
            store.delete(object_key(oid, ref.key))
        raise InvalidArgument(
            f"{oid!r} was created in {store.url} meanwhile by another writer, which wins; "
            "the fork was abandoned and its uploaded base deleted (if that failed, it is "
            "an orphan no head references)"
        )
