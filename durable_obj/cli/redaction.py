"""Keeping credentials out of everything the CLI prints.

A storage option whose (dotted) key names a credential is a secret; its
value is replaced by `***` wherever it would appear: tables, messages,
errors, log lines, even a query result that returns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

#: A storage option whose key contains one of these is a credential.
SENSITIVE_KEY_PARTS = ("secret", "key", "token", "password", "credential", "connection_string")
#: Shorter credential values are not searched for in the output (they would
#: mangle unrelated text and are no secret anyway).
MIN_REDACTED_LENGTH = 4
REDACTED = "***"


def is_sensitive(key: str) -> bool:
    """Whether a storage option (dotted path included) names a credential."""
    lowered = key.lower()
    return any(part in lowered for part in SENSITIVE_KEY_PARTS)


class Secrets:
    """The credential values of one invocation, and their redaction."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def add(self, value: str) -> None:
        if len(value) >= MIN_REDACTED_LENGTH:
            self.values.add(value)

    def add_items(self, items: Iterable[str]) -> None:
        """Raw `KEY=VALUE` items, registered before they are parsed, so that
        a parse error can never echo a credential."""
        for item in items:
            key, sep, text = item.partition("=")
            if sep and is_sensitive(key):
                self.add(text)

    def add_options(self, options: Mapping[str, Any], prefix: str = "") -> None:
        """Parsed (nested) storage options: every credential-named string."""
        for key, value in options.items():
            path = f"{prefix}{key}"
            if isinstance(value, Mapping):
                self.add_options(value, f"{path}.")
            elif is_sensitive(path) and isinstance(value, str):
                self.add(value)

    def redact(self, text: str) -> str:
        # Longest first: a secret that contains another is replaced whole.
        for secret in sorted(self.values, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text


class RedactingStream:
    """A text stream that redacts every write before passing it on."""

    def __init__(self, stream: IO[str], redact: Callable[[str], str]) -> None:
        self._stream = stream
        self._redact = redact

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        self._stream.write(self._redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        try:
            return bool(self._stream.isatty())
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()
