"""Child processes of the replay tests, each started fresh with TZ set.

    python -m tests.integration.replay_child MODE  < params.json

`run(mode, tz, params)` starts one (`start` without waiting) and returns the
JSON it printed on its last line prefixed with `@@`.

tests/integration/test_determinism.py: `corpus` executes the labelled corpus
as a writer and reports what each statement became; `corpus-read` reopens
read-only. Both dump every table as JSONCompact.

tests/property/test_pinning.py: `write` opens a new object (never folded into
a checkpoint, so every reader replays the WAL) and runs the generated cases
in three phases:

A. per case k: `CREATE TABLE t_k (id UInt32, c Array(T))` and
   `INSERT INTO t_k (id, c) VALUES (1, arrayShuffle([V])), (5, [])`: the
   pinner logs `arrayShuffle([V])` as a literal of Array(T);
B. that literal LIT, read back from the WAL, in every kind of statement:
   INSERT ... SELECT of constants, CREATE TABLE ... AS SELECT, and one of
   ALTER TABLE ... UPDATE, ALTER TABLE ... DELETE WHERE, lightweight DELETE;
C. per query-constant call Q (`now64(3, 'Asia/Tokyo')`, ...), the pinner
   pins Q in CREATE TABLE ... AS SELECT, INSERT ... SELECT, INSERT ...
   VALUES, ALTER TABLE ... UPDATE / DELETE and lightweight DELETE.

It reports what each statement became, whether the pinned value is the value
V had (RowBinary bytes), and a dump of every table. `read` (durable_obj) and
`read-v1` (chdb.durable) open the object read-only and report the same dump.
The dump is zone-independent: each row as RowBinary hex, with its type.
`script` runs given statements and queries (the single-example regression
tests); `categories` reports how a writer of either library answers each of
given statements (tests/integration/test_secrets.py). The result is printed
as one line prefixed with `@@`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARK = "@@"
REPO = Path(__file__).resolve().parents[2]


def start(mode: str, tz: str, params: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    """Start a child under TZ=`tz` and hand it `params`; `finish` collects it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.replay_child", mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TZ=tz, PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    return proc, json.dumps(params)


def finish(child: tuple[subprocess.Popen[str], str], what: str) -> dict[str, Any]:
    proc, params = child
    out, err = proc.communicate(params, timeout=900)
    lines = [line for line in out.splitlines() if line.startswith(MARK)]
    assert proc.returncode == 0 and lines, f"{what} failed (exit {proc.returncode}):\n{err[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    return result


def run(mode: str, tz: str, params: dict[str, Any]) -> dict[str, Any]:
    return finish(start(mode, tz, params), f"{mode} (TZ={tz})")


NO_FOLD = {"fold_segments": 0, "fold_bytes": 0, "close_fold_segments": 0}


def dump(query: Callable[[str], str], tables: list[str]) -> dict[str, str]:
    """Each table's rows with their column types, as text no zone changes: the
    RowBinary bytes of the row (a DateTime is its seconds) and the row's type."""
    return {
        table: query(
            f"SELECT hex(formatRow('RowBinary', *)) AS h, toTypeName(tuple(*)) FROM `{table}` "
            "ORDER BY h FORMAT TSV"
        )
        for table in tables
    }


def _wal_statements(root: Path) -> list[str]:
    head = json.loads((root / "head.json").read_text())
    out: list[str] = []
    for ref in head["manifest"]["wal"]:
        for line in (root / ref["key"]).read_bytes().splitlines():
            out.append(json.loads(line)["sql"])
    return out


def _first_row_value(sql: str) -> str:
    """The text of the second value of the first row of a logged INSERT."""
    from durable_obj.gate.shapes import insert_shape
    from durable_obj.gate.sql import tokenize

    tokens = tokenize(sql)
    shape = insert_shape(tokens)
    assert shape is not None and shape.rows, sql
    open_, close = shape.rows[0]
    depth, comma = 0, None
    for i in range(open_ + 1, close):
        if tokens[i].text in ("(", "["):
            depth += 1
        elif tokens[i].text in (")", "]"):
            depth -= 1
        elif depth == 0 and tokens[i].text == ",":
            comma = i
            break
    assert comma is not None, sql
    return sql[tokens[comma + 1].start : tokens[close].start].strip()


def write(p: dict[str, Any]) -> dict[str, Any]:
    import durable_obj

    ns = durable_obj.Namespace(p["url"], owner="writer", timezone=p["timezone"], **NO_FOLD)
    obj = ns.open(p["oid"])
    errors: list[dict[str, str]] = []
    created: list[str] = []

    def run(sql: str, case: str) -> bool:
        try:
            obj.execute(sql)
        except durable_obj.DurableError as exc:
            errors.append({"case": case, "sql": sql, "category": exc.category, "error": str(exc)})
            return False
        if sql.startswith("CREATE TABLE "):
            created.append(sql.split()[2])
        return True

    def query(sql: str) -> str:
        return str(obj.query(sql, "TSV").data()).strip()

    # A: pin arrayShuffle([V]) in VALUES
    for k, case in enumerate(p["cases"]):
        if run(
            f"CREATE TABLE t_{k} (id UInt32, c Array({case['type']}), s String) "
            "ENGINE = MergeTree ORDER BY id",
            case["type"],
        ):
            run(
                f"INSERT INTO t_{k} (id, c) VALUES (1, arrayShuffle([{case['value']}])), (5, [])",
                case["type"],
            )
    obj.flush()
    root = Path(p["url"]) / p["oid"]
    logged = {s.split()[2]: s for s in _wal_statements(root) if s.startswith("INSERT INTO t_")}
    faithful = []
    for k, case in enumerate(p["cases"]):
        if f"t_{k}" not in logged:
            continue
        want = query(f"SELECT hex(formatRow('RowBinary', [{case['value']}]))")
        got = query(f"SELECT hex(formatRow('RowBinary', c)) FROM t_{k} WHERE id = 1")
        if want != got:
            faithful.append(
                {
                    "case": case["type"],
                    "value": case["value"],
                    "want": want,
                    "got": got,
                    "logged": logged[f"t_{k}"],
                }
            )
        lit = _first_row_value(logged[f"t_{k}"])
        # B: the pinned literal in every kind of statement
        mutations = (  # one per case, in turn: mutations are the slow part of a replay
            f"ALTER TABLE t_{k} UPDATE c = {lit}, s = toString({lit}) WHERE id = 5",
            f"ALTER TABLE t_{k} DELETE WHERE id = 2 AND sipHash64(c) = sipHash64({lit})",
            f"DELETE FROM t_{k} WHERE id = 3 AND sipHash64(c) = sipHash64({lit})",
        )
        for sql in (
            f"INSERT INTO t_{k} (id, c) SELECT 2, {lit} UNION ALL SELECT 3, {lit}",
            f"INSERT INTO t_{k} (id, c) SELECT 4, {lit}",
            mutations[k % len(mutations)],
            f"CREATE TABLE u_{k} ENGINE = MergeTree ORDER BY tuple() AS SELECT {lit} AS c",
        ):
            run(sql, case["type"])
    # C: query-constant calls pinned in every kind of statement
    for j, q in enumerate(p["constants"]):
        if run(
            f"CREATE TABLE s_{j} ENGINE = MergeTree ORDER BY id AS "
            f"SELECT toUInt32(1) AS id, {q} AS c",
            q,
        ):
            for sql in (
                f"INSERT INTO s_{j} (id, c) SELECT 2, {q}",
                f"INSERT INTO s_{j} (id, c) VALUES (3, {q}), (4, {q})",
                f"ALTER TABLE s_{j} UPDATE c = {q} WHERE id = 1",
                f"ALTER TABLE s_{j} DELETE WHERE id = 2 AND sipHash64(c) != sipHash64({q})",
                f"DELETE FROM s_{j} WHERE id = 3 AND sipHash64(c) != sipHash64({q})",
            ):
                run(sql, q)
    obj.flush()
    tables = dump(query, created)
    obj.close()
    return {
        "errors": errors,
        "faithful": faithful,
        "dump": tables,
        "statements": _wal_statements(root),
    }


def script(p: dict[str, Any]) -> dict[str, Any]:
    """Open (a writer, or read-only), execute `statements`, flush, then answer
    `queries` (TSV): for the regression tests of single examples."""
    import durable_obj

    ns = durable_obj.Namespace(p["url"], owner="script", timezone=p.get("timezone", "UTC"))
    obj = ns.open(p["oid"], read_only=p.get("read_only", False))
    outcomes = []
    for sql in p.get("statements", []):
        try:
            obj.execute(sql)
            outcomes.append("ok")
        except durable_obj.DurableError as exc:
            outcomes.append(f"{exc.category}: {exc}")
    if not p.get("read_only"):
        obj.flush()
    answers = [str(obj.query(q, "TSV").data()) for q in p.get("queries", [])]
    obj.close()
    return {"outcomes": outcomes, "answers": answers}


def read(p: dict[str, Any], impl: str) -> dict[str, Any]:
    if impl == "chdb.durable":
        import chdb.durable as lib
    else:
        import durable_obj as lib  # type: ignore[no-redef]
    obj = lib.Namespace(p["url"]).open(p["oid"], read_only=True)
    try:
        return {"dump": dump(lambda sql: str(obj.query(sql, "TSV").data()).strip(), p["tables"])}
    finally:
        obj.close()


def corpus(p: dict[str, Any]) -> dict[str, Any]:
    import durable_obj

    obj = durable_obj.Namespace(p["url"], owner="corpus").open(p["oid"])
    for ddl in p["schema"]:
        obj.execute(ddl)
    outcomes: list[dict[str, Any]] = []
    for sql in p["corpus"]:
        try:
            obj.execute(sql)
        except durable_obj.DurableError as exc:
            outcomes.append({"status": exc.category, "message": str(exc)})
            continue
        outcomes.append({"status": "accepted"})
    obj.flush()
    # What each accepted statement became, from the WAL: the schema, then them in order.
    logged = iter(_wal_statements(Path(p["url"]) / p["oid"])[len(p["schema"]) :])
    for outcome in outcomes:
        if outcome["status"] == "accepted":
            outcome["logged"] = next(logged)
    tables = _json_dump(obj)
    obj.close()
    return {"outcomes": outcomes, "dump": tables, "second": int(time.time())}


def corpus_read(p: dict[str, Any]) -> dict[str, Any]:
    import durable_obj

    while int(time.time()) <= p["after_second"]:
        time.sleep(0.05)  # an unpinned now() must read another second than the writer's
    obj = durable_obj.Namespace(p["url"]).open(p["oid"], read_only=True)
    tables = _json_dump(obj)
    obj.close()
    return {"dump": tables, "tz": obj.timezone}


def _json_dump(obj: Any) -> dict[str, str]:
    tables = obj.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine != 'View'",
        "TSV",
    ).split()
    return {t: obj.query(f"SELECT * FROM `{t}` ORDER BY ALL", "JSONCompact").data() for t in tables}


def categories(p: dict[str, Any]) -> dict[str, Any]:
    """The error category and message (or "ok") of each statement executed by a
    writer of `impl` (durable_obj or chdb.durable) on a fresh object."""
    if p["impl"] == "chdb.durable":
        import chdb.durable as lib
    else:
        import durable_obj as lib  # type: ignore[no-redef]
    obj = lib.Namespace(p["url"], owner="gate").open(p["oid"])
    out = []
    for sql in p["statements"]:
        try:
            obj.execute(sql)
            out.append(["ok", ""])
        except lib.DurableError as exc:
            out.append([exc.category, str(exc)])
    obj.close()
    return {"outcomes": out}


def main() -> None:
    mode = sys.argv[1]
    params = json.load(sys.stdin)
    if mode == "write":
        out = write(params)
    elif mode == "read":
        out = read(params, "durable_obj")
    elif mode == "read-v1":
        out = read(params, "chdb.durable")
    elif mode == "script":
        out = script(params)
    elif mode == "categories":
        out = categories(params)
    elif mode == "corpus":
        out = corpus(params)
    elif mode == "corpus-read":
        out = corpus_read(params)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
