"""The engine lists shipped for the pinned build (`durable_obj.gate.shipped`).

The copy is what the pinned engine answers, to the row; it is used only
for that build, and the catalogues made from it are the ones the engine's
own answers make. When chdb-core's pin moves, the first test fails and
says how to rewrite the copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_obj.gate import determinism, reach, shipped
from durable_obj.replica import turn
from durable_obj.replica.engine import Engine, acquire


@pytest.fixture
def engine() -> Iterator[Engine]:
    eng = acquire()
    try:
        yield eng
    finally:
        eng.close(orphan=False)


def test_the_shipped_lists_are_what_the_pinned_engine_answers(engine: Engine) -> None:
    build = shipped.build_of(engine)
    copy = shipped.load_shipped(build)
    assert copy is not None, (
        f"the running engine is {build}, not the build the lists were shipped for: "
        "run `python -m durable_obj.testing.engine_lists` and commit the file"
    )
    live = shipped.read(engine, build)
    assert copy == live
    assert len(copy.functions) > 1000 and "file" in copy.table_functions
    assert "index_granularity" in copy.table_settings


def test_another_build_reads_the_engine(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build the copy is not for (another git hash of the same version)
    is read from the engine, and gives the same catalogues here."""
    sent: list[str] = []
    query = turn.Turned.query
    monkeypatch.setattr(
        turn.Turned,
        "query",
        lambda self, sql, *a, **k: sent.append(sql) or query(self, sql, *a, **k),
    )
    assert shipped.load_shipped(shipped.build_of(engine) + "x") is None
    monkeypatch.setattr(shipped, "_LISTS", {})
    monkeypatch.setattr(shipped, "BUILD_QUERY", "SELECT 'another-build'")
    found = shipped.lists(engine)
    assert found.build.endswith("+another-build")
    assert any("system.functions" in sql for sql in sent)
    sent.clear()
    monkeypatch.setattr(shipped, "_LISTS", {})
    monkeypatch.setattr(
        shipped, "BUILD_QUERY", "SELECT value FROM system.build_options WHERE name = 'GIT_HASH'"
    )
    again = shipped.lists(engine)
    assert not any("system.functions" in sql for sql in sent)  # the shipped copy
    assert again.functions == found.functions


def test_the_catalogues_are_the_engines_own(engine: Engine) -> None:
    """reach's and determinism's catalogues from the shipped lists equal
    those made from the engine's answers as each module asked before."""
    known = reach.Catalog.load(engine)
    rows = engine.json_rows(
        "SELECT lower(name), lower(alias_to), categories, is_aggregate FROM system.functions"
    )
    refused = {
        name
        for name, _a, categories, _g in rows
        if name in reach.REFUSED_FUNCTIONS
        or any(c.strip() in reach.REFUSED_CATEGORIES for c in categories.split(","))
    }
    refused |= {name for name, alias, _c, _g in rows if alias and alias in refused}
    tfs = set(engine.text("SELECT lower(name) FROM system.table_functions", "TSV").split())
    assert known.table_functions == tfs - reach.PURE_TABLE_FUNCTIONS
    assert known.refused == refused | known.table_functions
    assert known.aggregates == {name for name, _a, _c, agg in rows if int(agg)}
    assert "now" in known.allowed and "file" in known.refused and "url" in known.refused
    settings = engine.text("SELECT lower(name) FROM system.merge_tree_settings", "TSV")
    assert known.table_settings == set(settings.split())

    pins = determinism.Catalog.load(engine)
    names = engine.text("SELECT name FROM system.functions WHERE deterministic = 0", "TSV")
    assert pins.nondeterministic == {n.lower() for n in names.split()} - determinism.REPLAY_STABLE
    assert {"now", "rand", "generateuuidv4"} <= pins.nondeterministic
    assert pins.table_functions == tfs - determinism.PURE_TABLE_FUNCTIONS


def test_an_unreadable_copy_reads_the_engine(engine: Engine, tmp_path: Path) -> None:
    build = shipped.build_of(engine)
    bad = tmp_path / "engine-lists.json"
    bad.write_text("{not json")
    assert shipped.load_shipped(build, str(bad)) is None
    assert shipped.load_shipped(build, str(tmp_path / "missing.json")) is None
    live = shipped.read(engine, build)
    shipped.write(live, str(bad))
    assert shipped.load_shipped(build, str(bad)) == live
