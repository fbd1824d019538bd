"""Key providers: who wraps an object's data keys (envelope encryption).

An encrypted object seals its blobs under a random data key (a new one at
each checkpoint, `keyring.py`); the head stores each data key wrapped by a
key-encryption key that only the caller's provider can unwrap. A provider is
anything with a `key_id` and `wrap`/`unwrap`::

    class MyVault:
        key_id = "vault:agents/2026"
        def wrap(self, data_key: bytes, context: dict[str, str]) -> bytes:
            return vault.encrypt(self.key_id, data_key, context)
        def unwrap(self, wrapped: bytes, key_id: str, context: dict[str, str]) -> bytes:
            return vault.decrypt(key_id, wrapped, context)

`context` names the object and the data key; a provider binds the wrapped key
to it (associated data, a KMS encryption context), so a wrapped key copied
into another object's head does not unwrap. `key_id` is what the head
records and what errors name: never the key itself.

Here: `StaticKey` (32 bytes given, or read by `EnvKey` from an environment
variable or by `KeyFile` from a file; its id is a fingerprint that does not
reveal the key) and `AwsKms` (AWS KMS through boto3, the `kms` extra).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from typing import Any, Protocol, runtime_checkable

from durable_obj.errors import InvalidArgument, KeyRefused, MissingDependency


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys under one key-encryption key."""

    @property
    def key_id(self) -> str:
        """A stable name of the key-encryption key (recorded in the head)."""
        ...

    def wrap(self, data_key: bytes, context: dict[str, str]) -> bytes: ...

    def unwrap(self, wrapped: bytes, key_id: str, context: dict[str, str]) -> bytes:
        """The data key; raise (any exception) if this provider cannot."""
        ...


def _aad(context: dict[str, str]) -> bytes:
    return json.dumps(context, sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_key(text: str | bytes, where: str) -> bytes:
    """32 key bytes from raw bytes, 64 hex digits or base64 of 32 bytes."""
    if isinstance(text, bytes) and len(text) == 32:
        return text
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    raw = raw.strip()
    for decode in (bytes.fromhex, base64.b64decode, base64.urlsafe_b64decode):
        try:
            key = decode(raw)
        except (ValueError, binascii.Error):
            continue
        if len(key) == 32:
            return key
    raise InvalidArgument(
        f"{where} is not a 256-bit key: give 32 bytes as 64 hex digits or base64 "
        "(for instance: python -c 'import secrets; print(secrets.token_hex(32))')"
    )


class StaticKey:
    """A 256-bit key-encryption key held in memory; data keys are wrapped
    with AES-256-GCM, the context as associated data. `key_id` defaults to
    `static:` plus a fingerprint (an HMAC of a fixed label under the key,
    which reveals nothing of it), so a different key has a different id."""

    def __init__(self, key: bytes | str, *, key_id: str | None = None) -> None:
        self._key = parse_key(key, "the key")
        fingerprint = hmac.new(self._key, b"durable_obj key id", hashlib.sha256).hexdigest()
        self._id = key_id or f"static:{fingerprint[:16]}"

    @property
    def key_id(self) -> str:
        return self._id

    # cryptography is imported by the first wrap or unwrap: a process that
    # opens no encrypted object never loads it.
    def wrap(self, data_key: bytes, context: dict[str, str]) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(12)
        return nonce + AESGCM(self._key).encrypt(nonce, data_key, _aad(context))

    def unwrap(self, wrapped: bytes, key_id: str, context: dict[str, str]) -> bytes:
        if key_id != self._id:
            raise KeyRefused(f"this key is {self._id}, not {key_id}")
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            return AESGCM(self._key).decrypt(wrapped[:12], wrapped[12:], _aad(context))
        except (InvalidTag, ValueError):
            raise KeyRefused(f"key {key_id} does not unwrap this data key") from None

    def __repr__(self) -> str:  # never the key
        return f"StaticKey({self._id!r})"


def EnvKey(variable: str, *, key_id: str | None = None) -> StaticKey:
    """The `StaticKey` in environment variable `variable` (hex or base64)."""
    value = os.environ.get(variable)
    if not value:
        raise InvalidArgument(
            f"environment variable {variable} holds no key; set it to 64 hex digits"
        )
    return StaticKey(parse_key(value, f"environment variable {variable}"), key_id=key_id)


def KeyFile(path: str, *, key_id: str | None = None) -> StaticKey:
    """The `StaticKey` in file `path` (32 raw bytes, or hex or base64 text)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(4096)
    except OSError as exc:
        raise InvalidArgument(f"cannot read key file {path}: {exc.strerror}") from None
    return StaticKey(parse_key(data, f"key file {path}"), key_id=key_id)


class AwsKms:
    """A key in AWS KMS: data keys are wrapped by `Encrypt` and unwrapped by
    `Decrypt` with the context as the encryption context. `key_id` is the
    key's id, ARN or alias; `client` a boto3 KMS client (default: one from
    boto3's default session, with `client_kwargs`)."""

    def __init__(self, key_id: str, *, client: Any = None, **client_kwargs: Any) -> None:
        if client is None:
            try:
                import boto3  # type: ignore[import-untyped]
            except ImportError:
                raise MissingDependency(
                    "AwsKms needs boto3: pip install 'durable_obj[kms]'"
                ) from None
            client = boto3.client("kms", **client_kwargs)
        self._client = client
        self._id = key_id

    @property
    def key_id(self) -> str:
        return self._id

    def wrap(self, data_key: bytes, context: dict[str, str]) -> bytes:
        try:
            answer = self._client.encrypt(
                KeyId=self._id, Plaintext=data_key, EncryptionContext=context
            )
        except Exception as exc:
            raise KeyRefused(f"AWS KMS key {self._id} refused to wrap: {_kms_error(exc)}") from None
        return bytes(answer["CiphertextBlob"])

    def unwrap(self, wrapped: bytes, key_id: str, context: dict[str, str]) -> bytes:
        try:
            answer = self._client.decrypt(
                KeyId=key_id, CiphertextBlob=wrapped, EncryptionContext=context
            )
        except Exception as exc:
            raise KeyRefused(f"AWS KMS key {key_id} refused to unwrap: {_kms_error(exc)}") from None
        return bytes(answer["Plaintext"])

    def __repr__(self) -> str:
        return f"AwsKms({self._id!r})"


def _kms_error(exc: Exception) -> str:
    """The error code of a botocore ClientError, else the class name: a
    message could echo request fields, and credentials are never shown."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if isinstance(code, str):
            return code
    return type(exc).__name__
