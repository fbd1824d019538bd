"""The engine's function, table-function and table-setting lists, read once
per process, or taken from the copy shipped for the build this package pins.

Two of the gate's catalogues are made from them: what an object may call
(`reach.Catalog`) and what does not replay to the same value
(`determinism.Catalog`). Reading them costs an engine query on
`system.functions` that builds every function's row (11-19 ms in chDB
26.9, whatever columns are asked for): once per fresh process, on the path
of every cold open (a base's definitions are checked with them before
RESTORE). The lists are a property of the engine's build, not of any
object, so the package ships them for the build it pins (`chdb-core` in
pyproject.toml) in `engine-lists.json`, and uses that copy only when the
running engine is that build: the same version and the same git hash of
its source (`system.build_options`, one small query). Any other build is
read as before. The shipped copy is package data, trusted as the code is;
`tests/integration/test_shipped_lists.py` holds it equal to what the pinned
engine answers, and `python -m durable_obj.testing.engine_lists` rewrites it.

Only the engine's raw answers are shipped; which functions are refused or
non-deterministic is decided from them by the same code either way.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_obj.replica.engine import Engine

#: The shipped copy, beside this module.
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine-lists.json")

BUILD_QUERY = "SELECT value FROM system.build_options WHERE name = 'GIT_HASH'"
FUNCTIONS_QUERY = (
    "SELECT lower(name), lower(alias_to), categories, is_aggregate, deterministic "
    "FROM system.functions ORDER BY 1"
)
TABLE_FUNCTIONS_QUERY = "SELECT lower(name) FROM system.table_functions ORDER BY 1"
SETTINGS_QUERY = "SELECT lower(name) FROM system.merge_tree_settings ORDER BY 1"

#: One row of system.functions: lower(name), lower(alias_to), categories,
#: is_aggregate, deterministic (None where the engine does not say).
Function = tuple[str, str, str, int, int | None]


@dataclass(frozen=True, slots=True)
class Lists:
    """What one engine build answers, in the order its queries sort it."""

    build: str  # "<chdb version>+<git hash>"
    functions: tuple[Function, ...]
    table_functions: tuple[str, ...]
    table_settings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "functions": [list(row) for row in self.functions],
            "table_functions": list(self.table_functions),
            "table_settings": list(self.table_settings),
        }


_LISTS: dict[str, Lists] = {}
_LOCK = threading.Lock()


def lists(engine: Engine) -> Lists:
    """The lists of `engine`'s build: shipped if it is the pinned build,
    else read from the engine; once per process and engine version."""
    found = _LISTS.get(engine.version)
    if found is None:
        build = build_of(engine)
        found = load_shipped(build) or read(engine, build)
        with _LOCK:
            found = _LISTS.setdefault(engine.version, found)
    return found


def build_of(engine: Engine) -> str:
    """'<chdb version>+<git hash of its source>' of the running engine."""
    return f"{engine.version}+{engine.text(BUILD_QUERY, 'TSV').strip()}"


def read(engine: Engine, build: str) -> Lists:
    """The lists as the running engine answers them."""
    rows = engine.json_rows(FUNCTIONS_QUERY)
    return Lists(
        build,
        tuple(
            (str(n), str(a), str(c), int(g), None if d is None else int(d))
            for n, a, c, g, d in rows
        ),
        tuple(engine.text(TABLE_FUNCTIONS_QUERY, "TSV").split()),
        tuple(engine.text(SETTINGS_QUERY, "TSV").split()),
    )


def load_shipped(build: str, path: str = PATH) -> Lists | None:
    """The shipped copy if it is `build`'s, else None (also when it is
    missing or unreadable: the engine is read instead)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("build") != build:
        return None
    return Lists(
        build,
        tuple((n, a, c, int(g), d) for n, a, c, g, d in doc["functions"]),
        tuple(doc["table_functions"]),
        tuple(doc["table_settings"]),
    )


def write(found: Lists, path: str = PATH) -> None:
    """Write `found` as the shipped copy: one function per line, to diff."""
    doc = found.to_json()
    lines = ",\n".join(json.dumps(row) for row in doc.pop("functions"))
    head = json.dumps(doc, indent=1)[:-2]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f'{head},\n "functions": [\n{lines}\n ]\n}}\n')
