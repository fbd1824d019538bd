"""chDB's engine module, loaded without chdb's package.

`import chdb._chdb` first runs chdb's package (`chdb/__init__.py`), which
reads two distributions' metadata, changes the process's working folder
around its own load, and starts and stops a throwaway in-memory engine to
read its version: measured on a cold open, about 80 ms before durable_obj's
own engine could start, and a working folder that another thread saw
change. `load` loads the extension module itself, from the file chdb's
package loads first (`preload.library`), mapped with the flags chdb's
package maps it with, under the name chdb gives it; the package is not
imported.

A later `import chdb` (the caller's own) must still work. When chdb's
package initialises, it loads the engine module (changing the working
folder) and connects without arguments (an in-memory engine), which an
engine already started on another path refuses ("EmbeddedServer already
initialized with path ..."). So when durable_obj is imported, a finder
goes first on `sys.meta_path` (`install`) that answers for the name `chdb`
alone: it loads the package as before, except that its initialisation
runs under the engine's start lock (never beside durable_obj's engine
start), with the engine module already loaded by `load` (in UTC, the
working folder untouched), and, once durable_obj's engine runs, with the
module's argument-less `connect()` pointed at that engine (the package only
reads the version and closes that connection). Once the package has
loaded, the finder is gone. Anything else about chdb is as before: its own
`chdb.query()` meets the one engine a process may run, as it did.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from typing import TYPE_CHECKING, Any

from durable_obj.replica import preload

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

#: The name chdb's package gives its engine module.
NAME = "chdb._chdb"


def install(
    load_engine: Callable[[], Any],
    running: Callable[[], str | None],
    lock: threading.RLock | threading.Lock,
) -> None:
    """Put `_Finder` first on `sys.meta_path`, unless chdb's package is
    imported already. `load_engine()` loads the engine module as durable_obj
    does (`server._chdb`), `running()` gives the running engine's
    connection string (None before it starts), and `lock` is held while it
    starts."""
    if "chdb" in sys.modules or sys.platform != "linux":
        return
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder(load_engine, running, lock))


def load() -> ModuleType | None:
    """The engine module, loaded from chdb's library without chdb's package,
    or None where that cannot be done as chdb would (the caller then imports
    it through the package): when the package was imported other than
    through `_Finder` (its own load comes first), or off Linux."""
    loaded = sys.modules.get(NAME)
    if loaded is not None:
        return loaded
    package = sys.modules.get("chdb")
    if package is not None and not _ours(package):
        return None
    if sys.platform != "linux":
        return None
    path = preload.library()
    if path is None:
        return None
    try:
        preload.mapped(path)
        loader = importlib.machinery.ExtensionFileLoader(NAME, path)
        spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (ImportError, OSError):
        return None  # the package's own import meets the same failure and names it
    if not callable(getattr(module, "connect", None)):
        return None
    sys.modules[NAME] = module
    return module


def _ours(package: Any) -> bool:
    """Whether chdb's package module is (being) loaded by `_Loader`, read
    without running it: a module imported lazily (`importlib.util.LazyLoader`)
    runs its package on the first attribute read, and that would run it on
    the engine's start (found by attack: the open then waited forever)."""
    try:
        names = object.__getattribute__(package, "__dict__")
    except AttributeError:
        return False
    for loader in (names.get("__loader__"), getattr(names.get("__spec__"), "loader", None)):
        for _ in range(4):  # a LazyLoader holds the loader it defers to as `.loader`
            if loader is None or isinstance(loader, _Loader):
                break
            loader = getattr(loader, "loader", None)
        if isinstance(loader, _Loader):
            return True
    return False


class _Finder(importlib.abc.MetaPathFinder):
    """The name `chdb`, found by the other finders, loaded by `_Loader`;
    this finder leaves `sys.meta_path` once the package has loaded."""

    def __init__(
        self,
        load_engine: Callable[[], Any],
        running: Callable[[], str | None],
        lock: threading.RLock | threading.Lock,
    ) -> None:
        self.load_engine = load_engine
        self.running = running
        self.lock = lock
        self._asking = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "chdb" or "chdb" in sys.modules or getattr(self._asking, "now", False):
            return None
        spec: importlib.machinery.ModuleSpec | None = None
        # A finder after this one that asks every finder in turn, as this one
        # does, would ask this one again: it then answers None (found by
        # attack: each called the other until RecursionError).
        self._asking.now = True
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None) if finder is not self else None
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None:
                    break
        finally:
            self._asking.now = False
        if spec is None:
            return None
        if spec.loader is not None:
            spec.loader = _Loader(spec.loader, self)
        return spec


class _Loader(importlib.abc.Loader):
    """chdb's package loader: its initialisation runs under the engine's
    start lock, on the engine module durable_obj loads, whose
    argument-less `connect()` is pointed at the running engine if one runs."""

    def __init__(self, inner: Any, finder: _Finder) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        running = self.finder.running
        # Under the engine's start lock: the package's in-memory engine never
        # starts beside durable_obj's (one engine per process).
        with self.finder.lock:
            # loaded as durable_obj loads it, before the package would
            engine: Any = self.finder.load_engine()
            real = engine.connect

            def connect(*args: Any, **kwargs: Any) -> Any:
                where = None if args or kwargs else running()
                return real(where) if where is not None else real(*args, **kwargs)

            engine.connect = connect
            try:
                self.inner.exec_module(module)
            finally:
                engine.connect = real
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self.finder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # resources, get_data, is_package, ...
