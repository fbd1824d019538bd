"""The package's layers: imports run only downward, and the drawn page is current."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _layers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_layers", ROOT / "docs" / "layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_layers"] = module
    spec.loader.exec_module(module)
    return module


layers = _layers()


def test_every_import_runs_down_the_layers() -> None:
    assert layers.edges(), "no imports found: the scan is broken"
    assert layers.violations() == []


def test_no_layer_imports_in_a_circle() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in layers.layer_edges():
        graph.setdefault(a, set()).add(b)
    order = list(layers.LAYERS)
    for a, targets in graph.items():
        for b in targets:
            assert order.index(b) < order.index(a), f"{a} -> {b} runs up"


def test_every_subpackage_is_a_known_layer() -> None:
    for path in (ROOT / "durable_obj").iterdir():
        if path.name.startswith((".", "_")) or path.name == "py.typed":
            continue
        name = path.stem
        assert layers.layer_of(f"durable_obj.{name}") in layers.LAYERS, name


def test_an_upward_import_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check sees an import that runs up (so the first test can fail)."""
    wire = tmp_path / "durable_obj" / "wire"
    wire.mkdir(parents=True)
    (tmp_path / "durable_obj" / "core").mkdir()
    (tmp_path / "durable_obj" / "core" / "object.py").write_text("")
    (wire / "head.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from durable_obj.core import object\n"
        "def f():\n    import durable_obj.core.object\n"
    )
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    monkeypatch.setattr(layers, "PACKAGE", tmp_path / "durable_obj")
    assert layers.violations() == [
        "durable_obj/wire/head.py:5: durable_obj.wire.head (wire) imports "
        "durable_obj.core.object (core)"
    ]


def test_the_layers_page_is_current() -> None:
    assert layers.main(["--check"]) == 0, "run: python docs/layers.py"
