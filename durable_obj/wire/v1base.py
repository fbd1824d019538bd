"""A base of the `default` database, shaped as chdb.durable writes it.

chDB's own `default` database is an `Overlay` database, which SQL cannot
create; its definition prints as `CREATE DATABASE default`. chdb.durable
archives it so, and restores into it with chdb-core's `restore_database`,
which refuses an archive whose definition differs ("The database has a
different definition ... CANNOT_RESTORE_DATABASE"). An object's internal
database is `Atomic`, and `BACKUP DATABASE i AS default` records it as
`CREATE DATABASE default UUID '...' ENGINE = Atomic`: chdb.durable could
not open our bases of `default` (issue 26).

So a base of `default` is rewritten in place, as the engine writes it,
into V1's shape. Two spots change, neither changes a length the archive
depends on:

* the archive's first entry, `metadata/default.sql`: its tar header's size
  (83 -> 23) and checksum, and its data (one 512-byte block either way);
* in the last entry, `.backup` (the index), that file's `<size>` (two digits
  either way) and `<checksum>` (32 hex digits either way: the one the
  engine records for `CREATE DATABASE default`, as in chdb.durable's bases).

`GrowingFile` holds readers back from each spot until it is rewritten, so
every reader (the digest, an upload, a folder store adopting the file)
sees only the final bytes. Our RESTORE takes both shapes
(`allow_different_database_def`).
"""

from __future__ import annotations

import os
import re

BLOCK = 512
FIRST = b"metadata/default.sql"
OLD_DEFINITION = re.compile(rb"CREATE DATABASE default UUID '[0-9a-f-]{36}' ENGINE = Atomic\Z")
NEW_DEFINITION = b"CREATE DATABASE default"
#: The engine's checksum of NEW_DEFINITION, as its own archives record it.
NEW_CHECKSUM = b"5cc1e936705f380bf222d7b36168599d"
_INDEX_ENTRY = re.compile(
    rb"<name>metadata/default\.sql</name><size>(\d+)</size><checksum>([0-9a-f]{32})</checksum>"
)


def _size_of(header: bytes) -> int:
    field = header[124:136].strip(b"\0 ")
    return int(field, 8) if field else 0


def _blocks(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def _with_size(header: bytes, size: int) -> bytes:
    """`header` with its size field set to `size` and its checksum redone."""
    out = bytearray(header)
    out[124:136] = b"%011o\0" % size
    out[148:156] = b" " * 8
    out[148:156] = b"%06o\0 " % sum(out)
    return bytes(out)


class DefaultBase:
    """Rewrites one BACKUP archive of `default`, at `path`, as it grows."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._first = False  # the first entry is settled (rewritten or left)
        self._active = True  # the archive has the shape this rewrites
        self._next = 0  # offset of the next tar header not yet read
        self._index: int | None = None  # offset of `.backup`'s data
        self._index_size = 0
        self._end = False
        self._done = False

    def released(self, fd: int, size: int) -> int:
        """How many bytes from the start are final now (readers may have them)."""
        if not self._first:
            if size < 2 * BLOCK:
                return 0
            self._rewrite_first(fd)
        if not self._active:
            return size
        while self._index is None and not self._end and size >= self._next + BLOCK:
            header = os.pread(fd, BLOCK, self._next)
            if header == b"\0" * BLOCK:
                self._end = True
                break
            if header[:100].rstrip(b"\0") == b".backup":
                self._index, self._index_size = self._next + BLOCK, _size_of(header)
                break
            self._next += BLOCK + _blocks(_size_of(header))
        if self._index is not None and not self._done:
            return min(size, self._index)
        return size

    def complete(self, fd: int) -> None:
        """The engine has finished the archive: make both rewrites."""
        size = os.fstat(fd).st_size
        self.released(fd, size)
        if self._active and self._index is not None and not self._done:
            index = os.pread(fd, self._index_size, self._index)
            found = _INDEX_ENTRY.search(index)
            if found is not None and len(found.group(1)) == 2:
                fixed = (
                    b"<name>metadata/default.sql</name><size>%d</size><checksum>%s</checksum>"
                    % (len(NEW_DEFINITION), NEW_CHECKSUM)
                )
                assert len(fixed) == found.end() - found.start()
                self._write(found.start() + self._index, fixed)
        self._done = True

    def _rewrite_first(self, fd: int) -> None:
        self._first = True
        header = os.pread(fd, BLOCK, 0)
        size = _size_of(header)
        data = os.pread(fd, size, BLOCK) if size <= BLOCK else b""
        if header[:100].rstrip(b"\0") != FIRST or not OLD_DEFINITION.match(data):
            self._active = False  # not the shape we know: left as the engine wrote it
            return
        body = NEW_DEFINITION + b"\0" * (BLOCK - len(NEW_DEFINITION))
        self._write(0, _with_size(header, len(NEW_DEFINITION)) + body)
        self._next = BLOCK + _blocks(size)

    def _write(self, offset: int, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)


def rewrite_file(path: str) -> None:
    """Rewrite a finished archive of `default` at `path` into V1's shape."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        DefaultBase(path).complete(fd)
    finally:
        os.close(fd)
