"""Stores by URL protocol, imported lazily, with the install that fixes a miss.

Modelled on fsspec's registry: a protocol maps to "module:Class" and to the
extra that provides it. A protocol that has no atomic create and no
compare-and-swap (http, ftp, sftp, ...) is refused here, never emulated.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from durable_obj.errors import InvalidArgument, MissingDependency, UnsupportedStore
from durable_obj.stores.base import UNCHANGED, Blob, Entry, Store, Unchanged, Version


@dataclass(frozen=True, slots=True)
class _Registration:
    target: str
    extra: str | None
    requires: tuple[str, ...] = ()


#: protocol -> where its store lives, and which extra installs its client.
REGISTRY: dict[str, _Registration] = {
    "file": _Registration("durable_obj.stores.file:FileStore", None),
    "local": _Registration("durable_obj.stores.file:FileStore", None),
    "memory": _Registration("durable_obj.stores.memory:MemoryStore", None),
    "s3": _Registration("durable_obj.stores.s3:S3Store", "s3", ("s3fs",)),
    "gs": _Registration("durable_obj.stores.gcs:GCSStore", "gcs", ("gcsfs",)),
    "gcs": _Registration("durable_obj.stores.gcs:GCSStore", "gcs", ("gcsfs",)),
    "az": _Registration("durable_obj.stores.azure:AzureStore", "azure", ("adlfs",)),
    "abfs": _Registration("durable_obj.stores.azure:AzureStore", "azure", ("adlfs",)),
}


#: A relative path whose first segment starts like a URL scheme ("s3:",
#: "gs:x"); one letter is left alone (a drive letter).
_SCHEME_LIKE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")


def supported_protocols() -> list[str]:
    return sorted(REGISTRY)


def split_url(url: str) -> tuple[str, str]:
    """(protocol, path) of a store URL. A bare path is a local folder.

    A `file:` URL is percent-encoded (RFC 8089): `file:///srv/a%20b/ns` and
    `file://localhost/srv/a%20b/ns` name the folder `/srv/a b/ns`, non-ASCII
    names travel as UTF-8 escapes, and a `file:` URL naming another host is
    refused. `local:` and a bare path are literal. chdb.durable reads
    `file:///path`, `file:/path`, `local:` and bare paths the same way, so
    both libraries name the same folder.
    """
    if url[:5].lower() == "file:":
        return "file", file_url_path(url)
    if "://" in url:
        protocol, _, path = url.partition("://")
        protocol = protocol.lower()
        if protocol == "local":
            return "file", os.path.abspath("/" + path.lstrip("/"))
        return protocol, path
    if url.startswith("local:"):
        return "file", os.path.abspath(url[len("local:") :])
    looks = _SCHEME_LIKE.match(url)
    if looks:
        # "s3:/bkt/ns" (one slash) would quietly become the folder ./s3:/bkt/ns.
        scheme = looks.group(1)
        raise InvalidArgument(
            f"{url!r} would be a local path, but it starts with {scheme + ':'!r} like a URL "
            f"missing a slash: write {scheme}://... for that store, or ./{url} if a local "
            "folder is really meant. Nothing was read or written."
        )
    return "file", os.path.abspath(url)


def _bad_file_url(url: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"{url!r} is not a usable file: URL: {why}; nothing was read or written")


def _percent_decode(text: str, url: str) -> str:
    """`text` with its %XX escapes decoded as UTF-8 (RFC 3986, RFC 8089)."""
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise _bad_file_url(
            url, "its percent-escapes are not UTF-8 (write each byte of a UTF-8 name as %XX)"
        ) from None
    if "\x00" in decoded:
        raise _bad_file_url(url, "it names a NUL character (%00)")
    return decoded


def _check_plain(url: str) -> None:
    if "?" in url or "#" in url:
        raise _bad_file_url(
            url,
            "'?' and '#' begin a query or fragment, which a folder has not; "
            "write them as %3F and %23 if they are part of a name",
        )


def file_url_path(url: str) -> str:
    """The absolute local path a `file:` URL names (RFC 8089): the authority
    must be empty or `localhost`; the path is percent-decoded."""
    _check_plain(url)
    rest = url[5:]
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if authority and authority.lower() != "localhost":
            raise _bad_file_url(
                url,
                f"it names the host {authority!r}, and only local folders are stores "
                f"(a local path is file:///path, with three slashes)",
            )
        rest = slash + path or "/"
    path = _percent_decode(rest, url)
    if path.startswith("/"):
        path = "/" + path.lstrip("/")  # POSIX keeps a leading "//"; a folder has one
    return os.path.abspath(path)


def url_object_id(url: str, segment: str) -> str:
    """The object id that `segment`, the last path segment of the object URL
    `url`, names: percent-decoded in a `file:` URL, literal otherwise."""
    if url[:5].lower() != "file:":
        return segment
    _check_plain(url)
    return _percent_decode(segment, url)


def open_store(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The store rooted at `url` (a namespace)."""
    protocol, path = split_url(url)
    reg = REGISTRY.get(protocol)
    if reg is None:
        raise UnsupportedStore(
            f"no durable store for {protocol}:// URLs: a durable object needs an atomic "
            f"create-if-absent and compare-and-swap, which durable_obj implements for "
            f"{', '.join(p + '://' for p in supported_protocols())} and local paths. "
            f"Nothing was read or written."
        )
    module_name, _, cls_name = reg.target.partition(":")
    try:
        for name in reg.requires:
            # installed, not imported: a store may never need it (`s3static`)
            if importlib.util.find_spec(name) is None:
                raise ImportError(f"No module named {name!r}", name=name)
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] == "durable_obj":
            raise  # our own code failed to import: not a missing package
        hint = f"pip install 'durable_obj[{reg.extra}]'" if reg.extra else "pip install durable_obj"
        raise MissingDependency(
            f"{protocol}:// needs a package that is not installed ({exc.name}); run: {hint}"
        ) from exc
    cls: type[Store] = getattr(module, cls_name)
    store = cls(path, storage_options)  # type: ignore[call-arg]
    store.client_key = _client_key(store.url, storage_options)
    return store


def _client_key(url: str, options: dict[str, Any] | None) -> str | None:
    """`Store.client_key` of `url` opened with `options`: the URL and a
    SHA-256 of the options as JSON (so no credential is kept as text);
    None for options that are not plain JSON (a credential provider
    object), which then compare with nothing."""
    try:
        text = json.dumps(options or {}, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return f"{url}\n{hashlib.sha256(text.encode()).hexdigest()}"


__all__ = [
    "REGISTRY",
    "UNCHANGED",
    "Blob",
    "Entry",
    "Store",
    "Unchanged",
    "Version",
    "file_url_path",
    "open_store",
    "split_url",
    "supported_protocols",
    "url_object_id",
]
