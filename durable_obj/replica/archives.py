"""Durable V1 archives: BACKUP an object's database, RESTORE a base.

    backup(engine, db, path)    a full BACKUP of the object's database, archived
                                under its logical name `db`
    restore(engine, db, path)   RESTORE database `db` of a base (our `.tar`,
                                chdb.durable's `.tar.gz`) as the object's

The SQL is built only from our own quoted identifiers and paths, so the
wire format stays V1 (`BACKUP DATABASE i AS default`, `RESTORE DATABASE
default AS i`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_obj.errors import InvalidArgument
from durable_obj.gate.quoting import quote_ident, quote_string

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: RESTORE recreates each table from its stored definition, and checks its
#: column types as a new CREATE would: a table made with one of these in its
#: CREATE's SETTINGS (accepted, and replayed so from the WAL) failed to
#: restore from a checkpoint. They only relax which types a definition may
#: hold; every definition in a base passed the gate when it was made.
_RESTORE_TYPES = (
    "allow_suspicious_low_cardinality_types = 1, allow_suspicious_fixed_string_types = 1, "
    "allow_suspicious_variant_types = 1"
)


def backup(engine: Engine, db: str, path: str) -> None:
    """A full backup of the object's database, archived under its logical
    name `db` (never incremental: an incremental archive records its base
    by local path, which does not survive object storage). Refused while
    a table is detached: BACKUP DATABASE skips it, so it would vanish
    from the base and a later ATTACH would not replay (gate/control.py)."""
    detached = engine.json_rows(
        "SELECT table FROM system.detached_tables WHERE database = {db:String} ORDER BY table",
        {"db": engine.database},
    )
    if detached:
        names = ", ".join(str(row[0])[:60] for row in detached[:5])
        raise InvalidArgument(
            f"the object's table(s) {names} are detached, and a checkpoint (a BACKUP of the "
            "database) does not carry a detached table: it would vanish from the base. "
            "ATTACH TABLE (or DROP) it first, then checkpoint. Nothing was written; "
            "buffered statements stay buffered, and flush() makes them durable."
        )
    engine.archive(
        f"BACKUP DATABASE {quote_ident(engine.database)} AS {quote_ident(db)} "
        f"TO File({quote_string(path)})",
        f"backup of database {db!r}",
    )


def restore(engine: Engine, db: str, path: str) -> None:
    """RESTORE database `db` of the archive at `path` as the object's
    database (which must not exist yet)."""
    engine.archive(_restore_sql(engine, db, path), f"restore of database {db!r}")
    _recount_blocks(engine)


def _restore_sql(engine: Engine, db: str, source: str) -> str:
    """RESTORE of `db` from `source` (an archive, or a folder ending in '/')."""
    return (
        f"RESTORE DATABASE {quote_ident(db)} AS {quote_ident(engine.database)} "
        f"FROM File({quote_string(source)}) SETTINGS allow_different_database_def = 1, "
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
