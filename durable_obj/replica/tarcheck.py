"""A plain tar read the way the engine reads it, or refused.

The gate reads a base's definitions with Python's `tarfile`; RESTORE reads
a plain `.tar` in place with the engine's libarchive. Where the two name an
entry differently, the gate checks one file and RESTORE creates another
(measured: a GNU header's prefix field, which Python applies whatever the
magic and libarchive only for POSIX ustar; a GNU long name beside a pax
path; a pax path holding a NUL, or empty). So before a plain tar is read
in place, its raw headers are walked here and refused unless they are
what an engine's own archive holds: POSIX ustar headers with valid
checksums, of regular files, each perhaps after one pax header carrying
only harmless keys and a plain path, and nothing but zero blocks after the
end. The names this walk computes must be `tarfile`'s, in order.

(A compressed base is never read in place: `archives.restore` unpacks it
with Python first, so RESTORE reads exactly what the gate read.)
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from durable_obj.errors import Corrupt

BLOCK = 512
#: POSIX ustar: magic and version. GNU (`ustar  \0`) and V7 (none) are refused.
_USTAR = b"ustar\x0000"
#: The pax keys an engine's archive may carry.
PAX_KEYS = frozenset({"path", "size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})


def plain(name: str) -> bool:
    """Is `name` a plain relative path, the one way an engine's archive
    names an entry: no leading '/', no '.' or '..' or empty segment, no
    backslash? Only then is it the path the entry lands on when the
    archive is unpacked: `./.backup` is a second name for `.backup`, and
    the later one would replace what the gate read."""
    return (
        bool(name)
        and "\\" not in name
        and not name.startswith("/")
        and posixpath.normpath(name) == name
        and name != "."
    )


def _refuse(why: str) -> Corrupt:
    return Corrupt(f"the base archive is not a plain tar as an engine writes it: {why}")


def _number(field: bytes) -> int:
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text or any(c not in b"01234567" for c in text):
        raise _refuse("a header field is not an octal number")
    return int(text, 8)


def _pax(data: bytes) -> dict[str, str]:
    """A pax header's records (`len key=value\\n`), strictly."""
    out: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.find(b" ", at)
        if space < 0:
            raise _refuse("a pax record has no length")
        length = int(data[at:space]) if data[at:space].isdigit() else -1
        record = data[at : at + length] if length > 0 else b""
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise _refuse("a pax record is malformed")
        key, _, value = record[space - at + 1 : -1].partition(b"=")
        name = key.decode("ascii", errors="replace")
        if name not in PAX_KEYS or name in out:
            raise _refuse(f"a pax key {name[:20]!r} (or one given twice)")
        out[name] = value.decode("utf-8", errors="strict")
        at += length
    return out


def names(path: str) -> list[str]:
    """The names of a plain tar's entries, in order, as both readers read
    them; `Corrupt` for anything else."""
    found: list[str] = []
    with open(path, "rb") as f:
        pending: Mapping[str, str] | None = None
        while True:
            header = f.read(BLOCK)
            if len(header) < BLOCK:
                raise _refuse("it ends inside a header (no end blocks)")
            if header == b"\0" * BLOCK:
                if pending is not None:
                    raise _refuse("a pax header ends the archive")
                while chunk := f.read(1 << 16):
                    if chunk.count(0) != len(chunk):
                        raise _refuse("bytes follow its end blocks")
                return found
            stored = _number(header[148:156])
            if stored != sum(header[:148]) + 8 * 32 + sum(header[156:]):
                raise _refuse("a header's checksum is wrong")
            if header[257:265] != _USTAR:
                raise _refuse("a header is not POSIX ustar (a GNU or V7 header)")
            kind, size = header[156:157], _number(header[124:136])
            body = (size + BLOCK - 1) // BLOCK * BLOCK
            if kind == b"x":
                if pending is not None:
                    raise _refuse("two pax headers in a row")
                data = f.read(body)[:size]
                pending = _pax(data)
                continue
            if kind not in (b"0", b"\0"):
                raise _refuse(f"an entry of type {kind!r} (not a regular file)")
            name = header[0:100].split(b"\0", 1)[0]
            prefix = header[345:500].split(b"\0", 1)[0]
            text = (prefix + b"/" + name if prefix else name).decode("utf-8", errors="strict")
            if pending is not None:
                text = pending.get("path", text)
                if "size" in pending and int(pending["size"]) != size:
                    raise _refuse("a pax size differs from its header's")
                pending = None
            if not text or "\0" in text:
                raise _refuse("an entry has an empty name or one with a NUL")
            found.append(text)
            f.seek(body, 1)
