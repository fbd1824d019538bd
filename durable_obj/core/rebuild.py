"""A writer's local copy rebuilt from its own committed state and its buffer.

A unit of work (`write()`, a batch) runs its statements one by one; when one
fails after others of the unit ran, the engine holds changes that will never
be logged. The unit is not buffered, so the copy must go back to what the
log says: the head this writer last proved (its base and segments, fetched
and verified as an open does) with the statements still buffered replayed
on top, in order. That is exactly what a reopen elsewhere would restore
once the buffer is flushed, so the local copy and the durable state agree
again.

Nothing stored changes. If the rebuild itself fails (the store is
unreachable), the copy stays marked as diverged: reads and writes are
refused with an error saying so, while `flush()` and `close()` still
commit the buffer, which never held the failed unit.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from durable_obj.gate.replay import Replayer
from durable_obj.replica import restore
from durable_obj.wire.wal import parse_segment

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.core.commit import HeadWriter
    from durable_obj.core.options import Options
    from durable_obj.replica.local import LocalCopy

log = logging.getLogger("durable_obj")


def rebuild(
    writer: HeadWriter,
    local: LocalCopy,
    options: Options,
    buffered: list[bytes],
    *,
    progress: Callback | None = None,
) -> None:
    """Replace `local`'s engine with the writer's proven head restored and
    `buffered` (WAL lines, in order) replayed on it."""
    head = writer.head
    assert head is not None and local.work is not None
    with ThreadPoolExecutor(2) as pool:
        fetches = restore.Fetches(
            pool,
            writer.store,
            writer.oid,
            head,
            work=local.work,
            concurrency=options.fetch_concurrency,
            codec=writer.codec(head),
            progress=progress,
        )
        try:
            fetches.segments()
            if head.manifest.base is not None:
                fetches.check_base()
        except BaseException:
            fetches.cancel()
            raise
    engine = local.fresh_engine()
    local.pin_head(head)
    local.keep_base(head, restore.restore(engine, head, fetches, url=writer.url, stub=local.work))
    db = head.manifest.db
    replayer = Replayer(engine, db)
    for n, sql in enumerate(parse_segment(b"".join(buffered), "the buffer"), start=1):
        replayer.apply(sql, f"buffered statement {n}")
    replayer.finish()
    log.info(
        "%s: local copy rebuilt at seq %d with %d buffered statement(s) after a failed unit",
        writer.url,
        head.manifest.seq,
        len(buffered),
    )
