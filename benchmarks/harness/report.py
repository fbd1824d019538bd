"""Statistics, the rows of a table, the one renderer every family's table
goes through, the JSON results and the closing lines of a run.

A row is durable_obj's figure (`ours`) against another (`theirs`: chdb.durable,
a plain variant, a full checkpoint) and, where one is measured, against its
floor: what the same bytes cost with nothing of durable_obj in the way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.procs import RESULTS


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def timed(fn: Callable[..., Any]) -> tuple[float, float, Any]:
    """(wall s, this process's CPU s, result) of one call of `fn` (its
    arguments bound by default values: `lambda key=key: ...`)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


def verdict(ratio: float, goal: float | None, *, at_least: bool = False) -> str:
    """ "met" / "NOT met" of `ratio` against `goal` (at most, or `at_least`)."""
    if goal is None or math.isnan(ratio):
        return ""
    return "met" if (ratio >= goal if at_least else ratio <= goal) else "NOT met"


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import chdb

    return (
        f"machine: {model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"chdb {chdb.__version__}"
    )


@dataclass
class Figure:
    """durable_obj's figure on one line of a table: where, what, in which
    unit; and, where one was measured, its floor (the same work with nothing
    of durable_obj in the way) with the goal on durable_obj / floor."""

    store: str
    metric: str
    unit: str
    ours: float
    floor: float = field(default=math.nan, kw_only=True)
    floor_goal: float | None = field(default=None, kw_only=True)

    @property
    def floor_ratio(self) -> float:
        return self.ours / self.floor if self.floor else math.nan

    @property
    def floor_verdict(self) -> str:
        return verdict(self.floor_ratio, self.floor_goal)


@dataclass
class Row(Figure):
    """A figure for each implementation and their ratio."""

    theirs: float
    goal: float | None = None
    #: "lower" when a smaller figure is better (times, sizes, RSS), else "higher".
    better: str = "lower"
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.theirs if self.theirs else math.nan

    @property
    def verdict(self) -> str:
        return verdict(self.ratio, self.goal)


@dataclass
class OwnRow(Figure):
    """A figure of durable_obj alone (chdb.durable has nothing to compare),
    with an absolute goal: at most `limit`."""

    limit: float | None = None
    note: str = ""

    sign = "<="

    @property
    def verdict(self) -> str:
        return verdict(self.ours, self.limit)


@dataclass
class AtLeast(OwnRow):
    """A durable_obj figure whose goal is a floor under it: at least `limit`."""

    sign = ">="

    @property
    def verdict(self) -> str:
        return verdict(self.ours, self.limit, at_least=True)


@dataclass(frozen=True)
class Col:
    """A column: its title, width, side, and what a row shows in it."""

    title: str
    width: int
    cell: Callable[[Any], str]
    left: bool = False


def goal_text(goal: float | None, sign: str = "<=") -> str:
    return f"{sign}{goal:g}" if goal is not None else ""


def ratio_text(ratio: float, digits: int = 3) -> str:
    return "" if math.isnan(ratio) else f"{ratio:.{digits}f}"


def render(cols: Sequence[Col], rows: Sequence[Any]) -> str:
    """The rows under a header, one column each of `cols`, the note last."""

    def line(cells: Sequence[str]) -> str:
        return "".join(
            f"{text:<{c.width}}" if c.left else f"{text:>{c.width}}"
            for c, text in zip(cols, cells, strict=True)
        )

    head = line([c.title for c in cols])
    lines = [head.rstrip(), "-" * len(head)]
    for r in rows:
        text = line([c.cell(r) for c in cols])
        lines.append(f"{text}{r.note}".rstrip())
    return "\n".join(lines)


def left(title: str, width: int, attr: str) -> Col:
    return Col(title, width, lambda r: str(getattr(r, attr)), left=True)


def figure_col(title: str, width: int, attr: str) -> Col:
    return Col(title, width, lambda r: fmt(getattr(r, attr)))


def lead(store: int = 8, metric: int = 44, unit: int = 7) -> list[Col]:
    """The leading columns of every table: where, what, in which unit."""
    return [
        left("store", store, "store"),
        left("metric", metric, "metric"),
        left("unit", unit, "unit"),
    ]


def judged(
    title: str,
    ratio: Callable[[Any], float],
    goal: Callable[[Any], str],
    verdict: Callable[[Any], str],
    widths: tuple[int, int, int] = (8, 9, 8),
    digits: int = 3,
) -> list[Col]:
    """A ratio, its goal and the verdict on it."""
    return [
        Col(
            "ratio" if widths[0] < 10 else "obj/floor",
            widths[0],
            lambda r: ratio_text(ratio(r), digits),
        ),
        Col("  goal", widths[1], lambda r: "  " + goal(r), left=True),
        Col("", widths[2], verdict, left=True),
    ]


def ratio_cols(widths: tuple[int, int, int] = (8, 9, 8), digits: int = 3) -> list[Col]:
    """A Row's ratio (durable_obj over what it is set against), its goal, the verdict."""
    return judged(
        "ratio", lambda r: r.ratio, lambda r: goal_text(r.goal), lambda r: r.verdict, widths, digits
    )


#: The floor's columns: the figure, durable_obj over it, the goal on that.
FLOOR = [
    Col("floor", 10, lambda r: "" if math.isnan(r.floor) else fmt(r.floor)),
    *judged(
        "obj/floor",
        lambda r: r.floor_ratio,
        lambda r: goal_text(r.floor_goal),
        lambda r: r.floor_verdict,
        (10, 9, 8),
    ),
]


@dataclass
class Report:
    """Collects raw samples and table rows, prints them, writes them as JSON."""

    name: str
    args: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    own: list[OwnRow] = field(default_factory=list)
    samples: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def columns(self) -> list[Col]:
        """The main table's columns (a family with other comparisons names its own)."""
        return [
            *lead(),
            figure_col("durable_obj", 12, "ours"),
            figure_col("chdb.durable", 13, "theirs"),
            *ratio_cols(),
        ]

    def own_columns(self) -> list[Col]:
        return [
            *lead(),
            figure_col("durable_obj", 12, "ours"),
            Col("  goal", 11, lambda r: "  " + goal_text(r.limit, r.sign), left=True),
            Col("", 8, lambda r: r.verdict, left=True),
        ]

    def table(self) -> str:
        floors = any(not math.isnan(r.floor) for r in self.rows)
        return render([*self.columns(), *(FLOOR if floors else [])], self.rows)

    def own_table(self) -> str:
        floors = any(not math.isnan(r.floor) for r in self.own)
        return render([*self.own_columns(), *(FLOOR if floors else [])], self.own)

    def print(self) -> None:
        print(f"\n{machine()}")
        for note in self.notes:
            print(note)
        print()
        print(self.table())
        if self.own:
            print("\ndurable_obj alone (chdb.durable has no such operation):")
            print(self.own_table())

    def write(self, folder: str = RESULTS) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{self.name}-{int(time.time())}.json")

        def as_json(r: Row | OwnRow) -> dict[str, Any]:
            extra = {"floor_ratio": r.floor_ratio, "floor_verdict": r.floor_verdict}
            if isinstance(r, Row):
                extra["ratio"] = r.ratio
            return {**vars(r), **extra, "verdict": r.verdict}

        payload = {
            "machine": machine(),
            "args": self.args,
            "notes": self.notes,
            "rows": [as_json(r) for r in self.rows],
            "own_rows": [as_json(r) for r in self.own],
            "samples": self.samples,
        }
        with open(path, "w") as handle:
            json.dump(payload, handle, indent=1, default=str)
        return path

    def finish(self, started: float, *, smoke: bool, folder: str, wrote: str = "wrote") -> None:
        """The closing lines of a run: its wall time, the smoke run's
        disclaimer, the tables, and where the JSON went."""
        self.notes.append(f"total wall time {time.perf_counter() - started:.0f} s")
        if smoke:
            self.notes.append(SMOKE)
        self.print()
        print(f"\n{wrote} {self.write(folder)}")


#: What a --smoke run says of its figures (the tests look for it).
SMOKE = "--smoke: a check that every figure group runs; not a measurement"
