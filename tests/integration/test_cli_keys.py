"""The command line's keys (issue 29): `--key-env/--key-file/--kms-key` on
every command that reads or writes an object's data, fork's `--to-key-*`,
`rotate-key`, `ls`/`info` naming the key id, and a key value in no output.

Commands run through click's CliRunner as in test_cli.py; the MCP server
once as a `durable-obj mcp` subprocess over stdio.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result

import durable_obj
from durable_obj.wire.keys import StaticKey
from tests.integration.test_cli import fails, ok, pairs, run

REPO = Path(__file__).resolve().parents[2]
DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"
MARKER = "kiwi-marmalade-7f3a"


@pytest.fixture(autouse=True)
def _pipe_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Two keys as hex in $DO_KEY_A and $DO_KEY_B, and their key ids."""
    a, b = secrets.token_hex(32), secrets.token_hex(32)
    monkeypatch.setenv("DO_KEY_A", a)
    monkeypatch.setenv("DO_KEY_B", b)
    return {"a": a, "b": b, "id_a": StaticKey(a).key_id, "id_b": StaticKey(b).key_id}


@pytest.fixture
def url(tmp_path: Path, keys: dict[str, str]) -> str:
    """An object encrypted under key A, with one row holding MARKER."""
    target = str(tmp_path / "ns" / "notes")
    ok(
        "exec",
        target,
        "--create",
        "--key-env",
        "DO_KEY_A",
        DDL,
        f"INSERT INTO m VALUES (1, '{MARKER}')",
    )
    return target


def _no_key_in(result: Result, *values: str) -> None:
    text = result.stdout + result.stderr
    for value in values:
        assert value not in text
        assert value.upper() not in text


def _rows(url: str, *key: str) -> str:
    return ok("sql", url, "SELECT k, v FROM m ORDER BY k", "--format", "TSV", *key).stdout


def test_create_write_query_and_show_the_key_id(url: str, keys: dict[str, str]) -> None:
    ok("exec", url, "--key-env", "DO_KEY_A", "INSERT INTO m VALUES (2, 'b')")
    assert _rows(url, "--key-env", "DO_KEY_A") == f"1\t{MARKER}\n2\tb\n"
    stored = b"".join(p.read_bytes() for p in Path(url).rglob("*") if p.is_file())
    assert MARKER.encode() not in stored
    info = pairs(ok("info", url).stdout)  # no key needed to read the head
    assert keys["id_a"] in info["encryption"] and info["compression"] == "none"
    listed = ok("ls", str(Path(url).parent)).stdout
    assert "encryption" in listed and keys["id_a"] in listed
    [entry] = json.loads(ok("ls", str(Path(url).parent), "--json").stdout)
    assert entry["encrypted_with"] == keys["id_a"] and entry["compressed"] is False


def test_no_key_or_the_wrong_key_is_refused_naming_the_key_id(
    url: str, keys: dict[str, str]
) -> None:
    head = (Path(url) / "head.json").read_bytes()
    message = fails("key_refused", "sql", url, "SELECT count() FROM m", code=1)
    assert keys["id_a"] in message and "--key-env" in message and "encryption=" not in message
    for command in (
        ["sql", url, "SELECT count() FROM m"],
        ["exec", url, "INSERT INTO m VALUES (3, 'c')"],
        ["checkpoint", url],
    ):
        result = run(*command, "--key-env", "DO_KEY_B")
        assert result.exit_code == 1
        assert "error: key_refused: " in result.stderr and keys["id_a"] in result.stderr
        _no_key_in(result, keys["a"], keys["b"])
    assert (Path(url) / "head.json").read_bytes() == head  # nothing changed


def test_rotate_key_then_the_old_key_is_refused_and_the_new_one_works(
    url: str, keys: dict[str, str]
) -> None:
    ok("checkpoint", url, "--key-env", "DO_KEY_A")  # two data keys, one history file
    ok("exec", url, "--key-env", "DO_KEY_A", "INSERT INTO m VALUES (2, 'b')")
    result = ok("rotate-key", url, "--key-env", "DO_KEY_A", "--new-key-env", "DO_KEY_B")
    assert "rewrapped 2 data key(s)" in result.stdout and keys["id_b"] in result.stdout
    _no_key_in(result, keys["a"], keys["b"])
    message = fails("key_refused", "sql", url, "SELECT 1", "--key-env", "DO_KEY_A")
    assert keys["id_b"] in message
    assert _rows(url, "--key-env", "DO_KEY_B") == f"1\t{MARKER}\n2\tb\n"
    # the past is readable with the new key: time travel and history
    assert _rows(url, "--key-env", "DO_KEY_B", "--at", "1") == f"1\t{MARKER}\n"
    assert "3 restorable point(s)" in ok("history", url, "--key-env", "DO_KEY_B").stdout
    assert keys["id_b"] in pairs(ok("info", url).stdout)["encryption"]
    # the new key is the writer's key too
    ok("exec", url, "--key-env", "DO_KEY_B", "INSERT INTO m VALUES (3, 'c')")


def test_rotate_key_needs_both_keys_and_an_encrypted_object(
    tmp_path: Path, url: str, keys: dict[str, str]
) -> None:
    message = fails("invalid_argument", "rotate-key", url, "--key-env", "DO_KEY_A")
    assert "--new-key-env" in message
    fails("invalid_argument", "rotate-key", url, "--new-key-env", "DO_KEY_B")
    plain = str(tmp_path / "ns" / "plain")
    ok("exec", plain, "--create", DDL)
    message = fails(
        "invalid_argument",
        "rotate-key",
        plain,
        "--key-env",
        "DO_KEY_A",
        "--new-key-env",
        "DO_KEY_B",
    )
    assert "not encrypted" in message and "--to-key-env" in message
    # a key given for a plain object is refused, in the CLI's words
    message = fails("invalid_argument", "sql", plain, "SELECT 1", "--key-env", "DO_KEY_A")
    assert "durable-obj fork" in message and "encryption=" not in message


def test_key_file_hex_base64_and_raw(tmp_path: Path, url: str, keys: dict[str, str]) -> None:
    raw = bytes.fromhex(keys["a"])
    for name, data in (
        ("hex", (keys["a"] + "\n").encode()),
        ("b64", base64.b64encode(raw)),
        ("raw", raw),
    ):
        path = tmp_path / f"key.{name}"
        path.write_bytes(data)
        path.chmod(0o600)
        assert _rows(url, "--key-file", str(path)) == f"1\t{MARKER}\n"
    missing = fails("invalid_argument", "sql", url, "SELECT 1", "--key-file", str(tmp_path / "no"))
    assert "cannot read key file" in missing
    bad = tmp_path / "bad"
    bad.write_text("not a key at all, but long enough to be mistaken for one")
    result = run("sql", url, "SELECT 1", "--key-file", str(bad))
    assert result.exit_code == 2 and "is not a 256-bit key" in result.stderr
    _no_key_in(result, "not a key at all")


def test_a_key_value_is_never_printed(tmp_path: Path, url: str, keys: dict[str, str]) -> None:
    a, b = keys["a"], keys["b"]
    b64 = base64.b64encode(bytes.fromhex(a)).decode()
    results = [
        # the key itself where its variable's name or file path belongs: refused unshown
        run("sql", url, "SELECT 1", "--key-env", a),
        run("sql", url, "SELECT 1", "--key-env", b64),
        run("sql", url, "SELECT 1", "--key-file", a),
        run("fork", url, "copy", "--key-env", "DO_KEY_A", "--to-key-env", b),
        run("rotate-key", url, "--key-env", "DO_KEY_A", "--new-key-env", b),
        # errors with the key in play
        run("sql", url, "SELECT 1", "--key-env", "DO_KEY_B"),
        run("sql", url, "SELECT * FROM nowhere", "--key-env", "DO_KEY_A"),
        run("sql", url, "SELECT 1", "--key-env", "DO_KEY_A", "--key-file", "/x"),
        run("sql", url, "SELECT 1", "--key-env", "DO_KEY_UNSET"),
        # successes
        run("sql", url, "SELECT * FROM m", "--key-env", "DO_KEY_A"),
        run("info", url),
        run("info", url, "--json"),
        run("-v", "history", url, "--key-env", "DO_KEY_A"),
    ]
    for result in results[:5]:
        assert result.exit_code == 2 and "looks like a key itself" in result.stderr
    assert [r.exit_code for r in results[5:9]] == [1, 1, 2, 2]
    for result in results:
        _no_key_in(result, a, b, b64)
    assert not (tmp_path / "ns" / "copy").exists()


def test_exclusive_flags(url: str) -> None:
    message = fails(
        "invalid_argument", "sql", url, "SELECT 1", "--key-env", "DO_KEY_A", "--kms-key", "k"
    )
    assert "--key-env and --kms-key" in message and "give one" in message
    message = fails("invalid_argument", "sql", url, "SELECT 1", "--kms-endpoint", "http://x")
    assert "--kms-endpoint goes with --kms-key" in message
    message = fails(
        "invalid_argument",
        "fork",
        url,
        "copy",
        "--key-env",
        "DO_KEY_A",
        "--to-key-env",
        "DO_KEY_B",
        "--to-plain",
    )
    assert "--to-key-env and --to-plain" in message
    fails(
        "invalid_argument",
        "rotate-key",
        url,
        "--key-env",
        "DO_KEY_A",
        "--new-key-env",
        "DO_KEY_B",
        "--new-key-file",
        "/x",
    )


def test_fork_keeps_the_key_or_takes_another_or_none(url: str, keys: dict[str, str]) -> None:
    ns = Path(url).parent
    ok("fork", url, "same", "--key-env", "DO_KEY_A")
    ok("fork", url, "other", "--key-env", "DO_KEY_A", "--to-key-env", "DO_KEY_B")
    ok("fork", url, "plain", "--key-env", "DO_KEY_A", "--to-plain")
    fails("key_refused", "fork", url, "nokey")
    listed = {e["id"]: e["encrypted_with"] for e in json.loads(ok("ls", str(ns), "--json").stdout)}
    assert listed == {
        "notes": keys["id_a"],
        "same": keys["id_a"],
        "other": keys["id_b"],
        "plain": None,
    }
    assert _rows(str(ns / "other"), "--key-env", "DO_KEY_B") == f"1\t{MARKER}\n"
    assert _rows(str(ns / "plain")) == f"1\t{MARKER}\n"
    fails("key_refused", "sql", str(ns / "other"), "SELECT 1", "--key-env", "DO_KEY_A")
    # a plain object forks into an encrypted copy
    ok("fork", str(ns / "plain"), "sealed", "--to-key-env", "DO_KEY_B")
    assert _rows(str(ns / "sealed"), "--key-env", "DO_KEY_B") == f"1\t{MARKER}\n"


def test_history_gc_verify_export_with_the_key(
    tmp_path: Path, url: str, keys: dict[str, str]
) -> None:
    ok("checkpoint", url, "--key-env", "DO_KEY_A")
    message = fails("key_refused", "history", url)
    assert keys["id_a"] in message and "--key-env" in message
    assert "2 restorable point(s)" in ok("history", url, "--key-env", "DO_KEY_A").stdout
    fails("key_refused", "gc", url, "--dry-run")
    assert "would delete" in ok("gc", url, "--dry-run", "--key-env", "DO_KEY_A").stdout
    out = ok("verify", url).stdout
    assert "tags were not checked" in out
    out = ok("verify", url, "--restore", "--key-env", "DO_KEY_A").stdout
    assert "every sealed chunk's tag checks" in out and "restored and replayed" in out
    fails("key_refused", "export", url, str(tmp_path / "out"))
    ok("export", url, str(tmp_path / "out"), "--format", "csv", "--key-env", "DO_KEY_A")
    assert MARKER in (tmp_path / "out" / "m.csv").read_text()
    ok(
        "export",
        str(Path(url).parent),
        str(tmp_path / "all.csv"),
        "--all",
        "m",
        "--format",
        "csv",
        "--key-env",
        "DO_KEY_A",
    )
    assert MARKER in (tmp_path / "all.csv").read_text()


def test_kms_key_through_moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moto = pytest.importorskip("moto")
    pytest.importorskip("boto3")
    import boto3

    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    target = str(tmp_path / "ns" / "kms")
    with moto.mock_aws():
        kms = boto3.client("kms")
        key_id = kms.create_key()["KeyMetadata"]["KeyId"]
        other = kms.create_key()["KeyMetadata"]["KeyId"]
        ok("exec", target, "--create", "--kms-key", key_id, DDL, "INSERT INTO m VALUES (1, 'k')")
        assert _rows(target, "--kms-key", key_id) == "1\tk\n"
        assert key_id in fails("key_refused", "sql", target, "SELECT 1", "--kms-key", other)
        ok("rotate-key", target, "--kms-key", key_id, "--new-kms-key", other)
        assert _rows(target, "--kms-key", other) == "1\tk\n"
    assert pairs(ok("info", target).stdout)["encryption"].endswith(other)


@pytest.mark.slow
def test_mcp_serves_an_encrypted_object_with_its_key(tmp_path: Path, keys: dict[str, str]) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    target = str(tmp_path / "agents" / "memory")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = ["-m", "durable_obj.cli", "mcp", target, "--key-env", "DO_KEY_A"]

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(REPO), env=env)
        async with Client(params) as client:
            answer = await client.call_tool("remember", {"content": MARKER})
            assert not answer.is_error

    anyio.run(main)
    with durable_obj.open(target, read_only=True, encryption=StaticKey(keys["a"])) as obj:
        assert MARKER in str(obj.query("SELECT content FROM memories", "TSV"))
    stored = b"".join(p.read_bytes() for p in Path(target).rglob("*") if p.is_file())
    assert MARKER.encode() not in stored
    # without the key (or with another) the server does not start; the key is never shown
    for extra in ([], ["--key-env", "DO_KEY_B"]):
        done = subprocess.run(
            [sys.executable, *argv[:4], *extra],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert done.returncode == 1 and "error: key_refused: " in done.stderr
        assert keys["id_a"] in done.stderr and done.stdout == ""
        assert keys["a"] not in done.stderr and keys["b"] not in done.stderr


def test_kms_endpoint_is_the_one_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_MAX_ATTEMPTS", "1"),
    ):
        monkeypatch.setenv(name, value)
    target = tmp_path / "ns" / "kms"
    endpoint = ("--kms-key", "alias/agents", "--kms-endpoint", "http://127.0.0.1:9")
    message = fails("key_refused", "exec", str(target), "--create", *endpoint, DDL)
    assert "alias/agents" in message and "EndpointConnectionError" in message
    assert "testing" not in message
    assert not target.exists()
