"""Addressing: a namespace URL holds objects, one folder each.

    Namespace("s3://bucket/agents").open("checkout-api")
    durable_obj.open("s3://bucket/agents/checkout-api")      # the same object

The last path segment of an object URL is its id; the rest is the namespace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_obj.errors import InvalidArgument
from durable_obj.object import DurableObject
from durable_obj.options import Options, make_options
from durable_obj.protocol import valid_oid
from durable_obj.stores import open_store
from durable_obj.stores.base import Store

if TYPE_CHECKING:
    from fsspec.callbacks import Callback


def split_object_url(url: str) -> tuple[str, str]:
    """(namespace URL, object id) of an object URL."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument("an object URL must be a non-empty string")
    trimmed = url.rstrip("/")
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
    return namespace, oid


def check_oid(oid: str) -> str:
    if not isinstance(oid, str) or not valid_oid(oid):
        raise InvalidArgument(
            f"invalid object id {oid!r}: one path segment of at most 255 bytes, with no '/', "
            "no backslash, no control character, and not '.' or '..'"
        )
    return oid


class Namespace:
    """A folder of durable objects on one store.

    `url` is a namespace URL, or a `Store` instance (a custom store, or one
    wrapped in `durable_obj.testing.FaultyStore`).
    """

    def __init__(
        self,
        url: str | Store,
        *,
        owner: str | None = None,
        storage_options: dict[str, Any] | None = None,
        progress: Callback | None = None,
        **options: Any,
    ) -> None:
        self._options: Options = make_options(options)
        self._owner = owner
        self._progress = progress
        self.store: Store = url if isinstance(url, Store) else open_store(url, storage_options)

    @property
    def url(self) -> str:
        return self.store.url

    def open(self, oid: str, *, read_only: bool = False, force: bool = False) -> DurableObject:
        """Open (or create, as a writer) the object `oid`."""
        check_oid(oid)
        obj = DurableObject(
            self.store,
            oid,
            owner=self._owner,
            read_only=read_only,
            options=self._options,
            progress=self._progress,
        )
        obj._open(force)
        return obj

    def __repr__(self) -> str:
        return f"Namespace({self.url!r})"


def open(
    url: str,
    *,
    owner: str | None = None,
    read_only: bool = False,
    force: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: Callback | None = None,
    **options: Any,
) -> DurableObject:
    """Open the durable object at `url`; a writer open creates it if absent.

    `owner` names this writer in the lease (default: a random name);
    `read_only=True` takes no lease and never creates; `force=True` takes an
    unexpired lease (the old holder is fenced and loses unflushed writes).
    `storage_options` go to the store as-is (endpoint_url, key, secret, ...).
    Options: lease_ttl, heartbeat_interval, clock_skew, commit_deadline, db,
    fetch_concurrency.
    """
    namespace, oid = split_object_url(url)
    check_oid(oid)
    ns = Namespace(
        namespace, owner=owner, storage_options=storage_options, progress=progress, **options
    )
    return ns.open(oid, read_only=read_only, force=force)
