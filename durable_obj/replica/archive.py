"""The definitions a base holds, read from the archive before RESTORE.

A base is untrusted input like every statement: anyone who can write the
store can put a real BACKUP archive there (with its size and SHA-256 in
head.json), and chdb.durable writes bases whose tables passed a looser
gate. Checking what RESTORE made is too late for some of it: a
refreshable view starts refreshing as soon as it is created (measured:
`REFRESH EVERY 1 SECOND` over url() made 4 requests in the 2.5 s after a
RESTORE returned, and `SYSTEM STOP VIEWS` does not hold for views created
after it), and engines that stream or load at startup act before any
query. So the definitions are read here, from the same bytes RESTORE will
read, and judged by the gate (`gate.restored`) before RESTORE creates
anything.

What RESTORE reads is named by the archive's `.backup` (an XML list of
every file with its size and the archive entry holding its bytes,
`data_file`, which deduplication may point at another file's entry); this
reads it the same way, and refuses what it could read differently from
the engine: an archive format chosen otherwise than by the extension (as
the engine chooses), two entries of one name (the engine takes the first,
`tarfile` the last), an entry whose size is not the listed one, XML with
a document type, comment or CDATA, and an incremental archive (its files
would come from another backup, on the host).
"""

from __future__ import annotations

import posixpath
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote
from xml.etree import ElementTree

from durable_obj.errors import Corrupt
from durable_obj.replica import tarcheck

#: Archive suffixes the engine opens as a tar (libarchive), and that this
#: module reads the same way.
_TAR = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
#: The pax keys an entry may carry: a long name's, and what names no entry.
_PAX_KEYS = tarcheck.PAX_KEYS
#: Every element of an engine's `.backup` listing; nothing else is read.
_LISTING_TAGS = frozenset(
    {
        "config",
        "version",
        "deduplicate_files",
        "timestamp",
        "uuid",
        "backup_id",
        "base_backup",
        "base_backup_uuid",
        "contents",
        "file",
        "name",
        "size",
        "checksum",
        "use_base",
        "base_size",
        "base_checksum",
        "data_file",
        "encrypted_by_disk",
    }
)
_CHECKSUM = re.compile(r"[0-9a-f]{32}")
_SIZE = re.compile(r"[0-9]{1,19}")
#: Where a definition lies in a backup: the database's own, or a table's
#: (`shards/N/replicas/M/` prefixes a backup taken on a cluster).
_DEFINITION = re.compile(r"(?:shards/\d+/replicas/\d+/)?metadata/([^/]+)(?:/([^/]+))?\.sql")
#: A folder below a table's in a backup: a MergeTree part's, named
#: partition_min_max_level, with _mutation when a mutation rewrote it.
_PART = re.compile(r"(?:shards/\d+/replicas/\d+/)?data/[^/]+/[^/]+/([^/]+)/")
#: A part's name with no mutation version (a partition id holds no `_`).
_UNVERSIONED = re.compile(r"[^_/]+_[0-9]+_[0-9]+_[0-9]+")


@dataclass(frozen=True, slots=True)
class Definition:
    """One table's definition as RESTORE will read it: its name in the
    backup, the table's name (unescaped from the file name: a message names
    it), and the CREATE statement's text, naming the logical database."""

    path: str
    table: str
    text: str


@dataclass(frozen=True, slots=True)
class Contents:
    """What is read of a base before RESTORE: every table's definition, and
    whether a part may carry a mutation version (`versioned`): only then
    can RESTORE leave a table whose next mutation is skipped as applied
    (`archives._recount_blocks`)."""

    definitions: list[Definition]
    versioned: bool


class _Archive:
    """A tar archive's entries by exact name.

    Only a tar is read (V1 bases are `.tar` or `.tar.gz`): a zip's two
    directories (local headers, central directory) are read differently by
    different readers. A tar is refused where Python's reader and the
    engine's (libarchive) could name an entry differently: a pax global
    header (Python applies it to the entries after it, libarchive does
    not), or a pax key other than those the engine's own archives use."""

    def __init__(self, path: str) -> None:
        if not path.lower().endswith(_TAR):
            raise Corrupt(
                f"the base {posixpath.basename(path)!r} is not an archive this library can "
                f"check before restoring it (it reads {', '.join(_TAR)})"
            )
        self._tar = tarfile.open(path, "r:*")  # noqa: SIM115  # closed by close()
        try:
            members = self._tar.getmembers()
            names = [m.name for m in members]
            odd_name = next((name for name in names if not tarcheck.plain(name)), None)
            if odd_name is not None:  # a second name for a path (`./.backup`)
                raise Corrupt(
                    f"the base archive names an entry {odd_name[:80]!r}, not a plain relative "
                    "path as an engine's archive names every entry"
                )
            # read in place by the engine (a compressed one is unpacked first)
            if path.lower().endswith(".tar") and tarcheck.names(path) != names:
                raise Corrupt("the base archive's entries read differently by two tar readers")
        except BaseException:
            self.close()
            raise
        self._members = {m.name: m for m in members}
        self._sizes = {m.name: m.size for m in members if m.isfile()}
        odd: Mapping[str, str] | None = self._tar.pax_headers or next(
            (m.pax_headers for m in members if set(m.pax_headers) - _PAX_KEYS), None
        )
        if odd:
            self.close()
            raise Corrupt(
                "the base archive holds a tar header that two readers could apply differently "
                f"(pax keys {sorted(odd)[:5]}); an engine's archive holds none"
            )
        if len(set(names)) != len(names):
            self.close()
            raise Corrupt("the base archive holds two entries of one name")

    def read(self, name: str, size: int) -> bytes:
        if self._sizes.get(name) != size:
            raise Corrupt(f"the base archive's entry {name[:80]!r} is missing or not its size")
        handle = self._tar.extractfile(self._members[name])
        assert handle is not None  # a regular file: _sizes holds only those
        with handle:
            return handle.read()

    def close(self) -> None:
        self._tar.close()


def contents(path: str, db: str, chain: Sequence[tuple[str, str]] = ()) -> Contents:
    """Every definition of a table of database `db` the archive at `path`
    holds, as RESTORE DATABASE `db` will read it; `Corrupt` if it cannot be
    read the way the engine reads it. The database's own definition is left
    out (the object's database is created before RESTORE, which only fills
    it: `Engine.restore`), and so are other databases' (never restored).

    `chain` ((relative path, local file), full base first) are the links
    `path` is an increment over (`links.py`): each must record the one
    before it, by that path and its uuid, and the first none; a definition
    an increment takes from its base is read from the link that holds it."""
    opened: list[_Archive] = []
    try:
        for where in [*(local for _, local in chain), path]:
            opened.append(_Archive(where))
        listings = [_listing(archive) for archive in opened]
        _check_links(listings, [rel for rel, _ in chain])
        return Contents(_definitions(opened, listings, escaped(db)), _versioned(listings))
    except (OSError, ValueError, tarfile.TarError, EOFError) as exc:
        raise Corrupt(f"the base archive does not read ({type(exc).__name__})") from None
    finally:
        for archive in opened:
            archive.close()


def _versioned(listings: list[ElementTree.Element]) -> bool:
    """Does any folder below a table's, in any listing, have a name other
    than a part's without a mutation version? A part's data version is its
    mutation version, else its first block, which RESTORE leaves at most
    its table's highest block: so a base of such parts alone restores no
    table with a data version above its blocks."""
    for listing in listings:
        for entry in _files(listing):
            part = _PART.match(entry.findtext("name", ""))
            if part is not None and _UNVERSIONED.fullmatch(part.group(1)) is None:
                return True
    return False


def _check_links(listings: list[ElementTree.Element], rels: list[str]) -> None:
    """Each listing records exactly the link before it as its base (by the
    text RESTORE opens and by uuid), or none when it takes no file from a
    base (the engine then names none: an increment that shares nothing
    with its base is whole), and the first none: RESTORE then reads the
    links it was given, never a base an archive names on its own (another
    path, another server)."""
    for n, listing in enumerate(listings):
        recorded = listing.findtext("base_backup")
        uuid = listing.findtext("base_backup_uuid")
        if recorded is None and uuid is None:
            if any(_from_base(entry) for entry in _files(listing)):
                raise Corrupt(f"link {n + 1} of the base takes files from a base it does not name")
            continue  # whole: it needs nothing beneath it
        if n == 0:
            raise Corrupt(
                "the base is an incremental archive but the head names no links beneath "
                "it (its files would come from another backup)"
            )
        expected = f"File('{rels[n - 1]}')"
        if recorded != expected or uuid is None or uuid != listings[n - 1].findtext("uuid"):
            raise Corrupt(
                f"link {n + 1} of the base's chain does not record link {n} as its base "
                f"({(recorded or 'none')[:80]!r}); the chain is not the one the head names"
            )


def _from_base(entry: ElementTree.Element) -> bool:
    """Does the engine read (part of) this file from the base?"""
    use = entry.findtext("use_base", "").strip().lower() in ("1", "true")
    return use or int(entry.findtext("base_size", "0") or 0) > 0


def _definitions(
    archives: list[_Archive], listings: list[ElementTree.Element], folder: str
) -> list[Definition]:
    found: list[Definition] = []
    for entry in _files(listings[-1]):
        name = entry.findtext("name", "")
        if not name.lower().endswith(".sql"):
            continue
        where = _DEFINITION.fullmatch(name)
        if where is None:
            raise Corrupt(f"the base holds a definition {name[:80]!r} outside a database")
        if where.group(2) is None or where.group(1) != folder:
            continue  # the database's own, or another's: never run (see `definitions`)
        try:
            text = _read(archives, listings, len(archives) - 1, entry).decode("utf-8")
        except UnicodeDecodeError:
            raise Corrupt(f"the base's definition {name[:80]!r} is not UTF-8 text") from None
        found.append(Definition(name, unquote(where.group(2)), text))
    return found


def _read(
    archives: list[_Archive],
    listings: list[ElementTree.Element],
    n: int,
    entry: ElementTree.Element,
) -> bytes:
    """The bytes of `entry` of archive `n`, as RESTORE reads them. The
    engine finds a file's bytes by its size and checksum: the first entry
    of the listing with that pair (its data file, or with `use_base` the
    file of the pair in the link beneath), whichever entry named it; so
    does this. A file stored as a tail over its base (`base_size`) is
    refused: the engine cannot pack one into a tar."""
    name = entry.findtext("name", "")
    size = entry.findtext("size", "0")
    checksum = entry.findtext("checksum", "")
    first = next(
        e
        for e in _files(listings[n])
        if e.findtext("size", "0") == size and e.findtext("checksum", "") == checksum
    )
    base_size = int(first.findtext("base_size", "0") or 0)
    from_base = first.findtext("use_base", "").strip().lower() in ("1", "true")
    if base_size and (base_size != int(size) or not from_base):
        raise Corrupt(f"the base's file {name[:80]!r} is stored as a tail over another backup")
    if not from_base:
        return archives[n].read(
            first.findtext("data_file", "") or first.findtext("name", ""), int(size)
        )
    if n == 0:
        raise Corrupt("the base is an incremental archive (its files come from another backup)")
    found = next(
        (
            below
            for below in _files(listings[n - 1])
            if below.findtext("size", "0") == size and below.findtext("checksum", "") == checksum
        ),
        None,
    )
    if found is None:
        raise Corrupt(f"the base's file {name[:80]!r} is in none of the links beneath it")
    return _read(archives, listings, n - 1, found)


def escaped(name: str) -> str:
    """A database name as the engine names its folder in a backup
    (`escapeForFileName`: every byte but an ASCII letter, digit or _ as %XX)."""
    return "".join(
        chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) == "_") else f"%{b:02X}"
        for b in name.encode("utf-8")
    )


def _listing(archive: _Archive) -> ElementTree.Element:
    """The archive's `.backup` listing, parsed; `Corrupt` if it could be
    read two ways (a document type, whose entities two parsers may expand differently, a
    comment or CDATA: the engine's own listings hold none)."""
    try:
        raw = archive.read(".backup", archive._sizes.get(".backup", -1))
    except Corrupt:
        raise Corrupt("the base archive holds no .backup listing") from None
    text = raw.decode("utf-8", errors="replace")
    if "<!" in text or "<?" in text:
        raise Corrupt(
            "the base's .backup listing holds a declaration, comment, CDATA or processing "
            "instruction"
        )
    try:
        root = ElementTree.fromstring(raw)
    except ElementTree.ParseError:
        raise Corrupt("the base's .backup listing is not XML") from None
    if root.tag != "config":
        raise Corrupt("the base's .backup listing is not a backup's")
    _check_listing(root)
    return root


def _check_listing(root: ElementTree.Element) -> None:
    """Refuse what the engine's XML reader (Poco) and ElementTree could read
    apart: any attribute (a namespace hides an element from ElementTree
    and not from Poco), an element an engine's listing never holds, a
    checksum or size not in the engine's own spelling; and two entries of
    one name. (Two of one size and checksum are read as the engine reads
    them: both from the first, `_read`.)"""
    for element in root.iter():
        if element.attrib or element.tag not in _LISTING_TAGS:
            raise Corrupt(
                f"the base's .backup listing holds an element {str(element.tag)[:40]!r} "
                "(or an attribute) that no engine's listing holds"
            )
    names: set[str] = set()
    for entry in _files(root):
        name = entry.findtext("name", "")
        size = entry.findtext("size", "")
        checksum = entry.findtext("checksum", "")
        base_size, base_checksum = entry.findtext("base_size"), entry.findtext("base_checksum")
        if (
            not _SIZE.fullmatch(size)
            or not (_CHECKSUM.fullmatch(checksum) or (size == "0" and not checksum))
            or (base_size is not None and not _SIZE.fullmatch(base_size))
            or (base_checksum is not None and not _CHECKSUM.fullmatch(base_checksum))
        ):
            raise Corrupt(f"the base's listing entry {name[:80]!r} has an odd size or checksum")
        if name in names:
            raise Corrupt(f"the base's listing names {name[:80]!r} twice")
        names.add(name)


def _files(listing: ElementTree.Element) -> list[ElementTree.Element]:
    contents = listing.find("contents")
    return [] if contents is None else contents.findall("file")
