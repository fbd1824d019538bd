"""No credential in an error's chain.

A store's own messages never name a credential, but the client error it
chains (`raise BackendError(...) from exc`) is the client's text, and some
clients put the server's whole answer there (azure-core's `Content:`), or a
request URL with a SAS token in its query (aiohttp). A traceback prints the
chain, so a server that echoes a key or a token would put it in a log.

`secret_values(options)` collects the credentials a store was given (and
those its client reads from the environment); `scrub(error, secrets)`
replaces every exception in the error's chain whose text holds one by a
`ClientError` carrying the same type name and text, the secret cut out. An
exception that holds none stays as it is (its type and attributes intact).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

#: Option names (any depth, any case) whose string values are credentials.
_SECRET_NAME = re.compile(
    r"secret|token|password|passwd|sas|signature|credential|connection_string|"
    r"(^|_)key$|account_key|private_key|access_key",
    re.IGNORECASE,
)
#: Connection-string fields that are credentials.
_CONNECTION_FIELDS = ("AccountKey", "SharedAccessSignature")
#: Environment variables the clients read credentials from.
_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
)
#: Shorter strings are not searched for (a flag, a region, "true").
_MIN_LEN = 8
_CUT = "[redacted]"


class ClientError(Exception):
    """An error of a storage client, its text with credentials cut out."""


def secret_values(options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Every credential string in `options` (nested too) and in the
    environment the clients read, with the forms they travel in (a SAS
    token's fields, percent-encoded), longest first."""
    found: set[str] = set()

    def add(value: str) -> None:
        if len(value) < _MIN_LEN:
            return
        found.add(value)
        found.add(quote(value, safe=""))
        for part in re.split(r"[;&?]", value):  # a connection string, a SAS query
            name, sep, field = part.partition("=")
            if sep and (name in _CONNECTION_FIELDS or name == "sig") and len(field) >= _MIN_LEN:
                found.update((field, quote(field, safe="")))

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, str):
            if secret:
                add(value)
        elif isinstance(value, Mapping):
            for name, inner in value.items():
                walk(inner, secret or bool(_SECRET_NAME.search(str(name))))
        elif isinstance(value, (list, tuple)):
            for inner in value:
                walk(inner, secret)

    walk(options or {}, False)
    for name in _ENV:
        value = os.environ.get(name)
        if value:
            add(value)
    return tuple(sorted(found, key=len, reverse=True))


def _cut(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, _CUT)
    return text


def _texts(error: BaseException) -> str:
    try:
        return f"{error}\n{error!r}\n{error.args!r}"
    except Exception:  # a broken __str__: judge it by its type alone
        return type(error).__name__


def scrub(error: BaseException, secrets: tuple[str, ...]) -> None:
    """Cut every secret out of `error`'s own message and out of its chain
    (`__cause__` and `__context__`, to any depth), in place."""
    if not secrets:
        return
    if any(isinstance(a, str) and any(s in a for s in secrets) for a in error.args):
        error.args = tuple(_cut(a, secrets) if isinstance(a, str) else a for a in error.args)
    seen: set[int] = set()
    todo = [error]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for attr in ("__cause__", "__context__"):
            below = getattr(node, attr)
            if below is None:
                continue
            text = _texts(below)
            if any(s in text for s in secrets):
                clean = ClientError(f"{type(below).__name__}: {_cut(str(below), secrets)}")
                clean.__cause__ = below.__cause__
                clean.__context__ = below.__context__
                clean.__suppress_context__ = below.__suppress_context__
                setattr(node, attr, clean)
                below = clean
            todo.append(below)
