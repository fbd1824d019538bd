"""wire/keyring.py: the codec of an encrypted head, made once per section."""

from __future__ import annotations

import json
import os

import pytest

from durable_obj import StaticKey
from durable_obj.errors import Corrupt
from durable_obj.wire import keyring
from durable_obj.wire.head import Head, Lease


def _encrypted(key: StaticKey) -> Head:
    head = Head.cold(
        db="default",
        engine_version="26.9.0",
        lease=Lease(generation=1, owner="w", instance="i", expires_at=1.0),
    )
    keyring.start(head, "o", provider=key, zstd=False, now=1.0)
    return head


def test_a_codec_is_made_once_per_encryption_section_and_anew_after_a_rotation() -> None:
    """A flush asks for the codec of every segment: the same section gives
    the same codec; a rotation (a new section) a new one sealing under the
    new data key; a head read from bytes is checked again, so a section
    that names an active key it does not list is `Corrupt` even right
    after a good one was cached."""
    key = StaticKey(os.urandom(32))
    keys = keyring.Keys("o", "file:///x/o", key)
    head = _encrypted(key)
    first = keys.codec(head)
    assert keys.codec(head) is first
    head.manifest.seq = 5  # a commit changes the head, not its section
    assert keys.codec(head) is first
    keyring.rotate(head, "o", key, now=2.0, retention=60)
    rotated = keys.codec(head)
    assert rotated is not first and rotated.key is not None and first.key is not None
    assert rotated.key.id != first.key.id
    assert rotated.opener is not None and first.key.id in rotated.opener._keys
    doc = json.loads(head.to_bytes())
    doc["durable_obj"]["encryption"]["active"] = "00" * 8
    with pytest.raises(Corrupt, match="no active key"):
        keys.codec(Head.parse(json.dumps(doc).encode()))


def test_a_section_changed_in_place_is_checked_again() -> None:
    """The codec is kept while the section equals the one checked: the same
    dict changed in place (a cipher it does not name) is checked again and
    refused, not sealed under the codec made for what it said before."""
    key = StaticKey(os.urandom(32))
    keys = keyring.Keys("o", "file:///x/o", key)
    head = _encrypted(key)
    keys.codec(head)
    head.extension()[keyring.ENCRYPTION]["cipher"] = "ROT13"
    with pytest.raises(Corrupt, match="ROT13"):
        keys.codec(head)
