"""Shared fixtures. Hypothesis profiles: HYPOTHESIS_PROFILE=ci (default) or nightly."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The S3 / GCS / Azure protocol servers, started on 127.0.0.1 once per session
# (per worker under xdist); what the proofs covered, printed at the end.
pytest_plugins = ["tests.servers", "tests.proofs"]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a server with the server's marker (moto,
    seaweedfs, gcs, azure), so `pytest -m "not azure"` works; put the slow
    tests first."""
    from tests.servers import mark_server_tests

    mark_server_tests(items)
    # The long tests first, the short ones last. Under xdist (`--dist
    # loadgroup`) a free worker takes the next test in this order, so a run
    # no longer ends with one worker on a long test (SeaweedFS's races wait
    # seconds per round on the server's lock) while the others sit idle; the
    # many short tests fill the gaps at the end. The sort is stable: each
    # half keeps its collection order, and every worker sorts alike.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["memory", "file"])
def ns_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty namespace URL on each in-process store."""
    if request.param == "memory":
        yield f"memory://test-{uuid.uuid4().hex}"
    else:
        yield str(tmp_path / "ns")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the engine folders that the crash tests' SIGKILLed children
    left in memory (`/dev/shm`): only folders whose process is gone (their
    lock is free) and at least 10 s old (a folder is locked just after it is
    made), swept by the controller once every worker has finished."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: others may still be starting engines
    from durable_obj.replica import placement

    placement.sweep(min_age=10)
