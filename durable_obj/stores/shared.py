"""One fsspec filesystem per process, protocol and options, shared by stores.

Making a cloud client costs from tens to hundreds of milliseconds (sessions,
credential chains, botocore's service model), and an object opens a store per
operation in some paths; so stores with equal options share one filesystem,
and the last `close()` closes it.
"""

from __future__ import annotations

import difflib
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from durable_obj.errors import InvalidArgument


class SharedFS:
    _lock = threading.Lock()
    _by_token: ClassVar[dict[str, SharedFS]] = {}

    def __init__(self, token: str, fs: Any) -> None:
        self.token = token
        self.fs = fs
        self.users = 0

    @classmethod
    def acquire(cls, protocol: str, opts: dict[str, Any], make: Callable[[], Any]) -> SharedFS:
        """The filesystem for these options, made by `make()` the first time."""
        from fsspec.utils import tokenize

        token = tokenize(protocol, os.getpid(), sorted(opts.items(), key=lambda kv: kv[0]))
        with cls._lock:
            shared = cls._by_token.get(token)
            if shared is None:
                shared = cls._by_token[token] = cls(token, make())
            shared.users += 1
            return shared

    def release(self) -> bool:
        """Drop one user; True if that was the last and the client should close."""
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return False
            if self._by_token.get(self.token) is self:
                del self._by_token[self.token]
            return True


def accepted_options(*classes: type) -> frozenset[str]:
    """The keyword arguments the `__init__` of `classes` (and of their bases)
    name: what an fsspec filesystem does something with. fsspec's listings
    cache options are taken by every filesystem."""
    names = {"use_listings_cache", "listings_expiry_time", "max_paths"}
    for cls in classes:
        for klass in inspect.getmro(cls):
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            try:
                params = inspect.signature(init).parameters.values()
            except (TypeError, ValueError):  # a builtin: names nothing
                continue
            names.update(
                p.name
                for p in params
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
            )
    return frozenset(names)


def check_options(url: str, given: Mapping[str, Any], known: Iterable[str], *, by: str) -> None:
    """`InvalidArgument` naming the first key of `given` that is not `known`
    (never a value: values carry credentials). `by`: who would take them."""
    known = frozenset(known)
    unknown = sorted(str(key) for key in given if key not in known)
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    accepted = ", ".join(sorted(known)) or "none"
    raise InvalidArgument(
        f"{url}: storage_options key {key!r} is not one {by} uses{hint} The keys it takes: "
        f"{accepted}. Nothing was read or written."
    )
