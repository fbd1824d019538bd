"""An ObjectHost for the freeze test, imported by the Ray workers (the
cluster's PYTHONPATH holds the repository): a writer loop that runs inside
the actor, on its own thread, and journals every flush to a local file, so
the test sees what a zombie tried after it was thawed."""

from __future__ import annotations

import json
import threading
import time

from durable_obj import DurableError
from durable_obj.ray import ObjectHost


class JournalingHost(ObjectHost):
    def start_loop(self, oid: str, journal: str, every: float) -> int:
        """Write batch n (one row, tag 'loop', value n) and flush it, for n =
        0, 1, ... until the actor ends; journal each outcome as a JSON line:
        {n, started, ended, ok | error category}. Returns this actor's pid."""

        def loop() -> None:
            n = 0
            while True:
                started = time.time()
                entry: dict[str, object] = {"n": n, "started": started}
                try:
                    with self.use(oid) as (obj, _):
                        obj.execute(f"INSERT INTO t VALUES ('loop', {n})")
                        obj.flush()
                    entry["ok"] = True
                except DurableError as exc:
                    entry["error"] = exc.category
                entry["ended"] = time.time()
                with open(journal, "a", encoding="utf-8") as out:
                    out.write(json.dumps(entry) + "\n")
                n += 1
                time.sleep(every)

        threading.Thread(target=loop, name=f"loop-{oid}", daemon=True).start()
        import os

        return os.getpid()
