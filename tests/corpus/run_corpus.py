"""Issue 36: run the acceptance corpus through the gate and the raw engine.

    python -m tests.corpus.run_corpus [FILE ...] [--json OUT]

Each `NN_*.sql` here is a script that builds on itself (CREATE, then INSERT,
then ALTER ...); statements are separated by a line that is exactly
`-- ;;`, because a statement may hold `;`, comments and multi-line inline
data (CSV, JSONEachRow) and no other delimiter is safe. A chunk made only of
`--` comment lines (a file's header) is not a statement.

For each file the harness
- runs every statement on a fresh object (`durable_obj.open` on a temporary
  folder store): writes through `execute()`, reads (SELECT, SHOW, DESCRIBE,
  EXISTS, WITH) through `query()`, counted apart; it records accepted or
  refused (class, category, message);
- runs the same statements on a raw connection to the same engine, in a
  database of its own, with no gate: that tells what the engine itself
  accepts. chDB holds one engine per process, so the "plain chdb
  connection" is `replica.server.connect()`, the raw `chdb` connection every
  object's own connection is made from. A statement the raw engine rejects
  is a mistake in the corpus and is reported, never counted;
- flushes, fingerprints every table, view and dictionary of the writer
  (`SHOW CREATE` and the rows' checksum, read `FINAL` where the engine has
  it, since unmerged Replacing/Summing parts depend on merge timing, not on
  the statements), closes, reopens (the open replays the WAL) and compares;
  then checkpoints, reopens from the base and compares again.

`hostile/hostile.sql` is run on a fresh object holding a table `t`; each of
its statements must be refused. One that is accepted is a security finding.

Exit status: 1 if a hostile statement was accepted or a file did not replay
identically, else 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import durable_obj
from durable_obj import DurableError
from durable_obj.replica import server

HERE = Path(__file__).resolve().parent
DELIMITER = "-- ;;"
#: First keywords of a statement that only reads: run with `query()`.
READ_KEYWORDS = frozenset({"SELECT", "SHOW", "DESCRIBE", "DESC", "EXISTS", "WITH", "EXPLAIN"})
_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.S)
#: An INSERT whose data follows its FORMAT clause on the next lines.
_INLINE_DATA = re.compile(r"\bFORMAT\s+\w+\s*\n", re.I)
#: The object's logical database; the raw reference runs in its own, so a
#: statement naming `default` is pointed at that one there (and only there).
LOGICAL_DB = "default"


def corpus_files() -> list[Path]:
    """The statement scripts, in their numbered order."""
    return sorted(HERE.glob("[0-9][0-9]_*.sql"))


def hostile_file() -> Path:
    return HERE / "hostile" / "hostile.sql"


def parse(path: Path) -> list[str]:
    """The statements of one script, in order (see the module docstring)."""
    chunks: list[list[str]] = [[]]
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.rstrip() == DELIMITER:
            chunks.append([])
        else:
            chunks[-1].append(line)
    statements = []
    for chunk in chunks:
        text = "\n".join(chunk).strip()
        if not text or all(not ln.strip() or ln.lstrip().startswith("--") for ln in chunk):
            continue
        if _INLINE_DATA.search(text):  # rows end with a newline (TSKV needs it)
            text += "\n"
        statements.append(text)
    return statements


def is_read(sql: str) -> bool:
    """Whether `sql` only reads (its first keyword after any comments)."""
    rest = sql[_LEADING_COMMENTS.match(sql).end() :]  # type: ignore[union-attr]
    word = re.match(r"[A-Za-z]+", rest)
    return bool(word) and word.group(0).upper() in READ_KEYWORDS  # type: ignore[union-attr]


@dataclass
class Outcome:
    """What happened to one statement, in the object and in the raw engine."""

    file: str
    index: int
    sql: str
    read: bool
    raw_ok: bool = True
    raw_error: str = ""
    accepted: bool = True
    error_class: str = ""
    category: str = ""
    message: str = ""
    #: Refused by the engine in the object only because an earlier statement
    #: of the same file was refused (its table is missing, ...).
    cascade: bool = False


@dataclass
class FileReport:
    file: str
    outcomes: list[Outcome] = field(default_factory=list)
    #: Empty when the writer, the WAL replay and the checkpoint agree.
    replay_mismatches: list[str] = field(default_factory=list)
    #: Why the checkpoint was refused (InvalidArgument), if it was.
    checkpoint_refused: str = ""
    seconds: float = 0.0


@dataclass
class HostileOutcome:
    sql: str
    accepted: bool
    error_class: str = ""
    category: str = ""
    message: str = ""


class Raw:
    """A raw connection to the process's engine in a fresh database of its
    own: what the engine accepts with no gate in front of it."""

    def __init__(self) -> None:
        server.start()
        self.conn = server.connect()
        self.db = f"corpus_raw_{uuid.uuid4().hex[:12]}"
        self.conn.query(f"CREATE DATABASE {self.db}", "TSV")
        self.conn.query(f"USE {self.db}", "TSV")

    def run(self, sql: str) -> str:
        """'' when the engine accepts `sql`, else its message."""
        local = re.sub(rf"\b{LOGICAL_DB}\.", f"{self.db}.", sql)
        local = local.replace(f"DB '{LOGICAL_DB}'", f"DB '{self.db}'")
        try:
            self.conn.query(local, "TSV")
        except Exception as exc:
            return str(exc).strip().split("\n")[0][:400]
        return ""

    def close(self) -> None:
        try:
            self.conn.query(f"DROP DATABASE IF EXISTS {self.db} SYNC", "TSV")
        finally:
            self.conn.close()


def _refusal(exc: BaseException) -> tuple[str, str, str]:
    category = exc.category if isinstance(exc, DurableError) else "unexpected"
    return type(exc).__name__, category, str(exc)


def _text(obj: Any, sql: str) -> str:
    try:
        return str(obj.query(sql, "TSV"))
    except Exception as exc:
        return f"<error {type(exc).__name__}: {str(exc)[:200]}>"


def _rows_digest(obj: Any, name: str) -> str:
    """The rows of `name` as one value. Read FINAL first (merge timing must
    not count), then plain; a checksum in the engine, else the sorted TSV
    rows hashed here (a type cityHash64 does not take); an error's text when
    the object cannot be read at all (Set engine, a cache dictionary), which
    must then be the same error on both sides."""
    quoted = "`" + name.replace("`", "``") + "`"
    last = ""
    for source in (f"{quoted} FINAL", quoted):
        try:
            return str(
                obj.query(f"SELECT count(), groupBitXor(cityHash64(*)) FROM {source}", "TSV")
            ).strip()
        except Exception as exc:
            last = str(exc)
        try:
            text = str(obj.query(f"SELECT * FROM {source}", "TSV"))
            lines = sorted(text.splitlines())
            return (
                f"{len(lines)} rows sha256 " + hashlib.sha256("\n".join(lines).encode()).hexdigest()
            )
        except Exception as exc:
            last = str(exc)
    return f"<unreadable: {last.splitlines()[0][:200] if last else ''}>"


def fingerprint(obj: Any) -> dict[str, tuple[str, str]]:
    """Every table, view and dictionary of the object: (SHOW CREATE, rows)."""
    names = [n for n in _text(obj, "SHOW TABLES").splitlines() if n]
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        if name.startswith(".inner"):  # a view's inner table: its uuid is new on replay
            continue
        if name.startswith("<error"):
            out[name] = (name, "")
            continue
        quoted = "`" + name.replace("`", "``") + "`"
        create = _text(obj, f"SHOW CREATE TABLE {quoted}")
        if create.startswith("<error"):
            create = _text(obj, f"SHOW CREATE DICTIONARY {quoted}")
        out[name] = (create, _rows_digest(obj, name))
    return out


def _diff(stage: str, a: dict[str, tuple[str, str]], b: dict[str, tuple[str, str]]) -> list[str]:
    problems = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            problems.append(f"{stage}: {name} missing after reopen")
        elif name not in a:
            problems.append(f"{stage}: {name} appeared after reopen")
        elif a[name][0] != b[name][0]:
            problems.append(
                f"{stage}: SHOW CREATE of {name} differs: {a[name][0]!r} != {b[name][0]!r}"
            )
        elif a[name][1] != b[name][1]:
            problems.append(f"{stage}: rows of {name} differ: {a[name][1]} != {b[name][1]}")
    return problems


def run_file(path: Path, root: Path) -> FileReport:
    """One script on a fresh object and a fresh raw database (see the module
    docstring); then the replay comparisons."""
    started = time.monotonic()
    report = FileReport(path.name)
    url = str(root / path.stem)
    raw = Raw()
    obj = durable_obj.open(url, owner="corpus")
    refused_before = False
    try:
        for index, sql in enumerate(parse(path), 1):
            out = Outcome(path.name, index, sql, is_read(sql))
            out.raw_error = raw.run(sql)
            out.raw_ok = not out.raw_error
            try:
                if out.read:
                    obj.query(sql, "TSV")
                else:
                    obj.execute(sql)
            except Exception as exc:
                out.accepted = False
                out.error_class, out.category, out.message = _refusal(exc)
                out.cascade = out.category == "engine" and out.raw_ok and refused_before
                if not out.read and out.raw_ok:
                    refused_before = True
            report.outcomes.append(out)
        obj.flush()
        written = fingerprint(obj)
    finally:
        obj.close()
        raw.close()
    report.replay_mismatches += _reopen_and_compare(url, written, report)
    report.seconds = time.monotonic() - started
    return report


def _reopen_and_compare(
    url: str, written: dict[str, tuple[str, str]], report: FileReport
) -> list[str]:
    problems: list[str] = []
    checkpoint = True
    try:
        obj = durable_obj.open(url, owner="corpus")
    except Exception as exc:
        return [f"WAL replay: reopen failed: {type(exc).__name__}: {exc}"]
    try:
        problems += _diff("WAL replay", written, fingerprint(obj))
        if checkpoint:
            obj.checkpoint()
    except durable_obj.errors.InvalidArgument as exc:
        # a checkpoint refused, with its reason (Join/Set tables): the test
        # checks which scripts may see one
        report.checkpoint_refused = str(exc)
        checkpoint = False
    except Exception as exc:
        problems.append(f"checkpoint failed: {type(exc).__name__}: {exc}")
        checkpoint = False
    finally:
        obj.close()
    if checkpoint:
        try:
            obj = durable_obj.open(url, owner="corpus")
        except Exception as exc:
            return [*problems, f"checkpoint: reopen failed: {type(exc).__name__}: {exc}"]
        try:
            problems += _diff("checkpoint", written, fingerprint(obj))
        finally:
            obj.close()
    return problems


HOSTILE_SETUP = "CREATE TABLE t (a UInt64, s String) ENGINE = MergeTree ORDER BY a"


def run_hostile(root: Path) -> list[HostileOutcome]:
    """Each hostile statement on one object holding `t`: all must be refused."""
    outcomes = []
    obj = durable_obj.open(str(root / "hostile"), owner="corpus")
    try:
        obj.execute(HOSTILE_SETUP)
        for sql in parse(hostile_file()):
            try:
                if is_read(sql):
                    obj.query(sql, "TSV")
                else:
                    obj.execute(sql)
            except Exception as exc:
                outcomes.append(HostileOutcome(sql, False, *_refusal(exc)))
            else:
                outcomes.append(HostileOutcome(sql, True))
    finally:
        obj.close(discard=True)
    return outcomes


@dataclass
class Summary:
    files: list[FileReport]
    hostile: list[HostileOutcome]

    def outcomes(self) -> list[Outcome]:
        return [o for f in self.files for o in f.outcomes]

    def counted(self, read: bool = False) -> list[Outcome]:
        """Statements the raw engine accepts (the others are corpus mistakes)."""
        return [o for o in self.outcomes() if o.raw_ok and o.read == read]

    def accepted_pct(self) -> float:
        writes = self.counted()
        return 100.0 * sum(o.accepted for o in writes) / max(1, len(writes))

    def mismatched(self) -> list[FileReport]:
        return [f for f in self.files if f.replay_mismatches]

    def hostile_accepted(self) -> list[HostileOutcome]:
        return [h for h in self.hostile if h.accepted]

    def refusal_groups(self, read: bool = False) -> dict[tuple[str, str], list[Outcome]]:
        """Refused statements grouped by (category, reason): the message's
        first sentence, with quoted names and numbers folded away."""
        groups: dict[tuple[str, str], list[Outcome]] = {}
        for o in self.counted(read):
            if o.accepted:
                continue
            category = f"{o.category} (cascade)" if o.cascade else o.category
            groups.setdefault((category, reason(o.message)), []).append(o)
        return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def reason(message: str) -> str:
    """The part of a refusal message that names the reason, not the case."""
    first = re.split(r"(?<=[.:;])\s", message.strip(), maxsplit=1)[0]
    first = re.sub(r"`[^`]*`|'[^']*'|\"[^\"]*\"", "…", first)
    return re.sub(r"\d+", "N", first)[:160]


def run_all(files: Iterable[Path] | None = None, hostile: bool = True) -> Summary:
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        root = Path(tmp)
        reports = [run_file(p, root) for p in (files or corpus_files())]
        hostile_out = run_hostile(root) if hostile else []
    return Summary(reports, hostile_out)


def _one_line(sql: str, width: int = 160) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_summary(s: Summary, out: Any = sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    everything = s.outcomes()
    writes, reads = s.counted(), s.counted(read=True)
    mistakes = [o for o in everything if not o.raw_ok]
    p(
        f"files: {len(s.files)}  statements: {len(everything)}  "
        f"(writes {sum(not o.read for o in everything)}, reads {sum(o.read for o in everything)})"
    )
    p(f"raw engine rejects (corpus mistakes, not counted): {len(mistakes)}")
    for o in mistakes:
        p(f"  {o.file}#{o.index}: {o.raw_error[:200]}\n      {_one_line(o.sql)}")
    ok = sum(o.accepted for o in writes)
    p(f"writes accepted: {ok}/{len(writes)} = {s.accepted_pct():.1f}%")
    p(f"reads accepted: {sum(o.accepted for o in reads)}/{len(reads)}")
    for label, read in (("writes", False), ("reads", True)):
        groups = s.refusal_groups(read)
        if not groups:
            continue
        p(f"\nrefused {label}, by category and reason:")
        for (category, _why), items in groups.items():
            first = items[0]
            p(f"  [{len(items):3d}] {category}: {first.error_class}: {first.message[:300]}")
            p(f"        e.g. {first.file}#{first.index}: {_one_line(first.sql)}")
    bad = s.mismatched()
    p(f"\nfiles that did not replay identically: {len(bad)}")
    for f in bad:
        p(f"  {f.file}:")
        for problem in f.replay_mismatches:
            p(f"    {problem[:400]}")
    if s.hostile:
        through = s.hostile_accepted()
        p(f"\nhostile statements: {len(s.hostile)}, refused {len(s.hostile) - len(through)}")
        engine = [h for h in s.hostile if not h.accepted and h.category == "engine"]
        if engine:
            p(f"  refused by the engine, not the gate ({len(engine)}): the engine saw them")
            for h in engine:
                p(f"    {_one_line(h.sql, 100)}  <- {h.message[:150]}")
        if through:
            p(f"  !!! SECURITY: {len(through)} hostile statement(s) ACCEPTED:")
            for h in through:
                p(f"  !!!   {_one_line(h.sql)}")
    p("\nseconds per file: " + ", ".join(f"{f.file[:2]}={f.seconds:.1f}" for f in s.files))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="scripts (default: all)")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument("--no-hostile", action="store_true")
    args = parser.parse_args(argv)
    summary = run_all(args.files or None, hostile=not args.no_hostile)
    print_summary(summary)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "files": [asdict(f) for f in summary.files],
                    "hostile": [asdict(h) for h in summary.hostile],
                },
                indent=1,
            )
        )
    return 1 if summary.hostile_accepted() or summary.mismatched() else 0


if __name__ == "__main__":
    sys.exit(main())
