"""Rewrite the engine lists the gate ships (`durable_obj.gate.shipped`)
from the running engine's build: run it when chdb-core's pin moves.

    python -m durable_obj.testing.engine_lists
"""

from __future__ import annotations

import sys

from durable_obj.gate import shipped
from durable_obj.replica.engine import acquire


def main() -> None:
    engine = acquire()
    try:
        found = shipped.read(engine, shipped.build_of(engine))
    finally:
        engine.close(orphan=False)
    shipped.write(found)
    print(f"{shipped.PATH}: {found.build}, {len(found.functions)} functions", file=sys.stderr)


if __name__ == "__main__":
    main()
