"""`verify`: download every blob an object's head references and check its
size and SHA-256 and, for an encrypted object given its key, every sealed
chunk's tag (and that a compressed segment decompresses)."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable_obj.core.ops import live_refs, read_head
from durable_obj.errors import Corrupt
from durable_obj.wire import keyring
from durable_obj.wire.digest import file_digest, verify, verify_bytes
from durable_obj.wire.keyring import Keys
from durable_obj.wire.protocol import CHECKPOINT_DIR, object_key

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.stores.base import Store
    from durable_obj.wire.keys import KeyProvider


@dataclass
class VerifyReport:
    oid: str
    checked: list[str] = field(default_factory=list)
    checked_bytes: int = 0
    rows: dict[str, int] | None = None
    #: Every sealed chunk's tag was checked (an encrypted object, verified
    #: with its key); None for a plain object.
    tags_checked: bool | None = None


def verify_object(
    store: Store,
    oid: str,
    *,
    callback: Callback | None = None,
    encryption: KeyProvider | None = None,
) -> VerifyReport:
    """Download every key the head references and check size and SHA-256;
    for an encrypted object given its key provider `encryption`, also every
    sealed chunk's tag (without it: `tags_checked` is False)."""
    head = read_head(store, oid)
    report = VerifyReport(oid)
    codec = None
    if encryption is not None or not keyring.is_encrypted(head):
        keys = Keys(oid, f"{store.url.rstrip('/')}/{oid}", encryption)
        keys.check(head)
        codec = keys.codec(head)
    report.tags_checked = False if codec is None else (True if codec.encrypted else None)
    with tempfile.TemporaryDirectory(prefix="durable_obj-verify-") as tmp:
        for ref in live_refs(head):
            key = object_key(oid, ref.key)
            if ref.key.startswith(f"{CHECKPOINT_DIR}/"):
                path = os.path.join(tmp, uuid.uuid4().hex)
                if not store.download(key, path, callback):
                    raise Corrupt(f"missing base: {key} is referenced by the head but missing")
                verify(*file_digest(path), ref, "base checkpoint")
                if codec is not None and codec.encrypted:
                    codec.open_file(ref.key, path, os.devnull)
                os.unlink(path)
            else:
                blob = store.get(key)
                if blob is None:
                    raise Corrupt(f"{key} is referenced by the head but missing")
                verify_bytes(blob.data, ref, "WAL segment")
                if codec is not None:
                    codec.decode(ref.key, blob.data)  # tags; a frame that decompresses
            report.checked.append(key)
            report.checked_bytes += ref.size
    return report
