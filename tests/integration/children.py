"""The programs integration tests run in fresh interpreters.

chDB allows one engine per process, so a test that needs durable_obj and
chdb.durable side by side, a crash, or a party in another process runs each
party as one of these programs:

    python -m tests.integration.children NAME '{"param": ...}'

`tests/integration/_proc.py` starts them (`run`, `run_value`, `Script`,
`Worker`). A program talks to the test by `emit()`: one stdout line that
starts with MARK and carries JSON (anything else on stdout, from the engine
or a library, is ignored). Programs that must wait for the test read a line
from stdin: an event the test sends, never a sleep.

Each program imports the library it drives when it runs, so a chdb.durable
child never imports durable_obj, and the other way round.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

#: Prefix of the lines a child uses to talk to the test.
MARK = "@@"

Params = dict[str, Any]
PROGRAMS: dict[str, Callable[[Params], None]] = {}

#: Objects a program leaves open on purpose: kept referenced until the
#: interpreter shuts down, as a script's global would be.
LEFT_OPEN: list[Any] = []


def program(fn: Callable[[Params], None]) -> Callable[[Params], None]:
    PROGRAMS[fn.__name__] = fn
    return fn


def emit(value: Any) -> None:
    sys.stdout.write(MARK + json.dumps(value) + "\n")
    sys.stdout.flush()


def wait_for_test() -> str:
    """Block until the test sends a line (or closes stdin): an event."""
    return sys.stdin.readline().strip()


def failure(exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "category": getattr(exc, "category", None),
        "type": type(exc).__name__,
        "message": str(exc),
    }


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """{"ok": True, "value": ...} or the error's category, type and message."""
    try:
        return {"ok": True, "value": fn(*args, **kwargs)}
    except Exception as exc:
        return failure(exc)


def namespace(p: Params, **options: Any) -> Any:
    import durable_obj

    return durable_obj.Namespace(
        p["url"], owner=p.get("owner"), storage_options=p.get("options") or {}, **options
    )


# -- reading --------------------------------------------------------------------------------


@program
def read(p: Params) -> None:
    """Open (with either library), run `queries`, close; emit what was seen."""
    lib = importlib.import_module(p["impl"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = lib.Namespace(p["url"], owner=p.get("owner")).open(
            p["oid"], read_only=p["read_only"], force=p["force"]
        )
    try:
        seen = {
            "warnings": [[w.category.__name__, str(w.message)] for w in caught],
            "generation": obj.generation,
            "seq": obj.seq,
            "results": [obj.query(q, "CSV").data() for q in p["queries"]],
        }
    finally:
        obj.close()
    emit(seen)


@program
def read_query(p: Params) -> None:
    """A read-only open of `oid` (default "o"): emit one query's CSV."""
    with namespace(p).open(p.get("oid", "o"), read_only=True) as obj:
        emit(obj.query(p["query"], "CSV").data())


@program
def follower(p: Params) -> None:
    """A follower (follow=`interval`) of `oid`: emit "ready", then, once its
    view reached seq `until`, every update it saw as [seq, the view's
    `query` at that seq] (read in on_change, which runs between refreshes)."""
    import threading

    seen: list[list[Any]] = []
    done = threading.Event()

    def on_change(update: Any) -> None:
        seen.append([update.seq, obj.query(p["query"], "CSV").data()])
        if update.seq >= p["until"]:
            done.set()

    obj = namespace(p, follow=p["interval"], on_change=on_change).open(
        p.get("oid", "o"), read_only=True
    )
    with obj:
        emit({"ready": obj.seq})
        if obj.seq < p["until"]:
            done.wait(p.get("timeout", 120))
        emit({"seq": obj.seq, "seen": seen})


@program
def open_missing(p: Params) -> None:
    """A read-only open of an object that does not exist: emit the outcome."""
    emit(attempt(lambda: namespace(p).open(p["oid"], read_only=True)))


# -- writing --------------------------------------------------------------------------------


@program
def write(p: Params) -> None:
    """Run `statements` as writer `owner` on `oid`, flush, close; emit the generation."""
    with namespace(p).open(p.get("oid", "o")) as obj:
        for sql in p["statements"]:
            obj.execute(sql)
        obj.flush()
        emit(obj.generation)


@program
def crash_writer(p: Params) -> None:
    """Flush `flushed`, execute `unflushed`, then wait to be SIGKILLed."""
    obj = namespace(p, lease_ttl=p["ttl"]).open(p["oid"])
    for sql in p["flushed"]:
        obj.execute(sql)
    obj.flush()
    emit({"state": "FLUSHED", "seq": obj.seq, "generation": obj.generation})
    for sql in p["unflushed"]:
        obj.execute(sql)
    emit({"state": "EXECUTED", "pending": obj.pending})
    LEFT_OPEN.append(obj)
    wait_for_test()  # the test kills us first


@program
def pool_holder(p: Params) -> None:
    """An `AsyncPool` as `owner` writes a row to each of `oids` (durable),
    executes one more (unflushed), then waits to be SIGKILLed holding them."""
    import asyncio

    import durable_obj

    async def main() -> None:
        pool = durable_obj.AsyncPool(
            p["url"], owner=p["owner"], storage_options=p.get("options") or {}, lease_ttl=60
        )
        generations = []
        for oid in p["oids"]:
            async with pool.object(oid) as obj:
                await obj.awrite("CREATE TABLE t (k String) ENGINE = MergeTree ORDER BY k")
                await obj.awrite(f"INSERT INTO t VALUES ('{oid}')")
                await obj.aexecute("INSERT INTO t VALUES ('lost')")
                generations.append(obj.sync.generation)
        emit({"held": len(pool), "generations": generations})
        LEFT_OPEN.append(pool)
        await asyncio.get_running_loop().run_in_executor(None, wait_for_test)

    asyncio.run(main())


@program
def loop_writer(p: Params) -> None:
    """Take the object by force and write whole batches until killed: each
    batch is `rows` INSERTs then a flush (acknowledged by an emit), with a
    checkpoint every `checkpoint_every` batches."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = namespace(p).open(p["oid"], force=True)
    state = obj.query(p["query"], "CSV").data()
    rows = [[int(x) for x in line.split(",")] for line in state.splitlines() if line]
    emit({"opened": rows, "warnings": [w.category.__name__ for w in caught]})
    batch = len(rows)
    while True:
        for part in range(p["rows"]):
            obj.execute(f"INSERT INTO b VALUES ({batch}, {part})")
        obj.flush()
        emit({"ack": batch})
        if batch % p["checkpoint_every"] == p["checkpoint_every"] - 1:
            # Keeps reopening cheap, and lets some kills land inside a checkpoint.
            obj.checkpoint()
            emit({"checkpoint": batch})
        batch += 1


#: The tables of `unit_writer`: a unit is one row in memories and one in log,
#: both keyed by (child, task, n); noise holds unrelated single rows.
UNIT_TABLES = (
    "CREATE TABLE IF NOT EXISTS memories (child UInt32, task UInt32, n UInt32, text String) "
    "ENGINE = MergeTree ORDER BY (child, task, n)",
    "CREATE TABLE IF NOT EXISTS log (child UInt32, task UInt32, n UInt32, event String) "
    "ENGINE = MergeTree ORDER BY (child, task, n)",
    "CREATE TABLE IF NOT EXISTS noise (child UInt32, i UInt32) ENGINE = MergeTree ORDER BY i",
)
MEMORY = "INSERT INTO memories VALUES ({c:UInt32}, {t:UInt32}, {n:UInt32}, {text:String})"
LOG = "INSERT INTO log VALUES ({c:UInt32}, {t:UInt32}, {n:UInt32}, 'remembered')"


@program
def unit_writer(p: Params) -> None:
    """Write units of work from `tasks` asyncio tasks until killed.

    Opens `oid` as `owner` with reclaim=True (a restarted child takes its
    killed predecessor's lease at once), creates the tables if absent, and
    emits {"opened": ...} with the lease takeovers it logged and the
    warnings it got. Then each task writes units n = 0, 1, ... of its own,
    alternately with awrite(memory, log) and with an abatch() block of two
    aexecute() calls, and emits {"ack": [task, n, child]} once a unit is
    durable. Beside them one task calls aflush() at random moments and one
    aexecute()s single rows into noise: neither may ever commit part of a
    unit."""
    import asyncio
    import logging
    import random

    import durable_obj

    child, rng = p["child"], random.Random(p["seed"])
    takeovers: list[str] = []

    class Takeovers(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "took the lease" in record.getMessage():
                takeovers.append(record.getMessage())

    logging.getLogger("durable_obj").addHandler(Takeovers())

    async def main() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            obj = await durable_obj.aopen(
                f"{p['url']}/{p['oid']}",
                owner=p["owner"],
                reclaim=True,
                storage_options=p.get("options") or {},
            )
        await obj.awrite(*UNIT_TABLES)
        emit({"opened": {"takeovers": takeovers, "warnings": [str(w.message) for w in caught]}})

        async def units(task: int) -> None:
            for n in range(2**31):
                key = {"c": child, "t": task, "n": n}
                if n % 2 == 0:
                    await obj.awrite((MEMORY, {**key, "text": f"memory {n}"}), (LOG, key))
                else:
                    async with obj.abatch():
                        await obj.aexecute(MEMORY, params={**key, "text": f"memory {n}"})
                        await obj.aexecute(LOG, params=key)
                emit({"ack": [task, n, child]})

        async def flusher() -> None:
            while True:
                await asyncio.sleep(rng.uniform(0, 0.02))
                await obj.aflush()

        async def noise() -> None:
            for i in range(2**31):
                await obj.aexecute(
                    "INSERT INTO noise VALUES ({c:UInt32}, {i:UInt32})", params={"c": child, "i": i}
                )

        await asyncio.gather(*(units(t) for t in range(p["tasks"])), flusher(), noise())

    asyncio.run(main())


@program
def replay_writer(p: Params) -> None:
    """Create table e, try `sql`, flush; emit the outcome and what the writer reads."""
    obj = namespace(p).open(p["oid"])
    obj.execute("CREATE TABLE e (id UInt32, v String, d DateTime) ENGINE = MergeTree ORDER BY id")
    outcome = attempt(obj.execute, p["sql"])
    obj.flush()
    seen = obj.query(p["query"], "CSV").data()
    obj.close()
    emit({"outcome": outcome, "seen": seen})


@program
def race_open(p: Params) -> None:
    """Race other processes to open the new object "raced" as its writer.

    Says "ready" once the library is imported and the namespace made, then
    opens when the test sends "go" (the start line); the winner holds the
    lease until the test sends "release", after every racer has answered."""
    ns = namespace(p)
    emit("ready")
    wait_for_test()
    try:
        obj = ns.open("raced")
    except Exception as exc:
        emit(getattr(exc, "category", type(exc).__name__))
        return
    emit("won")
    wait_for_test()
    obj.close()


@program
def leave_open(p: Params) -> None:
    """Open `oid` read-only, emit a count, maybe fail, and end without close()."""
    obj = namespace(p).open(p["oid"], read_only=True)
    LEFT_OPEN.append(obj)
    emit(obj.query("SELECT count() FROM t").strip())
    if p["fail"]:
        obj.query("SELECT * FROM no_such_table")  # uncaught: the program dies here


# -- a long-lived worker, driven command by command -----------------------------------------

_real_time = time.time


def set_clock(at: float | None) -> None:
    """Freeze this process's wall clock at `at` (None: the real clock again).
    Both libraries read the wall clock as `time.time()`, for every lease
    decision; monotonic time, sleeps and timeouts are untouched."""
    frozen: Callable[[], float] = _real_time if at is None else (lambda: at)
    time.time = frozen


@program
def serve(p: Params) -> None:
    """Hold one object (durable_obj or chdb.durable) and serve commands read
    from stdin, one JSON line each; reply to each with one emit."""
    impl = p["impl"]
    if impl not in ("durable_obj", "chdb.durable"):
        raise SystemExit(f"unknown impl {impl!r}")
    lib = importlib.import_module(impl)
    obj: Any = None

    def info() -> dict[str, Any]:
        return {
            "generation": obj.generation,
            "seq": obj.seq,
            "pending": obj.pending,
            "fenced": obj.fenced,
            "closed": obj.closed,
            "pid": os.getpid(),
        }

    def handle(req: dict[str, Any]) -> Any:
        nonlocal obj
        op = req["op"]
        if op == "open":
            ns = lib.Namespace(req["url"], owner=req.get("owner"), **req.get("options", {}))
            at = {"at": req["at"]} if "at" in req else {}  # time travel: durable_obj only
            obj = ns.open(req["oid"], read_only=req["read_only"], force=req["force"], **at)
            return info()
        if op == "execute":
            obj.execute(req["sql"])
            return None
        if op == "flush":
            return obj.flush()
        if op == "checkpoint":
            return obj.checkpoint()
        if op == "query":
            return obj.query(req["sql"], req.get("fmt", "CSV")).data()
        if op == "info":
            return info()
        if op == "close":
            obj.close()
            return None
        if op == "clock":
            set_clock(req["at"])
            return None
        raise ValueError(f"unknown op {op!r}")

    emit({"ready": impl})
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["op"] == "exit":
            break
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                reply: dict[str, Any] = {"ok": True, "value": handle(req)}
            except Exception as exc:
                reply = failure(exc)
        reply["warnings"] = [
            {"category": w.category.__name__, "message": str(w.message)} for w in caught
        ]
        emit(reply)
    # Leave without close(): like a process that simply ends. os._exit skips
    # interpreter teardown, so nothing is flushed or released behind our back.
    sys.stdout.flush()
    os._exit(0)


@program
def describe(p: Params) -> None:
    """What this process sees (the harness's own test): its argv, working
    directory, TMPDIR, zone, an environment variable; then, at its exit, the
    exit handlers durable_obj's import registered still there, by name."""
    import atexit

    import durable_obj  # noqa: F401

    emit(
        {
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "tmp": __import__("tempfile").gettempdir(),
            "tz": time.strftime("%Z", time.localtime(1_000_000_000)),
            "env": os.environ.get(p["variable"]),
            "chdb": "chdb" in sys.modules,
            "handlers": atexit._ncallbacks(),
        }
    )

    def at_exit() -> None:
        emit({"exited": atexit._ncallbacks()})

    atexit.register(at_exit)
    raise SystemExit(p.get("code", 0))


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or argv[1] not in PROGRAMS:
        raise SystemExit(f"usage: python -m tests.integration.children {'|'.join(PROGRAMS)} [JSON]")
    PROGRAMS[argv[1]](json.loads(argv[2]) if len(argv) == 3 else {})


if __name__ == "__main__":
    main(sys.argv)
