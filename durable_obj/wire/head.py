"""head.json: the lease and the manifest in one compare-and-swap document.

Taking the lease, publishing a segment and replacing the base are each one
conditional replace of this document, so there is never a moment when the
lease says one thing and the manifest another.

Validation is strict (V1 §4.5): a head that does not fit the schema is
`Corrupt`, with the path of the first bad field, never coerced. Fields this
version does not know are kept at every level and written back unchanged
(§4.2), so a head survives a round trip through an older or newer writer.
The `durable_obj` top-level field is our extension, and its field names are
spelled here only: `nonce`, a per-write value that guarantees every write
changes the bytes (an S3 ETag is a content hash, so an identical rewrite would
keep the old ETag and let a stale token win); `timezone`, the object's session
time zone (`Head.timezone`); `forked_from`, where a fork came from;
`description`, a short text set when the object was created; `retention`,
the time-travel window (seconds) the last writer kept. The manifest's own
`durable_obj.chain` lists an incremental base's links (`Manifest.chain`).
A WAL or base ref
durable_obj commits carries its own `durable_obj` field: `committed_at`
(epoch seconds, the writer's clock when it made the commit) and `owner`
(`stamp`, `stamp_of`); chdb.durable keeps unknown ref fields too.
"""

from __future__ import annotations

import contextlib
import uuid
from operator import attrgetter
from typing import Any, ClassVar

from durable_obj.errors import Corrupt, LimitExceeded
from durable_obj.wire.model import (
    Field,
    Invalid,
    Model,
    after,
    finite,
    integer,
    json_copy,
    list_of,
    model,
    non_empty,
    optional,
    required,
    text,
)
from durable_obj.wire.protocol import (
    BACKUP_FORMAT,
    DEFAULT_TIMEZONE,
    ENGINE_NAME,
    INCREMENTAL_FEATURE,
    MAX_HEAD_BYTES,
    MAX_SAFE_INT,
    PROTOCOL_VERSION,
    check_key,
    check_sha256,
)
from durable_obj.wire.untrusted import dump_json, parse_json

SafeInt = integer(0, MAX_SAFE_INT)
Key = after(text, check_key)
Sha256 = after(text, check_sha256)

#: Top-level field that carries durable_obj's own extension data ...
EXTENSION = "durable_obj"
#: ... and the fields in it.
NONCE = "nonce"
TIMEZONE = "timezone"
FORKED_FROM = "forked_from"
DESCRIPTION = "description"
RETENTION = "retention"
COMMITTED_AT = "committed_at"
OWNER = "owner"
CHAIN = "chain"


class ObjectRef(Model):
    """An immutable key and what it must be: both checked before any byte is used."""

    FIELDS: ClassVar[dict[str, Field]] = {
        "key": required(Key),
        "size": required(SafeInt),
        "sha256": required(Sha256),
    }
    key: str
    size: int
    sha256: str

    # Its JSON text once made, with a copy of the values it was made from (a
    # slot: not a field, nor in __eq__ or a copy). A head names up to
    # hundreds of refs and is written on every flush; a hit compares the ref
    # with that copy, so a change made any way (a field set, an unknown
    # field changed through a reference shared with a copy or a document,
    # another thread) writes the text anew. Equal as Python compares: an
    # unknown 1 changed in place to 1.0 or True would keep its text.
    __slots__ = ("_json",)
    _json: tuple[str, tuple[str, int, str], dict[str, Any]]

    def json_text(self, extra: dict[str, Any] | None = None) -> str:
        if extra:
            return super().json_text(extra)
        kept: tuple[str, tuple[str, int, str], dict[str, Any]] | None = getattr(self, "_json", None)
        fields = (self.key, self.size, self.sha256)
        if kept is not None and kept[1] == fields and kept[2] == self._extra:
            return kept[0]
        values = json_copy(self._extra)
        text = super().json_text()
        if (self.key, self.size, self.sha256) == fields and self._extra == values:
            object.__setattr__(self, "_json", (text, fields, values))  # unchanged meanwhile
        return text

    def __getstate__(self) -> dict[str, Any]:  # a pickle or a copy: the fields only
        return self.__dict__


def stamp(ref: ObjectRef, *, committed_at: float, owner: str) -> ObjectRef:
    """`ref` with durable_obj's commit fields (when, by whom) as an extension."""
    extra = dict(ref.model_extra)
    extra[EXTENSION] = {COMMITTED_AT: committed_at, OWNER: owner}
    return ObjectRef.model_validate(
        {"key": ref.key, "size": ref.size, "sha256": ref.sha256, **extra}
    )


def stamp_of(ref: ObjectRef) -> tuple[float | None, str | None]:
    """(committed_at, owner) a ref carries; None for what is absent or of the
    wrong type (a ref chdb.durable wrote carries neither)."""
    ext = ref.model_extra.get(EXTENSION)
    if not isinstance(ext, dict):
        return None, None
    when, owner = ext.get(COMMITTED_AT), ext.get(OWNER)
    at = None
    if isinstance(when, int | float) and not isinstance(when, bool):
        with contextlib.suppress(OverflowError):  # a 400-digit int is no time
            at = float(when)
    return at, (owner if isinstance(owner, str) else None)


class Lease(Model):
    """Who may write, and until when (epoch seconds).

    Released: owner, instance and expires_at are all null and the generation
    stays. `generation` moves only when the owner changes.
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        "generation": required(SafeInt),
        "owner": Field(optional(non_empty)),
        "instance": Field(optional(non_empty)),
        "expires_at": Field(optional(finite)),
    }
    generation: int
    owner: str | None
    instance: str | None
    expires_at: float | None

    def _after(self) -> None:
        if self.owner is None:
            if self.instance is not None or self.expires_at is not None:
                raise ValueError(
                    "a released lease must null owner, instance and expires_at together"
                )
        elif self.instance is None or self.expires_at is None:
            raise ValueError("a held lease needs owner, instance and expires_at")

    @property
    def released(self) -> bool:
        return self.owner is None


#: A ref's values (fields and unknown ones), got at C speed.
_values = attrgetter("__dict__")


class Manifest(Model):
    """The database name, its base checkpoint, and the WAL to replay onto it.

    An incremental base (`INCREMENTAL_FEATURE`) names the links it is made
    over in the manifest's own extension field, `durable_obj.chain`: their
    refs, the full base first, each next one an increment over the one
    before it; `base` is the newest increment."""

    FIELDS: ClassVar[dict[str, Field]] = {
        "db": required(non_empty),
        "base": Field(optional(model(ObjectRef))),
        "wal": Field(list_of(model(ObjectRef)), factory=list),
        "seq": required(SafeInt),
    }
    db: str
    base: ObjectRef | None
    wal: list[ObjectRef]
    seq: int

    # The WAL list's JSON text as last written, one text per ref, with a copy
    # of each ref's values (`__dict__`: fields and unknown ones) it was made
    # from (a slot: not a field, nor in __eq__ or a copy). A flush appends
    # one ref and writes the head again: the refs still equal to the copies
    # at the front keep their text, compared at C speed (dict equality)
    # rather than one ref at a time in Python. Equal as Python compares, as
    # `ObjectRef`'s own kept text is.
    __slots__ = ("_wal_json",)
    _wal_json: tuple[list[dict[str, Any]], list[str]]

    def _field_json(self, name: str, value: Any) -> str:
        if name != "wal" or type(value) is not list:
            return super()._field_json(name, value)
        snaps, texts = getattr(self, "_wal_json", None) or ([], [])
        kept = len(snaps)
        if kept > len(value) or list(map(_values, value[:kept])) != snaps:
            snaps, texts, kept = [], [], 0
        if kept < len(value):
            added = value[kept:]
            snaps = snaps + [json_copy(ref.__dict__) for ref in added]
            texts = texts + [ref.json_text() for ref in added]
            if list(map(_values, added)) == snaps[kept:]:  # unchanged meanwhile
                object.__setattr__(self, "_wal_json", (snaps, texts))
        return "[" + ",".join(texts) + "]"

    def __getstate__(self) -> dict[str, Any]:  # a pickle or a copy: the fields only
        return self.__dict__

    @property
    def chain(self) -> list[ObjectRef]:
        """The links beneath `base` (empty for a full base); `Corrupt` when
        the field is not a list of refs, or is set without a base."""
        ext = self.model_extra.get(EXTENSION)
        raw = ext.get(CHAIN) if isinstance(ext, dict) else None
        if raw is None:
            return []
        try:
            links: list[ObjectRef] = list_of(model(ObjectRef))(raw, ())
        except Invalid as exc:
            first = exc.problems[0][1]
            raise Corrupt(
                f"head.manifest.{EXTENSION}.{CHAIN} is not a list of refs ({first}); "
                "nothing was opened or changed"
            ) from None
        if links and self.base is None:
            raise Corrupt(
                f"head.manifest.{EXTENSION}.{CHAIN} names links but the manifest has no base; "
                "nothing was opened or changed"
            )
        return links

    def set_chain(self, links: list[ObjectRef]) -> None:
        """Name `links` (full base first) beneath `base`; [] for a full base."""
        extra = self.model_extra
        ext = extra.get(EXTENSION)
        ext = dict(ext) if isinstance(ext, dict) else {}
        if links:
            ext[CHAIN] = [link.model_dump() for link in links]
        else:
            ext.pop(CHAIN, None)
        if ext:
            extra[EXTENSION] = ext
        else:
            extra.pop(EXTENSION, None)

    def next_seq(self) -> int:
        """The seq of the next commit. `LimitExceeded` when this one is V1's
        largest (2**53 - 1; a head may say so, and no commit can follow)."""
        if self.seq >= MAX_SAFE_INT:
            raise LimitExceeded(
                f"the manifest's seq is {self.seq}, the largest V1 allows, so no commit can "
                "follow it; nothing was changed. Export the object and load it into a new one."
            )
        return self.seq + 1

    def all_bases(self) -> list[ObjectRef]:
        """Every archive the base is restored from: the chain, then `base`."""
        return [*self.chain, self.base] if self.base is not None else []


class EngineInfo(Model):
    """Which engine wrote the object; `backup_format` and `min_reader` gate readers."""

    FIELDS: ClassVar[dict[str, Field]] = {
        "name": Field(non_empty, default=ENGINE_NAME),
        "version": required(non_empty),
        "backup_format": Field(SafeInt, default=BACKUP_FORMAT),
        "min_reader": required(non_empty),
    }
    name: str
    version: str
    backup_format: int
    min_reader: str


class ProtocolInfo(Model):
    FIELDS: ClassVar[dict[str, Field]] = {
        "version": Field(integer(1, MAX_SAFE_INT), default=PROTOCOL_VERSION),
        "reader_features": Field(list_of(text), factory=list),
        "writer_features": Field(list_of(text), factory=list),
    }
    version: int
    reader_features: list[str]
    writer_features: list[str]


class Head(Model):
    FIELDS: ClassVar[dict[str, Field]] = {
        "protocol": required(model(ProtocolInfo)),
        "engine": required(model(EngineInfo)),
        "lease": required(model(Lease)),
        "manifest": required(model(Manifest)),
    }
    protocol: ProtocolInfo
    engine: EngineInfo
    lease: Lease
    manifest: Manifest

    @classmethod
    def cold(cls, *, db: str, engine_version: str, lease: Lease) -> Head:
        """The head of an object that does not exist yet."""
        return cls(
            protocol=ProtocolInfo(),
            engine=EngineInfo(version=engine_version, min_reader=engine_version),
            lease=lease,
            manifest=Manifest(db=db, seq=0),
        )

    @classmethod
    def parse(cls, data: bytes, where: str = "") -> Head:
        """Validate stored bytes. `Corrupt` names the first bad field, and
        `where` (the object's URL or key), so a caller of many objects can
        tell which head it was.

        Size and nesting depth are checked before the parser runs: a hostile
        head is `Corrupt` (or `LimitExceeded`), never a `RecursionError`."""
        name = f"head.json of {where}" if where else "head.json"
        safe = "nothing was changed; the object was not opened"
        if len(data) > MAX_HEAD_BYTES:
            raise LimitExceeded(
                f"{name} is {len(data)} bytes, over the V1 limit of {MAX_HEAD_BYTES}; "
                f"it was not read; {safe}"
            )
        doc = parse_json(data, name, safe=safe)
        if not isinstance(doc, dict):
            raise Corrupt(f"{name} must be a JSON object, not {type(doc).__name__}; {safe}")
        if "manifest" in doc and "protocol" not in doc and "engine" not in doc:
            raise Corrupt(
                f"{name} has no 'protocol' or 'engine' section: it is the pre-V1 "
                "chdb.durable shape, whose checkpoints carry no size or SHA-256 and cannot "
                "be verified. Export it with that version and load it into a new object."
            )
        try:
            return cls.model_validate(doc)
        except Invalid as exc:
            raise Corrupt(_describe(exc, name)) from None

    def to_bytes(self) -> bytes:
        """Serialize with a fresh nonce, so every write changes the bytes.

        Compact UTF-8 JSON, this head left as it was (the nonce goes into the
        bytes only). Text is written as it is, not as escapes; an unknown
        field holding a lone surrogate (valid JSON escapes, no UTF-8) is
        written back escaped, as read. A non-finite number an unknown field
        holds is written as json.dumps writes it (Infinity)."""
        ext = self.model_extra.get(EXTENSION)
        nonce = {EXTENSION: {**(ext if isinstance(ext, dict) else {}), NONCE: uuid.uuid4().hex}}
        try:
            body = self.json_text(nonce).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the whole head with escapes
            doc = self.document()  # a new dict: this head keeps its own extension
            doc.update(nonce)
            body = dump_json(doc)
        if len(body) > MAX_HEAD_BYTES:
            raise LimitExceeded(
                f"head.json would be {len(body)} bytes, over the V1 limit of {MAX_HEAD_BYTES}; "
                "nothing was published. checkpoint() to fold the WAL list away."
            )
        return body

    @property
    def incremental(self) -> bool:
        """Is the base an incremental archive (a reader feature)?"""
        return INCREMENTAL_FEATURE in self.protocol.reader_features

    def set_chain(self, links: list[ObjectRef]) -> None:
        """Record the links beneath the manifest's base, and declare the
        reader and writer feature while there are any: chdb.durable then
        refuses the object instead of restoring an increment alone."""
        self.manifest.set_chain(links)
        proto = self.protocol
        if links:
            if INCREMENTAL_FEATURE not in proto.reader_features:
                proto.reader_features = [*proto.reader_features, INCREMENTAL_FEATURE]
            if INCREMENTAL_FEATURE not in proto.writer_features:
                proto.writer_features = [*proto.writer_features, INCREMENTAL_FEATURE]
        else:
            proto.reader_features = [f for f in proto.reader_features if f != INCREMENTAL_FEATURE]
            proto.writer_features = [f for f in proto.writer_features if f != INCREMENTAL_FEATURE]

    def extension(self) -> dict[str, Any]:
        """durable_obj's extension fields as read (empty for a chdb.durable head)."""
        ext = self.model_extra.get(EXTENSION)
        return dict(ext) if isinstance(ext, dict) else {}

    def set_extension(self, key: str, value: Any) -> None:
        """Set one durable_obj extension field (kept by every V1 writer)."""
        extra = self.model_extra
        ext = extra.get(EXTENSION)
        extra[EXTENSION] = {**(ext if isinstance(ext, dict) else {}), key: value}

    @property
    def timezone(self) -> str:
        """The object's session time zone: every statement runs and replays in
        it. UTC for a head that records none (chdb.durable records none).
        `Corrupt` if the recorded value is not a string."""
        tz = self.extension().get(TIMEZONE, DEFAULT_TIMEZONE)
        if not isinstance(tz, str):
            raise Corrupt(
                f"head.{EXTENSION}.{TIMEZONE} is not a string; nothing was opened or changed"
            )
        return tz

    @property
    def records_timezone(self) -> bool:
        """Does the head say which time zone it replays in?"""
        return TIMEZONE in self.extension()

    def set_timezone(self, tz: str) -> None:
        self.set_extension(TIMEZONE, tz)

    @property
    def description(self) -> str | None:
        """The short description set when the object was created; None if
        there is none (or what is there is not a string: it only labels)."""
        text = self.extension().get(DESCRIPTION)
        return text if isinstance(text, str) else None

    def set_description(self, text: str | None) -> None:
        """Record `text` as the object's description (None: record none)."""
        if text is not None:
            self.set_extension(DESCRIPTION, text)

    @property
    def retention(self) -> float | None:
        """The retention window (seconds) the last durable_obj writer recorded;
        None when none is recorded (or what is there is not a number)."""
        value = self.extension().get(RETENTION)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
        return None


def _describe(exc: Invalid, name: str) -> str:
    """'head.manifest.wal[0].sha256: ...' for the first error, plus a count."""
    problems = exc.problems
    loc, msg = problems[0]
    path = "head"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return f"{name} is invalid at {path}: {msg}{more}; nothing was opened or changed"
