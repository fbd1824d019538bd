"""The `durable-obj` command line: every command, its error path, redaction.

Commands run through click's CliRunner in this process (each command
closes what it opens), once as a real `python -m durable_obj.cli`
subprocess, and against an S3 server (moto, from tests/servers.py).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import durable_obj
from durable_obj import cli
from durable_obj.cli import formatting, progress
from durable_obj.cli.redaction import REDACTED
from durable_obj.cli.write import default_owner
from tests import servers

# The S3 server fixtures (session scoped), visible to this module's tests.
loopback_only_env = servers.loopback_only_env
moto_s3 = servers.moto_s3

REPO = Path(__file__).resolve().parents[2]
DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"
SECRET = "hunter2-correct-horse-battery"


@pytest.fixture(autouse=True)
def _pipe_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI draws tables at its pipe width unless COLUMNS says otherwise;
    a test runner may set COLUMNS (pytest-xdist's workers do): unset it."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _runner() -> CliRunner:
    if "mix_stderr" in inspect.signature(CliRunner).parameters:  # click 8.1
        return CliRunner(mix_stderr=False)
    return CliRunner()  # click >= 8.2 keeps stderr apart


def run(*args: str, input: str | None = None) -> Result:
    """Invoke the CLI; an exception that escapes the CLI fails the test."""
    result = _runner().invoke(cli.cli, list(args), input=input, catch_exceptions=False)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def ok(*args: str, input: str | None = None) -> Result:
    result = run(*args, input=input)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def fails(category: str, *args: str, code: int | None = None, input: str | None = None) -> str:
    """Run a command that must fail with exactly one `error: <category>: ...`
    line on stderr; returns that line's message."""
    result = run(*args, input=input)
    assert result.exit_code != 0, result.stdout
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stderr)
    else:
        assert result.exit_code == (2 if category == "invalid_argument" else 1)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    others = [
        line
        for line in result.stderr.splitlines()
        if not line.startswith("warning:") and "[y/N]: " not in line  # a prompt and its answer
    ]
    assert others == errors, result.stderr  # nothing else: no usage block, no traceback
    prefix = f"error: {category}: "
    assert errors[0].startswith(prefix), errors[0]
    return errors[0][len(prefix) :]


def head_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((path / "head.json").read_bytes())
    return doc


def pairs(out: str) -> dict[str, str]:
    """`info`'s "name  value" lines as a dict."""
    split = (re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines())
    return {p[0]: p[1] for p in split if len(p) == 2}


@pytest.fixture
def ns(tmp_path: Path) -> Path:
    return tmp_path / "ns"


@pytest.fixture
def obj_url(ns: Path) -> str:
    """ns/o: table m, rows 1..2 in a checkpoint, row 3 in one WAL segment."""
    url = str(ns / "o")
    with durable_obj.open(url, owner="maker") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3, 'c')")
        obj.flush()
    return url


def abandon_writer(url: str, owner: str = "holder") -> None:
    """Leave a held, unexpired lease behind, as a SIGKILLed writer would."""
    obj = durable_obj.open(url, owner=owner)
    obj._abandon()


# -- ls -------------------------------------------------------------------------------
def test_ls_lists_objects_with_their_lease(ns: Path, obj_url: str) -> None:
    abandon_writer(str(ns / "p"))
    out = ok("ls", str(ns)).stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert set(rows) == {"o", "p"}
    cells_o = [c.strip() for c in rows["o"].split("│")[1:-1]]
    # id, seq, generation, holder, expiry, segments, live, stored, last write
    assert cells_o[:6] == ["o", "2", "1", "-", "-", "1"]
    assert cells_o[6].endswith("KiB") and cells_o[8].endswith("ago")
    cells_p = [c.strip() for c in rows["p"].split("│")[1:-1]]
    assert cells_p[3] == "holder"
    assert cells_p[4].startswith("in ") and cells_p[4].endswith("s")


def test_ls_empty_and_missing_namespace(tmp_path: Path) -> None:
    # an existing folder without objects: an empty namespace
    (tmp_path / "empty").mkdir()
    result = ok("ls", str(tmp_path / "empty"))
    assert result.stdout == ""
    assert "no durable objects" in result.stderr
    assert json.loads(ok("ls", str(tmp_path / "empty"), "--json").stdout) == []
    # a folder that is not there: not_found, and nothing is created
    message = fails("not_found", "ls", str(tmp_path / "nothing-here"))
    assert f"folder {tmp_path / 'nothing-here'} does not exist" in message
    fails("not_found", "ls", str(tmp_path / "nothing-here"), "--json")
    assert not (tmp_path / "nothing-here").exists()
    (tmp_path / "a-file").write_text("x")
    assert "is not a folder" in fails("not_found", "ls", str(tmp_path / "a-file"))
    # memory: an unused namespace is empty
    assert ok("ls", f"memory://unused-{uuid.uuid4().hex}", "--json").stdout.strip() == "[]"


def test_ls_json(ns: Path, obj_url: str) -> None:
    abandon_writer(str(ns / "p"))
    # from the catalog (one read): each row as its writer last wrote it, no stored size
    hint = json.loads(ok("ls", str(ns), "--json").stdout)
    assert [(e["id"], e["from_catalog"], e["stored_bytes"]) for e in hint] == [
        ("o", True, None),
        ("p", True, None),
    ]
    listed = json.loads(ok("ls", str(ns), "--json", "--verify").stdout)
    assert [entry["id"] for entry in listed] == ["o", "p"]
    assert not any(e["from_catalog"] for e in listed)
    same = ("id", "seq", "generation", "owner", "expires_at", "segments", "live_bytes", "db")
    assert [[e[k] for k in same] for e in hint] == [[e[k] for k in same] for e in listed]
    head = head_doc(ns / "p")
    o, p = listed
    assert o["seq"] == 2 and o["generation"] == 1 and o["segments"] == 1
    assert o["owner"] is None and o["expires_at"] is None
    assert p["owner"] == "holder" and p["expires_at"] == head["lease"]["expires_at"]
    assert o["live_bytes"] > 0 and o["stored_bytes"] >= o["live_bytes"]
    assert isinstance(o["last_write"], float)
    assert (o["db"], o["timezone"]) == ("default", "UTC")
    assert o["description"] is None and p["description"] is None
    fast = json.loads(ok("ls", str(ns), "--json", "--heads-only").stdout)
    assert [(e["stored_bytes"], e["last_write"]) for e in fast] == [(None, None)] * 2
    assert [{**e, "stored_bytes": None, "last_write": None} for e in listed] == fast
    assert ok("catalog", "rebuild", str(ns)).stdout.strip().endswith("rebuilt: 2 object(s)")
    (row,) = [
        line for line in ok("ls", str(ns), "--heads-only").stdout.splitlines() if "│ o " in line
    ]
    assert [c.strip() for c in row.split("│")[1:-1]][7:9] == ["-", "-"]


def test_ls_shows_descriptions(ns: Path, obj_url: str) -> None:
    # No object has a description: no description column.
    assert "description" not in ok("ls", str(ns)).stdout
    with durable_obj.open(str(ns / "agent"), description="Alice's [bold]memory[/bold]") as obj:
        obj.execute(DDL)
    out = ok("ls", str(ns)).stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    (header,) = [line for line in out.splitlines() if "┃ id " in line]
    assert [c.strip() for c in header.split("┃")[1:-1]][-1] == "description"
    # the text as written (never read as markup), "-" for an object without one
    assert [c.strip() for c in rows["agent"].split("│")[1:-1]][-1] == (
        "Alice's [bold]memory[/bold]"
    )
    assert [c.strip() for c in rows["o"].split("│")[1:-1]][-1] == "-"
    listed = {e["id"]: e for e in json.loads(ok("ls", str(ns), "--json").stdout)}
    assert listed["agent"]["description"] == "Alice's [bold]memory[/bold]"
    assert listed["o"]["description"] is None
    assert pairs(ok("info", str(ns / "agent")).stdout)["description"] == (
        "Alice's [bold]memory[/bold]"
    )


def test_lease_expiry_shown_as_expired(monkeypatch: pytest.MonkeyPatch, ns: Path) -> None:
    url = str(ns / "short")
    abandon_writer(url, owner="brief")
    expires_at = head_doc(ns / "short")["lease"]["expires_at"]
    # The CLI's clock, frozen just past the lease's expiry (no sleeping).
    monkeypatch.setattr(formatting, "clock", lambda: expires_at + 1)
    out = ok("ls", str(ns)).stdout
    (row,) = [line for line in out.splitlines() if "│ short " in line]
    assert [c.strip() for c in row.split("│")[1:-1]][3:5] == ["brief", "expired"]
    assert "expired at" in ok("info", url).stdout
    monkeypatch.setattr(formatting, "clock", lambda: expires_at - 25)
    (row,) = [line for line in ok("ls", str(ns)).stdout.splitlines() if "│ short " in line]
    assert [c.strip() for c in row.split("│")[1:-1]][3:5] == ["brief", "in 25s"]
    assert "expires in 25s (" in ok("info", url).stdout


# -- info -----------------------------------------------------------------------------
def test_info_summary(ns: Path, obj_url: str) -> None:
    out = ok("info", obj_url).stdout
    head = head_doc(ns / "o")
    fields = pairs(out)
    assert fields["object"] == "o"
    assert fields["seq"] == "2"
    assert fields["timezone"] == "UTC"
    assert fields["database"] == "default"
    assert fields["base"].startswith(head["manifest"]["base"]["key"] + " (")
    assert fields["wal"].startswith("1 segment(s), ")
    assert fields["lease"] == "released (generation 1)"
    assert fields["protocol"].startswith("v1 ")
    assert fields["engine"].startswith("chdb ")
    assert fields["live size"].endswith("KiB") and fields["stored size"].endswith("KiB")
    assert fields["last write"].endswith(" ago)")


def test_info_json_prints_the_stored_head(ns: Path, obj_url: str) -> None:
    out = ok("info", obj_url, "--json").stdout
    assert json.loads(out) == head_doc(ns / "o")


def test_info_errors(ns: Path, obj_url: str) -> None:
    message = fails("not_found", "info", str(ns / "missing"))
    assert "'missing'" in message
    fails("not_found", "info", str(ns / "missing"), "--json")
    fails("invalid_argument", "info", str(ns / ".."))
    # A schema-invalid head: `info` refuses it, `info --json` still shows it.
    head = head_doc(ns / "o")
    head["manifest"]["seq"] = "three"
    (ns / "o" / "head.json").write_text(json.dumps(head))
    assert "seq" in fails("corrupt", "info", obj_url)
    assert json.loads(ok("info", obj_url, "--json").stdout)["manifest"]["seq"] == "three"
    (ns / "o" / "head.json").write_bytes(b"\xff not json")
    fails("corrupt", "info", obj_url, "--json")


# -- verify ---------------------------------------------------------------------------
def test_verify_and_restore(obj_url: str) -> None:
    out = ok("verify", obj_url).stdout
    assert out.startswith("ok: o: 2 key(s)")
    out = ok("verify", obj_url, "--restore").stdout
    (row,) = [line for line in out.splitlines() if "│ m " in line]
    assert row.split("│")[2].strip() == "3"


def test_verify_detects_a_corrupt_base(ns: Path, obj_url: str) -> None:
    (base,) = (ns / "o" / "checkpoints").iterdir()
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0xFF
    base.write_bytes(bytes(data))
    message = fails("corrupt", "verify", obj_url)
    assert base.name in message and "SHA-256" in message
    fails("corrupt", "verify", obj_url, "--restore")


def test_verify_detects_a_missing_segment(ns: Path, obj_url: str) -> None:
    (segment,) = (ns / "o" / "wal").iterdir()
    segment.unlink()
    assert "missing" in fails("corrupt", "verify", obj_url)
    fails("not_found", "verify", str(ns / "nope"))


# -- sql ------------------------------------------------------------------------------
def test_sql_renders_a_table(obj_url: str) -> None:
    out = ok("sql", obj_url, "SELECT k, v, k * 1.5 AS f, NULL AS n FROM m ORDER BY k").stdout
    lines = out.splitlines()
    header = next(line for line in lines if "┃" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["k", "v", "f", "n"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if "│" in line]
    assert rows == [["1", "a", "1.5", "NULL"], ["2", "b", "3", "NULL"], ["3", "c", "4.5", "NULL"]]
    assert lines[-1] == "3 row(s)"


def test_sql_raw_format(obj_url: str) -> None:
    assert ok("sql", obj_url, "SELECT * FROM m ORDER BY k", "--format", "CSV").stdout == (
        '1,"a"\n2,"b"\n3,"c"\n'
    )
    out = ok("sql", obj_url, "SELECT k FROM m ORDER BY k", "--format", "JSONEachRow").stdout
    assert [json.loads(line)["k"] for line in out.splitlines()] == [1, 2, 3]


def test_sql_errors(ns: Path, obj_url: str) -> None:
    fails("classification_refused", "sql", obj_url, "INSERT INTO m VALUES (9, 'z')")
    fails("engine", "sql", obj_url, "SELECT * FROM no_such_table")
    fails("not_found", "sql", str(ns / "nope"), "SELECT 1")
    assert not (ns / "nope").exists()
    assert "QUERY" in fails("invalid_argument", "sql", obj_url)
    # nothing was written by any of it
    with durable_obj.open(obj_url, read_only=True) as obj:
        assert obj.query("SELECT count() FROM m") == "3\n"


def test_sql_refusal_speaks_cli(obj_url: str) -> None:
    message = fails("classification_refused", "sql", obj_url, "DELETE FROM m WHERE k = 1")
    assert "'durable-obj exec'" in message and "execute()" not in message


# -- exec -----------------------------------------------------------------------------
def test_exec_commits_and_says_what(ns: Path, obj_url: str) -> None:
    before = head_doc(ns / "o")["manifest"]
    out = ok(
        "exec", obj_url, "INSERT INTO m VALUES (4, 'd')", "ALTER TABLE m DELETE WHERE k = 1"
    ).stdout
    after = head_doc(ns / "o")
    (segment,) = [r["key"] for r in after["manifest"]["wal"] if r not in before["wal"]]
    assert after["manifest"]["seq"] == before["seq"] + 1
    assert out == f"committed 2 statement(s) to o as {segment}, seq {before['seq'] + 1}\n"
    assert after["lease"]["owner"] is None  # closed: the lease is released
    sums = ok("sql", obj_url, "SELECT groupArray(k) FROM (SELECT k FROM m ORDER BY k)")
    assert "[2,3,4]" in sums.stdout.replace(" ", "")


def test_exec_all_or_nothing(ns: Path, obj_url: str) -> None:
    before = head_doc(ns / "o")
    message = fails(
        "engine", "exec", obj_url, "INSERT INTO m VALUES (4, 'd')", "INSERT INTO nope VALUES (1)"
    )
    assert message.startswith("statement 2 of 2: ") and "Nothing of this run" in message
    after = head_doc(ns / "o")
    assert after["manifest"] == before["manifest"] and after["lease"]["owner"] is None
    # a read-only statement: exec points at sql, in the CLI's words
    message = fails("classification_refused", "exec", obj_url, "SELECT * FROM m")
    assert "'durable-obj sql'" in message and "query()" not in message
    two = "INSERT INTO m VALUES (5, 'e'); INSERT INTO m VALUES (6, 'f')"
    message = fails("classification_refused", "exec", obj_url, two)
    assert "as its own argument to 'durable-obj exec'" in message and "execute()" not in message
    assert head_doc(ns / "o")["manifest"] == before["manifest"]
    assert "QUERY" not in fails("invalid_argument", "exec", obj_url)


def test_exec_missing_object_and_create(ns: Path) -> None:
    url = str(ns / "fresh")
    assert "--create" in fails("not_found", "exec", url, DDL)
    assert not (ns / "fresh").exists()
    out = ok("exec", url, "--create", DDL, "INSERT INTO m VALUES (1, 'a')").stdout
    assert out.startswith("committed 2 statement(s) to fresh as wal/")
    assert ok("sql", url, "SELECT count() FROM m", "--format", "TSV").stdout == "1\n"


def test_exec_on_a_held_lease_says_force(ns: Path, obj_url: str) -> None:
    abandon_writer(obj_url)
    message = fails("lease_held", "exec", obj_url, "INSERT INTO m VALUES (4, 'd')")
    assert "pass --force" in message and "force=True" not in message
    assert "read_only" not in message
    out = ok("exec", obj_url, "--force", "--owner", "ops", "INSERT INTO m VALUES (4, 'd')")
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "force takeover" in warned[0], out.stderr  # said once
    assert ok("sql", obj_url, "SELECT count() FROM m", "--format", "TSV").stdout == "4\n"


def test_exec_and_checkpoint_reclaim_their_own_owner_name_at_once(ns: Path, obj_url: str) -> None:
    abandon_writer(obj_url, owner="ops")  # an earlier `--owner ops` run, killed
    insert = "INSERT INTO m VALUES (4, 'd')"
    message = fails("lease_held", "exec", obj_url, "--owner", "ops", insert)
    assert "run it again with --reclaim" in message and "reclaim=True" not in message
    out = ok("exec", obj_url, "--owner", "ops", "--reclaim", insert)
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "took the lease at once from 'ops'" in warned[0], out.stderr
    abandon_writer(obj_url, owner=default_owner())  # the default owner: durable-obj-cli@HOST
    ok("checkpoint", obj_url, "--reclaim")
    assert head_doc(ns / "o")["manifest"]["wal"] == []
    # another owner's lease is never reclaimed
    abandon_writer(obj_url, owner="someone")
    message = fails("lease_held", "exec", obj_url, "--owner", "ops", "--reclaim", insert)
    assert "'someone'" in message and "--reclaim takes only a lease held under" in message
    message = fails("lease_held", "checkpoint", obj_url, "--reclaim")
    assert "'someone'" in message and "--reclaim takes only" in message
    assert ok("sql", obj_url, "SELECT count() FROM m", "--format", "TSV").stdout == "4\n"


def test_params_bind_values_in_sql_and_exec(ns: Path, obj_url: str) -> None:
    hostile = "x'); DROP TABLE m; --"
    ok(
        "exec",
        obj_url,
        "INSERT INTO m VALUES ({k:UInt32}, {v:String})",
        "-p",
        "k=7",
        "-p",
        f"v={hostile}",
    )
    out = ok(
        "sql", obj_url, "SELECT v FROM m WHERE k = {k:UInt32}", "-p", "k=7", "--format", "TSVRaw"
    ).stdout
    assert out == hostile + "\n"
    # the segment holds the statement that ran, with the values as literals
    wal = sorted((ns / "o" / "wal").iterdir())[-1].read_text()
    assert "{k:UInt32}" not in wal and "DROP TABLE m; --" in wal
    message = fails(
        "invalid_argument", "exec", obj_url, "INSERT INTO m VALUES (8, 'h')", "-p", "k=8"
    )
    assert "--param k" in message
    assert "NAME=VALUE" in fails("invalid_argument", "sql", obj_url, "SELECT 1", "-p", "novalue")
    assert ok("sql", obj_url, "SELECT count() FROM m", "--format", "TSV").stdout == "4\n"


# -- checkpoint -----------------------------------------------------------------------
def test_checkpoint(ns: Path, obj_url: str) -> None:
    before = head_doc(ns / "o")
    out = ok("checkpoint", obj_url, "--owner", "ops").stdout
    after = head_doc(ns / "o")
    base = after["manifest"]["base"]
    assert base["key"] != before["manifest"]["base"]["key"]
    assert after["manifest"]["wal"] == []
    assert out.startswith(f"checkpoint of o: {base['key']} (")
    assert f"{base['size']} bytes" in out
    assert after["lease"]["owner"] is None  # closed: the lease is released
    with durable_obj.open(obj_url, read_only=True) as obj:
        assert obj.query("SELECT count() FROM m") == "3\n"


def test_checkpoint_increment_and_full(tmp_path: Path) -> None:
    """`checkpoint` takes an increment when the policy allows; `--full` a
    full base, which drops the chain and its reader feature (V1 reads it)."""
    url = str(tmp_path / "c")
    with durable_obj.open(url, owner="maker") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m SELECT number, repeat('v', 40) FROM numbers(20000)")
        obj.checkpoint()
    ok("exec", url, "--full-checkpoints", "INSERT INTO m VALUES (100000, 'x')")
    ok("checkpoint", url)
    chained = head_doc(tmp_path / "c")
    assert chained["manifest"]["durable_obj"]["chain"]
    assert "durable_obj.incremental-base" in chained["protocol"]["reader_features"]
    ok("checkpoint", url, "--full")
    full = head_doc(tmp_path / "c")
    assert "chain" not in full["manifest"].get("durable_obj", {})
    assert full["protocol"]["reader_features"] == []
    with durable_obj.open(url, read_only=True) as obj:
        assert obj.query("SELECT count() FROM m") == "20001\n"


def test_checkpoint_errors(ns: Path, obj_url: str) -> None:
    fails("not_found", "checkpoint", str(ns / "nope"))
    assert not (ns / "nope").exists()  # a writer open would have created it
    abandon_writer(obj_url)
    message = fails("lease_held", "checkpoint", obj_url)
    assert "holder" in message and "pass --force" in message and "force=True" not in message
    result = ok("checkpoint", obj_url, "--force")
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warning and "force takeover" in warning[0]
    assert head_doc(ns / "o")["manifest"]["wal"] == []


# -- gc -------------------------------------------------------------------------------
def test_gc(ns: Path, obj_url: str) -> None:
    ok("checkpoint", obj_url, "--full")  # supersedes the first base (an increment would not)
    # The first base and the segment are now superseded, and the checkpoint
    # archived their manifest (history/); a grace period keeps all three.
    # --retention 0: no time-travel window (tests/integration/test_history.py).
    stored = {p for p in (ns / "o").rglob("*") if p.is_file()}
    assert len(list((ns / "o" / "history").iterdir())) == 1
    out = ok("gc", obj_url, "--retention", "0").stdout.splitlines()
    assert out[0].startswith("deleted 0 key(s), 0 B; kept 5 key(s)")
    # ... and says so: which keys wait, for how long
    assert out[1].startswith("3 of the kept key(s) (")
    assert "wait out the 3600 s grace period (--grace): collectable from " in out[1]
    assert re.search(r"\(in (59m|1h 0m)\)", out[1]), out[1]
    assert (
        ok("gc", obj_url, "--dry-run", "--grace", "7200", "--retention", "0")
        .stdout.splitlines()[1]
        .startswith("3 of the kept key(s) (")
    )
    # the default window (the one the head records: 7 days) keeps them all
    out = ok("gc", obj_url, "--grace", "0", "--dry-run").stdout.splitlines()
    assert out[-1].startswith("would delete 0 key(s), ")
    out = ok(
        "gc", obj_url, "--grace", "0", "--dry-run", "--list", "--retention", "0"
    ).stdout.splitlines()
    assert out[-1].startswith("would delete 3 key(s), ")
    doomed = {ns / key for key in out[:-1]}
    assert len(doomed) == 3 and doomed <= stored
    assert {p for p in (ns / "o").rglob("*") if p.is_file()} == stored
    out = ok("gc", obj_url, "--grace", "0", "--retention", "0").stdout
    assert out.startswith("deleted 3 key(s), ") and "kept 2 key(s)" in out
    assert "grace" not in out  # nothing waits any more
    assert {p for p in (ns / "o").rglob("*") if p.is_file()} == stored - doomed
    ok("verify", obj_url, "--restore")
    fails("invalid_argument", "gc", obj_url, "--grace", "-1")
    fails("invalid_argument", "gc", obj_url, "--retention", "-1")
    fails("not_found", "gc", str(ns / "nope"), "--grace", "0")


# -- fork -----------------------------------------------------------------------------
def test_fork(ns: Path, obj_url: str) -> None:
    out = ok("fork", obj_url, "o2").stdout
    assert out.startswith("forked o into o2\n")
    fields = pairs("\n".join(out.splitlines()[1:]))
    assert fields["object"] == "o2" and fields["forked from"] == "o at seq 2"
    assert ok("sql", str(ns / "o2"), "SELECT sum(k) FROM m", "--format", "TSV").stdout == "6\n"
    assert "already exists" in fails("invalid_argument", "fork", obj_url, "o2")
    fails("invalid_argument", "fork", obj_url, "a/b")
    fails("not_found", "fork", str(ns / "nope"), "o3")
    assert not (ns / "o3").exists()


def test_fork_to_a_url(
    ns: Path, obj_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's `durable-obj fork ./ns/a1 ./ns/a2`, another folder, progress,
    and an existing destination refused untouched."""
    seen: list[tuple[str, int]] = []

    class Recording(progress.RichProgress):
        def set_size(self, size: int) -> None:
            seen.append((self._description, size))
            super().set_size(size)

    monkeypatch.setattr(progress, "RichProgress", Recording)
    monkeypatch.chdir(ns.parent)
    out = ok("fork", "./ns/o", "./ns/o2").stdout
    assert out.startswith("forked o into ./ns/o2\n")
    assert pairs("\n".join(out.splitlines()[1:]))["forked from"] == "o at seq 2"
    assert ("fork", head_doc(ns / "o2")["manifest"]["base"]["size"]) in seen  # the upload
    out = ok("fork", obj_url, str(tmp_path / "elsewhere" / "copy")).stdout
    assert out.startswith(f"forked o into {tmp_path / 'elsewhere' / 'copy'}\n")
    copy = str(tmp_path / "elsewhere" / "copy")
    assert ok("sql", copy, "SELECT sum(k) FROM m", "--format", "TSV").stdout == "6\n"
    before = {p: p.read_bytes() for p in (ns / "o2").rglob("*") if p.is_file()}
    message = fails("invalid_argument", "fork", obj_url, "./ns/o2")
    assert "'o2' already exists" in message and "nothing was written" in message
    assert {p: p.read_bytes() for p in (ns / "o2").rglob("*") if p.is_file()} == before
    assert "--to-option" in fails("invalid_argument", "fork", obj_url, "o3", "-t", "key=x")
    assert not (ns / "o3").exists()


@pytest.mark.slow
@pytest.mark.moto
def test_fork_across_s3(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """folder -> S3 with --to-option, S3 -> folder with -o; secrets redacted."""
    root, options = request.getfixturevalue("moto_s3")
    namespace = f"{root}/cli-fork-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "ns"
    with durable_obj.open(str(local / "exp"), owner="maker") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    secret, key = options["secret"], options["key"]
    region = options.get("client_kwargs", {}).get("region_name", "us-east-1")
    pairs_ = {
        "endpoint_url": options["endpoint_url"],
        "key": key,
        "secret": secret,
        "client_kwargs.region_name": region,
    }
    to = [arg for k, v in pairs_.items() for arg in ("-t", f"{k}={v}")]
    src = [arg for k, v in pairs_.items() for arg in ("-o", f"{k}={v}")]
    outputs = []
    up = ok("fork", str(local / "exp"), f"{namespace}/published", *to)
    outputs.append(up.stdout + up.stderr)
    assert up.stdout.startswith(f"forked exp into {namespace}/published\n")
    published = ok("sql", f"{namespace}/published", "SELECT sum(k) FROM m", "--format", "TSV", *src)
    assert published.stdout == "6\n"
    down = ok("fork", f"{namespace}/published", str(tmp_path / "debug" / "copy"), *src)
    outputs.append(down.stdout + down.stderr)
    copy = ok("sql", str(tmp_path / "debug" / "copy"), "SELECT sum(k) FROM m", "--format", "TSV")
    assert copy.stdout == "6\n"
    beside = ok("fork", f"{namespace}/published", f"{namespace}/again", *src)  # -o reused
    outputs.append(beside.stdout + beside.stderr)
    refused = run("fork", str(local / "exp"), f"{namespace}/published", *to)
    outputs.append(refused.stdout + refused.stderr)
    assert refused.exit_code == 2 and "already exists" in refused.stderr
    assert durable_obj.Namespace(namespace, storage_options=options).info("published").seq == 1
    for text in outputs:
        assert secret not in text and key not in text


# -- export ---------------------------------------------------------------------------
def test_export(tmp_path: Path, obj_url: str) -> None:
    dest = tmp_path / "out"
    out = ok("export", obj_url, str(dest)).stdout
    assert out.splitlines() == [f"file://{dest}/m.parquet"]
    assert sorted(pq.read_table(dest / "m.parquet").to_pydict()["k"]) == [1, 2, 3]
    out = ok("export", obj_url, str(dest), "--format", "jsonl").stdout
    assert out.splitlines() == [f"file://{dest}/m.jsonl"]
    lines = (dest / "m.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["v"] for line in lines) == ["a", "b", "c"]
    fails("invalid_argument", "export", obj_url, str(dest), "--format", "xml")
    fails("not_found", "export", str(tmp_path / "ns" / "nope"), str(dest))


def test_export_refuses_to_overwrite(tmp_path: Path, obj_url: str) -> None:
    dest = tmp_path / "out"
    ok("export", obj_url, str(dest))
    before = (dest / "m.parquet").read_bytes()
    ok("exec", obj_url, "INSERT INTO m VALUES (4, 'd')")
    message = fails("invalid_argument", "export", obj_url, str(dest))
    assert f"file://{dest}/m.parquet already exist(s)" in message and "--overwrite" in message
    assert (dest / "m.parquet").read_bytes() == before
    ok("export", obj_url, str(dest), "--overwrite")
    assert sorted(pq.read_table(dest / "m.parquet").to_pydict()["k"]) == [1, 2, 3, 4]
    assert "--all" in fails("invalid_argument", "export", obj_url, str(dest), "--id", "o")


def test_export_encodes_table_names_into_the_destination(tmp_path: Path, ns: Path) -> None:
    """Statements choose table names: each file lands directly in DEST_URL,
    its name the table's percent-encoded unless plain, for --overwrite too."""
    url = str(ns / "h")
    # (a tab in a name is refused: the engine writes it escaped in a base)
    tables = ["../../escaped/pwn", "a/b", "sp ace", "%41", "A", "m"]
    ok(
        "exec",
        url,
        "--create",
        *(f"CREATE TABLE {_ident(t)} (s String) ENGINE = Memory" for t in tables),
    )
    ok("exec", url, "INSERT INTO `../../escaped/pwn` VALUES ('pwned')")
    (tmp_path / "escaped").mkdir()  # where `../../escaped/pwn` would land
    dest = tmp_path / "x" / "dest"
    out = ok("export", url, str(dest), "--format", "csv").stdout
    files = sorted(p.name for p in dest.iterdir())
    assert files == sorted(
        [
            "%2E.%2F..%2Fescaped%2Fpwn.csv",
            "a%2Fb.csv",
            "sp%20ace.csv",
            "%2541.csv",
            "A.csv",
            "m.csv",
        ]
    )
    assert sorted(out.splitlines()) == sorted(f"file://{dest}/{name}" for name in files)
    assert sorted(unquote(name.removesuffix(".csv")) for name in files) == sorted(tables)
    assert (dest / "%2E.%2F..%2Fescaped%2Fpwn.csv").read_text() == '"s"\n"pwned"\n'
    assert not any((tmp_path / "escaped").iterdir())
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["dest"]
    # --overwrite checks the same names
    message = fails("invalid_argument", "export", url, str(dest), "--format", "csv")
    assert f"file://{dest}/a%2Fb.csv" in message and f"file://{dest}/A.csv" in message
    (dest / "a%2Fb.csv").unlink()
    ok("export", url, str(dest), "--format", "csv", "--overwrite")
    assert (dest / "a%2Fb.csv").exists() and not any((tmp_path / "escaped").iterdir())
    # --all reads each object's own export of the table back
    one = tmp_path / "one.parquet"
    ok("export", str(ns), str(one), "--all", "../../escaped/pwn")
    assert pq.read_table(one).to_pydict() == {"object_id": ["h"], "s": ["pwned"]}


def _ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


@pytest.fixture
def agents(ns: Path, obj_url: str) -> Path:
    """ns: o (m: 1..3), a2 (m: 10), a3 (m: empty), bare (no table m)."""
    ok("exec", str(ns / "a2"), "--create", DDL, "INSERT INTO m VALUES (10, 'x')")
    ok("exec", str(ns / "a3"), "--create", DDL)
    ok("exec", str(ns / "bare"), "--create", "CREATE TABLE t (x UInt8) ENGINE = Memory")
    return ns


def test_export_namespace_parquet(tmp_path: Path, agents: Path) -> None:
    out = tmp_path / "all.parquet"
    result = ok("export", str(agents), str(out), "--all", "m")
    assert result.stdout == f"file://{out}\n"
    assert "skipped 1 object(s) without table 'm': bare" in result.stderr
    assert "exported table 'm' of 3 object(s), 4 row(s)" in result.stderr
    table = pq.read_table(out)
    assert table.column_names == ["object_id", "k", "v"]
    assert str(table.schema.field("k").type) == "uint32"
    rows = sorted(zip(*table.to_pydict().values(), strict=True))
    assert rows == [("a2", 10, "x"), ("o", 1, "a"), ("o", 2, "b"), ("o", 3, "c")]
    # an existing file is refused unless --overwrite
    assert "--overwrite" in fails("invalid_argument", "export", str(agents), str(out), "--all", "m")
    ok("export", str(agents), str(out), "--all", "m", "--id", "a2", "--overwrite")
    assert pq.read_table(out).to_pydict() == {"object_id": ["a2"], "k": [10], "v": ["x"]}


def test_export_namespace_text_formats(tmp_path: Path, agents: Path) -> None:
    csv = tmp_path / "all.csv"
    ok("export", str(agents), str(csv), "--all", "m", "--format", "csv", "--id-column", "agent")
    lines = csv.read_text().splitlines()
    assert lines[0] == '"agent","k","v"'  # one header, from the first object
    assert sorted(lines[1:]) == ['"a2",10,"x"', '"o",1,"a"', '"o",2,"b"', '"o",3,"c"']
    jsonl = tmp_path / "all.jsonl"
    ok("export", str(agents), str(jsonl), "--all", "m", "--format", "jsonl")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted((r["object_id"], r["k"]) for r in rows) == [
        ("a2", 10),
        ("o", 1),
        ("o", 2),
        ("o", 3),
    ]


def test_export_namespace_errors(tmp_path: Path, agents: Path) -> None:
    out = tmp_path / "x.parquet"
    message = fails("not_found", "export", str(agents), str(out), "--all", "nope")
    assert "no object in" in message and "'nope'" in message
    fails("not_found", "export", str(tmp_path / "no-ns"), str(out), "--all", "m")
    fails("not_found", "export", str(agents), str(out), "--all", "m", "--id", "ghost")
    fails("invalid_argument", "export", str(agents), str(out), "--all", "m", "--id", "a/b")
    message = fails(
        "invalid_argument", "export", str(agents), str(out), "--all", "m", "--id-column", "k"
    )
    assert "--id-column" in message
    ok("exec", str(agents / "a3"), "ALTER TABLE m ADD COLUMN extra UInt8")
    message = fails("schema_mismatch", "export", str(agents), str(out), "--all", "m")
    assert "'a3'" in message and "extra UInt8" in message
    assert not out.exists()


# -- release --------------------------------------------------------------------------
def test_release(ns: Path, obj_url: str) -> None:
    abandon_writer(obj_url)
    held = head_doc(ns / "o")["lease"]
    assert held["owner"] == "holder"
    message = fails("invalid_argument", "release", obj_url)
    assert "fenced" in message and "--force" in message
    assert head_doc(ns / "o")["lease"] == held
    # declined at the prompt: nothing changes
    assert fails("aborted", "release", obj_url, "--force", input="n\n")
    assert head_doc(ns / "o")["lease"] == held
    result = ok("release", obj_url, "--force", input="y\n")
    assert "holder" in result.stderr  # the prompt names the holder
    assert "released the lease of o (was held by 'holder'" in result.stdout
    lease = head_doc(ns / "o")["lease"]
    assert lease["owner"] is None and lease["generation"] == held["generation"]
    out = ok("release", obj_url, "--force", "--yes").stdout
    assert "not held" in out
    abandon_writer(obj_url, owner="other")
    ok("release", obj_url, "--force", "--yes")
    assert head_doc(ns / "o")["lease"]["owner"] is None
    fails("not_found", "release", str(ns / "nope"), "--force", "--yes")


# -- bad input --------------------------------------------------------------------------
def test_bad_storage_option_syntax(ns: Path, obj_url: str) -> None:
    assert "KEY=VALUE" in fails("invalid_argument", "ls", str(ns), "-o", "fsync")
    fails("invalid_argument", "info", obj_url, "-o", "=x")
    fails("invalid_argument", "info", obj_url, "-o", "a=1", "-o", "a.b=2")
    fails("invalid_argument", "info", obj_url, "-o", "a..b=2")
    # a value without a key might itself be a credential: never echoed
    message = fails("invalid_argument", "info", obj_url, "-o", SECRET)
    assert SECRET not in message
    # well-formed options reach the store (fsync=false is the file store's own)
    ok("info", obj_url, "-o", "fsync=false")


def test_unsupported_protocol() -> None:
    message = fails("invalid_argument", "ls", "ftp://example.invalid/ns")
    assert "ftp://" in message and "s3://" in message
    fails("invalid_argument", "info", "ftp://example.invalid/ns/o")
    fails("invalid_argument", "sql", "ftp://example.invalid/ns/o", "SELECT 1")


def test_usage_errors_are_one_line(obj_url: str) -> None:
    assert "no-such" in fails("invalid_argument", "no-such-command")
    assert "--bogus" in fails("invalid_argument", "info", obj_url, "--bogus")
    assert ok("--help").stdout.startswith("Usage:")
    assert "Usage:" in ok("gc", "--help").stdout


# -- redaction --------------------------------------------------------------------------
def test_credentials_never_printed(
    tmp_path: Path, obj_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local folder refuses storage options it does not use (issue 13); this
    # test is about redacting credential-like values, so let it take them.
    monkeypatch.setattr("durable_obj.stores.file.check_options", lambda *a, **k: None)
    opts = ["-o", f"password={SECRET}", "-o", f"client_kwargs.session_token={SECRET}x"]
    result = ok("sql", obj_url, f"SELECT '{SECRET}' AS s, 'plain' AS p", *opts)
    assert SECRET not in result.stdout and REDACTED in result.stdout
    assert "plain" in result.stdout
    result = run("sql", obj_url, f"SELECT '{SECRET}x' FROM no_such_table", *opts)
    assert result.exit_code == 1 and result.stderr.startswith("error: engine: ")
    assert SECRET not in result.stderr and REDACTED in result.stderr
    # unrelated options are not redacted
    result = ok("sql", obj_url, "SELECT 'visible-value'", "-o", "region=visible-value")
    assert "visible-value" in result.stdout


# -- progress ---------------------------------------------------------------------------


def test_progress_is_passed_for_transfers(
    monkeypatch: pytest.MonkeyPatch, ns: Path, obj_url: str
) -> None:
    seen: list[tuple[str, int]] = []

    class Recording(progress.RichProgress):
        def set_size(self, size: int) -> None:
            seen.append((self._description, size))
            super().set_size(size)

    monkeypatch.setattr(progress, "RichProgress", Recording)
    base_size = head_doc(ns / "o")["manifest"]["base"]["size"]
    ok("verify", obj_url)
    assert seen == [("verify", base_size)]
    ok("checkpoint", obj_url)
    assert seen[-1] == ("checkpoint", head_doc(ns / "o")["manifest"]["base"]["size"])
    ok("fork", obj_url, "o2")
    assert seen[-1][0] == "fork"


# -- as a real process ------------------------------------------------------------------
@pytest.mark.slow
def test_runs_as_a_module(ns: Path, obj_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def proc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "durable_obj.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )

    done = proc("sql", obj_url, "SELECT count() FROM m", "--format", "TSV")
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")
    done = proc("info", str(ns / "missing"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: not_found: ") and "Traceback" not in done.stderr
    done = proc("ls", str(ns), "-o", "oops")
    assert done.returncode == 2 and done.stderr.startswith("error: invalid_argument: ")
    assert done.stderr.count("\n") == 1


# -- S3 -------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.moto
def test_against_s3(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root, options = request.getfixturevalue("moto_s3")
    namespace = f"{root}/cli-{uuid.uuid4().hex[:8]}"
    url = f"{namespace}/o"
    with durable_obj.open(url, owner="maker", storage_options=options) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a'), (2, 'b')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3, 'c')")
        obj.flush()
    secret, key = options["secret"], options["key"]
    region = options.get("client_kwargs", {}).get("region_name", "us-east-1")
    opts = [
        *("-o", f"endpoint_url={options['endpoint_url']}"),
        *("-o", f"key={key}"),
        *("-o", f"secret={secret}"),
        *("-o", f"client_kwargs.region_name={region}"),
    ]
    outputs: list[str] = []

    def s3(*args: str) -> Result:
        result = run(*args, *opts)
        outputs.append(result.stdout + result.stderr)
        return result

    listed = s3("ls", namespace)
    assert listed.exit_code == 0 and "│ o " in listed.stdout
    assert [o["id"] for o in json.loads(s3("ls", namespace, "--json").stdout)] == ["o"]
    empty = s3("ls", f"{namespace}-empty-prefix", "--json")  # an empty prefix: empty namespace
    assert (empty.exit_code, empty.stdout.strip()) == (0, "[]")
    no_bucket = s3("ls", "s3://no-such-bucket-here/ns")
    assert no_bucket.exit_code == 1
    # A missing bucket is the store's error, as open() reports it (issue 37).
    assert no_bucket.stderr.startswith("error: backend: ") and "no-such-bucket-here" in (
        no_bucket.stderr
    )
    assert "does not exist" in no_bucket.stderr
    with pytest.raises(durable_obj.BackendError, match=r"no-such-bucket-here.*does not exist"):
        durable_obj.open("s3://no-such-bucket-here/ns/o", owner="w", storage_options=options)
    info = s3("info", url)
    assert info.exit_code == 0 and "1 segment(s)" in info.stdout
    assert json.loads(s3("info", url, "--json").stdout)["manifest"]["seq"] == 2
    sql = s3("sql", url, "SELECT sum(k) FROM m", "--format", "TSV")
    assert (sql.exit_code, sql.stdout) == (0, "6\n")
    shown = s3("sql", url, f"SELECT '{secret}' AS s")  # redacted even when a query returns it
    assert shown.exit_code == 0 and REDACTED in shown.stdout
    verify = s3("verify", url, "--restore")
    assert verify.exit_code == 0 and verify.stdout.startswith("ok: o: 2 key(s)")
    gc = s3("gc", url, "--grace", "0", "--dry-run")
    assert gc.exit_code == 0 and gc.stdout.startswith("would delete 0 key(s)")
    dest = tmp_path / "export"
    export = s3("export", url, str(dest), "--format", "csv")
    assert export.exit_code == 0 and (dest / "m.csv").read_text().count("\n") == 4
    export = s3("export", url, f"{namespace}-export")  # same protocol: -o reused
    assert export.exit_code == 0
    assert export.stdout.strip() == f"{namespace}-export/m.parquet"
    checkpoint = s3("checkpoint", url, "--owner", "ops")
    assert checkpoint.exit_code == 0 and checkpoint.stdout.startswith("checkpoint of o: ")
    fork = s3("fork", url, "o2")
    assert fork.exit_code == 0 and fork.stdout.startswith("forked o into o2")
    forked = s3("sql", f"{namespace}/o2", "SELECT sum(k) FROM m", "--format", "TSV")
    assert (forked.exit_code, forked.stdout) == (0, "6\n")
    holder = durable_obj.open(url, owner="holder", storage_options=options)
    holder._abandon()  # a writer that died holding the lease
    refused = s3("release", url)
    assert refused.exit_code == 2 and refused.stderr.startswith("error: invalid_argument: ")
    released = s3("release", url, "--force", "--yes")
    assert released.exit_code == 0
    assert durable_obj.Namespace(namespace, storage_options=options).info("o").owner is None
    missing = s3("info", f"{namespace}/nope")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: not_found: ")
    wrong = run("ls", namespace, *opts[:-2], "-o", f"secret={secret}-wrong")
    outputs.append(wrong.stdout + wrong.stderr)
    for text in outputs:
        assert secret not in text and key not in text


def test_the_cli_passes_the_same_statement_gate(obj_url: str, tmp_path: Path) -> None:
    """Issue 25: the nested-comment prefix, a heredoc with digits and the
    `--allow-nondeterministic` flag get nothing past the gate through the CLI."""
    host = tmp_path / "host.txt"
    host.write_text("host data")
    hide = "/* /* */ ' */ "
    fails("classification_refused", "sql", obj_url, f"{hide}SELECT file('{host}') -- '")
    fails("classification_refused", "sql", obj_url, f"SELECT $a1$ ' $a1$, file('{host}') -- '")
    fails(
        "classification_refused",
        "exec",
        obj_url,
        "--allow-nondeterministic",
        "CREATE TABLE u (x String) ENGINE = URL('http://127.0.0.1:9/x', CSV)",
    )
    fails(
        "classification_refused",
        "exec",
        obj_url,
        f"{hide}CREATE TABLE f (s String) ENGINE = File(RawBLOB, '{host}') -- '",
    )
    assert host.read_text() == "host data"
