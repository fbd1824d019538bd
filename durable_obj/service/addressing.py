"""Addressing: what names an object, checked before anything is opened.

An object URL is `<namespace>/<id>`: its last path segment is the id, the
rest the namespace (`split_object_url`). An id is one visible path segment
(`check_oid`); a fork's destination is an id beside the source or an object
URL of its own (`split_destination`); `at=` is a seq or an aware datetime,
for a read-only open only (`check_at`). Every failure is `InvalidArgument`,
raised before any storage is touched.
"""

from __future__ import annotations

import os
import unicodedata
from datetime import datetime

from durable_obj.core.catalog import CATALOG_KEY
from durable_obj.errors import InvalidArgument
from durable_obj.stores import url_object_id
from durable_obj.wire.protocol import valid_oid


def split_object_url(url: str) -> tuple[str, str]:
    """(namespace URL, object id) of an object URL."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument("an object URL must be a non-empty string")
    if url.endswith("/"):
        raise InvalidArgument(
            f"{url!r} ends with '/', so it names a folder (a namespace), not an object: "
            "open one object as <namespace>/<id> (durable_obj.open), or the folder as "
            "durable_obj.Namespace(url). Nothing was opened."
        )
    trimmed = url
    scheme, sep, rest = trimmed.partition("://")
    if not sep:
        scheme, rest = "", trimmed
    head, slash, oid = rest.rpartition("/")
    if not slash:
        head, oid = "", rest
    if not oid:
        raise InvalidArgument(f"{url!r} names no object: its last path segment is the object id")
    namespace = f"{scheme}://{head}" if sep else (head or ".")
    if not sep and rest.startswith("/") and not head:
        namespace = "/"
    return namespace, url_object_id(url, oid)  # file: URLs are percent-encoded


def check_oid(oid: str) -> str:
    """`oid` when it may name an object: one path segment (`valid_oid`),
    valid UTF-8, nothing invisible that would show one id as another
    (bidi controls, a BOM, zero-width and other format characters), and not
    the catalog's key (`_catalog.json`: its file would take the folder's place)."""
    if not isinstance(oid, str) or not valid_oid(oid):
        raise InvalidArgument(
            f"invalid object id {oid!r}: one path segment of at most 255 bytes, with no '/', "
            "no backslash, no control character, and not '.' or '..'"
        )
    if oid == CATALOG_KEY:
        raise InvalidArgument(
            f"invalid object id {oid!r}: it is the name of the namespace's catalog "
            "(docs/guides/operations.md); choose another id. Nothing was opened."
        )
    hidden = next((ch for ch in oid if unicodedata.category(ch) in _HIDDEN), None)
    if hidden is not None:
        what = "not valid UTF-8" if unicodedata.category(hidden) == "Cs" else "invisible"
        raise InvalidArgument(
            f"invalid object id {oid!r}: it holds U+{ord(hidden):04X}, which is {what} "
            "(an id is shown to people and tools; bidi controls, BOMs, zero-width and "
            "unpaired surrogate characters are refused). Nothing was opened."
        )
    return oid


#: Unicode categories an object id may not hold: format characters (bidi
#: controls, BOM, zero-width), surrogates, private use, line/paragraph separators.
_HIDDEN = frozenset({"Cf", "Cs", "Co", "Zl", "Zp"})


def check_at(at: object, *, read_only: bool) -> None:
    """`at=` is a seq or an aware datetime, and only for a read-only open."""
    if at is None:
        return
    if not read_only:
        raise InvalidArgument(
            "at= opens a past state, which is read-only: pass read_only=True (or fork it "
            "with fork(..., at=) to write from there). Nothing was opened."
        )
    if isinstance(at, bool) or not isinstance(at, int | datetime):
        raise InvalidArgument(
            f"at= is a seq (int) or a timezone-aware datetime, not {type(at).__name__}; "
            "nothing was opened"
        )
    if isinstance(at, int) and at < 1:
        raise InvalidArgument(f"at={at}: the first commit is seq 1; nothing was opened")


def split_destination(dst: str) -> tuple[str | None, str]:
    """(namespace URL, object id) of a fork's destination; the namespace is
    None for a bare id (beside the source). A URL has a scheme (`s3://`,
    `file:`, `local:`) or is a path: absolute, or relative starting with `./`
    or `../`. Anything else must be an object id: `a/b` is refused rather
    than guessed to be a relative path."""
    if not isinstance(dst, str) or not dst.strip():
        raise InvalidArgument("a fork destination must be a non-empty string")
    lowered = dst.lower()
    if (
        "://" in dst
        or lowered.startswith(("file:", "local:"))
        or os.path.isabs(dst)
        or dst.startswith(("./", "../"))
    ):
        namespace, oid = split_object_url(dst)
        return namespace, check_oid(oid)
    if not valid_oid(dst):
        raise InvalidArgument(
            f"invalid fork destination {dst!r}: give an object id beside the source (one path "
            "segment: no '/', no backslash, no control character, not '.' or '..') or an "
            "object URL (s3://bucket/ns/id, /abs/path/ns/id, or ./ns/id for a relative path). "
            "Nothing was written."
        )
    return None, dst
