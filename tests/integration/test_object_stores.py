"""The object-level path on every store: memory, a folder, S3 on moto and on
SeaweedFS, GCS on fake-gcs-server, Azure on Azurite (servers on 127.0.0.1,
started by tests/servers.py). Writers and readers in separate processes."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

import durable_obj
from durable_obj import errors
from tests.integration import _proc

STORES = ["memory", "file", "moto_s3", "seaweed_s3", "fake_gcs", "azurite"]
SHARED = [s for s in STORES if s != "memory"]
#: Where a one-winner race proves something: moto's server is not
#: linearizable (two racers can both win a create), so S3 races on SeaweedFS.
RACING = [s for s in SHARED if s != "moto_s3"]
DDL = "CREATE TABLE m (k UInt32, v String) ENGINE = MergeTree ORDER BY k"


def _target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    kind = request.param
    if kind == "memory":
        return f"memory://objstores-{uuid.uuid4().hex}", {}
    if kind == "file":
        return str(tmp_path / "ns"), {}
    root, options = request.getfixturevalue(kind)
    return f"{root}/t-{uuid.uuid4().hex[:12]}", dict(options)


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return _target(request, tmp_path)


@pytest.fixture(params=SHARED)
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return _target(request, tmp_path)


@pytest.fixture(params=RACING)
def racing_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return _target(request, tmp_path)


def test_lifecycle(any_store: tuple[str, dict[str, Any]]) -> None:
    url, options = any_store
    ns = durable_obj.Namespace(url, owner="w", storage_options=options)
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES (1, 'a')")
        assert obj.flush() is not None
        obj.execute("INSERT INTO m VALUES (2, 'b')")
        obj.checkpoint()
        obj.execute("INSERT INTO m VALUES (3, 'c')")
    with ns.open("o") as again:
        assert again.generation == 2 and again.seq == 3
        assert again.query("SELECT * FROM m ORDER BY k") == '1,"a"\n2,"b"\n3,"c"\n'
        again.execute("INSERT INTO m VALUES (4, 'd')")
        again.flush()
    with ns.open("o", read_only=True) as reader:
        assert reader.query("SELECT count() FROM m") == "4\n"
    assert [i.oid for i in ns.list()] == ["o"]
    assert ns.verify("o").checked


ROWS = "SELECT k, v FROM m ORDER BY k"


def _write(params: dict[str, Any], owner: str, k: int, create: bool) -> Any:
    statements = [DDL] if create else []
    statements.append(f"INSERT INTO m VALUES ({k}, '{owner}')")
    return _proc.run_value("write", {**params, "owner": owner, "statements": statements})


@pytest.mark.slow
def test_written_on_one_machine_reopens_in_another(
    shared_store: tuple[str, dict[str, Any]],
) -> None:
    url, options = shared_store
    params = {"url": url, "options": options}
    assert _write(params, "first", 1, create=True) == 1
    assert _write(params, "second", 2, create=False) == 2
    assert _proc.run_value("read_query", {**params, "query": ROWS}) == '1,"first"\n2,"second"\n'


@pytest.mark.slow
def test_lease_held_force_takeover_and_fencing(shared_store: tuple[str, dict[str, Any]]) -> None:
    url, options = shared_store
    params = {"url": url, "options": options}
    with _proc.Worker() as a, _proc.Worker() as b:
        a.open(url, "o", owner="A", storage_options=options)
        a.execute(DDL)
        a.execute("INSERT INTO m VALUES (1, 'a1')")
        a.flush()
        reply = b.request("open", url=url, oid="o", owner="B", read_only=False, force=False,
                          options={"storage_options": options})  # fmt: skip
        assert (reply["ok"], reply["category"]) == (False, "lease_held"), reply
        # a reader beside the writer sees exactly what was flushed
        a.execute("INSERT INTO m VALUES (2, 'a2 unflushed')")
        assert _proc.run_value("read_query", {**params, "query": ROWS}) == '1,"a1"\n'
        taken = b.open(url, "o", owner="B", force=True, storage_options=options)
        assert taken["generation"] == 2
        assert any(w["category"] == "RuntimeWarning" for w in b.warnings)
        b.execute("INSERT INTO m VALUES (3, 'b1')")
        b.flush()
        reply = a.request("flush")
        assert (reply["ok"], reply["category"]) == (False, "lease_fenced"), reply
        b.close()
        a.request("close")
    assert _proc.run_value("read_query", {**params, "query": ROWS}) == '1,"a1"\n3,"b1"\n'


@pytest.mark.slow
def test_eight_processes_open_one_new_object(racing_store: tuple[str, dict[str, Any]]) -> None:
    """Eight writers open one object that does not exist yet, together:
    exactly one wins, seven are lease_held. Each says "ready" once it has
    imported the library; all are then sent "go" (the start line). The
    winner holds the lease until all have answered: on a loaded machine a
    late racer would otherwise win, rightly, after the winner's close."""
    url, options = racing_store
    params = {"url": url, "options": options}
    scripts = [_proc.Script("race_open", {**params, "owner": f"p{i}"}) for i in range(8)]
    try:
        for script in scripts:
            assert script.next_marked(timeout=120) == "ready"
        for script in scripts:
            script.send("go")
        outcomes = [str(s.next_marked(timeout=120)) for s in scripts]
        for script, outcome in zip(scripts, outcomes, strict=True):
            if outcome == "won":
                script.send("release")
        for script in scripts:
            assert script.wait(60) == 0, script.stderr()
    finally:
        for script in scripts:
            script.cleanup()
    assert sorted(outcomes) == ["lease_held"] * 7 + ["won"], outcomes


def test_unsupported_protocols_are_refused() -> None:
    for url in ("http://127.0.0.1:9/ns/o", "ftp://127.0.0.1/ns/o"):
        with pytest.raises(errors.UnsupportedStore) as info:
            durable_obj.open(url)
        message = str(info.value)
        for name in ("s3://", "gs://", "az://", "file://", "memory://"):
            assert name in message


def test_missing_bucket_is_a_clear_backend_error(
    moto_s3: tuple[str, dict[str, Any]],
) -> None:
    _, options = moto_s3
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with warnings.catch_warnings(), pytest.raises(errors.BackendError) as info:
        durable_obj.open(f"s3://{bucket}/ns/o", storage_options=options)
    assert bucket in str(info.value)
    assert options["secret"] not in str(info.value)
