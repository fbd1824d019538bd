"""The local side of one open object: its engine, its scratch folder, and
the gates every statement passes before it runs.

Each open object gets its own connection to the process's one engine
(`engine.acquire`) and its own database in it; every statement runs as
`Engine.localize` maps it, and is refused if it could reach past the object
(`durable_obj.gate.isolation`). The scratch folder lives in the engine's backups
folder, the only place BACKUP and RESTORE may touch.
Nothing here talks to storage: the state machine in `object.py` decides when
what runs, and what becomes durable.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from durable_obj.errors import Corrupt, InvalidArgument
from durable_obj.gate import reach
from durable_obj.gate.determinism import Pinner
from durable_obj.gate.pipeline import Gate
from durable_obj.gate.reading import engine_text
from durable_obj.gate.sql import tokenize_head
from durable_obj.replica.engine import Engine, acquire
from durable_obj.replica.server import HELPERS, engine_root, version
from durable_obj.wire.head import EXTENSION, TIMEZONE, Head
from durable_obj.wire.v1base import rewrite_file

#: CREATE <kind> IF NOT EXISTS / DROP <kind> IF EXISTS, for the kinds whose
#: name lives in system.tables.
_KINDS = (("table",), ("view",), ("materialized", "view"), ("dictionary",))


def warm_catalog() -> None:
    """Read the gate's catalogue of the running engine (`reach.catalog`) in
    a thread, on a connection of its own, unless it was read already. A
    restore checks the base's definitions with it before RESTORE: read
    here (engine time, the interpreter free meanwhile) it overlaps the
    base's download and the archive's checks instead of following them.
    Readers wait for it (`reach.claim_read_ahead`: this thread never takes
    the async turn, so it always finishes); a failure is left for a
    reader's own reading to report. Not a daemon, and one of the engine's
    `HELPERS`: an exit waits for it rather than tear the engine down under
    a query, also when a background engine start began it late."""
    running = version()
    if not reach.claim_read_ahead(running):
        return

    def read() -> None:
        try:
            with contextlib.suppress(Exception):
                spare = acquire()
                try:
                    reach.read_ahead(spare)
                finally:
                    spare.close(orphan=False)  # it made no database
        finally:
            reach.end_read_ahead(running)

    thread = threading.Thread(target=read, name="durable_obj-catalog")
    HELPERS.append(thread)  # joined at exit before the engine closes
    try:
        thread.start()
    except BaseException:
        HELPERS.remove(thread)
        reach.end_read_ahead(running)
        raise


class LocalCopy:
    """The engine and scratch folder of one object, and its session: the
    time zone every statement runs and replays in, and the pinner."""

    def __init__(self, oid: str, *, url: str, mode: str, timezone: str) -> None:
        self._oid = oid
        self._url = url
        self._mode = mode
        self.timezone = timezone
        self.engine: Engine | None = None
        self.work: str | None = None
        self.pinner: Pinner | None = None
        #: The statement gate every statement of this object passes.
        self.gate = Gate(url)
        #: (key, listing stub) of the base a writer's next checkpoint may be
        #: an increment over (`links.py`); None: the next one is full.
        self.base_link: tuple[str, str] | None = None

    def keep_base(self, head: Head, stub: str | None) -> None:
        """Remember `stub`, the listing of `head`'s base (None: forget it)."""
        base = head.manifest.base
        self.base_link = None if stub is None or base is None else (base.key, stub)

    def make_scratch(self) -> str:
        backups = os.path.join(engine_root(), "backups")
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", self._oid)[:48] or "obj"
        self.work = tempfile.mkdtemp(prefix=f"{safe}-", dir=backups)
        return self.work

    def start_engine(self) -> Engine:
        """A connection of this object's own to the process's engine."""
        self.engine = acquire()
        return self.engine

    def pin(self, timezone: str) -> None:
        """Set the session time zone and the determinism gate, before
        anything is restored, replayed or run."""
        assert self.engine is not None
        self.engine.set_timezone(timezone)  # InvalidArgument: a zone the engine lacks
        self.timezone = timezone
        self.pinner = Pinner(self.engine, mode=self._mode, timezone=timezone)

    def pin_head(self, head: Head) -> None:
        """`pin` the time zone a head records (UTC when it records none)."""
        try:
            timezone = head.timezone
        except Corrupt as exc:
            raise Corrupt(f"{self._url}: {exc}") from None
        try:
            self.pin(timezone)
        except InvalidArgument as exc:
            raise Corrupt(f"{self._url}: head.{EXTENSION}.{TIMEZONE}: {exc}") from None

    def fresh_engine(self) -> Engine:
        """A new connection and database, for a new base (the scratch folder
        is kept); the old database is dropped."""
        if self.engine is not None:
            self.engine.release()
            self.engine = None
        return self.start_engine()

    def reset(self) -> None:
        """Between open attempts: an empty engine and scratch."""
        if self.engine is not None:
            self.engine.release()
            self.engine = None
        assert self.work is not None
        self.base_link = None
        for name in os.listdir(self.work):
            os.unlink(os.path.join(self.work, name))

    # -- statements -----------------------------------------------------------
    def bind(self, sql: str, params: Mapping[str, Any] | None) -> str:
        """`sql` with its `{name:Type}` placeholders bound to `params` as exact
        literals (`durable_obj.gate.params`); `sql` itself when `params` is None.
        `InvalidArgument` when `sql` is no str (None, bytes): every read and
        write passes here first."""
        if not isinstance(sql, str):
            raise InvalidArgument(
                f"a statement is a str of SQL, not {type(sql).__name__}; nothing was run"
            )
        if type(sql) is not str:
            sql = str.__str__(sql)  # a subclass's own methods never read it for the gate
        if params is None:
            return sql
        assert self.pinner is not None and self.engine is not None
        # the placeholders the engine reads, not those a comment hides from the lexer
        return self.pinner.bind(engine_text(self.engine, sql), params)

    def checked_read(self, engine: Engine, sql: str, db: str) -> tuple[str, bool]:
        """`sql` as it runs, proved one read-only statement of this object's
        own (`gate.pipeline.Gate.read`), and whether its errors are withheld."""
        return self.gate.read(engine, sql, db)

    def read(self, engine: Engine, sql: str, fmt: str, db: str) -> str:
        """Run one read-only statement (`checked_read`), its output as text."""
        local, redact = self.checked_read(engine, sql, db)
        text = engine.text(local, fmt, redact=redact)
        # SHOW CREATE, EXPLAIN, ...: this object's database under its logical name
        return engine.scope.shown(text) if engine.database in text else text

    def prepare(
        self,
        engine: Engine,
        sql: str,
        db: str,
        *,
        allow_nondeterministic: bool,
        unread_rows: bool = True,
    ) -> str:
        """The text of a mutation to run and log (`gate.pipeline.Gate.mutation`)."""
        return self.gate.mutation(
            engine,
            sql,
            db,
            self.pinner,
            allow_nondeterministic=allow_nondeterministic,
            unread_rows=unread_rows,
        )

    def run_logged(self, engine: Engine, text: str, db: str) -> bool:
        """Run a prepared mutation; False when it provably changed nothing
        and must not be logged: a CREATE ... IF NOT EXISTS whose target
        existed, or a DROP ... IF EXISTS whose target was absent, with the
        catalogue entry of that name the same after as before."""
        target = _conditional_ddl(text)
        local = engine.localize(text)
        if target is None:
            engine.run(local)
            return True
        create, where, name = target
        before = _catalogue(engine, where or db, name)
        engine.run(local)
        unchanged = before == _catalogue(engine, where or db, name)
        return not (unchanged and (before != "") == create)

    def snapshot(self, engine: Engine, db: str) -> str:
        """A full BACKUP of `db` as a `.tar` in the scratch folder."""
        assert self.work is not None
        path = os.path.join(self.work, f"snapshot-{uuid.uuid4().hex}.tar")
        engine.backup(db, path)
        if db == "default":
            rewrite_file(path)  # in V1's shape (v1base.py): a fork's base is a base
        return path

    # -- teardown ---------------------------------------------------------------
    def teardown(self, *, background: bool = True) -> None:
        """Free the engine and remove the scratch folder."""
        if self.engine is not None:
            if background and not sys.is_finalizing():
                self.engine.release()
            else:
                self.engine.close()  # from __del__ or at exit: no queries now
            self.engine = None
        work, self.work = self.work, None
        if not work:
            return
        if background and not sys.is_finalizing():
            # A large scratch takes a while to unlink and nothing waits on it.
            # Not a daemon, so the process finishes it before exiting.
            threading.Thread(target=shutil.rmtree, args=(work, True), name="durable_obj-rm").start()
        else:
            # From __del__ or at interpreter exit no thread may be started.
            shutil.rmtree(work, ignore_errors=True)


def _conditional_ddl(sql: str) -> tuple[bool, str, str] | None:
    """(is CREATE, database or '', name) of `CREATE <kind> IF NOT EXISTS
    [db.]name ...` or `DROP <kind> IF EXISTS [db.]name [SYNC]`; None for
    anything else (OR REPLACE, several names, ON CLUSTER, ...).

    Only the head is lexed (up to a VALUES / SELECT / WITH / FORMAT at depth
    0): every INSERT comes through here, and lexing a 3 KB VALUES row whole
    cost 1.2 ms of each execute(). The verdict is the same as on every
    token: what follows the name is judged only by its first token (CREATE)
    or by being empty or SYNC (DROP), and a cut tail ends in one of those
    four words, never empty, never SYNC."""
    tokens = tokenize_head(sql)
    words = [t.word if t.kind == "ident" else "" for t in tokens]
    if not words or words[0] not in ("create", "drop"):
        return None
    create = words[0] == "create"
    for kind in _KINDS:
        cond = ("if", "not", "exists") if create else ("if", "exists")
        head = (words[0], *kind, *cond)
        if tuple(words[: len(head)]) == head:
            rest = tokens[len(head) :]
            break
    else:
        return None
    named = ("ident", "quoted")
    if len(rest) >= 3 and rest[1].text == ".":
        if rest[0].kind not in named or rest[2].kind not in named:
            return None
        where, name, tail = rest[0].name, rest[2].name, rest[3:]
    elif rest and rest[0].kind in named:
        where, name, tail = "", rest[0].name, rest[1:]
    else:
        return None
    if not create and [t.word for t in tail] not in ([], ["sync"]):
        return None
    if create and tail and tail[0].word == "on":  # ON CLUSTER
        return None
    return create, where, name


def _catalogue(engine: Engine, db: str, name: str) -> str:
    """The catalogue entry of `db`.`name` ('' when there is none)."""
    return engine.run_params(
        "SELECT uuid, engine, create_table_query, metadata_modification_time "
        "FROM system.tables WHERE database = {db:String} AND name = {t:String} "
        "FORMAT JSONCompactEachRow",
        {"db": db, "t": name},
    )
