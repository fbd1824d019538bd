"""A pinned value means the same to every reader, in every zone and statement kind.

Hypothesis generates values over the type families a pinned call can
produce (DateTime / DateTime64 with and without a zone, Date, Date32, UUID,
String of arbitrary bytes, FixedString, Float32/64 with their special values,
Decimal, wide integers, IPv4/IPv6, Enum, and Array / Tuple / Map / Nullable /
LowCardinality of them) and query-constant calls (`now64(6, 'Asia/Tokyo')`,
`today()`, ...). A writer process under one TZ pins them in every kind of
statement that pins (see `tests.integration.replay_child`); a reader under another TZ
(drawn per example: Asia/Tokyo or Asia/Kathmandu; the last regression test
below reads under both) replays the WAL in a fresh process, and a third of the examples
also go through a chdb.durable reader. Every reader's tables must be byte-identical to the
writer's, and every pinned value must be the value it stood for.

Many statements run per process: one example is a batch of cases, so the
`ci` profile (HYPOTHESIS_PROFILE, default) runs a few hundred cases in a few
examples; `nightly` runs many more.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_obj.gate.quoting import quote_ident, quote_string
from tests.integration import replay_child

REPO = Path(__file__).resolve().parents[2]
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
#: (examples, cases per example, query-constant calls per example)
_SIZES = {"ci": (6, 50, 6), "nightly": (40, 120, 16), "dev": (2, 20, 4)}
EXAMPLES, CASES, CONSTANTS = _SIZES.get(_PROFILE, _SIZES["ci"])

WRITER_TZ = "America/Los_Angeles"
READER_TZS = ("Asia/Tokyo", "Asia/Kathmandu")
V1_READER_TZ = "Australia/Lord_Howe"
#: chdb.durable replays one statement at a time: a sample of the examples.
V1_ONE_IN = 3
ZONES = ["UTC", "Asia/Tokyo", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]
ZONES += ["Asia/Kathmandu"]
#: Instants around DST changes, where a local time is ambiguous or missing.
DST_EDGES = [1699160400, 1699163999, 1699164000, 1699167600, 1678604400, 1711846800]
DST_EDGES += [1730595600, 1743872400, 0, 2**31 - 1, 2**32 - 1]


# -- values of every type family --------------------------------------------


@dataclass(frozen=True)
class Spec:
    """A type, and constant expressions of it."""

    type: str
    raw: st.SearchStrategy[str]  # expressions that CAST to `type` exactly

    @property
    def values(self) -> st.SearchStrategy[str]:
        type_lit = quote_string(self.type)
        return self.raw.map(lambda expr: f"CAST({expr}, {type_lit})")


def _scalar(type_name: str, raw: st.SearchStrategy[str]) -> Spec:
    return Spec(type_name, raw)


def _number(n: int) -> str:
    return quote_string(str(n))


def _not_nan(bits: int, exponent: int, mantissa: int) -> bool:
    return (bits >> mantissa) & ((1 << exponent) - 1) != (1 << exponent) - 1 or not (
        bits & ((1 << mantissa) - 1)
    )


def _float(name: str) -> Spec:
    width, exponent, mantissa = (32, 8, 23) if name == "Float32" else (64, 11, 52)
    # A NaN's sign and payload are not kept (ClickHouse's text forms carry
    # neither; see literals.py): NaN comes only as the canonical 'nan'.
    bits = st.integers(0, 2**width - 1).filter(lambda b: _not_nan(b, exponent, mantissa))
    return _scalar(
        name,
        st.one_of(
            st.sampled_from(["nan", "inf", "-inf", "-0", "0", "1e-45", "5e-324"]).map(quote_string),
            bits.map(lambda b: f"reinterpretAs{name}(toUInt{width}({b}))"),
        ),
    )


@st.composite
def _decimal(draw: st.DrawFn) -> Spec:
    precision = draw(st.integers(1, 76))
    scale = draw(st.integers(0, precision))

    def text(n: int) -> str:
        digits = str(abs(n)).rjust(scale + 1, "0")
        body = f"{digits[:-scale]}.{digits[-scale:]}" if scale else digits
        return quote_string(("-" if n < 0 else "") + body)

    return _scalar(
        f"Decimal({precision}, {scale})",
        st.integers(-(10**precision) + 1, 10**precision - 1).map(text),
    )


_zone = st.one_of(st.none(), st.sampled_from(ZONES))


@st.composite
def _datetime(draw: st.DrawFn) -> Spec:
    zone = draw(_zone)
    seconds = st.one_of(st.sampled_from(DST_EDGES), st.integers(0, 2**32 - 1))
    suffix = "" if zone is None else f"({quote_string(zone)})"
    return _scalar(f"DateTime{suffix}", seconds.map(lambda s: f"toDateTime({s}, 'UTC')"))


@st.composite
def _datetime64(draw: st.DrawFn) -> Spec:
    scale = draw(st.integers(0, 9))
    zone = draw(_zone)
    edge = st.sampled_from(DST_EDGES).map(lambda s: s * 10**9)
    nanos = st.one_of(edge, st.integers(-2208988800 * 10**9, 2**63 - 1))
    params = str(scale) if zone is None else f"{scale}, {quote_string(zone)}"
    return _scalar(
        f"DateTime64({params})",
        nanos.map(lambda n: f"fromUnixTimestamp64Nano(toInt64({n}), 'UTC')"),
    )


@st.composite
def _enum(draw: st.DrawFn) -> Spec:
    bits = draw(st.sampled_from([8, 16]))
    label = st.one_of(
        st.sampled_from(["DateTime", "a'b", "c\\d", "NULL", "é😀", "x, y"]),
        st.text(
            st.characters(min_codepoint=32, exclude_categories=("Cs",)), min_size=1, max_size=6
        ),
    )
    labels = draw(st.lists(label, min_size=1, max_size=4, unique=True))
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    numbers = draw(
        st.lists(st.integers(lo, hi), min_size=len(labels), max_size=len(labels), unique=True)
    )
    members = ", ".join(f"{quote_string(a)} = {n}" for a, n in zip(labels, numbers, strict=True))
    return _scalar(f"Enum{bits}({members})", st.sampled_from(labels).map(quote_string))


_INTS = [(f"Int{b}", -(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 32, 64, 128, 256)]
_INTS += [(f"UInt{b}", 0, 2**b - 1) for b in (8, 16, 64, 128, 256)]


def _strings() -> st.SearchStrategy[Spec]:
    """String and FixedString: what LowCardinality may wrap (without a setting)."""
    string = _scalar("String", st.binary(max_size=16).map(lambda b: f"unhex('{b.hex()}')"))
    fixed = st.integers(1, 8).map(
        lambda n: _scalar(
            f"FixedString({n})",
            st.binary(max_size=n).map(lambda b: f"toFixedString(unhex('{b.hex()}'), {n})"),
        )
    )
    return st.one_of(st.just(string), fixed)


def _keys() -> st.SearchStrategy[Spec]:
    """Types a Map key may have."""
    return st.one_of(_plain_keys(), _strings().map(_lowcard))


def _plain_keys() -> st.SearchStrategy[Spec]:
    return st.one_of(
        st.sampled_from(_INTS).map(lambda t: _scalar(t[0], st.integers(t[1], t[2]).map(_number))),
        _datetime(),
        st.just(
            _scalar(
                "Date", st.integers(0, 65535).map(lambda d: f"addDays(toDate('1970-01-01'), {d})")
            )
        ),
        _strings(),
        st.just(_scalar("UUID", st.uuids().map(lambda u: f"toUUID('{u}')"))),
        _enum(),
    )


def _scalars() -> st.SearchStrategy[Spec]:
    return st.one_of(
        _plain_keys(),
        st.sampled_from(["Float32", "Float64"]).map(_float),
        _decimal(),
        _datetime64(),
        st.just(
            _scalar(
                "Date32",
                st.integers(-25567, 120529).map(lambda d: f"addDays(toDate32('1970-01-01'), {d})"),
            )
        ),
        st.just(
            _scalar("IPv4", st.integers(0, 2**32 - 1).map(lambda n: f"CAST(toUInt32({n}), 'IPv4')"))
        ),
        st.just(
            _scalar(
                "IPv6",
                st.binary(min_size=16, max_size=16).map(
                    lambda b: f"toIPv6(IPv6NumToString(toFixedString(unhex('{b.hex()}'), 16)))"
                ),
            )
        ),
        st.just(_scalar("Bool", st.sampled_from(["true", "false"]))),
    )


def _nullable(spec: Spec) -> Spec:
    raw = st.one_of(st.just("NULL"), spec.values.map(lambda v: f"toNullable({v})"))
    return Spec(f"Nullable({spec.type})", raw)


def _lowcard(spec: Spec) -> Spec:
    return Spec(f"LowCardinality({spec.type})", spec.values.map(lambda v: f"toLowCardinality({v})"))


def _array(spec: Spec) -> Spec:
    items = st.lists(spec.values, max_size=3)
    return Spec(f"Array({spec.type})", items.map(lambda xs: "[" + ", ".join(xs) + "]"))


@st.composite
def _tuple(draw: st.DrawFn, inner: st.SearchStrategy[Spec]) -> Spec:
    specs = draw(st.lists(inner, min_size=1, max_size=3))
    names = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.sampled_from(["a", "DateTime", "b c", "é", "String", "Nullable"]),
                min_size=len(specs),
                max_size=len(specs),
                unique=True,
            ),
        )
    )
    if names is None:
        fields = ", ".join(s.type for s in specs)
    else:
        fields = ", ".join(f"{quote_ident(n)} {s.type}" for n, s in zip(names, specs, strict=True))
    raw = st.tuples(*(s.values for s in specs)).map(lambda xs: "tuple(" + ", ".join(xs) + ")")
    return Spec(f"Tuple({fields})", raw)


@st.composite
def _map(draw: st.DrawFn, inner: st.SearchStrategy[Spec]) -> Spec:
    key = draw(_keys())
    value = draw(inner)
    pairs = st.lists(st.tuples(key.values, value.values), max_size=3)
    raw = pairs.map(lambda ps: "map(" + ", ".join(f"{k}, {v}" for k, v in ps) + ")")
    return Spec(f"Map({key.type}, {value.type})", raw)


def _types(depth: int = 2) -> st.SearchStrategy[Spec]:
    scalar = _scalars()
    strings = _strings()
    lowcard = st.one_of(strings, strings.map(_nullable)).map(_lowcard)
    flat = st.one_of(scalar, scalar.map(_nullable), lowcard)
    if depth == 0:
        return flat
    inner = st.deferred(lambda: _types(depth - 1))
    return st.one_of(flat, inner.map(_array), _tuple(inner), _map(inner))


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, str]:
    spec = draw(_types())
    return spec.type, draw(spec.values)


# -- query-constant calls ---------------------------------------------------------


def _zone_arg(zone: str | None) -> str:
    return "" if zone is None else f", {quote_string(zone)}"


_constant_calls = st.one_of(
    st.sampled_from(["now()", "today()", "yesterday()", "randConstant()", "utcTimestamp()"]),
    # hostName(), serverUUID() and currentUser() describe the host and the
    # engine: the statement gate refuses them (gate/reach.py)
    st.sampled_from(["now64()", "now64(6)", "randConstant(1)"]),
    st.sampled_from(ZONES).map(lambda z: f"now({quote_string(z)})"),
    st.tuples(st.integers(0, 9), _zone).map(lambda t: f"now64({t[0]}{_zone_arg(t[1])})"),
    st.tuples(
        st.integers(0, 2**63), st.binary(max_size=8), st.sampled_from(["nan", "-0", "1e-320"])
    ).map(
        lambda t: (
            f"getSettingOrDefault('custom_pin', ({t[0]}, unhex('{t[1].hex()}'), "
            f"[CAST({quote_string(t[2])}, 'Float64')]))"
        )
    ),
)
_constants = st.tuples(
    _constant_calls,
    st.sampled_from(["{}", "[{}]", "tuple({}, 'w')", "map('k', {})", "toString({})"]),
).map(lambda t: t[1].format(t[0]))


# -- processes ------------------------------------------------------------------------


STATS = {"examples": 0, "cases": 0, "constants": 0, "v1_readers": 0}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    cases=st.lists(_cases(), min_size=CASES // 2, max_size=CASES),
    constants=st.lists(_constants, min_size=CONSTANTS // 2, max_size=CONSTANTS),
    timezone=st.sampled_from(["UTC", "America/New_York", "Asia/Kathmandu"]),
    reader_tz=st.sampled_from(READER_TZS),
    v1_sample=st.integers(0, V1_ONE_IN - 1),
)
@pytest.mark.slow
@pytest.mark.timeout(max(600, EXAMPLES * 60))
def test_pinned_values_replay_identically_in_every_zone(
    cases: list[tuple[str, str]],
    constants: list[str],
    timezone: str,
    reader_tz: str,
    v1_sample: int,
) -> None:
    # The readers are drawn, so that a failing example replays with its readers:
    # one durable_obj reader's zone per example (each reader is a fresh process
    # replaying the whole WAL: 4-6 CPU-s apiece, the writer 5-7), and the
    # chdb.durable reader in one example of V1_ONE_IN.
    _replays_identically(cases, constants, timezone, (reader_tz,), with_v1=v1_sample == 0)
    STATS["examples"] += 1
    STATS["cases"] += len(cases)
    STATS["constants"] += len(constants)


def _replays_identically(
    cases: list[tuple[str, str]],
    constants: list[str],
    timezone: str,
    reader_tzs: tuple[str, ...] = READER_TZS,
    *,
    with_v1: bool,
) -> None:
    """Write `cases` and `constants` (see replay_child) under WRITER_TZ; every
    reader's tables must equal the writer's, byte for byte."""
    with tempfile.TemporaryDirectory(prefix="pinning-") as root:
        params = {
            "url": root,
            "oid": "o",
            "timezone": timezone,
            "cases": [{"type": type_name, "value": value} for type_name, value in cases],
            "constants": constants,
        }
        wrote = replay_child.run("write", WRITER_TZ, params)
        assert not wrote["errors"], "statements failed:\n" + "\n".join(
            f"{e['category']}: {e['error']}\n    {e['sql']}" for e in wrote["errors"]
        )
        assert not wrote["faithful"], "pinned values differ from the values they stand for:\n" + (
            "\n".join(json.dumps(f) for f in wrote["faithful"])
        )
        readers = [("read", tz) for tz in reader_tzs]
        if with_v1:
            STATS["v1_readers"] += 1
            readers.append(("read-v1", V1_READER_TZ))
        params["tables"] = list(wrote["dump"])
        children = [(mode, tz, replay_child.start(mode, tz, params)) for mode, tz in readers]
        for mode, tz, child in children:
            seen = replay_child.finish(child, f"{mode} (TZ={tz})")["dump"]
            assert set(seen) == set(wrote["dump"]), f"{mode} TZ={tz}: other tables"
            for table, rows in wrote["dump"].items():
                assert seen[table] == rows, (
                    f"table {table} differs in {mode} under TZ={tz} "
                    f"(writer TZ={WRITER_TZ}, object time zone {timezone}); statements:\n"
                    + "\n".join(s for s in wrote["statements"] if f" {table} " in f" {s} ")
                )


# -- regression tests, one per failing example ------------------------------------------


def _script(tz: str, **params: Any) -> dict[str, Any]:
    return replay_child.run("script", tz, params)


def test_alter_update_now_replays_in_tokyo(tmp_path: Path) -> None:
    """Issue 12 §2: the pinned now() of a mutation carried no zone and replayed
    nine hours off in a reader under TZ=Asia/Tokyo."""
    url, query = str(tmp_path), "SELECT id, toUnixTimestamp(ts) FROM e ORDER BY id"
    wrote = _script(
        "UTC",
        url=url,
        oid="o1",
        statements=[
            "CREATE TABLE e (id UInt32, ts DateTime) ENGINE=MergeTree ORDER BY id",
            "INSERT INTO e VALUES (1,'2026-01-01 00:00:00')",
            "ALTER TABLE e UPDATE ts = now() WHERE id = 1",
        ],
        queries=[query],
    )
    assert wrote["outcomes"] == ["ok"] * 3
    for tz in ("Asia/Tokyo", "America/Los_Angeles"):
        seen = _script(tz, url=url, oid="o1", read_only=True, queries=[query])
        assert seen["answers"] == wrote["answers"], f"TZ={tz}"


def test_insert_hex_random_string_is_pinned(tmp_path: Path) -> None:
    """Issue 12 §3: pinning randomString(8), which is not UTF-8, raised
    RuntimeError (UnicodeDecodeError) out of execute()."""
    url, query = str(tmp_path), "SELECT id, s FROM t ORDER BY id"
    wrote = _script(
        "UTC",
        url=url,
        oid="o",
        statements=[
            "CREATE TABLE t (id UInt32, s String) ENGINE=MergeTree ORDER BY id",
            "INSERT INTO t VALUES (1, hex(randomString(8)))",
            "INSERT INTO t VALUES (2, toString(length(randomString(8))))",
        ],
        queries=[query],
    )
    assert wrote["outcomes"] == ["ok"] * 3
    assert len(wrote["answers"][0].split("\n")[0].split("\t")[1]) == 16
    seen = _script("Asia/Tokyo", url=url, oid="o", read_only=True, queries=[query])
    assert seen["answers"] == wrote["answers"]


def test_enum_label_with_a_next_line_character(tmp_path: Path) -> None:
    """Found by the property: the type `Enum16('NULL' = -244, '\\x85ĝãM¶\\x98' =
    -1220)` holds U+0085, where str.splitlines() cut the engine's JSON row
    describing it, and a JSONDecodeError left execute()."""
    enum = "Enum16('NULL' = -244, '\x85ĝãM¶\x98' = -1220, 'a\u2028b' = 7)"
    value = f"CAST('\x85ĝãM¶\x98', {quote_string(enum)})"
    url, query = str(tmp_path), "SELECT id, CAST(c, 'Array(Int16)') FROM t ORDER BY id"
    wrote = _script(
        "UTC",
        url=url,
        oid="o",
        statements=[
            f"CREATE TABLE t (id UInt32, c Array({enum})) ENGINE = MergeTree ORDER BY id",
            f"INSERT INTO t VALUES (1, arrayShuffle([{value}]))",
            f"ALTER TABLE t UPDATE c = arrayShuffle([{value}]) WHERE id = 1",  # per row: refused
        ],
        queries=[query],
    )
    assert wrote["outcomes"][:2] == ["ok", "ok"]
    assert wrote["outcomes"][2].startswith("nondeterministic")
    assert wrote["answers"] == ["1\t[-1220]\n"]
    assert _script("Asia/Tokyo", url=url, oid="o", read_only=True, queries=[query]) == {
        "outcomes": [],
        "answers": wrote["answers"],
    }


def test_tostring_of_a_pinned_zoneless_datetime64_in_a_mutation() -> None:
    """Found by the property: `ALTER TABLE t_63 UPDATE ..., s = toString(LIT)`
    where LIT, a pinned `Array(Array(Tuple(Nullable Nullable(DateTime64(5)),
    ...)))`, was cast back to a DateTime64 that named no zone: inside a
    mutation that is the process's zone, so the string differed between the
    writer (TZ=America/Los_Angeles) and a reader (TZ=Asia/Tokyo)."""
    type_name = (
        "Array(Array(Tuple(`Nullable` Nullable(DateTime64(5)), `x y` DateTime64(0, "
        "'Asia/Kathmandu'), `a` LowCardinality(Nullable(FixedString(4))))))"
    )
    value = (
        "[[tuple(toNullable(fromUnixTimestamp64Nano(toInt64(1699163999000000000), 'UTC')), "
        "fromUnixTimestamp64Nano(toInt64(1730595600000000000), 'UTC'), "
        "toLowCardinality(toNullable(toFixedString(unhex('9A'), 4))))]]"
    )
    case = (type_name, f"CAST({value}, {quote_string(type_name)})")
    # case 0 takes the UPDATE with toString(); the object's zone is UTC
    _replays_identically([case], [], "UTC", with_v1=True)
