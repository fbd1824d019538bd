"""The object API a service developer reaches for on day one (issue 13):
open(create=), refresh(), unclosed objects, URL and storage_options typos,
no-op DDL, and the messages and states that used to mislead.

The refresh tests keep the writer in a child (`_proc.Worker`), so the
reader follows a writer in another process, as a deployed reader does.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core.options import Options
from durable_obj.stores import open_store
from durable_obj.testing import Fault, FaultyStore, abandon
from durable_obj.wire import lease as leases
from durable_obj.wire.head import Lease
from tests.integration import _proc

DDL = "CREATE TABLE m (k String, v UInt32) ENGINE = MergeTree ORDER BY k"


def rows(obj: durable_obj.DurableObject) -> str:
    return obj.query("SELECT k, v FROM m ORDER BY k, v")


# -- open(create=) ---------------------------------------------------------------


def test_create_false_never_creates(ns_url: str) -> None:
    with pytest.raises(errors.NotFound, match="create=False") as info:
        durable_obj.open(f"{ns_url}/alcie", create=False)
    assert info.value.category == "not_found"
    ns = durable_obj.Namespace(ns_url)
    with pytest.raises(errors.NotFound):
        ns.open("alcie", create=False)
    assert ns.store.list_keys() == []
    with durable_obj.open(f"{ns_url}/alice") as obj:  # the default creates
        obj.execute(DDL)
    with ns.open("alice", create=False) as obj:
        assert obj.tables() == ["m"]
    with pytest.raises(errors.NotFound):
        ns.open("ghost", read_only=True, create=True)  # a reader never creates


def test_open_docstring_names_every_option_and_its_default() -> None:
    doc = durable_obj.open.__doc__ or ""
    for name, default in Options.defaults().items():
        assert f"{name}=" in doc, name
        if default is not None and isinstance(default, (bool, str)):
            assert f"{name}={default!r}".replace("'", '"') in doc or (f"{name}={default}" in doc), (
                name
            )
    for arg in ("owner", "read_only", "force", "create", "storage_options", "progress"):
        assert f"{arg}:" in doc
    assert "with durable_obj.open(" in doc


# -- refresh() -------------------------------------------------------------------


def test_refresh_follows_a_writer_in_another_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ns_url = str(tmp_path / "ns")
    with _proc.Worker() as writer:
        writer.open(ns_url, "o", owner="w")
        writer.execute(DDL)
        writer.execute("INSERT INTO m VALUES ('a', 1)")
        writer.flush()
        reader = durable_obj.open(f"{ns_url}/o", read_only=True)
        try:
            assert rows(reader) == '"a",1\n'
            assert reader.refresh() is False  # nothing new: the view stays
            writer.execute("INSERT INTO m VALUES ('b', 2)")
            writer.flush()
            writer.execute("INSERT INTO m VALUES ('unflushed', 9)")
            assert rows(reader) == '"a",1\n'  # a snapshot until refresh()
            with caplog.at_level(logging.INFO, logger="durable_obj"):
                assert reader.refresh() is True
            assert "1 new WAL segment(s)" in caplog.text
            assert rows(reader) == '"a",1\n"b",2\n'  # never what is not flushed
            assert reader.seq == writer.info()["seq"]
            writer.checkpoint()  # a new base, an empty WAL
            writer.execute("INSERT INTO m VALUES ('c', 3)")
            writer.flush()
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="durable_obj"):
                assert reader.refresh() is True
            assert "a new base" in caplog.text
            assert rows(reader) == '"a",1\n"b",2\n"c",3\n"unflushed",9\n'
            assert reader.seq == writer.info()["seq"]
            assert reader.refresh() is False
        finally:
            reader.close()


def test_refresh_failure_before_apply_keeps_the_view(tmp_path: Path) -> None:
    ns_url = str(tmp_path / "ns")
    with _proc.Worker() as writer:
        writer.open(ns_url, "o", owner="w")
        writer.execute(DDL)
        writer.execute("INSERT INTO m VALUES ('a', 1)")
        writer.flush()
        with durable_obj.open(f"{ns_url}/o", read_only=True) as reader:
            writer.execute("INSERT INTO m VALUES ('b', 2)")
            key = writer.flush()
            assert key is not None
            store = open_store(ns_url)
            store.delete(f"o/{key}")
            store.create(f"o/{key}", b'{"sql": "INSERT INTO m VALUES (\'x\', 0)"}\n')
            with pytest.raises(errors.Corrupt, match=re.escape(key)):
                reader.refresh()
            assert not reader.closed and rows(reader) == '"a",1\n'
            store.delete("o/head.json")
            with pytest.raises(errors.NotFound):
                reader.refresh()
            assert rows(reader) == '"a",1\n'


def test_refresh_with_nothing_new_is_one_conditional_read() -> None:
    """An unchanged head costs a reader's refresh() one conditional read of
    head.json (no body, no listing), and the faults a get would meet."""
    ns = durable_obj.Namespace(f"memory://refresh-{uuid.uuid4().hex}")
    with ns.open("o") as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 1)")
    counting = FaultyStore(ns.store, seed=0, rate=0.0)
    with durable_obj.Namespace(counting).open("o", read_only=True) as reader:
        counting.calls.clear()
        for _ in range(3):
            assert reader.refresh() is False
        assert counting.calls == [("get_if_changed", "o/head.json")] * 3
        with ns.open("o") as obj:
            obj.execute("INSERT INTO m VALUES ('b', 2)")
        counting.calls.clear()
        assert reader.refresh() is True
        assert counting.calls[0] == ("get_if_changed", "o/head.json")
        assert not any(op in ("get", "list_keys", "list_folders") for op, _ in counting.calls)
        assert rows(reader) == '"a",1\n"b",2\n'
        counting.enabled, counting.rate, counting.faults = True, 1.0, (Fault.ERROR,)
        with pytest.raises(errors.BackendError, match="injected"):
            reader.refresh()
        assert not reader.closed and rows(reader) == '"a",1\n"b",2\n'


def test_refresh_on_a_writer_is_a_no_op(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        obj.execute(DDL)
        assert obj.refresh() is False
        assert obj.pending == 1  # nothing flushed, nothing dropped
    with pytest.raises(errors.Closed):
        obj.refresh()


# -- unclosed objects -----------------------------------------------------------------


def test_collected_writer_warns_and_frees_the_engine(
    ns_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    obj = durable_obj.open(f"{ns_url}/left", owner="w")
    obj.execute(DDL)
    with (
        caplog.at_level(logging.WARNING, logger="durable_obj"),
        pytest.warns(ResourceWarning, match=r"1 unflushed statement\(s\) are lost") as caught,
    ):
        del obj
        gc.collect()
    assert "its lease stays held" in str(caught[0].message)
    assert "was collected without being closed" in caplog.text
    # the engine is free again; the lease stays held until it expires
    with durable_obj.open(f"{ns_url}/other") as other:
        other.execute(DDL)
    with pytest.raises(errors.LeaseHeld):
        durable_obj.open(f"{ns_url}/left")


def test_collected_reader_and_closed_objects_are_silent(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        obj.execute(DDL)
    reader = durable_obj.open(f"{ns_url}/o", read_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del reader, obj
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_open_at_exit_warns(tmp_path: Path) -> None:
    code = """
    import logging, warnings
    import durable_obj
    warnings.simplefilter("always", ResourceWarning)
    logging.basicConfig(level=logging.WARNING)
    KEEP = durable_obj.open(P["url"], owner="script")
    KEEP.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
    emit("executed")
    """
    done = _proc.run_raw(code, {"url": str(tmp_path / "ns" / "o")})
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" in done.stderr
    assert "still open when the interpreter exited without being closed" in done.stderr
    assert "WARNING:durable_obj" in done.stderr


# -- URL and storage_options typos ------------------------------------------------------


def test_local_path_that_looks_like_a_url_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.InvalidArgument, match=r"s3://") as info:
        durable_obj.open("s3:/bkt/agents/zed", storage_options={"endpoint_url": "http://x"})
    assert info.value.category == "invalid_argument"
    assert list(tmp_path.iterdir()) == []
    with durable_obj.open("./s3:/bkt/agents/zed") as obj:  # said explicitly: a folder
        obj.execute(DDL)
    assert (tmp_path / "s3:" / "bkt" / "agents" / "zed" / "head.json").exists()


@pytest.mark.parametrize(
    ("url", "options", "key", "hint"),
    [
        ("s3://bkt/agents/zed", {"endpoint": "http://127.0.0.1:9"}, "endpoint", "endpoint_url"),
        ("s3://bkt/agents/zed", {"secrte": "sekrit-Value-42"}, "secrte", "secret"),
        ("memory://ns/zed", {"fsync": False}, "fsync", None),
        ("LOCAL/ns/zed", {"fsnyc": False}, "fsnyc", "fsync"),
    ],
)
def test_unknown_storage_options_are_refused(
    tmp_path: Path, url: str, options: dict[str, object], key: str, hint: str | None
) -> None:
    url = url.replace("LOCAL", str(tmp_path))
    with pytest.raises(errors.InvalidArgument) as info:
        durable_obj.open(url, storage_options=options)
    message = str(info.value)
    assert f"storage_options key {key!r}" in message
    if hint:
        assert f"did you mean {hint!r}" in message
    assert "sekrit" not in message and "127.0.0.1" not in message  # never a value
    assert list(tmp_path.iterdir()) == []


def test_known_storage_options_still_pass(tmp_path: Path) -> None:
    store = open_store(
        "s3://bkt/ns",
        {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s", "profile": None,
         "client_kwargs": {}, "config_kwargs": {}, "retries": 1, "use_listings_cache": False},
    )  # fmt: skip
    assert store.url == "s3://bkt/ns"
    assert open_store(str(tmp_path), {"fsync": False}).url.startswith("file://")


# -- no-op DDL is not logged -------------------------------------------------------


def test_conditional_ddl_that_changes_nothing_is_not_logged(ns_url: str) -> None:
    url = f"{ns_url}/o"
    create = "CREATE TABLE IF NOT EXISTS m (k String, v UInt32) ENGINE = MergeTree ORDER BY k"
    with durable_obj.open(url) as obj:
        obj.execute(create)
        obj.execute("DROP TABLE IF EXISTS gone")  # absent: changes nothing
        assert obj.pending == 1
        obj.execute("CREATE TABLE IF NOT EXISTS gone (x UInt8) ENGINE = Memory")
        obj.execute("DROP TABLE IF EXISTS gone")  # present: dropped, logged
        assert obj.pending == 3
    for _ in range(2):  # what a service does at every start
        with durable_obj.open(url) as obj:
            obj.execute(create)
            obj.execute("CREATE VIEW IF NOT EXISTS m AS SELECT 1")
            obj.execute("DROP DICTIONARY IF EXISTS nothing_here")
            assert obj.pending == 0
            assert obj.flush() is None
            with pytest.raises(errors.EngineError):  # still checked by the engine
                obj.execute("CREATE TABLE IF NOT EXISTS m (k Nonsense) ENGINE = Memory")
            assert obj.pending == 0
            seq = obj.seq
    assert seq == 1
    with durable_obj.open(url, read_only=True) as reader:
        assert reader.tables() == ["m"]


# -- messages and states -------------------------------------------------------------------


def test_lease_held_says_the_real_wait() -> None:
    other = Lease(generation=2, owner="other", instance=uuid.uuid4().hex, expires_at=130.0)
    me = leases.Holder("me", uuid.uuid4().hex)
    with pytest.raises(errors.LeaseHeld) as info:
        leases.check_free(other, me, 100.0, clock_skew=5.0)
    assert "succeeds in 35.0 s" in str(info.value)
    assert "clock_skew" in str(info.value)


def test_lease_held_after_a_crash(ns_url: str) -> None:
    held = durable_obj.open(f"{ns_url}/o", owner="crashed", lease_ttl=30, clock_skew=5)
    abandon(held)
    with pytest.raises(errors.LeaseHeld) as info:
        durable_obj.open(f"{ns_url}/o", clock_skew=5)
    wait = float(re.search(r"succeeds in ([\d.]+) s", str(info.value)).group(1))  # type: ignore[union-attr]
    assert 30 < wait <= 35


def test_fenced_writer_states_and_texts(ns_url: str) -> None:
    ns = durable_obj.Namespace(ns_url, owner="w")
    obj = ns.open("o")
    obj.execute(DDL)
    obj.flush()
    obj.execute("INSERT INTO m VALUES ('a', 1)")
    ns.release("o")  # an administrator's release
    with pytest.raises(errors.LeaseFenced, match="released") as info:
        obj.flush()
    assert "None" not in str(info.value)
    assert obj.fenced and obj.state == "fenced" and "state=fenced" in repr(obj)
    assert not obj.closed
    with pytest.raises(errors.LeaseFenced, match="released"):
        obj.execute("INSERT INTO m VALUES ('b', 2)")
    assert rows(obj) == '"a",1\n'  # its local copy still reads
    with pytest.raises(errors.LeaseFenced, match=r"1 unflushed statement\(s\)"):
        obj.close()
    assert obj.closed and obj.state == "closed" and "state=closed" in repr(obj)
    obj.close()  # closing a closed object does nothing
    again = ns.open("o")
    again._w.fenced = True  # fenced with nothing buffered: close() is quiet
    again.close()
    assert again.closed


def test_execute_on_a_reader_says_read_only(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        obj.execute(DDL)
    with durable_obj.open(f"{ns_url}/o", read_only=True) as reader:
        for call in (lambda: reader.execute("INSERT INTO m VALUES ('a', 1)"), reader.flush):
            with pytest.raises(errors.ClassificationRefused, match="is read-only") as info:
                call()
            assert info.value.category == "classification_refused"


def test_flush_tells_a_concurrent_commit_from_nothing_buffered(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o") as obj:
        assert obj.flush() is None  # nothing executed
        obj.execute(DDL)
        other: list[str | None] = []
        flusher = threading.Thread(target=lambda: other.append(obj.flush()))
        flusher.start()
        flusher.join()
        assert other[0] is not None and other[0].startswith("wal/")
        assert obj.flush() == other[0]  # another thread's flush committed ours
        assert obj.flush() is None  # told once; nothing new since
        obj.execute("INSERT INTO m VALUES ('a', 1)")
        base = obj.checkpoint()
        assert obj.flush() is None  # checkpoint() told this thread already
        assert base.startswith("checkpoints/")


def test_auto_flush_reports_its_key(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o", auto_flush=True, auto_flush_bytes=1) as obj:
        obj.execute(DDL)
        assert obj.pending == 0 and obj.seq == 1
        key = obj.flush()
        assert key is not None and key.startswith("wal/")
        assert obj.flush() is None


def test_auto_flush_age_flushes_an_idle_writer(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o", auto_flush=True, auto_flush_age=0.05) as obj:
        obj.execute(DDL)
        deadline = time.monotonic() + 60
        while obj.pending and time.monotonic() < deadline:
            time.sleep(0.01)  # no execute(), no flush(): the heartbeat's timer
        assert obj.pending == 0 and obj.seq == 1
    head = open_store(ns_url).get("o/head.json")
    assert head is not None and len(json.loads(head.data)["manifest"]["wal"]) == 1


def test_tick_flushes_only_a_buffer_old_enough(ns_url: str) -> None:
    with durable_obj.open(f"{ns_url}/o", auto_flush=True, auto_flush_age=3600) as obj:
        obj.execute(DDL)
        assert obj._tick() is True and obj.pending == 1  # not due yet: nothing
        obj._buf.since -= 3600
        assert obj._tick() is True and obj.pending == 0 and obj.seq == 1
