"""Query parameters and structured results (issue 13): `params=` binds
`{name:Type}` placeholders through the engine and logs the exact literal
statement; `rows`/`dicts`/`arrow`/`df`/`query_bytes` give the answer in the
shape the caller wants; a syntax error keeps the engine's hint; a mistyped
mutation gets the engine's own error; a network table function in a query
is refused before anything resolves it."""

from __future__ import annotations

import datetime as dt
import decimal
import http.server
import io
import json
import math
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import durable_obj
from durable_obj import errors
from tests.integration import _proc

DDL = (
    "CREATE TABLE m (id UInt32, txt String, emb Array(Float32), at DateTime, "
    "d Decimal(10, 3), n Nullable(Float64), tags Map(String, UInt8), "
    "pair Tuple(a UInt8, b String), u UUID, day Date) ENGINE = MergeTree ORDER BY id"
)
INSERT = (
    "INSERT INTO m VALUES ({id:UInt32}, {txt:String}, {emb:Array(Float32)}, {at:DateTime}, "
    "{d:Decimal(10, 3)}, {n:Nullable(Float64)}, {tags:Map(String, UInt8)}, "
    "{pair:Tuple(a UInt8, b String)}, {u:UUID}, {day:Date})"
)
HOSTILE = "it's a \"test\"\n\\ '); DROP TABLE m; -- {x:String} \t\0 ü 🦆"
UID = uuid.UUID("12345678-1234-5678-1234-567812345678")
VALUES = {
    "id": 1,
    "txt": HOSTILE,
    "emb": [0.5, -0.25, 1e-3],
    "at": dt.datetime(2026, 12, 1, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))),
    "d": decimal.Decimal("1.125"),
    "n": float("nan"),
    "tags": {"a": 1, "b'": 2},
    "pair": (7, "x"),
    "u": UID,
    "day": dt.date(2026, 12, 1),
}
UTC = dt.UTC


@pytest.fixture
def obj(tmp_path: Path) -> Iterator[durable_obj.DurableObject]:
    with durable_obj.open(f"{tmp_path}/o", owner="t") as o:
        o.execute(DDL)
        yield o


def wal_text(root: Path) -> str:
    return "".join(p.read_text() for p in sorted(root.glob("**/wal/*")))


def test_bound_mutation_is_logged_as_literals_and_replays_exactly(tmp_path: Path) -> None:
    with durable_obj.open(f"{tmp_path}/o", owner="t") as o:
        o.execute(DDL)
        o.execute(INSERT, params=VALUES)
        o.flush()
        written = o.rows("SELECT * FROM m")
    logged = [json.loads(line)["sql"] for line in wal_text(tmp_path).splitlines()]
    assert "{id:UInt32}" not in logged[1] and "CAST(" in logged[1]
    assert "DROP TABLE m; --" in logged[1]  # the value is in the log, as a string literal
    with durable_obj.open(f"{tmp_path}/o", read_only=True) as r:
        replayed = r.rows("SELECT * FROM m")
    (row,) = written
    assert row[0] == 1 and row[1] == HOSTILE
    assert row[2] == [0.5, -0.25, 0.001] or math.isclose(row[2][2], 1e-3, rel_tol=1e-6)
    assert row[3] == dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # 13:00+01 is 12:00 UTC
    assert row[4] == decimal.Decimal("1.125")
    assert math.isnan(row[5])
    assert row[6] == {"a": 1, "b'": 2}
    assert row[7] == (7, "x")
    assert row[8] == UID and row[9] == dt.date(2026, 12, 1)
    assert repr(replayed) == repr(written)  # nan != nan: compare the texts


def test_chdb_durable_replays_a_bound_mutation(tmp_path: Path) -> None:
    with durable_obj.open(f"{tmp_path}/o", owner="t") as o:
        o.execute("CREATE TABLE kv (k String, v Array(Float32)) ENGINE = MergeTree ORDER BY k")
        o.execute(
            "INSERT INTO kv VALUES ({k:String}, {v:Array(Float32)})",
            params={"k": HOSTILE, "v": [0.5, 2.0]},
        )
        o.flush()
        mine = o.query("SELECT hex(k), v FROM kv")
    with _proc.Worker("chdb.durable") as w:
        w.open(f"local:{tmp_path}", "o", owner="cd", read_only=True)
        assert w.query("SELECT hex(k), v FROM kv") == mine
        w.close()
        assert w.exit() == 0


def test_params_in_reads_and_every_python_type(obj: durable_obj.DurableObject) -> None:
    obj.execute(INSERT, params=VALUES)
    assert obj.query("SELECT count() FROM m WHERE txt = {t:String}", params={"t": HOSTILE}) == "1\n"
    assert obj.rows(
        "SELECT {b:Bool}, {i:Int128}, {f:Float64}, {s:String}, {z:Nullable(UInt8)}",
        params={"b": True, "i": -(2**100), "f": -math.inf, "s": b"ab", "z": None},
    )[0][1:3] == (-(2**100), -math.inf)
    assert obj.rows("SELECT hex({s:String})", params={"s": b"\xff\x00'\\"}) == [("FF00275C",)]
    assert obj.rows("SELECT {a:Array(Array(String))}", params={"a": [["x'", "\n"], []]}) == [
        ([["x'", "\n"], []],)
    ]
    naive = dt.datetime(2026, 1, 2, 3, 4, 5, 678000)
    assert obj.rows("SELECT {t:DateTime64(3)}", params={"t": naive}) == [
        (naive.replace(tzinfo=UTC),)  # a naive datetime is in the object's zone (UTC)
    ]
    assert obj.rows("SELECT {d:Date}", params={"d": "2026-12-01"}) == [(dt.date(2026, 12, 1),)]
    # a placeholder in a string or comment is text, not a placeholder
    assert obj.rows("SELECT '{x:UInt8}' -- {y:UInt8}") == [("{x:UInt8}",)]
    # an Identifier names a column or table, quoted
    assert obj.rows("SELECT count() FROM {t:Identifier}", params={"t": "m"}) == [(1,)]


def test_bad_params_are_clear_and_never_quote_the_value(obj: durable_obj.DurableObject) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    with pytest.raises(
        errors.InvalidArgument, match="'x' does not fit UInt8: not an integer"
    ) as info:
        obj.execute("INSERT INTO m (id) VALUES ({x:UInt8})", params={"x": secret})
    assert secret not in str(info.value)
    with pytest.raises(errors.InvalidArgument, match="'y' appear in no"):
        obj.query("SELECT {x:UInt8}", params={"x": 1, "y": 2})
    with pytest.raises(errors.InvalidArgument, match=r"'x'.* have no value"):
        obj.query("SELECT {x:UInt8}", params={})
    with pytest.raises(errors.InvalidArgument, match="no ClickHouse form"):
        obj.query("SELECT {x:String}", params={"x": object()})
    with pytest.raises(errors.InvalidArgument, match="must be a dict"):
        obj.query("SELECT {x:String}", params=[("x", "1")])  # type: ignore[arg-type]
    assert obj.pending == 1  # the DDL only: nothing bound badly was run or buffered
    assert obj.query("SELECT count() FROM m") == "0\n"


def test_a_bound_identifier_is_still_judged(obj: durable_obj.DurableObject) -> None:
    with pytest.raises(errors.ClassificationRefused):
        obj.query("SELECT * FROM {d:Identifier}.m", params={"d": "__durable_obj_x"})
    with pytest.raises(errors.ClassificationRefused):
        obj.execute("DROP TABLE {d:Identifier}.x", params={"d": "other"})


def test_structured_results(obj: durable_obj.DurableObject) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    obj.execute(INSERT, params=VALUES)
    obj.execute(INSERT, params={**VALUES, "id": 2, "n": None, "txt": "b"})
    assert obj.dicts("SELECT id, n FROM m ORDER BY id")[1] == {"id": 2, "n": None}
    table = obj.arrow("SELECT id, txt FROM m ORDER BY id")
    assert isinstance(table, pa.Table) and table.column("txt").to_pylist() == [HOSTILE, "b"]
    frame = obj.df("SELECT id, d FROM m ORDER BY id")
    assert list(frame["id"]) == [1, 2]
    parquet = obj.query_bytes("SELECT id FROM m ORDER BY id", "Parquet")
    assert pq.read_table(io.BytesIO(parquet)).column("id").to_pylist() == [1, 2]
    assert obj.query_bytes("SELECT 1", "RowBinary") == b"\x01"
    with pytest.raises(errors.InvalidArgument, match=r"query_bytes\(sql, 'Arrow'\)"):
        obj.query("SELECT 1", "Arrow")
    with pytest.raises(errors.InvalidArgument, match=r"df\(sql\)"):
        obj.query("SELECT 1", "DataFrame")
    with pytest.raises(errors.InvalidArgument, match="binary format"):
        obj.query_bytes("SELECT 1", "CSV")
    with pytest.raises(errors.EngineError, match="not valid UTF-8"):
        obj.rows("SELECT unhex('ff')")
    # the same gates as query(): nothing outside the object, nothing written
    for read in (obj.rows, obj.dicts, obj.arrow, obj.df):
        with pytest.raises(errors.ClassificationRefused):
            read("SELECT * FROM system.processes")
        with pytest.raises(errors.ClassificationRefused):
            read("INSERT INTO m (id) VALUES (9)")


def test_syntax_errors_keep_the_engine_hint_without_the_statement(
    obj: durable_obj.DurableObject,
) -> None:
    with pytest.raises(errors.ClassificationRefused, match="maybe you meant: AND") as info:
        obj.query("SELECT * FROM m WHERE txt = 'sekrit-token' ANDD id = 1")
    assert "sekrit" not in str(info.value) and "position 44 (ANDD)" in str(info.value)
    with pytest.raises(errors.ClassificationRefused, match=r"\(UPDAT\).*expected one of: ") as info:
        obj.execute("ALTER TABLE m UPDAT id = 2 WHERE txt = 'sekrit'")
    assert "sekrit" not in str(info.value)


def test_mistyped_mutation_gets_the_engine_error(obj: durable_obj.DurableObject) -> None:
    with pytest.raises(errors.EngineError, match="Unknown expression identifier `DELETE`"):
        obj.execute("DELETE m WHERE id = 1")
    with pytest.raises(errors.ClassificationRefused, match="use query"):
        obj.execute("SELECT 1")  # a real query still gets the plain advice
    assert obj.pending == 1


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"1\n")

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


def test_network_table_functions_are_refused_before_anything_resolves_them(
    obj: durable_obj.DurableObject,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/x.csv"
    try:
        for sql in (
            f"SELECT * FROM url('{url}', CSV)",
            f"DESCRIBE TABLE url('{url}', CSV)",
            f"SELECT * FROM m WHERE id IN (SELECT c1 FROM url('{url}', CSV))",
            f"SELECT * FROM s3('{url}', 'AKIA', 'secret', CSV)",
        ):
            with pytest.raises(errors.ClassificationRefused, match=r"table function"):
                obj.query(sql)
        with pytest.raises(errors.DurableError):
            obj.execute(f"url('{url}', CSV)")  # an implicit SELECT: never resolved either
    finally:
        server.shutdown()
        server.server_close()
    assert _Recorder.hits == []


def test_async_face_takes_params_and_gives_structured_results(tmp_path: Path) -> None:
    import asyncio

    async def main() -> None:
        async with await durable_obj.aopen(f"{tmp_path}/a", owner="t") as obj:
            await obj.aexecute("CREATE TABLE kv (k String, v UInt8) ENGINE = MergeTree ORDER BY k")
            await obj.aexecute(
                "INSERT INTO kv VALUES ({k:String}, {v:UInt8})", params={"k": HOSTILE, "v": 7}
            )
            await obj.aflush()
            q = "SELECT k, v FROM kv WHERE v = {v:UInt8}"
            assert await obj.arows(q, params={"v": 7}) == [(HOSTILE, 7)]
            assert await obj.adicts(q, params={"v": 7}) == [{"k": HOSTILE, "v": 7}]
            assert (await obj.aarrow(q, params={"v": 7})).num_rows == 1
            assert len(await obj.adf(q, params={"v": 7})) == 1
            assert (await obj.aquery_bytes(q, "RowBinary", params={"v": 7})).endswith(b"\x07")
            assert (
                await obj.aquery(
                    "SELECT count() FROM kv WHERE k = {k:String}", params={"k": HOSTILE}
                )
                == "1\n"
            )

    asyncio.run(main())


def test_show_create_names_the_logical_database(tmp_path: Path) -> None:
    with durable_obj.open(f"{tmp_path}/s", owner="t", db="my-app") as obj:
        obj.execute("CREATE TABLE t (id UInt8) ENGINE = MergeTree ORDER BY id")
        obj.execute("CREATE VIEW v AS SELECT id FROM t")
        shown = obj.query("SHOW CREATE TABLE t", "TSVRaw") + obj.query(
            "SHOW CREATE VIEW v", "TSVRaw"
        )
        ((as_row,),) = obj.rows("SHOW CREATE VIEW v")
    assert "__durable_obj_" not in shown + as_row
    assert "CREATE TABLE `my-app`.t" in shown and "FROM `my-app`.t" in as_row


def test_a_float_s_negative_zero_keeps_its_sign(obj: durable_obj.DurableObject) -> None:
    """The engine prints -0.0 as `-0`, which JSON reads as the integer 0."""
    row = obj.rows(
        "SELECT {x:Float64}, [-0.0, 0.0], toFloat32(-0.0), toNullable(-0.0), 0::Int8",
        params={"x": -0.0},
    )[0]
    signs = [math.copysign(1, v) for v in (row[0], *row[1], row[2], row[3])]
    assert signs == [-1, -1, 1, -1, -1] and row[4] == 0 and type(row[4]) is int
