"""The local side of one open object: its engine, its scratch folder, and
the gates every statement passes before it runs.

chDB runs one engine per process (`engine.acquire`); the scratch folder lives
in the engine's backups folder, the only place BACKUP and RESTORE may touch.
Nothing here talks to storage: the state machine in `object.py` decides when
what runs, and what becomes durable.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
import warnings

from durable_obj.determinism import Pinner
from durable_obj.engine import Engine, acquire, check_mutation, check_read, engine_root
from durable_obj.errors import Corrupt, InvalidArgument
from durable_obj.head import EXTENSION, TIMEZONE, Head


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

    def make_scratch(self) -> str:
        backups = os.path.join(engine_root(), "backups")
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", self._oid)[:48] or "obj"
        self.work = tempfile.mkdtemp(prefix=f"{safe}-", dir=backups)
        return self.work

    def start_engine(self) -> Engine:
        """The process's engine, emptied (`EngineError` if another object
        holds it)."""
        self.engine = acquire()
        return self.engine

    def pin(self, timezone: str) -> None:
        """Set the session time zone and the determinism gate, before
        anything is restored, replayed or run."""
        assert self.engine is not None
        try:
            self.engine.set_timezone(timezone)
        except InvalidArgument as exc:
            raise Corrupt(f"{self._url}: head.{EXTENSION}.{TIMEZONE}: {exc}") from None
        self.timezone = timezone
        self.pinner = Pinner(self.engine, mode=self._mode, timezone=timezone)

    def pin_head(self, head: Head) -> None:
        """`pin` the time zone a head records (UTC when it records none)."""
        try:
            timezone = head.timezone
        except Corrupt as exc:
            raise Corrupt(f"{self._url}: {exc}") from None
        self.pin(timezone)

    def reset(self) -> None:
        """Between open attempts: an empty engine and scratch."""
        if self.engine is not None:
            self.engine.release()
            self.engine = None
        assert self.work is not None
        for name in os.listdir(self.work):
            os.unlink(os.path.join(self.work, name))

    # -- statements -----------------------------------------------------------
    def read(self, engine: Engine, sql: str, fmt: str, db: str) -> str:
        """Run one read-only statement; anything else is refused unrun."""
        analysis = engine.analyze(sql, db)
        syntax = engine.syntax_error(sql) if analysis.query_class == "UNKNOWN" else ""
        check_read(analysis, syntax)
        return engine.text(sql, fmt, redact=analysis.has_secrets)

    def prepare(self, engine: Engine, sql: str, db: str, *, allow_nondeterministic: bool) -> str:
        """The text of a mutation to run and log: classified (one statement,
        writes only `db`, no secret, ...), then pinned or refused."""
        analysis = engine.analyze(sql, db)
        syntax = engine.syntax_error(sql) if analysis.query_class == "UNKNOWN" else ""
        check_mutation(analysis, db, syntax)
        if allow_nondeterministic:
            warnings.warn(
                f"{self._url}: logging a statement unchecked for determinism; replicas "
                "may replay it to other values",
                RuntimeWarning,
                stacklevel=3,
            )
            return sql
        assert self.pinner is not None
        return self.pinner.prepare(sql, db)

    def snapshot(self, engine: Engine, db: str) -> str:
        """A full BACKUP of `db` as a `.tar` in the scratch folder."""
        assert self.work is not None
        path = os.path.join(self.work, f"snapshot-{uuid.uuid4().hex}.tar")
        engine.backup(db, path)
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
