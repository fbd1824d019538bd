"""The package's layers, read from its imports: the rule and the picture.

    python docs/layers.py          rewrite docs/concepts/layers.md
    python docs/layers.py --check  exit 1 if that page is out of date

`tests/unit/test_layers.py` holds the package to `ALLOWED` and checks the
page is current, so the picture cannot drift from the code. An import under
`if TYPE_CHECKING:` is for types only (nothing runs it) and is not an edge.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "durable_obj"
PAGE = ROOT / "docs" / "concepts" / "layers.md"

#: Each layer, lowest first, with what it holds. A layer may import only the
#: layers listed before it (and itself); the faces on top import any layer.
LAYERS: dict[str, str] = {
    "errors": "the error types every layer raises",
    "telemetry": "OpenTelemetry spans and metrics, hooked on every layer; free when unset",
    "wire": "the V1 contract: head, WAL, lease, digests, bytes in and out",
    "gate": "the statement gate: what a statement means is what the engine reads",
    "stores": "object stores by URL: atomic create, compare-and-swap",
    "replica": "the local copy: the chDB engine, restore, results",
    "core": "one durable object's state machine: open, flush, checkpoint, close",
    "service": "many objects in one process: namespaces, pools, async lanes",
    "aio": "the async face",
    "faces": "durable_obj itself, the CLI, LangGraph, MCP, Ray, testing",
}

#: Which layers each layer may import at run time, beyond itself.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "telemetry": {"errors"},
    "wire": {"errors", "telemetry"},
    "gate": {"errors", "telemetry"},
    "stores": {"errors", "telemetry", "wire"},
    "replica": {"errors", "telemetry", "wire", "gate", "stores"},
    "core": {"errors", "telemetry", "wire", "gate", "stores", "replica"},
    "service": {"errors", "telemetry", "wire", "gate", "stores", "replica", "core"},
    "aio": {"errors", "telemetry", "wire", "gate", "stores", "replica", "core", "service"},
    "faces": {
        "errors", "telemetry", "wire", "gate", "stores", "replica", "core", "service", "aio"
    },
}


FACES = {"__init__", "cli", "langgraph", "mcp", "ray", "testing"}


def layer_of(module: str) -> str:
    """The layer of a dotted module name under durable_obj."""
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    return "faces" if head in FACES else head


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(imported module, line) for every run-time import in a module."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, node.lineno))
            # `from durable_obj import errors`: the name may be a module.
            for alias in node.names:
                found.append((f"{node.module}.{alias.name}", node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def edges() -> list[tuple[str, str, str]]:
    """(importing module, imported module, "file:line") for every import of ours."""
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    out: list[tuple[str, str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _module_name(path)
        for target, line in _imports(ast.parse(path.read_text(), str(path))):
            if target in modules and target != source:
                out.append((source, target, f"{path.relative_to(ROOT)}:{line}"))
    return out


def violations() -> list[str]:
    """Every run-time import that runs up or sideways between layers."""
    bad = []
    for source, target, where in edges():
        a, b = layer_of(source), layer_of(target)
        if a != b and b not in ALLOWED[a]:
            bad.append(f"{where}: {source} ({a}) imports {target} ({b})")
    return bad


def layer_edges() -> set[tuple[str, str]]:
    return {
        (layer_of(s), layer_of(t)) for s, t, _ in edges() if layer_of(s) != layer_of(t)
    }


def page() -> str:
    """The docs page: the layers and the imports between them, as drawn."""
    lines = [
        "# The package's layers",
        "",
        "<!-- Generated by `python docs/layers.py` from the package's imports;",
        "     tests/unit/test_layers.py fails when it is out of date. -->",
        "",
        "Each box is a subpackage (or, for `errors` and `telemetry`, a module); an",
        "arrow is a run-time import. Arrows only run down: a layer imports",
        "only the layers below it, which `tests/unit/test_layers.py` checks",
        "on every module. An import under `if TYPE_CHECKING:` names a type",
        "and runs nothing, so it is not an arrow.",
        "",
        "```mermaid",
        "graph TD",
    ]
    for name in LAYERS:
        lines.append(f'    {name}["{name}"]')
    for a, b in sorted(layer_edges(), key=lambda e: (list(LAYERS).index(e[0]), e[1])):
        lines.append(f"    {a} --> {b}")
    lines += ["```", "", "| layer | holds |", "| --- | --- |"]
    lines += [f"| `{name}` | {what} |" for name, what in LAYERS.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run python docs/layers.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    bad = violations()
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
