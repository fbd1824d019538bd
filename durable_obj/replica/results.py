"""A query's answer in the shape the caller wants: text (`query`), bytes of
a binary format (`query_bytes`), Python rows (`rows`, `dicts`), a pyarrow
Table (`arrow`) or a pandas DataFrame (`df`).

Rows are read from the engine's `JSONCompactEachRowWithNamesAndTypes`, and
each value becomes the Python value its ClickHouse type names: integers of
any width as `int`, floats as `float` (nan and inf too), decimals as
`Decimal` (exact), `Date` as `date`, `DateTime`/`DateTime64` as an aware
`datetime` in the column's zone (the object's when the column names none),
`UUID` as `uuid.UUID`, `Array` as `list`, `Tuple` as `tuple`, `Map` as
`dict`, `Nullable` as the value or None; every other type as the engine's
JSON gives it (`String`, `Enum` labels, IPs, ... as `str`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

from durable_obj.errors import EngineError, InvalidArgument
from durable_obj.gate.sql import depth_zero, tokenize

#: Output formats whose bytes are not text.
BINARY_FORMATS = frozenset(
    {"arrow", "arrowstream", "parquet", "orc", "native", "avro", "msgpack", "npy", "bson"}
    | {"rowbinary", "rowbinarywithnames", "rowbinarywithnamesandtypes", "rowbinarywithdefaults"}
    | {"protobuf", "protobufsingle", "protobuflist", "capnproto", "bsoneachrow"}
)
#: The format rows are read in.
ROWS_FORMAT = "JSONCompactEachRowWithNamesAndTypes"

Convert = Callable[[Any], Any]


def text_format(fmt: str) -> str:
    """`fmt` if query() can return it as text; else `InvalidArgument` naming
    the method that returns it."""
    low = fmt.lower()
    if low in BINARY_FORMATS:
        raise InvalidArgument(
            f"fmt={fmt!r} is a binary format: use query_bytes(sql, {fmt!r}), which returns "
            "bytes (query() returns text)"
        )
    if low in ("dataframe", "datastore"):
        raise InvalidArgument("for a pandas DataFrame use df(sql)")
    if low in ("arrowtable", "pyarrow"):
        raise InvalidArgument("for a pyarrow Table use arrow(sql)")
    return fmt


def binary_format(fmt: str) -> str:
    if fmt.lower() not in BINARY_FORMATS:
        raise InvalidArgument(
            f"query_bytes() takes a binary format (Arrow, Parquet, Native, RowBinary, ...), "
            f"not {fmt!r}; use query() for text"
        )
    return fmt


def decode_rows(text: str, timezone: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names and rows of a `ROWS_FORMAT` answer."""
    lines = [line for line in text.split("\n") if line]
    try:
        names = [str(n) for n in json.loads(lines[0])]
        types = [str(t) for t in json.loads(lines[1])]
        convert = [converter(t, timezone) for t in types]
        rows = []
        for line in lines[2:]:
            values = json.loads(line, parse_float=str, parse_int=_int)
            rows.append(tuple(c(v) for c, v in zip(convert, values, strict=True)))
    except (ValueError, IndexError, TypeError, KeyError) as exc:
        raise EngineError(f"chDB answered rows that could not be read ({exc})") from None
    return names, rows


def _int(text: str) -> int | float:
    """A JSON integer; the engine prints a float's negative zero as `-0`,
    which `int` would read as 0 and lose its sign."""
    return -0.0 if text == "-0" else int(text)


def converter(type_name: str, timezone: str) -> Convert:
    """The function turning one JSON value of `type_name` into Python."""
    head, args = _split(type_name)
    if head == "Nullable":
        inner = converter(args[0], timezone)
        return lambda v: None if v is None else inner(v)
    if head in ("LowCardinality", "SimpleAggregateFunction"):
        return converter(args[-1], timezone)
    if head == "Array":
        item = converter(args[0], timezone)
        return lambda v: [item(x) for x in v]
    if head == "Tuple":
        parts = [converter(_unnamed(a), timezone) for a in args]
        return lambda v: tuple(
            c(x) for c, x in zip(parts, v.values() if isinstance(v, dict) else v, strict=True)
        )
    if head == "Map":
        key, value = converter(args[0], timezone), converter(args[1], timezone)
        return lambda v: {key(k): value(x) for k, x in v.items()}
    if head.startswith(("Int", "UInt")):
        return int
    if head.startswith(("Float", "BFloat")):
        return float
    if head.startswith("Decimal"):
        return lambda v: decimal.Decimal(str(v))
    if head in ("Date", "Date32"):
        return lambda v: dt.date.fromisoformat(v)
    if head in ("DateTime", "DateTime64"):
        named = [a for a in args if a.startswith("'")]
        zone = ZoneInfo(json.loads('"' + named[0][1:-1] + '"') if named else timezone)
        return lambda v: dt.datetime.fromisoformat(v).replace(tzinfo=zone)
    if head == "UUID":
        return uuid.UUID
    return _same


def _same(value: Any) -> Any:
    return value


def _split(type_name: str) -> tuple[str, list[str]]:
    """`Map(String, Array(UInt8))` -> ("Map", ["String", "Array(UInt8)"])."""
    tokens = tokenize(type_name)
    if not tokens:
        return "", []
    head = tokens[0].text
    if len(tokens) < 2 or tokens[1].text != "(":
        return head, []
    args: list[str] = []
    start = tokens[1].end
    inner = tokens[2:-1]
    for _, tok in depth_zero(inner):
        if tok.text == ",":
            args.append(type_name[start : tok.start].strip())
            start = tok.end
    args.append(type_name[start : tokens[-1].start].strip())
    return head, [a for a in args if a]


def _unnamed(element: str) -> str:
    """A Tuple element's type without its name (`a UInt8` -> `UInt8`)."""
    tokens = tokenize(element)
    if len(tokens) >= 2 and tokens[0].kind in ("ident", "quoted") and tokens[1].kind == "ident":
        return element[tokens[1].start :]
    return element
