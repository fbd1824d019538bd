"""A query parameter's value must fit its type exactly: checked, not converted.

The engine reads a parameter's text as its type and wraps or clamps what
does not fit: `{x:UInt8}` with 300 read 44, `{d:Date}` with '2026-02-30'
read 2026-03-02, '2026-13-45' read 1970-01-01, and the WAL logged what it
read. So before a value reaches the engine, `check` holds it to its type:
an integer in range, a real calendar date or time in the type's range, a
Decimal with no digit lost, a DateTime64 with no sub-second digit lost, an
Array/Tuple/Map/Nullable/LowCardinality element by element. A value that
does not fit is `InvalidArgument` naming the parameter, the type and the
problem (never the value: it may be a secret), before anything runs.

A `str` given for a compound type (`'[1,2]'` for an Array) is the engine's
text and is read by the engine as it is; scalars given as text are checked
like the value they spell.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from durable_obj.errors import InvalidArgument

_INT = re.compile(r"(U?)Int(8|16|32|64|128|256)")
_DECIMAL_N = {"Decimal32": 9, "Decimal64": 18, "Decimal128": 38, "Decimal256": 76}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DATE_RANGE = {"Date": (dt.date(1970, 1, 1), dt.date(2149, 6, 6))}
#: chdb-core 26.9 reads every year 1-9999 as a Date32 (and a DateTime64 up
#: to precision 6) exactly; a DateTime64(7-9) past its range is the engine's error
_DATE_RANGE["Date32"] = (dt.date.min, dt.date.max)
_DATETIME_MAX = 2**32 - 1


class _Misfit(Exception):
    pass


def check(value: Any, type_name: str, name: str, zone: ZoneInfo) -> None:
    """`InvalidArgument` unless `value` fits `type_name` exactly."""
    try:
        _fits(value, type_name.strip(), zone)
    except _Misfit as why:
        raise InvalidArgument(
            f"param {name!r} does not fit {type_name[:100]}: {why}; nothing was run or logged "
            "(the engine would have stored another value)"
        ) from None


def split_type(type_name: str) -> tuple[str, list[str]]:
    """(`Array`, [`UInt8`]) of `Array(UInt8)`: the base name and its top-level
    arguments (each stripped)."""
    base, paren, rest = type_name.partition("(")
    if not paren or not rest.endswith(")"):
        return type_name.strip(), []
    args, depth, start = [], 0, 0
    body = rest[:-1]
    for i, ch in enumerate(body):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(body[start:i].strip())
            start = i + 1
    args.append(body[start:].strip())
    return base.strip(), args


def _fits(value: Any, type_name: str, zone: ZoneInfo) -> None:
    base, args = split_type(type_name)
    if base in ("Nullable", "LowCardinality"):
        if value is None and base == "Nullable":
            return
        _fits(value, args[0], zone)
        return
    if value is None:
        return  # the engine refuses NULL for a type that cannot hold it
    if base in ("Array", "Tuple", "Map") and isinstance(value, str):
        return  # the engine's own text for the type
    if base == "Array":
        if isinstance(value, list | tuple):
            for element in value:
                _fits(element, args[0], zone)
        return
    if base == "Tuple":
        if isinstance(value, tuple | list) and len(value) == len(args):
            for element, arg in zip(value, args, strict=True):
                # a named element: `name Type`
                named = re.match(r"[A-Za-z_]\w*\s+(?=[A-Z])", arg)
                _fits(element, arg[named.end() :] if named else arg, zone)
        return
    if base == "Map":
        if isinstance(value, Mapping):
            for k, v in value.items():
                _fits(k, args[0], zone)
                _fits(v, args[1], zone)
        return
    found = _INT.fullmatch(base)
    if found is not None:
        _int_fits(value, found.group(1) == "U", int(found.group(2)))
    elif base in _DATE_RANGE:
        _date_fits(value, *_DATE_RANGE[base])
    elif base == "DateTime":
        _datetime_fits(value, _zone_of(args, 0, zone))
    elif base == "DateTime64":
        precision = int(args[0]) if args and args[0].isdigit() else 3
        _datetime64_fits(value, precision, _zone_of(args, 1, zone))
    elif base == "Decimal" or base in _DECIMAL_N:
        if base == "Decimal":
            precision, scale = int(args[0]), int(args[1]) if len(args) > 1 else 0
        else:
            precision, scale = _DECIMAL_N[base], int(args[0])
        _decimal_fits(value, precision, scale)
    elif base == "Float32":
        _float32_fits(value)


def _zone_of(args: list[str], at: int, zone: ZoneInfo) -> ZoneInfo:
    if len(args) > at:
        try:
            return ZoneInfo(args[at].strip("'"))
        except Exception:
            return zone
    return zone


def _int_fits(value: Any, unsigned: bool, bits: int) -> None:
    if isinstance(value, bool):
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise _Misfit("not an integer") from None
    elif isinstance(value, float | decimal.Decimal):
        if not math.isfinite(value) or value != int(value):
            raise _Misfit("not a whole number")
        number = int(value)
    else:
        return
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not low <= number <= high:
        raise _Misfit(f"out of range ({low} to {high})")


def _date_fits(value: Any, low: dt.date, high: dt.date) -> None:
    if isinstance(value, dt.datetime):
        raise _Misfit("a datetime for a date (give a date)")
    if isinstance(value, str):
        try:
            value = dt.date.fromisoformat(value.strip())
        except ValueError:
            raise _Misfit("not a calendar date (YYYY-MM-DD)") from None
    if isinstance(value, dt.date) and not low <= value <= high:
        raise _Misfit(f"out of range ({low} to {high})")


def _as_datetime(value: Any, zone: ZoneInfo) -> dt.datetime | None:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _Misfit("not a date and time (YYYY-MM-DD hh:mm:ss)") from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=zone)


def _datetime_fits(value: Any, zone: ZoneInfo) -> None:
    when = _as_datetime(value, zone)
    if when is None:
        return
    if when.microsecond:
        raise _Misfit("a DateTime holds whole seconds (use DateTime64 for fractions)")
    seconds = (when - _EPOCH).total_seconds()
    if not 0 <= seconds <= _DATETIME_MAX:
        raise _Misfit("out of range (1970-01-01 00:00:00 to 2106-02-07 06:28:15 UTC)")


def _datetime64_fits(value: Any, precision: int, zone: ZoneInfo) -> None:
    when = _as_datetime(value, zone)
    if when is None:
        return
    if precision < 6 and when.microsecond % 10 ** (6 - precision):
        raise _Misfit(f"more sub-second digits than its precision {precision}")


def _decimal_fits(value: Any, precision: int, scale: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal | str):
        return
    try:
        number = decimal.Decimal(value.strip() if isinstance(value, str) else str(value))
    except decimal.InvalidOperation:
        raise _Misfit("not a number") from None
    if not number.is_finite():
        raise _Misfit("not a finite number")
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    if -exponent > scale and number != number.quantize(decimal.Decimal(1).scaleb(-scale)):
        raise _Misfit(f"more than {scale} digit(s) after the point")
    if abs(number) >= decimal.Decimal(10) ** (precision - scale):
        raise _Misfit(f"more than {precision - scale} digit(s) before the point")


def _float32_fits(value: Any) -> None:
    number = isinstance(value, float | int) and not isinstance(value, bool)
    if number and math.isfinite(value) and abs(value) > 3.4028234663852886e38:
        raise _Misfit("out of Float32's range")
