"""`durable-obj`: inspect and administer durable objects from a shell.

    durable-obj ls s3://bucket/agents -o endpoint_url=http://127.0.0.1:9000 -o key=... -o secret=...
    durable-obj info /srv/agents/checkout-api
    durable-obj sql /srv/agents/checkout-api "SELECT count() FROM memories"
    durable-obj verify /srv/agents/checkout-api --restore

An object URL's last path segment is the object id; the rest is its
namespace. Every command takes repeated `-o/--storage-option key=value`
(dotted keys nest: `-o client_kwargs.region_name=eu-west-1`), passed to the
store as `storage_options`.

Every failure is one line on stderr, `error: <category>: <message>`, and a
non-zero exit: 2 for bad input (category `invalid_argument`), 1 otherwise.
Values of storage options whose key names a credential (secret, key, token,
password, credential, connection_string) are replaced by `***` wherever they
would appear in the output.

Needs the `cli` extra: `pip install 'durable_obj[cli]'`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import IO, Any, NoReturn, TypeVar, cast

import click
from fsspec.callbacks import Callback
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from durable_obj import ops
from durable_obj.errors import DurableError, InvalidArgument, NotFound
from durable_obj.namespace import Namespace, check_oid, split_object_url
from durable_obj.object import EXPORT_FORMATS
from durable_obj.protocol import HEAD_KEY

F = TypeVar("F", bound=Callable[..., Any])

#: Transfers of at least this many bytes get a progress bar (on a terminal).
PROGRESS_MIN_BYTES = 4 * 1024 * 1024
#: A storage option whose key contains one of these is a credential.
SENSITIVE_KEY_PARTS = ("secret", "key", "token", "password", "credential", "connection_string")
#: Shorter credential values are not searched for in the output (they would
#: mangle unrelated text and are no secret anyway).
MIN_REDACTED_LENGTH = 4
REDACTED = "***"
#: Output width when stdout is not a terminal: wide enough that tables of
#: keys and URLs are not folded in logs and pipes.
PIPE_WIDTH = 200

_META = "durable_obj.cli"
_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?\Z")


# -- failures -------------------------------------------------------------------
class Failure(click.ClickException):
    """A failure shown as one line: `error: <category>: <message>`."""

    def __init__(self, category: str, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.category = category
        # click >= 8.5 declares exit_code a ClassVar; each failure has its own.
        object.__setattr__(self, "exit_code", exit_code)

    def format_message(self) -> str:
        return f"error: {self.category}: {_one_line(self.message)}"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(self.format_message(), file=file, err=file is None)


def _one_line(text: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def _exit_code(category: str) -> int:
    return 2 if category == "invalid_argument" else 1


# -- redaction --------------------------------------------------------------------
def is_sensitive(key: str) -> bool:
    """Whether a storage option (dotted path included) names a credential."""
    lowered = key.lower()
    return any(part in lowered for part in SENSITIVE_KEY_PARTS)


class Session:
    """Per-invocation state: the credential values to keep out of the output."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()

    def add_secrets(self, options: dict[str, Any], prefix: str = "") -> None:
        for key, value in options.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                self.add_secrets(value, f"{path}.")
            elif (
                is_sensitive(path) and isinstance(value, str) and len(value) >= MIN_REDACTED_LENGTH
            ):
                self.secrets.add(value)

    def redact(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    def stdout(self) -> Console:
        return self._console(sys.stdout)

    def stderr(self) -> Console:
        return self._console(sys.stderr)

    def _console(self, stream: IO[str]) -> Console:
        wrapped = _RedactingStream(stream, self.redact)
        tty = wrapped.isatty()
        return Console(
            file=cast(IO[str], wrapped),
            width=None if tty or os.environ.get("COLUMNS") else PIPE_WIDTH,
            markup=False,
            highlight=False,
            emoji=False,
            soft_wrap=False,
        )

    def echo(self, text: str, *, err: bool = False) -> None:
        click.echo(self.redact(text), err=err)


class _RedactingStream:
    """A text stream that redacts every write before passing it on."""

    def __init__(self, stream: IO[str], redact: Callable[[str], str]) -> None:
        self._stream = stream
        self._redact = redact

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        self._stream.write(self._redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        try:
            return bool(self._stream.isatty())
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()


def session(ctx: click.Context | None = None) -> Session:
    root = (ctx or click.get_current_context()).find_root()
    found = root.meta.get(_META)
    if not isinstance(found, Session):
        found = root.meta[_META] = Session()
    return found


# -- storage options ------------------------------------------------------------
def parse_value(key: str, text: str) -> Any:
    """true/false, ints and floats are typed; everything else stays a string.
    A credential's value always stays a string (a numeric password too)."""
    if is_sensitive(key):
        return text
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_storage_options(items: Sequence[str]) -> dict[str, Any]:
    """`["key=value", "client_kwargs.region_name=x"]` -> a (nested) dict.
    Raises `InvalidArgument` naming the position, never echoing a value."""
    out: dict[str, Any] = {}
    for n, item in enumerate(items, start=1):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidArgument(
                f"storage option #{n} is not KEY=VALUE (e.g. -o endpoint_url=http://...)"
            )
        parts = key.split(".")
        if any(not p for p in parts):
            raise InvalidArgument(f"storage option {key!r} has an empty part in its dotted key")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidArgument(
                    f"storage option {'.'.join(parts[: depth + 1])!r} is given both as a value "
                    "and as a group of options"
                )
            node = child
        leaf = parts[-1]
        if isinstance(node.get(leaf), dict):
            raise InvalidArgument(
                f"storage option {key!r} is given both as a value and as a group of options"
            )
        node[leaf] = parse_value(key, text)
    return out


def _options_callback(ctx: click.Context, _param: click.Parameter, value: Any) -> dict[str, Any]:
    items: Sequence[str] = value or ()
    sess = session(ctx)
    # Register what looks like a credential before anything can fail on it.
    for item in items:
        key, sep, text = item.partition("=")
        if sep and is_sensitive(key) and len(text) >= MIN_REDACTED_LENGTH:
            sess.secrets.add(text)
    parsed = parse_storage_options(items)
    sess.add_secrets(parsed)
    return parsed


def storage_options(f: F) -> F:
    return click.option(
        "--storage-option",
        "-o",
        "storage_options",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_options_callback,
        help="Passed to the store (repeatable; dotted keys nest; true/false and numbers "
        "are typed).",
    )(f)


# -- progress ---------------------------------------------------------------------
class RichProgress(Callback):  # type: ignore[misc]  # fsspec ships no types
    """An fsspec callback showing a rich progress bar for each transfer of at
    least `min_bytes`, on a terminal only. One instance serves many transfers
    in a row (each starts with `set_size`)."""

    def __init__(self, console: Console, description: str, *, min_bytes: int | None = None) -> None:
        super().__init__()
        self._console = console
        self._description = description
        self._min_bytes = PROGRESS_MIN_BYTES if min_bytes is None else min_bytes
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self.transfers = 0

    def set_size(self, size: int) -> None:
        with self._lock:
            self._stop_locked()
            self.size = size
            self.value = 0
            self.transfers += 1
            if size and size >= self._min_bytes and self._console.is_terminal:
                self._progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    DownloadColumn(binary_units=True),
                    TransferSpeedColumn(),
                    TimeRemainingColumn(),
                    console=self._console,
                    transient=True,
                )
                self._progress.start()
                self._task = self._progress.add_task(self._description, total=size)

    def relative_update(self, inc: int = 1) -> None:
        with self._lock:
            self.value += inc
            self._refresh_locked()

    def absolute_update(self, value: int) -> None:
        with self._lock:
            self.value = value
            self._refresh_locked()

    def call(self, hook_name: str | None = None, **kwargs: Any) -> Any:
        return None  # no hooks: the bar is the only consumer

    def close(self) -> None:
        with self._lock:
            self._stop_locked()

    def _refresh_locked(self) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=self.value)
        if self.size and self.value >= self.size:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress = None
        self._task = None


@contextlib.contextmanager
def _progress(description: str) -> Iterator[RichProgress]:
    bar = RichProgress(session().stderr(), description)
    try:
        yield bar
    finally:
        bar.close()


# -- formatting -------------------------------------------------------------------
def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        size /= 1024
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def lease_expiry(expires_at: float | None, now: float | None = None) -> str:
    """'in 25s', 'expired', or '-' for a released lease."""
    if expires_at is None:
        return "-"
    remaining = expires_at - (time.time() if now is None else now)
    return f"in {human_duration(remaining)}" if remaining > 0 else "expired"


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    delta = (time.time() if now is None else now) - ts
    if delta < 0:
        return f"in {human_duration(delta)}"
    return f"{human_duration(delta)} ago"


def timestamp(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return f"{_utc(ts)} ({ago(ts, now)})"


def _print_pairs(pairs: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in pairs)
    session().echo("\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs))


def _lease_text(info: ops.ObjectInfo, now: float | None = None) -> str:
    if info.owner is None:
        return f"released (generation {info.generation})"
    held = f"held by {info.owner!r}, generation {info.generation}"
    if info.expires_at is None:
        return held
    expiry = lease_expiry(info.expires_at, now)
    if expiry == "expired":
        return f"{held}, expired at {_utc(info.expires_at)}"
    return f"{held}, expires {expiry} ({_utc(info.expires_at)})"


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print_info(info: ops.ObjectInfo, namespace_url: str) -> None:
    head = info.head
    manifest = head.manifest
    proto = head.protocol
    engine = head.engine
    base = manifest.base
    pairs = [
        ("object", info.oid),
        ("namespace", namespace_url),
        (
            "protocol",
            f"v{proto.version} (reader features: {', '.join(proto.reader_features) or '-'}; "
            f"writer features: {', '.join(proto.writer_features) or '-'})",
        ),
        (
            "engine",
            f"{engine.name} {engine.version} (backup format {engine.backup_format}, "
            f"min reader {engine.min_reader})",
        ),
        ("lease", _lease_text(info)),
        ("database", manifest.db),
        ("base", "none" if base is None else f"{base.key} ({human_size(base.size)})"),
        (
            "wal",
            f"{len(manifest.wal)} segment(s), {human_size(sum(r.size for r in manifest.wal))}",
        ),
        ("seq", str(manifest.seq)),
        ("timezone", info.timezone),
        ("live size", human_size(info.live_bytes)),
        ("stored size", human_size(info.stored_bytes)),
        ("last write", timestamp(info.last_write)),
    ]
    forked = head.extension().get("forked_from")
    if isinstance(forked, dict):
        pairs.append(("forked from", f"{forked.get('oid')} at seq {forked.get('seq')}"))
    _print_pairs(pairs)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


# -- the command group ------------------------------------------------------------
class _LogHandler(logging.Handler):
    """durable_obj's log records as one redacted line each on stderr."""

    def __init__(self, sess: Session, level: int) -> None:
        super().__init__(level)
        self._session = sess

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _one_line(record.getMessage())
            prefix = "warning" if record.levelno >= logging.WARNING else "info"
            self._session.echo(f"{prefix}: {text}", err=True)
        except Exception:
            self.handleError(record)


def _convert(exc: BaseException, sess: Session) -> Failure:
    """Any failure as a one-line, redacted `Failure`."""
    if isinstance(exc, Failure):
        return Failure(exc.category, sess.redact(exc.message), exc.exit_code)
    if isinstance(exc, click.exceptions.Abort):
        return Failure("aborted", "nothing was changed", 1)
    if isinstance(exc, click.ClickException):
        message = exc.format_message()
        usage_ctx = getattr(exc, "ctx", None)
        if isinstance(exc, click.UsageError) and usage_ctx is not None:
            message += f" (see '{usage_ctx.command_path} --help')"
        return Failure("invalid_argument", sess.redact(message), exc.exit_code or 2)
    if isinstance(exc, DurableError):
        category = exc.category
        return Failure(category, sess.redact(str(exc)), _exit_code(category))
    if isinstance(exc, KeyboardInterrupt):
        return Failure("interrupted", "stopped by the user", 130)
    return Failure("internal", sess.redact(f"{type(exc).__name__}: {exc}"), 1)


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", click.exceptions.Exit)
#: Not failures: --help, --version, and a bare command showing its help (click >= 8.2).
_PASS_THROUGH: tuple[type[BaseException], ...] = (click.exceptions.Exit, _NO_ARGS_IS_HELP)

_USER_WARNINGS = (UserWarning, RuntimeWarning)


class _Group(click.Group):
    """Turns every failure into one line on stderr and a non-zero exit."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise _convert(exc, Session()) from None

    def invoke(self, ctx: click.Context) -> Any:
        sess = session(ctx)
        verbose = bool(ctx.params.get("verbose"))
        handler = _LogHandler(sess, logging.INFO if verbose else logging.WARNING)
        logger = logging.getLogger("durable_obj")
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if verbose else logging.WARNING)
        others: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    return super().invoke(ctx)
                finally:
                    for w in caught:
                        if issubclass(w.category, _USER_WARNINGS):
                            sess.echo(f"warning: {_one_line(str(w.message))}", err=True)
                        else:
                            others.append(w)
        except _PASS_THROUGH:
            raise
        except BaseException as exc:
            if isinstance(exc, SystemExit | GeneratorExit):
                raise
            raise _convert(exc, sess) from None
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            # Warnings meant for developers go back to the warnings machinery.
            for w in others:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Also show durable_obj's info log lines.")
@click.version_option(package_name="durable_obj", prog_name="durable-obj")
def cli(verbose: bool) -> None:
    """Inspect and administer durable objects (chDB databases in object storage).

    An OBJECT_URL's last path segment is the object id; the rest is its namespace
    (a local folder, file://, memory://, s3://, gs://, az://).
    """


def _object(url: str) -> tuple[str, str]:
    namespace, oid = split_object_url(url)
    return namespace, check_oid(oid)


# -- ls ---------------------------------------------------------------------------
@cli.command("ls")
@click.argument("ns_url")
@storage_options
def ls_cmd(ns_url: str, storage_options: dict[str, Any]) -> None:
    """List the objects of a namespace."""
    ns = Namespace(ns_url, storage_options=storage_options)
    infos = ns.list()
    sess = session()
    if not infos:
        sess.echo(f"no durable objects in {ns.url}", err=True)
        return
    now = time.time()
    table = Table()
    for name, justify in (
        ("id", "left"),
        ("seq", "right"),
        ("generation", "right"),
        ("lease holder", "left"),
        ("lease expiry", "left"),
        ("segments", "right"),
        ("live size", "right"),
        ("stored size", "right"),
        ("last write", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for info in infos:
        table.add_row(
            info.oid,
            str(info.seq),
            str(info.generation),
            info.owner or "-",
            lease_expiry(info.expires_at, now),
            str(info.segments),
            human_size(info.live_bytes),
            human_size(info.stored_bytes),
            ago(info.last_write, now),
        )
    sess.stdout().print(table)


# -- info -------------------------------------------------------------------------
@cli.command("info")
@click.argument("object_url")
@click.option("--json", "as_json", is_flag=True, help="Print the stored head.json instead.")
@storage_options
def info_cmd(object_url: str, as_json: bool, storage_options: dict[str, Any]) -> None:
    """Show an object's head: protocol, engine, lease, manifest, sizes."""
    namespace, oid = _object(object_url)
    ns = Namespace(namespace, storage_options=storage_options)
    if as_json:
        # The stored document as is, not validated: it also shows a corrupt head.
        blob = ns.store.get(f"{oid}/{HEAD_KEY}")
        if blob is None:
            raise NotFound(f"no durable object {oid!r} in {ns.url}")
        try:
            doc = json.loads(blob.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise Failure("corrupt", f"{oid}/{HEAD_KEY} is not UTF-8 JSON ({exc})") from None
        session().echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    _print_info(ns.info(oid), ns.url)


# -- verify -----------------------------------------------------------------------
@cli.command("verify")
@click.argument("object_url")
@click.option("--restore", is_flag=True, help="Also restore and replay it; count rows per table.")
@storage_options
def verify_cmd(object_url: str, restore: bool, storage_options: dict[str, Any]) -> None:
    """Download every key the head references and check its size and SHA-256."""
    namespace, oid = _object(object_url)
    with _progress("verify") as bar:
        ns = Namespace(namespace, storage_options=storage_options, progress=bar)
        report = ns.verify(oid, restore=restore)
    sess = session()
    sess.echo(
        f"ok: {oid}: {len(report.checked)} key(s), {human_size(report.checked_bytes)}, "
        "every size and SHA-256 matches the head"
    )
    if report.rows is not None:
        if not report.rows:
            sess.echo("restored and replayed: the object has no tables")
            return
        sess.echo("restored and replayed; rows per table:")
        table = Table()
        table.add_column("table", overflow="fold")
        table.add_column("rows", justify="right")
        for name, rows in report.rows.items():
            table.add_row(name, str(rows))
        sess.stdout().print(table)


# -- sql --------------------------------------------------------------------------
@cli.command("sql")
@click.argument("object_url")
@click.argument("query")
@click.option(
    "--format",
    "fmt",
    metavar="FMT",
    help="Print the engine's raw output in this format (CSV, TSV, JSONEachRow, ...).",
)
@storage_options
def sql_cmd(object_url: str, query: str, fmt: str | None, storage_options: dict[str, Any]) -> None:
    """Run one read-only query on the last flushed state."""
    namespace, oid = _object(object_url)
    ns = Namespace(namespace, storage_options=storage_options)
    with ns.open(oid, read_only=True) as obj:
        result = obj.query(query, fmt or "JSONCompact")
    sess = session()
    if fmt:
        click.echo(sess.redact(str(result)), nl=False)
        return
    try:
        doc = json.loads(str(result))
        columns = [str(c["name"]) for c in doc["meta"]]
        rows: list[list[Any]] = list(doc["data"])
    except (ValueError, KeyError, TypeError) as exc:
        raise Failure("engine", f"unexpected JSONCompact output from the engine ({exc})") from None
    table = Table()
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    sess.stdout().print(table)
    sess.echo(f"{len(rows)} row(s)")


# -- checkpoint -------------------------------------------------------------------
def _default_owner() -> str:
    return f"durable-obj-cli@{socket.gethostname() or 'localhost'}"


@cli.command("checkpoint")
@click.argument("object_url")
@click.option("--owner", help="Name in the lease while this runs (default: durable-obj-cli@HOST).")
@click.option(
    "--force",
    is_flag=True,
    help="Take an unexpired lease: its holder is fenced and loses what it did not flush.",
)
@storage_options
def checkpoint_cmd(
    object_url: str, owner: str | None, force: bool, storage_options: dict[str, Any]
) -> None:
    """Fold the WAL into a new base snapshot (open as writer, checkpoint, close)."""
    namespace, oid = _object(object_url)
    with _progress("checkpoint") as bar:
        ns = Namespace(
            namespace,
            owner=owner or _default_owner(),
            storage_options=storage_options,
            progress=bar,
        )
        ns.info(oid)  # a writer open would create a missing object: refuse instead
        with ns.open(oid, force=force) as obj:
            key = obj.checkpoint()
            head = obj.head
    assert head is not None and head.manifest.base is not None
    base = head.manifest.base
    session().echo(
        f"checkpoint of {oid}: {key} ({human_size(base.size)}, {base.size} bytes), "
        f"seq {head.manifest.seq}"
    )


# -- gc ---------------------------------------------------------------------------
@cli.command("gc")
@click.argument("object_url")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=ops.DEFAULT_GC_GRACE,
    show_default=True,
    metavar="SECONDS",
    help="Keep everything until the current base is this old.",
)
@click.option("--list", "list_keys", is_flag=True, help="Also print each (would-be) deleted key.")
@storage_options
def gc_cmd(
    object_url: str,
    dry_run: bool,
    grace: float,
    list_keys: bool,
    storage_options: dict[str, Any],
) -> None:
    """Delete superseded bases, folded segments and orphans no head can need."""
    namespace, oid = _object(object_url)
    ns = Namespace(namespace, storage_options=storage_options)
    report = ns.gc(oid, grace=grace, dry_run=dry_run)
    sess = session()
    if list_keys:
        for key in report.deleted:
            sess.echo(key)
    verb = "would delete" if dry_run else "deleted"
    sess.echo(
        f"{verb} {len(report.deleted)} key(s), {human_size(report.deleted_bytes)}; "
        f"kept {report.kept} key(s), {human_size(report.kept_bytes)}"
    )


# -- fork -------------------------------------------------------------------------
@cli.command("fork")
@click.argument("src_url")
@click.argument("dst_id")
@storage_options
def fork_cmd(src_url: str, dst_id: str, storage_options: dict[str, Any]) -> None:
    """Create DST_ID beside SRC_URL, starting from SRC's current state."""
    namespace, oid = _object(src_url)
    with _progress("fork") as bar:
        ns = Namespace(namespace, storage_options=storage_options, progress=bar)
        info = ns.fork(oid, dst_id)
    session().echo(f"forked {oid} into {info.oid}")
    _print_info(info, ns.url)


# -- export -----------------------------------------------------------------------
@cli.command("export")
@click.argument("object_url")
@click.argument("dest_url")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(EXPORT_FORMATS), case_sensitive=False),
    default="parquet",
    show_default=True,
)
@click.option(
    "--to-option",
    "-t",
    "to_options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_options_callback,
    help="Storage options for DEST_URL (default: the -o options when DEST_URL has the "
    "same protocol as OBJECT_URL, else none).",
)
@storage_options
def export_cmd(
    object_url: str,
    dest_url: str,
    fmt: str,
    to_options: dict[str, Any],
    storage_options: dict[str, Any],
) -> None:
    """Write each table to DEST_URL/<table>.<parquet|csv|jsonl>."""
    namespace, oid = _object(object_url)
    if not to_options and _protocol(dest_url) == _protocol(namespace):
        to_options = storage_options
    with _progress("export") as bar:
        ns = Namespace(namespace, storage_options=storage_options, progress=bar)
        written = ns.export(oid, dest_url, format=fmt.lower(), storage_options=to_options)
    sess = session()
    for url in written:
        sess.echo(url)
    sess.echo(f"exported {len(written)} table(s) of {oid}", err=True)


def _protocol(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep and scheme.lower() not in ("file", "local") else "file"


# -- release ----------------------------------------------------------------------
@cli.command("release")
@click.argument("object_url")
@click.option("--force", is_flag=True, help="Required: releasing fences the current holder.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@storage_options
def release_cmd(object_url: str, force: bool, yes: bool, storage_options: dict[str, Any]) -> None:
    """Release the lease whoever holds it (administrative)."""
    namespace, oid = _object(object_url)
    if not force:
        raise Failure(
            "invalid_argument",
            "release takes the lease from whoever holds it: a live holder is fenced at its "
            "next commit and loses every statement it has not flushed. Use it only for a "
            "writer that is gone, and pass --force to do it. Nothing was read or changed.",
            2,
        )
    ns = Namespace(namespace, storage_options=storage_options)
    info = ns.info(oid)
    sess = session()
    if info.owner is None:
        sess.echo(f"the lease of {oid} is not held (generation {info.generation}); nothing to do")
        return
    if not yes:
        click.confirm(
            sess.redact(
                f"Release the lease of {oid} held by {info.owner!r} "
                f"({lease_expiry(info.expires_at)})? If that writer is alive it is fenced "
                "and loses what it has not flushed"
            ),
            abort=True,
            err=True,
        )
    ns.release(oid)
    sess.echo(
        f"released the lease of {oid} (was held by {info.owner!r}, generation {info.generation})"
    )


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point (`durable-obj`)."""
    cli.main(args=None if argv is None else list(argv), prog_name="durable-obj")
    raise SystemExit(0)  # pragma: no cover - cli.main always exits


if __name__ == "__main__":
    main()
