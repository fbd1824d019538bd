"""`-o/--storage-option KEY=VALUE` items -> the `storage_options` dict.

Dotted keys nest (`client_kwargs.region_name=eu-west-1`); true/false, ints
and floats are typed; a credential's value always stays a string. Pure: no
click, no output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from durable_obj.cli.redaction import is_sensitive
from durable_obj.errors import InvalidArgument

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?\Z")


def parse_value(key: str, text: str) -> Any:
    """true/false, ints and floats are typed; everything else stays a string.
    A credential's value always stays a string (a numeric password too)."""
    if is_sensitive(key):
        return text
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_storage_options(items: Sequence[str]) -> dict[str, Any]:
    """`["key=value", "client_kwargs.region_name=x"]` -> a (nested) dict.
    Raises `InvalidArgument` naming the position, never echoing a value."""
    out: dict[str, Any] = {}
    for n, item in enumerate(items, start=1):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidArgument(
                f"storage option #{n} is not KEY=VALUE (e.g. -o endpoint_url=http://...)"
            )
        parts = key.split(".")
        if any(not p for p in parts):
            raise InvalidArgument(f"storage option {key!r} has an empty part in its dotted key")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidArgument(
                    f"storage option {'.'.join(parts[: depth + 1])!r} is given both as a value "
                    "and as a group of options"
                )
            node = child
        leaf = parts[-1]
        if isinstance(node.get(leaf), dict):
            raise InvalidArgument(
                f"storage option {key!r} is given both as a value and as a group of options"
            )
        node[leaf] = parse_value(key, text)
    return out
