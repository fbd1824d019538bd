"""The links of an incremental base, where the engine looks for them.

An incremental BACKUP (`BACKUP ... SETTINGS base_backup = File(p)`) holds
only what its base lacks, and records its base as the text `File(p)`;
RESTORE opens that base, and the base's own base, by the text each records
(only the newest link's can be given again as a setting). A relative `p` is
resolved against the engine's backups folder, so an increment records its
base as `links/<name of the base's key>`: every process can put the links
of a chain where the archives say they are, whatever its own folders are
called.

That folder is shared by every object of the process, so a link is put in
place only for the one engine call that reads it (`placed`), under a lock of
its path: two objects whose links have one name (the same object opened
twice, or an unlucky pair of keys) take turns, never read each other's.

    link_path(key)           the relative path an increment over `key` records
    placed(engine, links)    hard-link each (relative path, local file) into place
                             for the length of the block
    stub(archive, into)      a copy of an archive's `.backup` listing alone: all an
                             incremental BACKUP reads of its base
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tarfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from durable_obj.errors import Corrupt

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: The folder of the backups folder the links are put in.
FOLDER = "links"
#: A link's name: a base key's, as `mint_checkpoint_key` makes them. Nothing
#: else is ever put into a `File('...')` text.
_NAME = re.compile(r"[0-9]{1,16}-[0-9]{1,16}-[0-9a-f]{8}\.tar")

#: The database's own definition of `default`, in a listing (see `stub`).
_DEFAULT_SQL = re.compile(rb"<file><name>metadata/default\.sql</name>.*?</file>", re.DOTALL)

_guard = threading.Lock()
_busy: dict[str, threading.Lock] = {}


def link_path(key: str) -> str | None:
    """`links/<name>` for a base key of ours; None for any other (a
    chdb.durable `.tar.gz`, a fork's): an increment is then not taken."""
    name = key.rsplit("/", 1)[-1]
    return f"{FOLDER}/{name}" if _NAME.fullmatch(name) else None


def _lock(path: str) -> threading.Lock:
    with _guard:
        return _busy.setdefault(path, threading.Lock())


@contextlib.contextmanager
def placed(engine: Engine, links: Sequence[tuple[str, str]]) -> Iterator[None]:
    """Each local file of `links` ((relative path, file)) at its relative
    path of the engine's backups folder while the block runs; removed
    after, also on error. Paths are locked in sorted order (no deadlock)."""
    root = engine.backups
    paths = sorted({rel for rel, _ in links})
    with contextlib.ExitStack() as stack:
        for rel in paths:
            stack.enter_context(_lock(rel))
        os.makedirs(os.path.join(root, FOLDER), exist_ok=True)
        made: list[str] = []
        try:
            for rel, local in links:
                target = os.path.join(root, rel)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)  # a leftover of a process that died holding it
                try:
                    os.link(local, target)
                except OSError:  # another filesystem: a copy
                    shutil.copyfile(local, target)
                made.append(target)
            yield
        finally:
            for target in made:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)


def stub(archive: str, into: str) -> str:
    """A tar at `into` holding only `archive`'s `.backup` listing: an
    incremental BACKUP reads nothing else of its base (it compares sizes and
    checksums), so a writer keeps this instead of the whole base. `Corrupt`
    if the archive has no readable listing.

    The listing leaves out `metadata/default.sql`: a base of `default` holds
    it in V1's shape (`v1base.py`), `CREATE DATABASE default`, a prefix of
    what the engine writes, so an increment would store the rest as a tail,
    which the engine cannot pack ("Couldn't pack tar archive"). Left out, it
    is stored whole in each increment (and put in V1's shape there too)."""
    return _write_stub(listing(archive), into)


def stub_walked(read: Callable[[int, int], bytes], into: str) -> bool:
    """`stub` of an archive read as `read(offset, size)` gives it (a
    growing archive's: `GrowingFile.read` waits for the bytes), found by
    `_walk` alone: False, and nothing written, where `_walk` leaves it to
    tarfile (`stub` of the file then)."""
    found = _walk(read)
    if found is None:
        return False
    _write_stub(found, into)
    return True


def _write_stub(found: bytes, into: str) -> str:
    listing_bytes = _DEFAULT_SQL.sub(b"", found)
    try:
        with tarfile.open(into, "w", format=tarfile.GNU_FORMAT) as out:
            info = tarfile.TarInfo(".backup")
            info.size = len(listing_bytes)
            out.addfile(info, io.BytesIO(listing_bytes))
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(into)
        raise Corrupt(f"the base's listing could not be kept ({type(exc).__name__})") from None
    return into


def listing(archive: str) -> bytes:
    """The `.backup` listing of the tar at `archive` (a stub's: small);
    `Corrupt` if there is none. Found by `_walk` when every header before
    it is a plain one; else read by tarfile, as `_walk` never answers
    otherwise than it would."""
    try:
        with open(archive, "rb") as file:
            fd = file.fileno()
            end = os.fstat(fd).st_size  # a size past the end is read short, never allocated
            found = _walk(lambda at, size: os.pread(fd, max(0, min(size, end - at)), at))
    except OSError:
        found = None
    return found if found is not None else _read_by_tarfile(archive)


#: A tar block, and the typeflags `_walk` reads (a regular file's).
_BLOCK = 512
_REGULAR = (b"0", b"\0")
_ZEROS = bytes(_BLOCK)
#: The longest listing `_walk` reads (a database of about 400k files); a
#: longer one is tarfile's to read.
_LISTING_MAX = 64 * 1024 * 1024


def _walk(read: Callable[[int, int], bytes]) -> bytes | None:
    """The first `.backup` member's bytes, reading the headers one
    `read(offset, size)` each (an archive of ours: a few dozen; tarfile's
    Python spent about a millisecond on them per checkpoint). None, for
    tarfile to read it, at anything but a plain header of a regular file:
    a checksum tarfile alone would accept, a numeric field tarfile would
    not read, a long name or extended header, a ustar prefix, a name ending
    in "/", a base-256 or negative size, a listing over `_LISTING_MAX`, a
    short read, the end."""
    offset = 0
    while True:
        header = read(offset, _BLOCK)
        if len(header) < _BLOCK or header == _ZEROS:
            return None
        numbers = [_octal(header[start:end]) for start, end in _NUMBERS]
        if None in numbers:
            return None
        size, checksum = numbers[3], numbers[5]
        assert size is not None
        if size < 0 or checksum != 256 + sum(header[:148]) + sum(header[156:]):
            return None
        name = header[:100].split(b"\0", 1)[0]
        # a ustar prefix lengthens the name; an old-style directory ends in "/"
        if header[156:157] not in _REGULAR or header[345:500].split(b"\0", 1)[0]:
            return None
        if name.endswith(b"/"):
            return None
        if name == b".backup":
            data = read(offset + _BLOCK, size) if size <= _LISTING_MAX else b""
            return data if len(data) == size else None
        offset += _BLOCK + -(-size // _BLOCK) * _BLOCK


#: A header's numeric fields, in tarfile's order: mode, uid, gid, size,
#: mtime, checksum, devmajor, devminor (tarfile reads each, and a header
#: with any of them unreadable ends its list of members).
_NUMBERS = (
    (100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156), (329, 337), (337, 345)
)  # fmt: skip


def _octal(field: bytes) -> int | None:
    """A numeric field as tarfile's `nti` reads its octal form (the ASCII
    up to the first NUL, stripped, in base 8); None for the base-256 form
    and for anything `nti` refuses."""
    if field[:1] in (b"\x80", b"\xff"):
        return None
    try:
        return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except ValueError:  # UnicodeDecodeError is one
        return None


def _read_by_tarfile(archive: str) -> bytes:
    try:
        with tarfile.open(archive, "r:") as tar:
            member = next((m for m in tar if m.name == ".backup" and m.isfile()), None)
            handle = None if member is None else tar.extractfile(member)
            if handle is None:
                raise Corrupt("the archive holds no .backup listing")
            with handle:
                return handle.read()
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise Corrupt(f"the archive does not read ({type(exc).__name__})") from None
