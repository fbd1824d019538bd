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
from durable_obj.stores import ioloop, open_store, s3reads
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


@pytest.mark.parametrize("protocol", ["s3", "s3a"])
def test_fsspec_configuration_builds_the_client(
    monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """fsspec applies the configuration of each protocol s3fs answers to
    (found by attack: one under `s3a` was missed, and the fast path sent
    GETs without the bucket-owner header and the token it gave)."""
    from fsspec.config import conf

    monkeypatch.setitem(conf, protocol, {"endpoint_url": "http://127.0.0.2:1"})
    _assert_builds_the_client()


def _static_in_a_fresh_process(env: dict[str, str]) -> list[bool]:
    """[whether a store of static options reads without the client, whether
    fsspec was imported to decide], in a new interpreter with `env` added."""
    child = (
        "import json, sys\n"
        "from durable_obj.stores import open_store\n"
        f"store = open_store('s3://bkt/p', {{**{KEYS!r}, **{SHAPES['endpoint and region']!r}}})\n"
        "print(json.dumps([store._static is not None, 'fsspec' in sys.modules]))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FSSPEC_")}
    out = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, **env},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got: list[bool] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def test_fsspec_configuration_is_read_without_importing_fsspec(tmp_path: Path) -> None:
    """Before fsspec is imported, what it would read for s3 is looked at
    without it: a `FSSPEC_*` variable or a configuration file builds the
    client; an empty folder, or only the folder's own variable, does not
    (and fsspec is not imported)."""
    folder = tmp_path / "conf"
    folder.mkdir()
    empty = {"FSSPEC_CONFIG_DIR": str(folder)}
    assert _static_in_a_fresh_process(empty) == [True, False]
    # each builds the client (which imports fsspec then)
    assert _static_in_a_fresh_process({**empty, "FSSPEC_S3_ENDPOINT_URL": "http://x:1"})[0] is False
    assert _static_in_a_fresh_process({**empty, "FSSPEC_S3": '{"anon": true}'})[0] is False
    (folder / "s3.json").write_text(json.dumps({"s3": {"endpoint_url": "http://x:1"}}))
    assert _static_in_a_fresh_process(empty)[0] is False


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
        "print(json.dumps([rows, 's3fs' in sys.modules, 'botocore' in sys.modules,\n"
        "                  'fsspec' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, json.dumps({"url": url, "so": options})],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows, *imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows == [[1001, 5000]]
    assert imported == [False, False, False]  # s3fs, botocore, fsspec


def test_what_static_reads_do_not_take_is_the_client_s(seaweed_s3: Server) -> None:
    root, options = _server_options(seaweed_s3)
    prefix = f"{root}/{uuid.uuid4().hex}"
    store = open_store(prefix, options)
    assert isinstance(store, S3Store) and store._static is not None
    try:
        assert not store._fs_made()
        assert store.get("missing") is None  # a 404: the client says so, as before
        # made then, on the loop the static reads ran on (`stores/ioloop.py`)
        assert store._fs_made() and store._fs.loop is ioloop.loop()
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


def test_the_io_loop_is_the_process_s_own_and_a_forked_child_s_own() -> None:
    """`ioloop.run` runs a coroutine on the process's loop thread; called
    from that thread it refuses (it would wait for itself); a forked child
    starts a loop of its own, which runs."""

    async def answer(n: int) -> int:
        return n + 1

    assert ioloop.run(answer, 41) == 42

    async def nested() -> int:
        return ioloop.run(answer, 1)

    with pytest.raises(RuntimeError, match="own IO thread"):
        ioloop.run(nested)
    if not hasattr(os, "fork"):
        return
    parent = id(ioloop.loop())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            ok = id(ioloop.loop()) != parent and ioloop.run(answer, 1) == 2
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and os.waitstatus_to_exitcode(status) == 0
    os.close(read)


def test_a_child_forked_while_another_thread_asks_for_the_io_loop_gets_one() -> None:
    """The loop's lock is the child's own after a fork (found by attack:
    a fork while another thread held it gave a child whose every S3 call
    before its client, and every client made, waited forever)."""
    if not hasattr(os, "fork"):
        return
    import threading

    ioloop.loop()
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            ioloop.loop()

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    stuck = 0
    try:
        for _ in range(200):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child reports by its exit status
                done = threading.Event()

                def probe(done: threading.Event = done) -> None:
                    ioloop.loop()
                    done.set()

                threading.Thread(target=probe, daemon=True).start()
                os._exit(0 if done.wait(5) else 7)
            _, status = os.waitpid(pid, 0)
            stuck += os.waitstatus_to_exitcode(status) != 0
            if stuck:
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert stuck == 0


@pytest.mark.parametrize("client", ["before the client", "with the client made"])
def test_an_interrupted_download_leaves_no_part_file(tmp_path: Path, client: str) -> None:
    """A download the caller gives up on (an interrupt while it waits)
    is cancelled and has removed its temporary file by the time the
    interrupt reaches the caller, who may be about to exit (found by
    attack, twice: first `.part` files stayed, then they went only after
    the caller had moved on), whether or not the store's client is made
    yet (both run through `ioloop.run_on`)."""
    import asyncio
    import signal
    import time

    store = _store({**KEYS, **SHAPES["endpoint and region"]})
    if client == "with the client made":
        assert store._fs is not None and store._fs_made()
    target = tmp_path / "base.tar"

    async def write(out: Any) -> None:
        out.write(b"part of a base")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            time.sleep(0.3)  # a cancellation that takes its time to unwind
            raise

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            store._run(store._download_to, "base.tar", str(target), write)
        assert sorted(p.name for p in tmp_path.iterdir()) == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        store.close()


def test_a_child_forked_after_an_obstore_write_writes(seaweed_s3: Server) -> None:
    """obstore's runtime is not in a forked child (found by attack: a child
    forked after its parent's PUT through obstore waited forever on its
    own): the child's PUTs go through the client, and land."""
    if not hasattr(os, "fork"):
        return
    root, options = _server_options(seaweed_s3)
    prefix = f"{root}/{uuid.uuid4().hex}"
    store = open_store(prefix, options)
    try:
        assert store.create("parent", b"p") is not None  # through obstore
    finally:
        store.close()
    import signal
    import time

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit status
        code = 3
        try:
            child = open_store(prefix, options)
            ok = child.create("child", b"c") is not None and child.get("child") is not None
            code = 0 if ok else 4
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    done, status = os.waitpid(pid, os.WNOHANG)
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
        done, status = os.waitpid(pid, os.WNOHANG)
    if not done:  # a hang fails the test instead of the run
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's first write did not return within 60 s")
    assert os.waitstatus_to_exitcode(status) == 0
    store = open_store(prefix, options)
    try:
        got = store.get("child")
        assert got is not None and got.data == b"c"
    finally:
        store.close()


def test_obstore_is_not_used_in_a_child_forked_while_it_was_loaded() -> None:
    """A child forked while obstore was loaded, by us or by the program,
    does not use it (its runtime is not in the child), whatever pid the
    child gets; its parent still does."""
    if not hasattr(os, "fork"):
        return
    import obstore  # noqa: F401  (the program's own, say)

    from durable_obj.stores import obstore_runtime

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit status
        os._exit(0 if obstore_runtime.usable() is False else 5)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert obstore_runtime.usable() is True
