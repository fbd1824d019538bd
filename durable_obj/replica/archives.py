"""Durable V1 archives: BACKUP an object's database, RESTORE a base.

    backup(engine, db, path, base)  a BACKUP of the object's database, archived
                                under its logical name `db`: full, or an
                                increment over `base` (`links.py`)
    restore(engine, db, path, links)  RESTORE database `db` of a base (our `.tar`,
                                chdb.durable's `.tar.gz`; an increment over
                                `links`) as the object's
    NotIncremental              an increment the engine could not write
    unpacked(archive, into)     an untrusted archive unpacked, safely and
                                bounded, into a temporary folder of `into`
    Refused, TooLarge           what unpacking raises (`Corrupt`, `LimitExceeded`)

The SQL is built only from our own quoted identifiers and paths, so the
wire format stays V1 (`BACKUP DATABASE i AS default`, `RESTORE DATABASE
default AS i`).

Why a restore may unpack: chDB reads a base's files straight out of the
archive, but a Memory table's data (`data.bin` in Native format, with its
`index.mrk`) is read by a reader that asks its buffer where it is, which a
buffer reading from an archive cannot say ("getPosition not supported when
reading from archive", UNSUPPORTED_METHOD). So every object with rows in a
Memory table failed to reopen after a checkpoint, here and in chdb.durable
(its `.tar.gz` alike). The same files in a folder (a directory backup,
`File('<folder>/')`) restore. So:

* a plain `.tar` (ours) is read in place, and unpacked only when that
  failure says it must: any other base pays nothing. Telling a Memory
  table's data apart beforehand would mean a parse of our own of what the
  engine can read from an archive; the engine's answer is the authority.
  On a 100 MiB base: 0.09 s to open without a Memory table (as before),
  0.21 s with one (the failed attempt 0.09 s, unpacking 0.06 s, RESTORE
  from the folder 0.04 s);
* a `.tar.gz` (chdb.durable's) is always unpacked: chDB inflates it on one
  thread as it restores (3.2 s for 100 MiB, 4.9 s with a Memory table's
  failed attempt first), Python's zlib in 0.6 s, and the folder restores
  in 0.05 s: 0.65 s in all.

A base is untrusted: anyone who can write the store can write one with the
digest its head names. Unpacking takes regular files and folders only,
inside the folder (Python's `data` filter: no absolute path, no `..`, no
link, no device), at most `MAX_ENTRIES` of them and no more bytes than the
disk has free (a `.tar.gz` can unpack to far more than its size); the
folder is removed whatever happens.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from durable_obj.errors import (
    ClassificationRefused,
    Corrupt,
    EngineError,
    InvalidArgument,
    LimitExceeded,
)
from durable_obj.gate import restored
from durable_obj.gate.known import UNAPPLIED
from durable_obj.gate.quoting import quote_ident, quote_string
from durable_obj.replica import links, tarcheck

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine


class Refused(Corrupt, EngineError):
    """A base unpacking refuses (a link, a path out, an unreadable archive):
    `Corrupt` to the caller. An `EngineError` as well, so the open judges
    the base's digest first, as for any RESTORE that failed: an altered
    base then says it was altered, naming its key (`restore.py`)."""


class NotIncremental(EngineError):
    """An incremental BACKUP the engine could not write: a file that grew
    since the base (an ALTER's definition, a Log table's data) is stored as
    its new tail, which chDB 4.4 cannot pack into a tar ("Couldn't pack tar
    archive: Wrote N of expected M", CANNOT_PACK_ARCHIVE). Nothing was
    stored; a full BACKUP is taken instead."""


class TooLarge(LimitExceeded, EngineError):
    """A base that unpacks past `MAX_ENTRIES` or the free disk: a
    `LimitExceeded`, and an `EngineError` for the reason `Refused` is."""


#: RESTORE recreates each table from its stored definition, and checks its
#: column types as a new CREATE would: a table made with one of these in its
#: CREATE's SETTINGS (accepted, and replayed so from the WAL) failed to
#: restore from a checkpoint. They only relax which types a definition may
#: hold; every definition in a base passed the gate when it was made.
_RESTORE_TYPES = (
    "allow_suspicious_low_cardinality_types = 1, allow_suspicious_fixed_string_types = 1, "
    "allow_suspicious_variant_types = 1"
)
#: What the engine says when a table's data cannot be read out of an archive.
_NOT_FROM_ARCHIVE = "not supported when reading from archive"
#: What the engine says when an increment holds a file's new tail (NotIncremental).
_NOT_PACKED = "Couldn't pack tar archive"
#: The names of a gzipped tar (chdb.durable's bases are `.tar.gz`).
_GZIPPED = (".tar.gz", ".tgz")
#: At most this many entries in an archive unpacked for RESTORE: each table
#: and part is a handful of files, and each entry costs an inode.
MAX_ENTRIES = 200_000
#: Free space on the engine's disk that unpacking leaves untouched.
RESERVE = 256 << 20
#: Python's `data` extraction filter (3.10.12, 3.11.4 and later).
_DATA_FILTER = hasattr(tarfile, "data_filter")


def backup(engine: Engine, db: str, path: str, base: tuple[str, str] | None = None) -> None:
    """A backup of the object's database, archived under its logical name
    `db`: full, or with `base` ((relative path, stub of the base)) an
    increment that records its base as that path (`links.py`). Refused while
    a table is detached: BACKUP DATABASE skips it, so it would vanish
    from the base and a later ATTACH would not replay (gate/control.py);
    and while a Join or Set table exists: its rows do not come back from a
    base (measured: a RESTORE gives it empty), so a checkpoint would lose
    acknowledged rows. A lightweight UPDATE's patches are applied first
    (`_apply_patches`)."""
    # kept until a statement changes the tables (`gate.known`): no engine
    # query when none did since the open or the last checkpoint
    judged = engine.known.checkpointing(engine)
    detached = judged.detached
    if detached:
        names = ", ".join(name[:60] for name in detached[:5])
        raise InvalidArgument(
            f"the object's table(s) {names} are detached, and a checkpoint (a BACKUP of the "
            "database) does not carry a detached table: it would vanish from the base. "
            "ATTACH TABLE (or DROP) it first, then checkpoint. Nothing was written; "
            "buffered statements stay buffered, and flush() makes them durable."
        )
    if judged.detached_parts:
        names = ", ".join(part[:60] for part in judged.detached_parts[:5])
        raise InvalidArgument(
            f"the object has detached part(s) {names}, and a checkpoint (a BACKUP of the "
            "database) carries a table's active parts only: their rows would be in no "
            "replica of the new base, and a later ATTACH would bring them back here alone. "
            "ATTACH PARTITION (or PART) them first, then checkpoint. Nothing was written; "
            "buffered statements stay buffered, and flush() makes them durable."
        )
    if judged.aside:
        names = ", ".join(f"{name} ({kind})"[:60] for name, kind in judged.aside[:5])
        raise InvalidArgument(
            f"the object's table(s) {names} keep their rows outside what BACKUP carries: "
            "restored from a checkpoint they came back empty (chDB 4.4), so a checkpoint "
            "is refused while one exists. Nothing was lost: the WAL holds their rows and "
            "flush() makes them durable. To checkpoint, keep the rows in a MergeTree table "
            "(JOIN it, or IN it) and DROP the Join/Set table."
        )
    if not engine.known.verified:
        _check_definitions(engine)
    if judged.patched:
        _apply_patches(engine)
    sql = (
        f"BACKUP DATABASE {quote_ident(engine.database)} AS {quote_ident(db)} "
        f"TO File({quote_string(path)})"
    )
    if base is None:
        engine.archive(sql, f"backup of database {db!r}")
        return
    with links.placed(engine, [base]):
        try:
            engine.archive(
                f"{sql} SETTINGS base_backup = File({quote_string(base[0])})",
                f"incremental backup of database {db!r}",
            )
        except EngineError as exc:
            if _NOT_PACKED not in str(exc):
                raise
            raise NotIncremental(str(exc)) from None


def _check_definitions(engine: Engine) -> None:
    """`InvalidArgument` unless every definition passes what the open of the
    new base will check (`restored.check_changed`): a definition that
    passed the gate as a statement can still fail there as the engine prints
    it (a name it escapes), or arrive by replay of a line written before a
    check existed; such a base would never open. Run when a statement
    changed the catalog since the last check (`Known.verified`)."""
    try:
        restored.check_changed(engine)
    except ClassificationRefused as exc:
        why = str(exc).replace(" Nothing was run or logged.", "").rstrip(".")
        raise InvalidArgument(
            f"{why}. A base holding it would not open, so no checkpoint is taken while it "
            "exists: DROP it (or re-create it with plain names), then checkpoint. Nothing "
            "was written; buffered statements stay buffered, and flush() makes them durable."
        ) from None


def _apply_patches(engine: Engine) -> None:
    """Apply the lightweight UPDATE patches of each table that has one not
    yet applied (`known.UNAPPLIED`) to its parts, and wait: BACKUP takes a
    table's active parts but leaves its patch parts out (measured, chDB
    26.9), so a base would hold the rows as they were before the UPDATE.
    What the tables hold does not change, only how their parts keep it."""
    for (table,) in engine.json_rows(UNAPPLIED, {"db": engine.database}):
        name = f"{quote_ident(engine.database)}.{quote_ident(table)}"
        try:
            engine.archive(f"ALTER TABLE {name} APPLY PATCHES SETTINGS mutations_sync = 2", "it")
        except EngineError as exc:
            # the failed mutation would fail the table's next ALTER, DELETE
            # or OPTIMIZE too: it goes (a statement's own mutation never
            # stays behind: a failed one has the local copy rebuilt)
            with contextlib.suppress(EngineError):
                engine.run(
                    f"KILL MUTATION WHERE database = {quote_string(engine.database)} AND "
                    f"table = {quote_string(table)} AND NOT is_done SYNC"
                )
            raise EngineError(
                f"the UPDATE patches of table {table[:60]!r} cannot be applied to its parts "
                f"({str(exc)[:300]}): an expression of a projection or an index fails on "
                "the updated values. A checkpoint cannot carry them until they apply: UPDATE "
                "those rows to values the expression takes (or drop the projection or index), "
                "then checkpoint. Nothing was written; buffered statements stay buffered, "
                "and flush() makes them durable."
            ) from None


def restore(
    engine: Engine,
    db: str,
    path: str,
    chain: Sequence[tuple[str, str]] = (),
    *,
    versioned: bool = True,
) -> None:
    """`restore_one`, with the links `chain` ((relative path, local file),
    full base first) in place when `path` is an increment over them."""
    if not chain:
        restore_one(engine, db, path, versioned=versioned)
        return
    with links.placed(engine, chain):
        restore_one(engine, db, path, chain[-1][0], versioned=versioned)


def restore_one(
    engine: Engine, db: str, path: str, base: str | None = None, *, versioned: bool = True
) -> None:
    """RESTORE the tables of database `db` of the archive at `path` into the
    object's (empty) database. A gzipped base is unpacked first
    (chDB inflates it five times slower than Python does); a plain one is
    read in place, unless the engine cannot read a table's data out of it
    (a Memory table's): then what the attempt made is dropped and it is
    restored again, unpacked. `versioned` False: no part of the base
    carries a mutation version (`archive.Contents`), so no table needs
    `_recount_blocks` (one engine query fewer per open)."""
    what = f"restore of database {db!r}"
    if path.endswith(".tar"):  # read in place; any other is unpacked (`tarcheck.py`)
        try:
            engine.archive(_restore_sql(engine, db, path, base), what)
        except EngineError as exc:
            if _NOT_FROM_ARCHIVE not in str(exc):
                raise
            # RESTORE appends, and the failed attempt left tables behind: the
            # database is made empty again (ours, never the archive's)
            engine.run(f"DROP DATABASE IF EXISTS {quote_ident(engine.database)} SYNC")
            engine.create_database(db)
        else:
            if versioned:
                _recount_blocks(engine)
            return
    with unpacked(path, engine.backups) as folder:
        engine.archive(_restore_sql(engine, db, folder + "/", base), what)
    if versioned:
        _recount_blocks(engine)


def _restore_sql(engine: Engine, db: str, source: str, base: str | None) -> str:
    """RESTORE of `db` from `source` (an archive, or a folder ending in '/'),
    an increment over the link at relative path `base` (or a full base)."""
    over = "" if base is None else f"base_backup = File({quote_string(base)}), "
    return (
        f"RESTORE DATABASE {quote_ident(db)} AS {quote_ident(engine.database)} "
        f"FROM File({quote_string(source)}) SETTINGS {over}allow_different_database_def = 1, "
        + _RESTORE_TYPES
    )


def _recount_blocks(engine: Engine) -> None:
    """RESTORE numbers a MergeTree table's parts from block 1 again but
    keeps their mutation versions, so the table's next mutation can get a
    version its parts already carry and be skipped as applied: an UPDATE
    or DELETE after opening from a checkpoint silently did nothing, here
    and on every replay. Reattaching such a table makes it count on from
    its parts' highest block or mutation version."""
    stale = engine.json_rows(
        "SELECT table FROM system.parts WHERE database = {db:String} AND active "
        "GROUP BY table HAVING max(data_version) > max(max_block_number)",
        {"db": engine.database},
    )
    for (table,) in stale:
        params = {"db": engine.database, "t": table}
        engine.run_params("DETACH TABLE {db:Identifier}.{t:Identifier}", params)
        engine.run_params("ATTACH TABLE {db:Identifier}.{t:Identifier}", params)


@contextlib.contextmanager
def unpacked(archive: str, into: str) -> Iterator[str]:
    """The tar archive at `archive` (plain or compressed) unpacked into a
    new folder of `into`, removed when the block ends, also on error.
    `Corrupt` for an entry that is not a regular file or folder inside it or
    for an unreadable archive; `LimitExceeded` past `MAX_ENTRIES` entries
    or the disk's free space. An entry is checked before it is written."""
    folder = tempfile.mkdtemp(prefix="unpacked-", dir=into)
    try:
        _unpack(archive, folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _unpack(archive: str, folder: str) -> None:
    budget = shutil.disk_usage(folder).free - RESERVE
    entries = size = 0
    seen: set[str] = set()
    try:
        # One member at a time, front to back, with the reader the gate read
        # the archive with (`archive._Archive`): tarfile's stream mode ("r|*")
        # inflates a gzip header's extra field that GzipFile skips, so one
        # file could be two archives, one for the gate and one unpacked
        # (an attack showed it).
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                entries += 1
                size += member.size
                if member.name in seen:  # the later one would replace what the gate read
                    raise Refused(
                        f"the base holds two entries named {member.name[:80]!r}; an engine's "
                        "archive names each once, so the base was not restored"
                    )
                seen.add(member.name)
                if entries > MAX_ENTRIES or size > budget:
                    raise TooLarge(
                        f"the base unpacks to more than {MAX_ENTRIES:,} entries or more bytes "
                        f"than the engine's disk has free ({max(budget, 0):,} past a reserve); "
                        "it was not restored and nothing was changed. Free disk space, or "
                        "check who wrote the base"
                    )
                why = _refusal(member)
                if why is not None:
                    raise Refused(
                        f"the base holds an entry {member.name[:80]!r} that is {why}; a chDB "
                        "backup holds none, so the base was not restored and nothing was "
                        "written outside the engine's folder"
                    )
                if _DATA_FILTER:  # as well: what passed ours, it refuses too
                    tar.extract(member, folder, filter="data")
                else:  # ours alone; no mode, owner or time from the archive
                    tar.extract(member, folder, set_attrs=False)
    except tarfile.FilterError as exc:  # its message names our folder: name the entry only
        raise Refused(
            f"the base holds an entry {exc.tarinfo.name[:80]!r} that would land outside its "
            "folder (an absolute path, '..', or a link out); the base was not restored and "
            "nothing was written outside the engine's folder"
        ) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise Refused(f"the base is not a readable archive ({exc}); it was not restored") from None
    except OSError as exc:
        raise EngineError(
            f"could not unpack the base to restore it: {exc.strerror or type(exc).__name__}; "
            "nothing was restored"
        ) from None


def _refusal(member: tarfile.TarInfo) -> str | None:
    """Why `member` is not unpacked (None: it is). A chDB backup holds
    regular files under relative, plain paths and nothing else."""
    if not (member.isfile() or member.isdir()) or member.issparse():
        return "not a regular file or folder (a link, a device or a sparse file)"
    if not tarcheck.plain(member.name):  # `./.backup` would replace `.backup`
        return (
            "not a plain relative path (an absolute one, a '.', '..' or empty segment, "
            "or a backslash)"
        )
    return None
