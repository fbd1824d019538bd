"""`DurableStore`: a LangGraph store (`BaseStore`) on a durable object.

One table, `<table>` (default `lg_store`), ReplacingMergeTree read FINAL,
keyed by (namespace, key): the item's JSON value, its times (microseconds
since the epoch, computed here), its TTL and expiry, and, when an
`IndexConfig` is given, the embedded paths with their vectors. Embeddings
are computed once, by the writer, and logged as literal arrays: a replay
never calls the embedding model. Search ranks by `cosineDistance` in the
engine (best field per item); filters (`$eq $ne $gt $gte $lt $lte`, nested
equality) are applied here with LangGraph's InMemoryStore semantics.

TTL (`supports_ttl`): an item put with `ttl` (minutes, or the TTLConfig's
`default_ttl`) expires that long after its last write or refreshed read;
expired items are never returned, even before `sweep_ttl()` deletes them
with a logged `DELETE` whose cutoff is a literal.

Deletes (a PutOp whose value is None) are logged `DELETE`s; everything else
is an INSERT of literals. Flushing follows `flush=` as for `DurableSaver`:
"every" (default) flushes every batch that wrote before it returns.

The DDL, the statements, the row encoding and the filters are in `_store_sql`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from durable_obj.errors import InvalidArgument
from durable_obj.langgraph import _store_sql as sql
from durable_obj.langgraph._common import FlushMode, Handle, check_table_name
from durable_obj.langgraph._store_sql import COLS, dt, keys_in, now_us, ns_key, where_live

log = logging.getLogger("durable_obj")


class DurableStore(BaseStore):
    """A LangGraph store whose items live in a durable object.

        store = DurableStore("s3://bucket/agents/memory", index={"dims": 384, "embed": embed})
        store.put(("users", "alice"), "prefs", {"theme": "dark"})

    `target`: a URL (opened here, closed by close()), or an open
    DurableObject / AsyncDurableObject, e.g. `saver.obj` of a DurableSaver.
    `index`: LangGraph's IndexConfig (dims, embed, fields) for vector search.
    `ttl`: LangGraph's TTLConfig (default_ttl minutes, refresh_on_read,
    sweep_interval_minutes: start_ttl_sweeper() runs sweep_ttl() that often).
    `owner` and `reclaim=True`: as for `DurableSaver`, a restarted worker
    under the same owner name takes its earlier process's lease at once.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        target: Any,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        flush: FlushMode = "every",
        batch_puts: int = 100,
        batch_seconds: float | None = 2.0,
        table: str = "lg_store",
        owner: str | None = None,
        reclaim: bool = False,
        read_only: bool = False,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        check_table_name(table, "table")
        self._h = Handle(
            target,
            what="DurableStore",
            flush=flush,
            batch_puts=batch_puts,
            batch_seconds=batch_seconds,
            owner=owner,
            read_only=read_only,
            storage_options=storage_options,
            options=options,
            reclaim=reclaim,
        )
        self._t = table
        self.ttl_config = ttl
        self.index_config = dict(index) if index else None
        self.embeddings = ensure_embeddings(index.get("embed")) if index else None
        self._fields: list[tuple[str, str | list[str]]] = (
            [(p, tokenize_path(p) if p != "$" else p) for p in (index.get("fields") or ["$"])]
            if index
            else []
        )
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        if not self._h.read_only:
            try:
                with self._h.writing():
                    self._h.execute(sql.create_table(self._t))
                    if self._h.obj.pending:
                        self._h.flush_locked()
            except BaseException:
                if self._h.owns:  # the object it opened, and its lease, go with it
                    with contextlib.suppress(Exception):
                        self._h.close()
                raise

    @property
    def obj(self) -> Any:
        """The DurableObject under this store."""
        return self._h.obj

    # -- lifecycle -------------------------------------------------------------------
    def flush(self) -> None:
        """Make every buffered write durable now (for flush="batch")."""
        self._h.flush()

    def close(self) -> None:
        """Stop the sweeper, flush, and close the object if this store opened it."""
        self.stop_ttl_sweeper()
        self._h.close()

    def __enter__(self) -> DurableStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> DurableStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aflush(self) -> None:
        """`flush` through the object's async face."""
        await self._h.arun(self.flush, io=True)

    async def aclose(self) -> None:
        """`close` through the object's async face (the sweeper is stopped
        in its worker too)."""
        await self._h.arun(self.close, io=True)

    # -- batch -----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Apply `ops` in order: reads see the state before this batch's puts
        (as InMemoryStore does); puts to one (namespace, key) keep the last."""
        ops = list(ops)
        puts = self._dedupe(ops)
        queries = self._embed_queries(ops)
        vectors = self._embed_puts(puts, self._embed_sync)
        return self._apply(ops, puts, queries, vectors)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` through the object's async face (durable_obj.aio): the
        reads, row building, statements and flush are ONE lane call in a
        worker thread, never on the loop. Cancelled before its turn it never
        runs; once started it finishes (its flush commits or leaves the
        buffer intact). With an index, the texts to embed are picked in a
        worker too, and the embedding function's async face is awaited here."""
        ops = list(ops)
        if self.embeddings is None:
            writes = any(isinstance(op, PutOp) for op in ops)
            return await self._h.arun(self.batch, ops, io=writes and self._h.may_flush(put=True))
        puts, texts, wanted = await self._h.arun(self._prepare, ops, io=False)
        queries = {}
        for q in wanted:
            queries[q] = [float(x) for x in await self.embeddings.aembed_query(q)]
        vecs = await self.embeddings.aembed_documents([t for _, _, t in texts]) if texts else []
        vectors = self._group(texts, [[float(x) for x in v] for v in vecs])
        return await self._h.arun(
            self._apply, ops, puts, queries, vectors, io=bool(puts) and self._h.may_flush(put=True)
        )

    def _prepare(
        self, ops: list[Op]
    ) -> tuple[
        dict[tuple[tuple[str, ...], str], PutOp],
        list[tuple[tuple[tuple[str, ...], str], str, str]],
        list[str],
    ]:
        """The puts that count, the texts they embed, the queries to embed."""
        puts = self._dedupe(ops)
        return puts, self._texts(puts), self._queries(ops)

    @staticmethod
    def _queries(ops: list[Op]) -> list[str]:
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    def _dedupe(self, ops: list[Op]) -> dict[tuple[tuple[str, ...], str], PutOp]:
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
            elif not isinstance(op, (GetOp, SearchOp, ListNamespacesOp)):
                raise InvalidArgument(f"unknown store operation {type(op).__name__}")
        return puts

    # -- embeddings (computed here, by the writer, once) -----------------------------
    def _embed_sync(self, texts: list[str]) -> list[list[float]]:
        assert self.embeddings is not None
        return [list(map(float, v)) for v in self.embeddings.embed_documents(texts)]

    def _embed_queries(self, ops: list[Op]) -> dict[str, list[float]]:
        queries = self._queries(ops)
        if not queries or self.embeddings is None:
            return {}
        return {q: [float(x) for x in self.embeddings.embed_query(q)] for q in queries}

    def _texts(
        self, puts: dict[tuple[tuple[str, ...], str], PutOp]
    ) -> list[tuple[tuple[tuple[str, ...], str], str, str]]:
        """(item, path, text) for every text to embed, in a stable order."""
        if self.embeddings is None:
            return []
        out: list[tuple[tuple[tuple[str, ...], str], str, str]] = []
        for ident, op in puts.items():
            if op.value is None or op.index is False:
                continue
            fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            for path, tokens in fields:
                texts = get_text_at_path(op.value, tokens)
                if len(texts) > 1:
                    out.extend((ident, f"{path}.{i}", t) for i, t in enumerate(texts))
                elif texts:
                    out.append((ident, path, texts[0]))
        return out

    @staticmethod
    def _group(
        texts: list[tuple[tuple[tuple[str, ...], str], str, str]], vecs: list[list[float]]
    ) -> dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]]:
        if len(vecs) != len(texts):
            raise InvalidArgument(
                f"the embedding function returned {len(vecs)} vectors for {len(texts)} texts"
            )
        out: dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]] = {}
        for (ident, path, _), vec in zip(texts, vecs, strict=True):
            out.setdefault(ident, []).append((path, vec))
        return out

    def _embed_puts(
        self, puts: dict[tuple[tuple[str, ...], str], PutOp], embed: Any
    ) -> dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]]:
        texts = self._texts(puts)
        return self._group(texts, embed([t for _, _, t in texts]) if texts else [])

    # -- applying ----------------------------------------------------------------------
    def _apply(
        self,
        ops: list[Op],
        puts: dict[tuple[tuple[str, ...], str], PutOp],
        queries: dict[str, list[float]],
        vectors: dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]],
    ) -> list[Result]:
        with self._h.lock:
            now = now_us()
            results: list[Result] = []
            refresh: set[tuple[tuple[str, ...], str]] = set()
            gets = [op for op in ops if isinstance(op, GetOp)]
            found = self._get_many(gets, now)
            for op in ops:
                if isinstance(op, GetOp):
                    row = found.get((tuple(op.namespace), op.key))
                    results.append(None if row is None else self._item(row))
                    if row is not None and op.refresh_ttl and row[5] is not None:
                        refresh.add((tuple(op.namespace), op.key))
                elif isinstance(op, SearchOp):
                    items = self._search(op, queries.get(op.query or ""), now)
                    results.append([i for i, _ in items])
                    if op.refresh_ttl:
                        refresh.update((tuple(i.namespace), i.key) for i, ttl in items if ttl)
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._namespaces(op, now))
                else:
                    results.append(None)
            if puts or refresh:
                with self._h.writing():
                    wrote = self._write(puts, vectors, now)
                    self._refresh(refresh - set(puts), now)
                    if wrote:
                        self._h.wrote(put=True)
            return results

    def _get_many(
        self, gets: list[GetOp], now: int
    ) -> dict[tuple[tuple[str, ...], str], list[Any]]:
        if not gets:
            return {}
        keys = sorted({(ns_key(tuple(op.namespace)), op.key) for op in gets})
        rows = self._h.rows(
            f"SELECT {COLS}, ttl_minutes FROM {self._t} FINAL "
            f"WHERE {keys_in(keys)} AND {where_live(now)}"
        )
        return {(tuple(r[0]), r[1]): r for r in rows}

    @staticmethod
    def _item(row: list[Any]) -> Item:
        return Item(
            value=json.loads(row[2]),
            key=row[1],
            namespace=tuple(row[0]),
            created_at=dt(int(row[3])),
            updated_at=dt(int(row[4])),
        )

    def _search(
        self, op: SearchOp, query: list[float] | None, now: int
    ) -> list[tuple[SearchItem, bool]]:
        """The page of items, each with whether it has a TTL."""
        rows = self._h.rows(sql.select_search(self._t, tuple(op.namespace_prefix), query, now))
        kept: list[tuple[float | None, list[Any]]] = []
        for row in rows:
            value = json.loads(row[2])
            row[2] = value
            if op.filter and not all(sql.compare(value.get(k), v) for k, v in op.filter.items()):
                continue
            kept.append((None if row[5] is None else float(row[5]), row))
        if query is not None:
            scored = sorted((s for s in kept if s[0] is not None), key=lambda s: -(s[0] or 0.0))
            scoreless = [s for s in kept if s[0] is None]
            page = scored[op.offset : op.offset + op.limit]
            if len(page) < op.limit:
                page += scoreless[: op.limit - len(page)]
        else:
            page = kept[op.offset : op.offset + op.limit]
        return [
            (
                SearchItem(
                    namespace=tuple(r[0]),
                    key=r[1],
                    value=r[2],
                    created_at=dt(int(r[3])),
                    updated_at=dt(int(r[4])),
                    score=s,
                ),
                bool(r[6]),
            )
            for s, r in page
        ]

    def _namespaces(self, op: ListNamespacesOp, now: int) -> list[tuple[str, ...]]:
        rows = self._h.rows(f"SELECT DISTINCT ns FROM {self._t} FINAL WHERE {where_live(now)}")
        spaces = [tuple(r[0]) for r in rows]
        if op.match_conditions:
            spaces = [s for s in spaces if all(sql.matches(c, s) for c in op.match_conditions)]
        if op.max_depth is not None:
            spaces = sorted({s[: op.max_depth] for s in spaces})
        else:
            spaces = sorted(spaces)
        return spaces[op.offset : op.offset + op.limit]

    def _write(
        self,
        puts: dict[tuple[tuple[str, ...], str], PutOp],
        vectors: dict[tuple[tuple[str, ...], str], list[tuple[str, list[float]]]],
        now: int,
    ) -> bool:
        if not puts:
            return False
        gone = sorted((ns_key(ns), k) for (ns, k), op in puts.items() if op.value is None)
        live = {ident: op for ident, op in puts.items() if op.value is not None}
        # A put over a live item keeps its created_at, and the vectors of the
        # paths it does not embed again (index=False, other paths), as
        # LangGraph's InMemoryStore and PostgresStore do: they upsert the
        # vectors per (item, path) and drop them only with the item.
        existing: dict[tuple[str, str], tuple[int, dict[str, list[float]]]] = {}
        if live:
            keys = [(ns_key(ns), k) for ns, k in sorted(live)]
            existing = {
                (r[0], r[1]): (int(r[2]), dict(zip(r[3], r[4], strict=True)))
                for r in self._h.rows(
                    f"SELECT ns_key, key, created_at, paths, vectors FROM {self._t} FINAL "
                    f"WHERE {keys_in(keys)} AND {where_live(now)}"
                )
            }
        rows = []  # made first: a put refused (its ttl, its value) changes nothing
        for (ns, key), op in sorted(live.items()):
            made, kept = existing.get((ns_key(ns), key), (now, {}))
            kept = {**kept, **dict(vectors.get((ns, key), []))}
            rows.append(sql.item_row(ns, key, op, made, now, list(kept.items())))
        if gone:
            self._h.execute(f"DELETE FROM {self._t} WHERE {keys_in(gone)}")
        if rows:
            self._h.execute(f"INSERT INTO {self._t} VALUES " + ", ".join(rows))
        return True

    def _refresh(self, idents: set[tuple[tuple[str, ...], str]], now: int) -> None:
        """Move the expiry of items read with refresh_ttl (a logged rewrite of
        those rows with a literal new expiry). Rides with the next flush."""
        if not idents:
            return
        keys = [(ns_key(ns), k) for ns, k in sorted(idents)]
        self._h.execute(sql.refresh(self._t, keys, now))

    # -- TTL -----------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete every expired item (a logged DELETE with a literal cutoff);
        the number deleted."""
        with self._h.writing():
            now = now_us()
            cond = sql.expired(now)
            n = int(self._h.rows(f"SELECT count() FROM {self._t} FINAL WHERE {cond}")[0][0])
            if n:
                self._h.execute(sql.sweep(self._t, now))
                self._h.wrote(put=False)
            return n

    async def asweep_ttl(self) -> int:
        return await self._h.arun(self.sweep_ttl, io=self._h.may_flush(put=False))

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Run sweep_ttl() on a background thread every `sweep_interval_minutes`
        (default: the TTLConfig's sweep_interval_minutes, else 5). As
        langgraph's own stores: returns a future done when the sweeper stops
        (cancel it to stop it). A read-only store never sweeps (its writer
        does): its future is done at once. A failed sweep is logged."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        if self._h.read_only:
            future.set_result(None)
            return future
        if self._sweeper is not None and self._sweeper.is_alive():
            return future  # the one running; cancelling this one stops it
        minutes = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # a sweep failure must not kill the thread
                    log.warning("DurableStore: TTL sweep failed", exc_info=True)
            if not future.done():
                future.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="durable-store-ttl", daemon=True)
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False if it is still running after `timeout`
        seconds (None: wait until it stopped)."""
        thread = self._sweeper
        if thread is None:
            return True
        self._stop.set()
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._sweeper = None
        return True
