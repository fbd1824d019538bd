"""From a head to a local database: check, fetch, verify, restore, replay.

    check_protocol(head)         refuse what this library cannot read or write
    Fetches(pool, ...)           the base and every WAL segment, downloading in
                                 parallel with the rest of the open
    restore(engine, head, ...)   RESTORE the base (or create the database),
                                 then replay the WAL in manifest order

Every byte is checked against the size and SHA-256 the head names before it
is used; a missing, short or altered base or segment is `Corrupt`: never
skipped, never fallen back from. Everything here gets its inputs as
arguments; the state machine in `object.py` decides when to call it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import durable_obj.telemetry as telemetry
from durable_obj.errors import (
    ClassificationRefused,
    Corrupt,
    EngineError,
    EngineIncompatible,
    ProtocolUnsupported,
)
from durable_obj.gate import restored
from durable_obj.gate.replay import Replayer
from durable_obj.replica import archive, links
from durable_obj.wire import unsealing
from durable_obj.wire.digest import (
    BackgroundDigest,
    Digest,
    read_chunks,
    verify,
    verify_bytes,
    verify_size,
)
from durable_obj.wire.head import Head, ObjectRef
from durable_obj.wire.protocol import (
    BACKUP_FORMAT,
    ENGINE_NAME,
    PROTOCOL_VERSION,
    SUPPORTED_READER_FEATURES,
    SUPPORTED_WRITER_FEATURES,
    object_key,
    version_lt,
)
from durable_obj.wire.wal import parse_segment

if TYPE_CHECKING:
    from fsspec.callbacks import Callback

    from durable_obj.replica.engine import Engine
    from durable_obj.stores.base import Store
    from durable_obj.wire.sealing import Codec

log = logging.getLogger("durable_obj")


def check_protocol(head: Head, *, url: str, read_only: bool) -> None:
    """Refuse a protocol version or reader feature we lack; a writer feature
    we lack refuses only a writer."""
    proto = head.protocol
    if proto.version > PROTOCOL_VERSION:
        raise ProtocolUnsupported(
            f"{url} declares protocol version {proto.version}; this library speaks "
            f"{PROTOCOL_VERSION}. Upgrade durable_obj; nothing was changed."
        )
    unknown = sorted(set(proto.reader_features) - SUPPORTED_READER_FEATURES)
    if unknown:
        raise ProtocolUnsupported(
            f"{url} requires reader feature(s) {unknown} this library lacks; "
            "not opened, nothing was changed"
        )
    unknown = sorted(set(proto.writer_features) - SUPPORTED_WRITER_FEATURES)
    if unknown and not read_only:
        raise ProtocolUnsupported(
            f"{url} requires writer feature(s) {unknown} this library lacks; "
            "open it read_only=True instead. Nothing was changed."
        )


def check_engine(engine: Engine, head: Head) -> None:
    """`EngineIncompatible` unless the running engine reads what wrote the head."""
    check_compatible(
        name=head.engine.name,
        backup_format=head.engine.backup_format,
        min_reader=head.engine.min_reader,
        running=engine.version,
    )


def check_compatible(*, name: str, backup_format: int, min_reader: str, running: str) -> None:
    """The V1 open gate: engine name, archive generation, reader version."""
    if name != ENGINE_NAME:
        raise EngineIncompatible(
            f"the object was written by engine {name!r}, not {ENGINE_NAME!r}; not opened"
        )
    if backup_format > BACKUP_FORMAT:
        raise EngineIncompatible(
            f"the object uses backup format {backup_format}; this engine restores up to "
            f"{BACKUP_FORMAT}. Upgrade chdb to open it; nothing was changed."
        )
    older = version_lt(running, min_reader)
    if older is None:
        raise EngineIncompatible(
            f"cannot order the running engine {running!r} against the object's min_reader "
            f"{min_reader[:40]!r}; refusing rather than assuming compatibility"
        )
    if older:
        raise EngineIncompatible(
            f"the object needs chDB {min_reader} or newer; this engine is {running}. "
            "Upgrade chdb-core; nothing was changed."
        )


class Fetches:
    """The base and every segment a head names, fetched on `pool` at once,
    each verified before it is handed out."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        store: Store,
        oid: str,
        head: Head,
        *,
        work: str,
        concurrency: int,
        codec: Codec,
        progress: Callback | None = None,
    ) -> None:
        self._store = store
        #: How the blobs are stored: sealed and/or compressed, or plain (V1).
        self._codec = codec
        self._oid = oid
        self._url = f"{store.url.rstrip('/')}/{oid}"
        self._work = work
        self._base: Future[tuple[str, Digest]] | None = None
        self._segments: Future[list[list[str]]] | None = None
        self._links: Future[list[tuple[str, str]]] | None = None
        base = self._base_ref = head.manifest.base
        chain = head.manifest.chain
        if base is not None:
            self._base = pool.submit(self._fetch_base, base, progress)
        if chain:
            self._links = pool.submit(self._fetch_links, chain, concurrency)
        if head.manifest.wal:
            self._segments = pool.submit(self._fetch_segments, head.manifest.wal, concurrency)

    def cancel(self) -> None:
        for future in (self._base, self._segments, self._links):
            if future is not None:
                future.cancel()

    def links(self) -> list[tuple[str, str]]:
        """The links beneath an incremental base ((relative path, local
        file), full base first), each verified against its ref."""
        return [] if self._links is None else self._links.result()

    def _fetch_links(self, refs: list[ObjectRef], concurrency: int) -> list[tuple[str, str]]:
        names = [ref.key.rsplit("/", 1)[-1] for ref in refs]
        if self._base_ref is not None:
            names.append(self._base_ref.key.rsplit("/", 1)[-1])
        if len(set(names)) != len(names):
            raise Corrupt(
                f"{self._url}: the base's chain names one archive name twice; a chain this "
                "library writes never does. The object was not opened; nothing was changed."
            )
        for n, ref in enumerate(refs, start=1):
            if links.link_path(ref.key) is None:
                raise Corrupt(
                    f"{self._url}: link {n} of the base's chain, {ref.key[:80]!r}, is not a "
                    "base key this library writes; the object was not opened. Nothing was "
                    "changed."
                )
        with ThreadPoolExecutor(max(1, min(concurrency, len(refs)))) as pool:
            got = list(pool.map(self._fetch_link, refs))
        return [(str(links.link_path(ref.key)), path) for ref, path in zip(refs, got, strict=True)]

    def _fetch_link(self, ref: ObjectRef) -> str:
        path, digest = self._fetch_base(ref, None, what="link of the base's chain")
        try:
            verify(*digest.result(), ref, f"link {ref.key} of the base's chain")
        except BaseException:
            os.unlink(path)
            raise
        return path

    def base(self) -> str:
        """The local path of the base, named as its key (chDB tells an
        archive's format by its extension). Its size and SHA-256 are being
        checked meanwhile, beside the engine's start and RESTORE reading it:
        `check_base` judges them, and nothing made of a base it refuses is
        ever seen."""
        assert self._base is not None
        return self._base.result()[0]

    def check_base(self) -> None:
        """`Corrupt` unless the base is the one the head names."""
        assert self._base is not None and self._base_ref is not None
        verify(*self._base.result()[1].result(), self._base_ref, "base checkpoint")

    def segments(self) -> list[list[str]]:
        """Every segment's statements, in manifest order."""
        return [] if self._segments is None else self._segments.result()

    def _fetch_base(
        self, ref: ObjectRef, progress: Callback | None, what: str = "base checkpoint"
    ) -> tuple[str, Digest]:
        path = os.path.join(self._work, os.path.basename(ref.key))
        part = path + ".incoming"
        key = object_key(self._oid, ref.key)
        missing = Corrupt(
            f"{self._url}: missing {what} {ref.key}: the base the head names is "
            "gone; "
            "the object cannot be restored without it and was not opened. Nothing was "
            "changed."
        )
        opener = self._codec.opener
        if opener is not None and self._store.streams_reads:
            # Opened as it downloads, chunks in parallel (`unsealing.py`): every
            # tag holds before RESTORE sees a byte; the SHA-256 of what was
            # stored is judged as a plain base's is.
            sink = unsealing.StreamOpener(opener, self._oid, ref.key, path, what=what)
            try:
                found = self._store.read_into(key, sink, progress)
            except BaseException:
                sink.close()
                unsealing.remove(path)
                raise
            if not found:
                sink.close()
                unsealing.remove(path)
                raise missing
            return path, sink.finish()
        # only read (by RESTORE), then removed: a folder store may link it
        if not self._store.fetch_file(key, part, progress):
            raise missing
        try:  # its size first: nothing reads a file longer than the head says (a sparse hole)
            verify_size(os.path.getsize(part), ref, what)
        except BaseException:
            os.unlink(part)
            raise
        if opener is not None:
            # Opened chunk by chunk on every core; hashed after, beside RESTORE.
            try:
                return path, unsealing.open_file(opener, self._oid, ref.key, part, path, what=what)
            finally:
                os.unlink(part)  # the digest reads its own open handle
        os.replace(part, path)
        handle = open(path, "rb", buffering=0)  # noqa: SIM115  # closed by the digest's thread

        def chunks() -> Iterator[memoryview]:
            with handle:
                yield from read_chunks(handle)

        return path, BackgroundDigest(chunks())

    def _fetch_segments(self, refs: list[ObjectRef], concurrency: int) -> list[list[str]]:
        keys = [object_key(self._oid, ref.key) for ref in refs]
        blobs = self._store.get_many(keys, concurrency)  # one batched read
        segments = []
        for ref, blob in zip(refs, blobs, strict=True):
            if blob is None:
                raise Corrupt(
                    f"{self._url}: missing WAL segment {ref.key}: the head names it; "
                    "committed writes cannot be replayed without it, so the object was not "
                    "opened"
                )
            verify_bytes(blob.data, ref, "WAL segment")
            segments.append(parse_segment(self._codec.decode(ref.key, blob.data), ref.key))
        return segments


def _restored(args: tuple[Any, ...], kwargs: Mapping[str, Any], result: Any) -> telemetry.Attrs:
    """The restore span's attributes: the object, its seq and the bytes its head names."""
    head: Head = args[1]
    url: str = kwargs["url"]
    sizes = [ref.size for ref in (*head.manifest.all_bases(), *head.manifest.wal)]
    return {
        telemetry.OBJECT_ID: url.rstrip("/").rsplit("/", 1)[-1],
        telemetry.STORE: telemetry.store_of(url),
        telemetry.SEQ: head.manifest.seq,
        telemetry.BYTES: sum(sizes),
    }


@telemetry.operation("restore", _restored)
def restore(
    engine: Engine, head: Head, fetches: Fetches | None, *, url: str, stub: str | None = None
) -> str | None:
    """RESTORE the base into a fresh engine (or create the empty database),
    then replay every segment in manifest order. With `stub` (a writer's
    scratch folder), the base's listing is kept there (`links.stub`), for
    the next checkpoint to be an increment over it: its path, else None.

    A base passes the gate its statements would have (`gate.restored`):
    its definitions, read from the archive, before RESTORE creates any of
    them (a refreshable view would start at once); what RESTORE made, after
    it and before anything is shown or replayed. A refusal is `Corrupt`.
    An incremental base is restored over its links (`links.py`), each
    verified before RESTORE reads it."""
    db = head.manifest.db
    engine.create_database(db)  # empty; RESTORE only fills it (`Engine.restore`)
    kept = None
    if head.manifest.base is not None:
        assert fetches is not None
        ref = head.manifest.base
        path = fetches.base()
        chain: list[tuple[str, str]] = []
        try:
            chain = fetches.links()
            versioned = _check_archive(engine, fetches, path, url=url, key=ref.key, chain=chain)
            # Hashed beside RESTORE reading the same bytes, and judged before
            # anything else happens: a base that does not match is Corrupt and
            # the open fails, so what RESTORE made of it is never seen (the
            # caller drops the engine of a failed open). RESTORE appends:
            # only ever into a fresh engine.
            engine.restore(db, path, chain, versioned=versioned)
            if stub is not None and links.link_path(ref.key) is not None:
                with contextlib.suppress(Corrupt):  # then the next checkpoint is full
                    kept = links.stub(path, os.path.join(stub, "base.stub"))
        except EngineError as exc:
            fetches.check_base()  # an altered base says so
            if "not found in backup" not in str(exc):
                raise
            # The base verified against its SHA-256, so it is the archive the
            # head names; a head whose manifest.db is not in it is inconsistent.
            raise Corrupt(
                f"{url}: the base {ref.key} holds no database {db!r}, which "
                "the head's manifest.db names; the head and its base disagree, so the "
                "object was not opened and nothing was changed"
            ) from exc
        finally:
            for local in [path, *(local for _, local in chain)]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(local)
        # judged before anything else happens: a base that does not match
        # fails the open, whose engine is dropped unseen
        fetches.check_base()
        try:
            restored.check_restored(engine)
        except ClassificationRefused as exc:
            raise _hostile(url, ref.key, exc) from None
    engine.use_database(db)
    replay(engine, db, head.manifest.wal, [] if fetches is None else fetches.segments(), url=url)
    return kept


def _check_archive(
    engine: Engine,
    fetches: Fetches,
    path: str,
    *,
    url: str,
    key: str,
    chain: list[tuple[str, str]],
) -> bool:
    """The base's definitions, read from the archive (and the links it is
    an increment over), through the gate before RESTORE creates any; an
    altered base is reported as such first. Whether a part of it may carry
    a mutation version (`archive.Contents.versioned`)."""
    try:
        found = archive.contents(path, engine.logical, chain)
        restored.check_definitions(engine, ((d.table, d.text) for d in found.definitions))
    except Corrupt as exc:
        fetches.check_base()
        raise Corrupt(f"{url}: {exc}; the object was not opened. Nothing was changed.") from None
    except ClassificationRefused as exc:
        fetches.check_base()
        raise _hostile(url, key, exc) from None
    return found.versioned


def _hostile(url: str, key: str, exc: ClassificationRefused) -> Corrupt:
    return Corrupt(
        f"{url}: the base {key} holds {exc} A base passes the gate its statements would "
        "have; nothing of it was shown or replayed, the object was not opened and nothing "
        "was changed."
    )


def replay(
    engine: Engine, db: str, refs: list[ObjectRef], segments: list[list[str]], *, url: str
) -> None:
    """Replay verified `segments` (those of `refs`, in manifest order) onto `db`."""
    replayer = Replayer(engine, db)
    for ref, statements in zip(refs, segments, strict=True):
        for n, sql in enumerate(statements, start=1):
            replayer.apply(sql, f"{ref.key} statement {n}")
    replayer.finish()
    if replayer.statements:
        log.debug(
            "%s: replayed %d statement(s) in %d engine call(s)",
            url,
            replayer.statements,
            replayer.engine_calls,
        )
