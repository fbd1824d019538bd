"""Stores by URL protocol, imported lazily, with the install that fixes a miss.

Modelled on fsspec's registry: a protocol maps to "module:Class" and to the
extra that provides it. A protocol that has no atomic create and no
compare-and-swap (http, ftp, sftp, ...) is refused here, never emulated.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from durable_obj.errors import MissingDependency, UnsupportedStore
from durable_obj.stores.base import Blob, Entry, Store, Version


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


def supported_protocols() -> list[str]:
    return sorted(REGISTRY)


def split_url(url: str) -> tuple[str, str]:
    """(protocol, path) of a store URL. A bare path is a local folder."""
    if "://" in url:
        protocol, _, path = url.partition("://")
        protocol = protocol.lower()
        if protocol in ("file", "local"):
            return "file", os.path.abspath("/" + path.lstrip("/"))
        return protocol, path
    if url.startswith("local:"):
        return "file", os.path.abspath(url[len("local:") :])
    return "file", os.path.abspath(url)


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
            importlib.import_module(name)
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] == "durable_obj":
            raise  # our own code failed to import: not a missing package
        hint = f"pip install 'durable_obj[{reg.extra}]'" if reg.extra else "pip install durable_obj"
        raise MissingDependency(
            f"{protocol}:// needs a package that is not installed ({exc.name}); run: {hint}"
        ) from exc
    cls: type[Store] = getattr(module, cls_name)
    return cls(path, storage_options)  # type: ignore[call-arg]


__all__ = [
    "REGISTRY",
    "Blob",
    "Entry",
    "Store",
    "Version",
    "open_store",
    "split_url",
    "supported_protocols",
]
