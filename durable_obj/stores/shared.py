"""One fsspec filesystem per process, protocol and options, shared by stores.

Making a cloud client costs from tens to hundreds of milliseconds (sessions,
credential chains, botocore's service model), and an object opens a store per
operation in some paths; so stores with equal options share one filesystem,
and the last `close()` closes it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar


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
