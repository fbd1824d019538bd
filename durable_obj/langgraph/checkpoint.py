"""`DurableSaver`: a LangGraph checkpointer on a durable object.

Three tables, the shapes of langgraph-checkpoint-sqlite and -postgres in
ClickHouse terms (ReplacingMergeTree, read with FINAL: of two rows with the
same key the one inserted last wins, on the writer and on every replay):

    <prefix>checkpoints  (thread_id, checkpoint_ns, checkpoint_id) -> the
                         checkpoint without its channel values, metadata,
                         parent id, run_id (for delete_for_runs)
    <prefix>writes       (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
                         -> pending writes; a regular write is first-write-wins
                         (checked before the insert, under the saver's lock);
                         the special channels (error, scheduled, interrupt,
                         resume: a negative idx) replace
    <prefix>blobs        (thread_id, checkpoint_ns, channel, version) -> a
                         channel value, stored once per version: a channel
                         that did not change is not written again

Values go through the saver's serde (JsonPlusSerializer by default) and are
logged as base64 literals; ids, versions and run ids are literals computed
here. Nothing logged depends on when or where it replays.

Durability (`flush=`): "every" (default) flushes every put, put_writes and
maintenance call before it returns; "step" flushes each put (one per
super-step) and lets put_writes ride with the next put, so a crash loses at
most the pending writes of the step that was running (LangGraph re-runs
those tasks on resume); "batch" flushes every `batch_puts` puts or when the
oldest unflushed write is `batch_seconds` old (checked on each call), and on
flush() and close(): a crash loses the steps since the last flush.
LangGraph's own `durability=` (of invoke/stream) decides when put is
called: with its default "async" a step is saved while the next runs, so a
crash loses the steps whose saves were in flight; "sync" saves each before
the next starts; "exit" once per run (docs/guides/langgraph.md).

The DDL, the statements and the row encodings are in `_checkpoint_sql`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from durable_obj.errors import InvalidArgument
from durable_obj.langgraph import _checkpoint_sql as sql
from durable_obj.langgraph._checkpoint_sql import lit_in, vkey
from durable_obj.langgraph._common import FlushMode, Handle, check_table_name, lit_str, unb64

_LOAD_BATCH = 200

# Aliases: inside the class `list` is the method.
_Row = list[Any]
_Rows = list[_Row]
_Strs = list[str]
_Keyed = list[tuple[tuple[str, str, int], PendingWrite]]
_Tuples = list[CheckpointTuple]
_Checkpoints = list[Checkpoint]


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config naming one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class DurableSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose state lives in a durable object.

        saver = DurableSaver("s3://bucket/agents/support-bot", owner="worker-1")
        graph = builder.compile(checkpointer=saver)
        ...
        saver.close()

    `target`: a URL (opened here, closed by close()), or an open DurableObject
    (or AsyncDurableObject) shared with other code, e.g. a `DurableStore`.
    The object's lease is the write ownership: a second saver on a held
    object gets `WriteOwnerHeld`, a saver whose lease was taken gets
    `StaleWriteOwner` and never writes again; both carry
    `is_stale_write_owner_error = True`.

    `owner` names this saver's writer in the lease. A worker restarted as
    a new process (a crash, a deploy) keeps its owner name and passes
    `reclaim=True`: the lease its earlier process left live is taken at
    once instead of after lease_ttl + clock_skew (~35 s by default), and
    that process, if it still runs, gets `StaleWriteOwner` at its next
    write. A lease held under another owner name is still `WriteOwnerHeld`.
    """

    def __init__(
        self,
        target: Any,
        *,
        serde: SerializerProtocol | None = None,
        flush: FlushMode = "every",
        batch_puts: int = 20,
        batch_seconds: float | None = 2.0,
        table_prefix: str = "lg_",
        owner: str | None = None,
        reclaim: bool = False,
        read_only: bool = False,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(serde=serde)
        check_table_name(table_prefix, "table_prefix")
        self._h = Handle(
            target,
            what="DurableSaver",
            flush=flush,
            batch_puts=batch_puts,
            batch_seconds=batch_seconds,
            owner=owner,
            read_only=read_only,
            storage_options=storage_options,
            options=options,
            reclaim=reclaim,
        )
        self._ck = f"{table_prefix}checkpoints"
        self._wr = f"{table_prefix}writes"
        self._bl = f"{table_prefix}blobs"
        if not self._h.read_only:
            try:
                self.setup()
            except BaseException:
                if self._h.owns:  # the object it opened, and its lease, go with it
                    with contextlib.suppress(Exception):
                        self._h.close()
                raise

    # -- lifecycle -----------------------------------------------------------------
    @property
    def obj(self) -> Any:
        """The DurableObject under this saver."""
        return self._h.obj

    def setup(self) -> None:
        """Create the three tables if they do not exist (run by the constructor)."""
        with self._h.writing():
            for statement in sql.create_tables(self._ck, self._wr, self._bl):
                self._h.execute(statement)
            if self._h.obj.pending:  # the schema is durable before any data
                self._h.flush_locked()

    def flush(self) -> None:
        """Make every buffered write durable now (for flush="step" or "batch")."""
        self._h.flush()

    def close(self) -> None:
        """Flush, and close the object if this saver opened it."""
        self._h.close()

    def __enter__(self) -> DurableSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> DurableSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- reads ---------------------------------------------------------------------
    def _select(self, where: _Strs, limit: int | None) -> _Rows:
        return self._h.rows(sql.select_checkpoints(self._ck, where, limit))

    def _tuples(self, rows: _Rows, metas: _Row) -> _Tuples:
        """Full tuples (channel values, pending writes) for checkpoint rows."""
        out: _Tuples = []
        for start in range(0, len(rows), _LOAD_BATCH):
            chunk = rows[start : start + _LOAD_BATCH]
            cks: _Checkpoints = [self.serde.loads_typed((r[4], unb64(r[5]))) for r in chunk]
            blobs = self._load_blobs(chunk, cks)
            writes = self._load_writes(chunk)
            for r, ck, md in zip(chunk, cks, metas[start : start + _LOAD_BATCH], strict=True):
                tid, ns, cid, parent = r[0], r[1], r[2], r[3]
                values = {}
                for ch, ver in ck["channel_versions"].items():
                    got = blobs.get((tid, ns, ch, vkey(ver)))
                    if got is not None and got[0] != "empty":
                        values[ch] = self.serde.loads_typed(got)
                pending = sorted(writes.get((tid, ns, cid), []), key=lambda w: w[0])
                out.append(
                    CheckpointTuple(
                        config=_config(tid, ns, cid),
                        checkpoint={**ck, "channel_values": values},
                        metadata=md,
                        parent_config=_config(tid, ns, parent) if parent else None,
                        pending_writes=[w[1] for w in pending],
                    )
                )
        return out

    def _load_blobs(
        self, rows: _Rows, cks: _Checkpoints
    ) -> dict[tuple[str, str, str, str], tuple[str, bytes]]:
        wanted = sorted(
            {
                (r[0], r[1], ch, vkey(ver))
                for r, ck in zip(rows, cks, strict=True)
                for ch, ver in ck["channel_versions"].items()
            }
        )
        found: dict[tuple[str, str, str, str], tuple[str, bytes]] = {}
        for start in range(0, len(wanted), 1000):
            keys = wanted[start : start + 1000]
            for t, n, c, v, typ, data in self._h.rows(sql.select_blobs(self._bl, keys)):
                found[(t, n, c, v)] = (typ, unb64(data))
        return found

    def _load_writes(self, rows: _Rows) -> dict[tuple[str, str, str], _Keyed]:
        found: dict[tuple[str, str, str], _Keyed] = {}
        if not rows:
            return found
        for t, n, c, task_id, idx, path, ch, typ, data in self._h.rows(
            sql.select_writes(self._wr, rows)
        ):
            value = self.serde.loads_typed((typ, unb64(data)))
            found.setdefault((t, n, c), []).append(
                (writes_sort_key(path, task_id, int(idx)), (task_id, ch, value))
            )
        return found

    def _metadata(self, row: _Row) -> CheckpointMetadata:
        md: CheckpointMetadata = self.serde.loads_typed((row[6], unb64(row[7])))
        return md

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        where, cid = sql.where_get(config)
        with self._h.lock:
            rows = self._select(where, 1)
            if not rows:
                return None
            got = self._tuples(rows, [self._metadata(rows[0])])[0]
        if cid:  # the caller's config, as the reference savers return it
            return got._replace(config=config)
        return got

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; `filter` matches metadata keys by equality."""
        yield from self._list(config, filter=filter, before=before, limit=limit)

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _Tuples:
        where = sql.where_list(config, before)
        if limit is not None and limit <= 0:
            return []
        with self._h.lock:
            rows = self._select(where, None if filter else limit)
            kept: _Rows = []
            metas: _Row = []
            for row in rows:
                md = self._metadata(row)
                if filter and not all(md.get(k) == v for k, v in filter.items()):
                    continue
                kept.append(row)
                metas.append(md)
                if limit is not None and len(kept) >= limit:
                    break
            return self._tuples(kept, metas)

    # -- writes --------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id")
        c = checkpoint.copy()
        values: dict[str, Any] = c.pop("channel_values")  # type: ignore[misc]
        blob_rows = []
        for ch, ver in new_versions.items():
            typ, data = self.serde.dumps_typed(values[ch]) if ch in values else ("empty", b"")
            blob_rows.append(sql.blob_row(thread_id, ns, ch, ver, typ, data))
        ck_typed = self.serde.dumps_typed(c)
        md = get_checkpoint_metadata(config, metadata)
        md_typed = self.serde.dumps_typed(md)
        row = sql.checkpoint_row(
            thread_id, ns, checkpoint["id"], parent, ck_typed, md_typed, md.get("run_id")
        )
        with self._h.writing():
            if blob_rows:
                self._h.execute(f"INSERT INTO {self._bl} VALUES " + ", ".join(blob_rows))
            self._h.execute(f"INSERT INTO {self._ck} VALUES {row}")
            self._h.wrote(put=True)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        cid = str(conf["checkpoint_id"])
        key = sql.write_key(thread_id, ns, cid)
        planned = [(WRITES_IDX_MAP.get(ch, i), ch, v) for i, (ch, v) in enumerate(writes)]
        if not planned:
            return
        with self._h.writing():
            taken: set[int] = set()
            if any(idx >= 0 for idx, _, _ in planned):
                taken = {
                    int(r[0]) for r in self._h.rows(sql.select_taken_idx(self._wr, key, task_id))
                }
            rows = []
            for idx, ch, value in planned:
                if idx >= 0 and idx in taken:
                    continue  # a regular write: the first one wins
                typ, data = self.serde.dumps_typed(value)
                rows.append(sql.write_row(key, task_id, idx, task_path, ch, typ, data))
            if rows:
                self._h.execute(f"INSERT INTO {self._wr} VALUES " + ", ".join(rows))
                self._h.wrote(put=False)

    def delete_thread(self, thread_id: str) -> None:
        where = f"thread_id = {lit_str(str(thread_id))}"
        with self._h.writing():
            self._delete(where, where, where)
            self._h.wrote(put=False)

    def _delete(self, ck: str | None, wr: str | None, bl: str | None) -> None:
        for table, where in ((self._ck, ck), (self._wr, wr), (self._bl, bl)):
            if where is not None:
                self._h.execute(f"DELETE FROM {table} WHERE {where}")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints written by these runs, with their pending
        writes. Channel values another checkpoint may share are kept."""
        ids = sorted({str(r) for r in run_ids})
        if not ids:
            return
        with self._h.writing():
            hit = self._h.rows(sql.select_run_checkpoints(self._ck, ids))
            if not hit:
                return
            where = sql.checkpoint_keys_in(hit)
            self._delete(where, where, None)
            self._h.wrote(put=False)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, pending write and channel value of one thread
        to another (the local tables are read by the logged statement itself,
        which replays to the same rows)."""
        statements = sql.copy_thread(
            self._ck, self._wr, self._bl, str(source_thread_id), str(target_thread_id)
        )
        with self._h.writing():
            for statement in statements:
                self._h.execute(statement)
            self._h.wrote(put=False)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """ "keep_latest": keep only the newest checkpoint of each namespace (its
        pending writes and the channel values it references); "delete": remove
        the threads. Not DeltaChannel-aware: do not prune threads whose graph
        uses DeltaChannel."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgument(f"unknown prune strategy {strategy!r}")
        ids = sorted({str(t) for t in thread_ids})
        if not ids:
            return
        with self._h.writing():
            if strategy == "delete":
                where = f"thread_id IN {lit_in(ids)}"
                self._delete(where, where, where)
                self._h.wrote(put=False)
                return
            for tid, ns, cid, typ, data in self._h.rows(sql.select_latest(self._ck, ids)):
                ck: Checkpoint = self.serde.loads_typed((typ, unb64(data)))
                others, blobs = sql.prune_keep_latest(tid, ns, cid, ck["channel_versions"])
                self._delete(others, others, blobs)
            self._h.wrote(put=False)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as the reference savers make them: a zero-padded counter and
        a random fraction (computed here, logged as a literal)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- async twins --------------------------------------------------------------
    # Each is the sync method run as ONE call of the object's async face
    # (durable_obj.aio): serde, the reads that decide a write, the statements
    # and the flush all in a worker thread, never on the event loop, in order
    # with the face's other calls. Cancelled before its turn, a call never
    # runs; once started it finishes (its flush commits or leaves the buffer
    # intact) and only the awaiting task sees CancelledError.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._h.arun(self.get_tuple, config, io=False)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self._h.arun(
            self._list, config, filter=filter, before=before, limit=limit, io=False
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._h.arun(
            self.put, config, checkpoint, metadata, new_versions, io=self._h.may_flush(put=True)
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._h.arun(
            self.put_writes, config, writes, task_id, task_path, io=self._h.may_flush(put=False)
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self._h.arun(self.delete_thread, thread_id, io=self._h.may_flush(put=False))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._h.arun(self.delete_for_runs, run_ids, io=self._h.may_flush(put=False))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._h.arun(
            self.copy_thread, source_thread_id, target_thread_id, io=self._h.may_flush(put=False)
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._h.arun(
            self.prune, thread_ids, strategy=strategy, io=self._h.may_flush(put=False)
        )

    async def aflush(self) -> None:
        await self._h.arun(self.flush, io=True)

    async def aclose(self) -> None:
        await self._h.arun(self.close, io=True)
