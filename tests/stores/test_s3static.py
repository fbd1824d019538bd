"""An S3 store whose options leave botocore nothing to look up reads
without the client (`durable_obj.stores.s3static`): where its GETs go and
how they are signed equal what the client itself presigns, for every shape
of options it takes; every other shape builds the client; a read-only cold
open on a real server never imports s3fs; and a read it does not take as
is (a missing key, a refused credential) is the client's, as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj.errors import BackendError
from durable_obj.stores import open_store, s3reads
from durable_obj.stores.s3 import S3Store
from tests.servers import Server

KEYS = {"key": "static-key", "secret": "static-secret-value-0123"}


def _store(options: dict[str, Any], bucket: str = "bkt") -> S3Store:
    store = open_store(f"s3://{bucket}/some/prefix", options)
    assert isinstance(store, S3Store)
    return store


def _presigned(store: S3Store) -> tuple[s3reads.Target | None, s3reads.Credentials | None]:
    """Where the client sends a GET, and what it signs with (no request)."""

    async def both() -> tuple[s3reads.Target | None, s3reads.Credentials | None]:
        target = await store._presigned_target("get_object")
        return target, await s3reads.frozen_credentials(await store._s3())

    return store._run(both)


SHAPES: dict[str, dict[str, Any]] = {
    "endpoint and region": {
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "us-east-1"},
    },
    "both in client_kwargs": {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-3"},
    },
    "region in config_kwargs": {
        "endpoint_url": "http://10.1.2.3:8333/",
        "config_kwargs": {"region_name": "ap-south-1", "read_timeout": 5, "connect_timeout": 2},
    },
    "no port": {"endpoint_url": "http://127.0.0.1", "client_kwargs": {"region_name": "us-east-1"}},
    "ipv6": {"endpoint_url": "http://[::1]:9000", "client_kwargs": {"region_name": "us-east-1"}},
    "a session token": {
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "us-east-1"},
        "token": "static-session-token",
    },
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_static_reads_go_where_the_client_sends_them(shape: str) -> None:
    store = _store({**KEYS, **SHAPES[shape], "retries": 2})
    try:
        assert store._static is not None and not store._fs_made()
        target, creds = _presigned(store)
        assert store._static.target == target
        assert store._static_creds == creds
    finally:
        store.close()


NOT_STATIC: dict[str, dict[str, Any]] = {
    "https": {"endpoint_url": "https://127.0.0.1:9000"},
    "a host name": {"endpoint_url": "http://localhost:9000"},
    "a path": {"endpoint_url": "http://127.0.0.1:9000/base"},
    "no region": {"client_kwargs": {}},
    "anonymous": {"anon": True},
    "extra request arguments": {"s3_additional_kwargs": {"RequestPayer": "requester"}},
    "a profile": {"profile": "other"},
    "another client setting": {"config_kwargs": {"signature_version": "s3"}},
    "no secret": {"secret": ""},
    # found by attack: what would reach the request's bytes as they are
    "a line break in the token": {"token": "t\r\nX-Injected: yes"},
    "a line break in the region": {"client_kwargs": {"region_name": "us-east-1\r\nX: r"}},
    "a request in the key": {"key": "A\r\n\r\nGET /other HTTP/1.1\r\nHost: x\r\n\r\n"},
    "port 0": {"endpoint_url": "http://127.0.0.1:0"},
    "no port after the colon": {"endpoint_url": "http://127.0.0.1:"},
}


@pytest.mark.parametrize("shape", sorted(NOT_STATIC))
def test_any_other_shape_builds_the_client(shape: str) -> None:
    options = {
        **KEYS,
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "us-east-1"},
        **NOT_STATIC[shape],
    }
    store = _store(options)
    try:
        assert store._static is None
    finally:
        store.close()


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_PROFILE": "other"},
        {"AWS_USE_FIPS_ENDPOINT": "true"},
        {"AWS_ENDPOINT_URL_S3": "http://127.0.0.2:1"},
        {"HTTP_PROXY": "http://127.0.0.1:3128"},
        {"AWS_CONFIG_FILE": "<a config file>"},
    ],
)
def test_settings_from_the_environment_build_the_client(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        if value == "<a config file>":
            value = str(tmp_path / "config")
            Path(value).write_text("[default]\ns3 =\n    addressing_style = virtual\n")
        monkeypatch.setenv(name, value)
    _assert_builds_the_client()


def _assert_builds_the_client() -> None:
    """A store of options that are static but for the setting under test."""
    store = _store(
        {**KEYS, "endpoint_url": "http://127.0.0.1:9000", "client_kwargs": {"region_name": "x"}}
    )
    try:
        assert store._static is None
    finally:
        store.close()


def test_fsspec_configuration_builds_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from fsspec.config import conf

    monkeypatch.setitem(conf, "s3", {"endpoint_url": "http://127.0.0.2:1"})
    _assert_builds_the_client()


def _server_options(server: Server) -> tuple[str, dict[str, Any]]:
    root, options = server
    return root, {k: v for k, v in options.items() if k != "retries"}


def test_a_read_only_open_never_imports_the_client(seaweed_s3: Server, tmp_path: Path) -> None:
    root, options = _server_options(seaweed_s3)
    url = f"{root}/{uuid.uuid4().hex}/o"
    with durable_obj.open(url, owner="w", storage_options=options) as obj:
        obj.execute("CREATE TABLE t (n UInt32) ENGINE = MergeTree ORDER BY n")
        obj.execute("INSERT INTO t SELECT number FROM numbers(1000)")
        obj.checkpoint()
        obj.execute("INSERT INTO t VALUES (5000)")
        obj.flush()
    child = (
        "import sys, json, durable_obj\n"
        "cfg = json.loads(sys.argv[1])\n"
        "with durable_obj.open(cfg['url'], read_only=True, storage_options=cfg['so']) as o:\n"
        "    rows = o.rows('SELECT count(), max(n) FROM t')\n"
        "print(json.dumps([rows, 's3fs' in sys.modules, 'botocore' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, json.dumps({"url": url, "so": options})],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows, s3fs_imported, botocore_imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows == [[1001, 5000]]
    assert not s3fs_imported and not botocore_imported


def test_what_static_reads_do_not_take_is_the_client_s(seaweed_s3: Server) -> None:
    root, options = _server_options(seaweed_s3)
    prefix = f"{root}/{uuid.uuid4().hex}"
    store = open_store(prefix, options)
    assert isinstance(store, S3Store) and store._static is not None
    try:
        assert store.get("missing") is None  # a 404: the client says so, as before
        version = store.create("k", b"v")
        got = store.get("k")
        assert got is not None and got.data == b"v" and got.version == version
    finally:
        store.close()
    wrong = {**options, "secret": "not-the-secret-value-987"}
    store = open_store(prefix, wrong)
    try:
        with pytest.raises(BackendError, match="credentials") as info:
            store.get("k")
        assert "not-the-secret-value-987" not in str(info.value)
    finally:
        store.close()
