"""How a folder store reaches a key: resolved inside its root, and opened
without following a link it did not check.

Containment (the rule of chdb.durable's local backend, which scopes a
backend to one object folder): a key's first segment is an object folder,
and it must resolve, symbolic links followed, to a folder strictly inside
the namespace root; the rest of the key must resolve inside that object
folder. So `<root>/alias -> <root>/real` is a second name for an object, but
a link that leads out of the root (a symlinked object folder, `wal/`,
`checkpoints/` or `head.json`), or out of its object folder into a
neighbour's, is refused with `InvalidArgument` (a `ValueError`, as in
chdb.durable) naming the key and the link, before anything is read, written,
listed or deleted. The namespace root itself is resolved once, when the
store is made.

The check is made at each operation, and the operation then never follows
a link it did not check: it walks from the real root one folder at a time
with `O_NOFOLLOW | O_DIRECTORY` and opens, creates, renames and unlinks by
name inside the folder it holds open (`*at` calls), so a folder swapped for a
link between the check and the use fails the walk instead of leading out.
Files this store writes never exist before it creates them (`O_EXCL`); the
lock file beside a head is never a link (chdb.durable would follow one); a
FIFO or device at a key is refused without blocking; and a listing shows
regular files only, never descending into a linked folder (an aliased object
is listed once, under its real name).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from durable_obj.errors import InvalidArgument
from durable_obj.stores.base import Store, check_relative

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
#: O_NONBLOCK: a FIFO planted at a key must not hang the open.
OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
OPEN_LOCK = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC


def _below(path: str, folder: str) -> bool:
    """`path` is strictly inside `folder` (both absolute and resolved)."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)


class _Linked(Exception):
    """A link on a key's literal path: resolve the key, then walk again."""


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class ConfinedFolder(Store):
    """A store whose keys are files below one folder: each key is checked
    against the root and reached one folder at a time, never through a link."""

    #: The root as named, and as resolved (set by the store's __init__).
    _root: str
    _real: str

    def _locate(self, key: str) -> tuple[tuple[str, ...], str]:
        """(folders below the real root, file name) of `key`, links resolved,
        or `InvalidArgument` if it resolves out of the root or out of its
        object folder."""
        check_relative(key, self)
        parts = key.split("/")
        top = os.path.realpath(os.path.join(self._real, parts[0]))
        if not _below(top, self._real):
            raise self._escape(key, top, "the namespace root", self._real)
        full = top
        if len(parts) > 1:
            full = os.path.realpath(os.path.join(top, *parts[1:]))
            if not _below(full, top):
                raise self._escape(key, full, f"its object folder {parts[0]!r}", top)
        rel = os.path.relpath(full, self._real).split(os.sep)
        return tuple(rel[:-1]), rel[-1]

    def _link_in(self, key: str) -> str:
        """The first symbolic link on `key`'s path, as "name -> target"."""
        parts = key.split("/")
        for end in range(1, len(parts) + 1):
            path = os.path.join(self._real, *parts[:end])
            if os.path.islink(path):
                try:
                    target = os.readlink(path)
                except OSError:
                    target = "?"
                return f"the symbolic link {'/'.join(parts[:end])!r} -> {target!r}"
        return "a symbolic link"

    def _escape(self, key: str, resolved: str, scope: str, folder: str) -> InvalidArgument:
        return InvalidArgument(
            f"refusing key {key!r} on {self.url}: {self._link_in(key)} makes it resolve to "
            f"{resolved}, outside {scope} ({folder}). A folder store never follows a link out "
            f"of its namespace root or out of an object's folder; nothing was read or written. "
            f"To use that data, move or copy it into place instead of linking to it."
        )

    def _moved(self, key: str, what: str) -> InvalidArgument:
        return InvalidArgument(
            f"refusing key {key!r} on {self.url}: {what!r} is a symbolic link this store did "
            f"not resolve (a link loop, or a link put there while the key was in use); it is "
            f"never followed, and nothing was read or written through it."
        )

    def _step(
        self, fd: int, name: str, key: str, flags: int, mode: int = 0o666, *, strict: bool = True
    ) -> int:
        """`openat(fd, name)` that never follows a link: a link there is
        refused, or with `strict=False` reported as `_Linked`."""
        try:
            return os.open(name, flags, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, name):
                if not strict:
                    raise _Linked from None
                raise self._moved(key, name) from None
            raise

    def _open_root(self, key: str, *, create: bool) -> int | None:
        """The real root, opened without following a link (one put there
        after the store resolved it is refused); made if `create`."""
        for attempt in (1, 2):
            try:
                return os.open(self._real, OPEN_DIR)
            except FileNotFoundError:
                if not create:
                    return None
                if attempt == 2:
                    raise  # removed again as soon as made
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(self._real):
                    raise self._moved(key, self._real) from None
                raise
            os.makedirs(self._real, exist_ok=True)
        raise AssertionError("unreachable")

    def _open_folder(
        self, folders: tuple[str, ...], key: str, *, create: bool, strict: bool = True
    ) -> int | None:
        """A descriptor of the folder `folders` below the real root, reached
        without following any link; None if it does not exist (and not `create`).
        A link on the way is refused, or with `strict=False` reported as `_Linked`
        (before anything was made: only a missing folder is made, and nothing
        below a missing folder can be a link)."""
        fd = self._open_root(key, create=create)
        if fd is None:
            return None
        # `fd` is always the one descriptor still ours to close (-1: none), so
        # an interrupt anywhere never closes one twice (it may be another
        # thread's by then).
        try:
            for name in folders:
                try:
                    nxt = self._step(fd, name, key, OPEN_DIR, strict=strict)
                except FileNotFoundError:
                    if not create:
                        done, fd = fd, -1
                        os.close(done)
                        return None
                    with suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                    nxt = self._step(fd, name, key, OPEN_DIR)
                done, fd = fd, nxt
                os.close(done)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd

    def _open_parent(self, key: str, *, create: bool) -> tuple[int | None, str]:
        """(descriptor of the folder holding `key`, or None if it is missing,
        and the key's name there). Most keys cross no link, so the literal
        path is walked first; only if it meets a link is the key resolved
        (`_locate`, which refuses a way out) and the resolved path walked."""
        check_relative(key, self)
        parts = key.split("/")
        try:
            fd = self._open_folder(tuple(parts[:-1]), key, create=create, strict=False)
            if fd is None or not _is_link(fd, parts[-1]):
                return fd, parts[-1]
            os.close(fd)
        except _Linked:
            pass
        folders, name = self._locate(key)
        return self._open_folder(folders, key, create=create), name

    @contextmanager
    def _folder(self, key: str, *, create: bool) -> Iterator[tuple[int | None, str]]:
        """`_open_parent`, closed on the way out."""
        fd, name = self._open_parent(key, create=create)
        try:
            yield fd, name
        finally:
            if fd is not None:
                os.close(fd)

    def _regular(self, fd: int, key: str) -> bool:
        """True for a regular file; False for a folder; refuse anything else."""
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return True
        if stat.S_ISDIR(mode):
            return False
        raise InvalidArgument(
            f"refusing key {key!r} on {self.url}: it is not a regular file "
            f"(a FIFO, socket or device); nothing was read"
        )

    @contextmanager
    def _reading(self, key: str) -> Iterator[tuple[int, str, int] | None]:
        """(folder descriptor, name, file descriptor) of the regular file at
        `key`, opened without following a link; None if there is none. The
        descriptors are closed on the way out (OSError passes through)."""
        with self._folder(key, create=False) as (dfd, name):
            if dfd is None:
                yield None
                return
            try:
                fd = self._step(dfd, name, key, OPEN_READ)
            except FileNotFoundError:
                yield None
                return
            try:
                yield (dfd, name, fd) if self._regular(fd, key) else None
            finally:
                os.close(fd)

    def _open_listed(self, prefix: str) -> int | None:
        """The folder `prefix` names, opened as every key is (no link
        followed out); None if there is no such folder."""
        if not prefix:
            return self._open_root(prefix, create=False)
        try:
            parent, name = self._open_parent(prefix, create=False)
        except NotADirectoryError:
            return None  # the prefix names a file: nothing below it
        if parent is None:
            return None
        try:
            return self._step(parent, name, prefix, OPEN_DIR)
        except (FileNotFoundError, NotADirectoryError):
            return None
        finally:
            os.close(parent)
