"""What an unchanged `get_if_changed` costs, counted where it is paid.

A follower polls `head.json` with `get_if_changed(key, version)`. While the
head is unchanged that must be exactly one request to the server, answered
304 with no body, and never a listing. The cloud stores are counted at the
HTTP level, through benchmarks/harness/s3proxy.py (a reverse proxy, here without
latency, that logs every request it forwards); the folder and memory stores
by counting the calls that would read a body or list.
"""

from __future__ import annotations

import builtins
import http.server
import importlib.util
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from durable_obj.stores import UNCHANGED, Blob, Store, Version, open_store
from durable_obj.stores.file import FileStore
from durable_obj.stores.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
KEY = "o/head.json"


def _s3proxy() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_s3proxy", ROOT / "benchmarks" / "harness" / "s3proxy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


s3proxy = _s3proxy()


def _upstream(options: dict[str, Any]) -> str:
    """The server's http://host:port, from a fixture's storage_options."""
    if "connection_string" in options:
        found = re.search(r"BlobEndpoint=(http://[^/;]+)", options["connection_string"])
        assert found is not None
        return found.group(1)
    return str(options["endpoint_url"]).rstrip("/")


def _through(options: dict[str, Any], upstream: str, proxy: str) -> dict[str, Any]:
    """The same storage_options, pointed at the proxy."""
    out = dict(options)
    if "connection_string" in out:
        out["connection_string"] = out["connection_string"].replace(upstream, proxy)
    else:
        out["endpoint_url"] = proxy
    return out


def _is_listing(path: str) -> bool:
    """An S3 ListObjects, a GCS objects.list or an Azure List Blobs request."""
    return "list-type=" in path or "comp=list" in path or bool(re.search(r"/o(\?|$)", path))


@pytest.fixture
def proxied(request: pytest.FixtureRequest) -> Iterator[tuple[Store, Any]]:
    """(a store on a fresh prefix of the server named by the parameter,
    reached through a logging proxy; the proxy)."""
    root, options = request.getfixturevalue(request.param)
    upstream = _upstream(options)
    proxy = s3proxy.LatencyProxy(upstream, latency=0.0).start()
    store = open_store(f"{root}/{uuid.uuid4().hex}", _through(options, upstream, proxy.endpoint))
    try:
        yield store, proxy
    finally:
        store.close()
        proxy.stop()


@pytest.mark.slow
@pytest.mark.parametrize("proxied", ["moto_s3", "seaweed_s3", "fake_gcs", "azurite"], indirect=True)
def test_unchanged_costs_one_request_and_no_body(proxied: tuple[Store, Any]) -> None:
    store, proxy = proxied
    body = os.urandom(64 * 1024)
    v1 = store.create(KEY, body)
    assert v1 is not None
    assert store.get_if_changed(KEY, v1) is UNCHANGED  # the client's session is warm now

    for _ in range(3):
        proxy.requests.clear()
        assert store.get_if_changed(KEY, v1) is UNCHANGED
        seen = list(proxy.requests)
        assert len(seen) == 1, seen
        ((method, path, status, body_bytes),) = seen
        assert method == "GET" and "head.json" in path and not _is_listing(path), seen
        if store.protocol == "gs":
            # GCS answers ifGenerationNotMatch with 304 (test_gcs_304_is_unchanged);
            # fake-gcs-server ignores it on a media download and sends the
            # body, which the store then finds still at the version.
            assert f"ifGenerationNotMatch={v1.token}" in path, path
            assert (status, body_bytes) in ((304, 0), (200, len(body))), seen
        else:
            assert (status, body_bytes) == (304, 0), seen

    # Changed: still one request, now with the new body.
    new = os.urandom(64 * 1024)
    v2 = store.replace(KEY, new, v1)
    assert v2 is not None
    proxy.requests.clear()
    assert store.get_if_changed(KEY, v1) == Blob(new, v2)
    seen = list(proxy.requests)
    # (Azure asks for the first range of the blob: 206, all of it here.)
    assert [(s.method, s.status in (200, 206), s.body_bytes) for s in seen] == [
        ("GET", True, len(new))
    ], seen

    # Gone: one request, answered 404 (a GCS store may also ask once
    # whether the bucket itself is missing), never a listing.
    store.delete(KEY)
    proxy.requests.clear()
    assert store.get_if_changed(KEY, v2) is None
    seen = list(proxy.requests)
    assert 1 <= len(seen) <= 2 and seen[0].status == 404, seen
    assert not any(_is_listing(s.path) for s in seen), seen


@pytest.fixture
def gcs_stub() -> Iterator[tuple[str, list[str]]]:
    """(endpoint, request log) of a GCS stand-in that answers every media
    GET carrying ifGenerationNotMatch=7 with 304 and no body, as GCS does
    while the object is at generation 7; anything else with 404."""
    log: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            log.append(self.path)
            self.send_response(304 if "ifGenerationNotMatch=7" in self.path else 404)
            if "ifGenerationNotMatch=7" not in self.path:
                self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_gcs_304_is_unchanged(loopback_only_env: None, gcs_stub: tuple[str, list[str]]) -> None:
    """GCS's answer to an unchanged conditional media GET (304, no body) is
    UNCHANGED, not an error, after one request."""
    endpoint, log = gcs_stub
    options = {"endpoint_url": endpoint, "token": "anon", "project": "stub", "retries": 2}
    store = open_store("gs://stub-bucket/ns", options)
    try:
        assert store.get_if_changed(KEY, Version("7")) is UNCHANGED
    finally:
        store.close()
    assert len(log) == 1 and "alt=media" in log[0], log


class _Counted:
    """Counts the calls of the named functions of a module made by this
    thread while a test runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, names: list[str]) -> None:
        self.calls: dict[str, int] = dict.fromkeys(names, 0)
        self._thread = threading.get_ident()
        for name in names:
            monkeypatch.setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self._thread:
                self.calls[name] += 1
            return fn(*args, **kwargs)

        return counted


_BODY_READS = ["fdopen", "read", "pread", "readv", "preadv", "sendfile", "copy_file_range"]
_LISTINGS = ["scandir", "listdir", "fwalk", "walk"]


def test_folder_store_unchanged_reads_no_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged is told from the file's nonce (an extended attribute): the
    file is opened once and its bytes are never read; nothing is listed."""
    store = FileStore(str(tmp_path / "root"))
    v1 = store.create(KEY, os.urandom(64 * 1024))
    assert v1 is not None and not v1.token.startswith(":"), "this filesystem has no user xattrs"
    names = [n for n in [*_BODY_READS, *_LISTINGS, "open", "getxattr"] if hasattr(os, n)]
    counted = _Counted(monkeypatch, os, names)
    opened = _Counted(monkeypatch, builtins, ["open"])

    assert store.get_if_changed(KEY, v1) is UNCHANGED
    calls = dict(counted.calls)
    assert calls.pop("getxattr") == 1
    assert calls.pop("open") >= 1  # the folders and the file, by descriptor
    assert calls == dict.fromkeys(calls, 0)
    assert opened.calls == {"open": 0}

    # The counters do see a read: get reads the body through fdopen.
    assert store.get(KEY) is not None
    assert counted.calls["fdopen"] == 1


def test_folder_store_without_a_nonce_compares_the_content(tmp_path: Path) -> None:
    """A file with no nonce (chdb.durable wrote it, or no user xattrs) is
    compared by its content: read once, as get reads it."""
    store = FileStore(str(tmp_path / "root"))
    (tmp_path / "root" / "o").mkdir(parents=True)
    (tmp_path / "root" / KEY).write_bytes(b"written by another library")
    blob = store.get(KEY)
    assert blob is not None and blob.version.token.startswith(":")
    assert store.get_if_changed(KEY, blob.version) is UNCHANGED
    (tmp_path / "root" / KEY).write_bytes(b"written again")
    changed = store.get_if_changed(KEY, blob.version)
    assert isinstance(changed, Blob) and changed.data == b"written again"


class _CountingDict(dict[str, Any]):
    """The memory store's keyspace, counting lookups and walks."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lookups = 0
        self.walks = 0

    def get(self, *args: Any) -> Any:
        self.lookups += 1
        return super().get(*args)

    def items(self) -> Any:
        self.walks += 1
        return super().items()

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return super().__iter__()


def test_memory_store_unchanged_is_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_obj.stores import memory

    store = MemoryStore(f"cond-{uuid.uuid4().hex}")
    v1 = store.create(KEY, b"x" * 1024)
    assert v1 is not None
    data = _CountingDict(memory._DATA)
    monkeypatch.setattr(memory, "_DATA", data)
    assert store.get_if_changed(KEY, v1) is UNCHANGED
    assert (data.lookups, data.walks) == (1, 0)
