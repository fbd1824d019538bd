"""Bounds a statement cannot raise: time, result size, memory.

`Bounds` is set on the object's own connection (`Engine.bounded`) around one
read, or one statement of a write (`Options.write_bounds`), as engine
settings: ClickHouse stops the query itself when it runs past `seconds`
(TIMEOUT_EXCEEDED), stops reading once its result holds `result_rows` rows
or `result_bytes` bytes (`result_overflow_mode = 'break'`: a partial
answer, the work stopped), and refuses to grow past `memory_bytes`. A
statement cannot lift them: `SET` is not a read, and the gate refuses a
SETTINGS clause naming any of them (`reach`).

`seconds` is one deadline for every engine call the read or statement
makes, the gate's own EXPLAIN included (`replica.watchdog` kills what is
still running then). The engine checks its time between blocks and between
the functions it folds while planning, never inside one function call, so
the one value a bare number can make arbitrarily large is capped too:
`range()` may build `RANGE_PER_SECOND` elements per block for each second
of the bound (chdb 4.4, one loaded core: `arrayMap(x -> sipHash64(x, x, x, x,
x, x, x, x), range(N))` folds 1M elements in ~0.2 s, 10M in 1.7 s, 40M in
tens of seconds, none of it stoppable). Values built whole otherwise
(`arrayWithConstant(1e8, x)`) are what `memory_bytes` stops.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_obj.errors import InvalidArgument
from durable_obj.gate.sql import code_words

#: Elements `range()` may build per block, for each second of a time bound.
RANGE_PER_SECOND = 1_000_000
#: ... and at least this many, however short the bound (a block of 65536 rows
#: may each hold a small range).
RANGE_FLOOR = 1 << 20

#: The engine's defaults, put back after a bounded call.
RESET = (
    "max_execution_time = 0, max_result_rows = 0, max_result_bytes = 0, "
    "result_overflow_mode = 'throw', max_memory_usage = 0, "
    "function_range_max_elements_in_block = DEFAULT, log_comment = DEFAULT"
)


#: The longest time bound (about 31 years): the engine's setting and the
#: range cap below are computed from it, and past ~1e302 s they overflow.
MAX_BOUND_SECONDS = 1e9
#: The largest row, byte and memory bound.
MAX_BOUND = 2**53 - 1


@dataclass(frozen=True, slots=True)
class Bounds:
    """Limits of one read or one statement of a write; 0 leaves that one
    unbounded. Each is a non-negative number (`InvalidArgument` otherwise,
    when the bounds are made): seconds up to `MAX_BOUND_SECONDS`, the rest
    whole numbers up to `MAX_BOUND`."""

    seconds: float = 30.0
    result_rows: int = 0
    result_bytes: int = 0
    memory_bytes: int = 0

    def __post_init__(self) -> None:
        seconds = self.seconds
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_BOUND_SECONDS  # NaN fails this too
        ):
            raise InvalidArgument(
                f"Bounds.seconds must be a number from 0 to {MAX_BOUND_SECONDS:g}, not {seconds!r}"[
                    :200
                ]
            )
        for name in ("result_rows", "result_bytes", "memory_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BOUND:
                raise InvalidArgument(
                    f"Bounds.{name} must be a whole number from 0 to {MAX_BOUND}, not {value!r}"[
                        :200
                    ]
                )

    def settings(self, *, write: bool = False) -> str:
        """The `SET` list that applies these bounds. A write returns no rows:
        its result bounds are left off (`break` must never cut what an
        INSERT ... SELECT inserts)."""
        rows, nbytes = (0, 0) if write else (int(self.result_rows), int(self.result_bytes))
        out = (
            f"max_execution_time = {float(self.seconds)!r}, "
            f"max_result_rows = {rows}, max_result_bytes = {nbytes}, "
            f"result_overflow_mode = '{'throw' if write else 'break'}', "
            f"max_memory_usage = {int(self.memory_bytes)}"
        )
        if self.seconds > 0:
            cap = max(RANGE_FLOOR, int(self.seconds * RANGE_PER_SECOND))
            out += f", function_range_max_elements_in_block = {cap}"
        return out


#: Functions one call of which may run past any time bound: the engine
#: checks its time only between calls and blocks, and these spend it inside
#: one (quadratic string and array distances: `editDistance` of two 64 KiB
#: strings is ~4.7 s a row; arrays built to a length the statement names).
#: Under a bound a statement may not call them (lower-cased; aliases too).
UNSTOPPABLE = frozenset(
    {"editdistance", "editdistanceutf8", "levenshteindistance", "levenshteindistanceutf8"}
    | {"dameraulevenshteindistance", "jarosimilarity", "jarowinklersimilarity"}
    | {"arraylevenshteindistance", "arraylevenshteindistanceweighted", "arraysimilarity"}
    | {"arraywithconstant", "arrayresize"}
)


def unstoppable(sql: str) -> str | None:
    """The first function of `UNSTOPPABLE` that the (plain) statement `sql`
    names, or None."""
    found = code_words(sql) & UNSTOPPABLE
    return min(found) if found else None
