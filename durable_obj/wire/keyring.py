"""An object's encryption and compression, as its head records them.

The head of an encrypted object carries, in durable_obj's extension::

    "encryption": {"cipher": "AES-256-GCM-HKDF-STREAM",
                   "active": "<data key id>",
                   "keys": [{"id": "<16 hex>", "kek": "<provider key id>",
                             "wrapped": "<base64>", "created_at": t,
                             "retired_at": t | null}, ...]}

and lists `ENCRYPTED` among both its reader and writer features, the V1 way
to say "a reader or writer that does not know this must not touch it":
chdb.durable refuses to open such an object with `protocol_unsupported`,
naming the feature, instead of reading sealed bytes as SQL. A compressed
WAL is declared the same way (`COMPRESSED`, extension `"compression":
"zstd"`). Everything else in the head (lease, manifest refs, seq) stays
readable, so the lease and compare-and-swap work as before.

Each data key is wrapped by the caller's key provider (`keys.py`) with the
object id and the data key id as context. A new data key is made at each
checkpoint (`rotate`); the keys a retained past state still needs stay in
the list until the retention window has passed since they were retired.
`rewrap` moves every data key under a new key-encryption key in one head
write, with no data rewritten.
"""

from __future__ import annotations

import base64
import binascii
import threading
from typing import TYPE_CHECKING, Any, Final

from durable_obj.errors import Corrupt, InvalidArgument, KeyRefused
from durable_obj.wire.model import json_copy
from durable_obj.wire.protocol import COMPRESSED_FEATURE, ENCRYPTED_FEATURE
from durable_obj.wire.sealing import Codec, DataKey, Unsealer

if TYPE_CHECKING:
    from durable_obj.wire.head import Head
    from durable_obj.wire.keys import KeyProvider

#: Feature names (reader and writer) of an encrypted object and of a zstd WAL.
ENCRYPTED: Final = ENCRYPTED_FEATURE
COMPRESSED: Final = COMPRESSED_FEATURE
#: Extension fields.
ENCRYPTION: Final = "encryption"
COMPRESSION: Final = "compression"
CIPHER: Final = "AES-256-GCM-HKDF-STREAM"


def _declare(head: Head, feature: str) -> None:
    proto = head.protocol
    if feature not in proto.reader_features:
        proto.reader_features = [*proto.reader_features, feature]
    if feature not in proto.writer_features:
        proto.writer_features = [*proto.writer_features, feature]


def is_encrypted(head: Head) -> bool:
    return ENCRYPTED in head.protocol.reader_features


def is_compressed(head: Head) -> bool:
    return COMPRESSED in head.protocol.reader_features


def kek_of(head: Head) -> str | None:
    """The provider key id the active data key is wrapped under (None: plain)."""
    if not is_encrypted(head):
        return None
    section = _section(head)
    for entry in section["keys"]:
        if entry["id"] == section["active"]:
            return str(entry["kek"])
    return None


def _context(oid: str, key_id: str) -> dict[str, str]:
    return {"durable_obj_object": oid, "durable_obj_data_key": key_id}


def _section(head: Head) -> dict[str, Any]:
    """The encryption section, checked for shape; `Corrupt` otherwise."""
    raw = head.extension().get(ENCRYPTION)
    problem = None
    if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
        problem = "has no key list"
    elif raw.get("cipher") != CIPHER:
        problem = f"names cipher {raw.get('cipher')!r}, not {CIPHER}"
    elif not isinstance(raw.get("active"), str):
        problem = "names no active data key"
    else:
        for entry in raw["keys"]:
            if not (
                isinstance(entry, dict)
                and all(isinstance(entry.get(f), str) for f in ("id", "kek", "wrapped"))
            ):
                problem = "has a malformed key entry"
                break
    if problem is not None:
        raise Corrupt(
            f"head.durable_obj.{ENCRYPTION} {problem}, yet the object declares {ENCRYPTED}; "
            "nothing was opened or changed"
        )
    assert isinstance(raw, dict)
    return raw


def _entry(provider: KeyProvider, oid: str, key: DataKey, now: float) -> dict[str, Any]:
    wrapped = provider.wrap(key.secret, _context(oid, key.hex_id))
    return {
        "id": key.hex_id,
        "kek": provider.key_id,
        "wrapped": base64.b64encode(wrapped).decode("ascii"),
        "created_at": now,
        "retired_at": None,
    }


def start(head: Head, oid: str, *, provider: KeyProvider | None, zstd: bool, now: float) -> None:
    """Make a new object's head encrypted (a first data key, wrapped by
    `provider`) and/or compressed."""
    if zstd:
        _declare(head, COMPRESSED)
        head.set_extension(COMPRESSION, "zstd")
    if provider is not None:
        key = DataKey.new()
        head.set_extension(
            ENCRYPTION,
            {"cipher": CIPHER, "active": key.hex_id, "keys": [_entry(provider, oid, key, now)]},
        )
        _declare(head, ENCRYPTED)


def rotate(head: Head, oid: str, provider: KeyProvider, *, now: float, retention: float) -> None:
    """A new active data key for what is written from now on (a checkpoint);
    the old one is retired, and keys retired longer than `retention` ago go
    (with no history window, at once: the new head references nothing
    sealed under them, and a reader of an older head holds its own list)."""
    section = _section(head)
    key = DataKey.new()
    keys = []
    for entry in section["keys"]:
        entry = dict(entry)
        if entry["id"] == section["active"]:
            entry["retired_at"] = now
        retired = entry.get("retired_at")
        if isinstance(retired, int | float) and (retention <= 0 or retired + retention < now):
            continue  # nothing retained can still need it
        keys.append(entry)
    keys.append(_entry(provider, oid, key, now))
    head.set_extension(ENCRYPTION, {**section, "active": key.hex_id, "keys": keys})


def rewrap(head: Head, oid: str, old: KeyProvider, new: KeyProvider) -> int:
    """Wrap every data key of `head` under `new` instead (unwrapped by
    `old`); the number rewrapped. Data keys and blobs stay as they are."""
    section = _section(head)
    keys = []
    for entry in section["keys"]:
        secret = _unwrap(old, oid, entry)
        wrapped = new.wrap(secret, _context(oid, entry["id"]))
        keys.append(
            {**entry, "kek": new.key_id, "wrapped": base64.b64encode(wrapped).decode("ascii")}
        )
    head.set_extension(ENCRYPTION, {**section, "keys": keys})
    return len(keys)


def _unwrap(provider: KeyProvider, oid: str, entry: dict[str, Any]) -> bytes:
    kek = entry["kek"]
    if provider.key_id != kek:
        raise KeyRefused(
            f"data key {entry['id']} is wrapped under key {kek}; the key given is "
            f"{provider.key_id}. Open with the key {kek}. Nothing was changed."
        )
    try:
        wrapped = base64.b64decode(entry["wrapped"], validate=True)
    except (ValueError, binascii.Error):
        raise Corrupt(f"the head's wrapped data key {entry['id']} is not base64") from None
    try:
        secret = provider.unwrap(wrapped, kek, _context(oid, entry["id"]))
    except KeyRefused as exc:
        raise KeyRefused(f"{exc}. Nothing was changed.") from None
    except Exception as exc:
        raise KeyRefused(
            f"key {kek} did not unwrap data key {entry['id']} ({type(exc).__name__}); "
            "nothing was changed"
        ) from None
    if not isinstance(secret, bytes | bytearray) or len(secret) != 32:
        raise KeyRefused(f"key {kek} unwrapped data key {entry['id']} to something not 32 bytes")
    return bytes(secret)


class Keys:
    """The key provider an object was opened with, and the data keys it has
    unwrapped (each once: a KMS call per data key, not per blob)."""

    def __init__(self, oid: str, url: str, provider: KeyProvider | None) -> None:
        self.oid, self.url, self.provider = oid, url, provider
        self._unwrapped: dict[tuple[str, str], DataKey] = {}
        self._lock = threading.Lock()
        #: The last codec made, with a copy of the encryption section it was
        #: made from (checked), the provider and zstd.
        self._made: tuple[Any, KeyProvider | None, bool, Codec] | None = None

    def check(self, head: Head) -> None:
        """Refuse, before anything is changed, an encrypted head without a
        key and a plain one when a key was given (it would stay plain)."""
        kek = kek_of(head)
        if kek is not None and self.provider is None:
            raise KeyRefused(
                f"{self.url} is encrypted under key {kek}; open it with encryption= a key "
                "provider for that key. Nothing was opened or changed."
            )
        if kek is None and is_encrypted(head):
            raise Corrupt(f"{self.url}: the head's encryption section names no active key")
        if kek is None and self.provider is not None:
            raise InvalidArgument(
                f"{self.url} exists and is not encrypted; encryption= applies to a new "
                "object. Fork it into an encrypted one (durable_obj.fork(src, dst, "
                "encryption=...)) or open it without a key. Nothing was changed."
            )

    def codec(self, head: Head) -> Codec:
        """How blobs of `head`'s object are written and read."""
        zstd = is_compressed(head)
        if not is_encrypted(head):
            return Codec(self.oid, zstd=zstd)
        # A flush asks for every segment: the section is checked and its
        # keys looked up once while it stays equal to the one checked (a
        # rotation or a rewrap makes a new one), not once per flush.
        raw = head.extension().get(ENCRYPTION)
        made = self._made
        if made is not None and made[1] is self.provider and made[2] == zstd and made[0] == raw:
            return made[3]
        kept = json_copy(raw)
        self.check(head)
        assert self.provider is not None
        section = _section(head)
        keys: dict[bytes, DataKey] = {}
        active = None
        for entry in section["keys"]:
            key = self._key(entry)
            keys[key.id] = key
            if entry["id"] == section["active"]:
                active = key
        if active is None:
            raise Corrupt(f"{self.url}: the head's active data key is not in its key list")
        codec = Codec(self.oid, key=active, opener=Unsealer(keys, kek_of(head) or "?"), zstd=zstd)
        self._made = (kept, self.provider, zstd, codec)
        return codec

    def _key(self, entry: dict[str, Any]) -> DataKey:
        assert self.provider is not None
        cache = (entry["id"], entry["wrapped"])
        with self._lock:
            found = self._unwrapped.get(cache)
        if found is not None:
            return found
        try:
            key_id = bytes.fromhex(entry["id"])
        except ValueError:
            key_id = b""
        if len(key_id) != 8:
            raise Corrupt(f"{self.url}: the head's data key id {entry['id']!r} is malformed")
        key = DataKey(key_id, _unwrap(self.provider, self.oid, entry))
        with self._lock:
            self._unwrapped[cache] = key
        return key
