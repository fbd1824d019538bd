"""The aggregate functions refused with the engine's Machine Learning
category (`reach.REFUSED_CATEGORIES`: stochasticLinearRegression,
stochasticLogisticRegression, hierarchicalKMeans), under every spelling
the engine resolves besides a plain call: a combinator (`-If`, `-State`,
`-Array`, ...), a name in a string (`arrayReduce`, `arrayReduceInRanges`,
`initializeAggregation`) and an `AggregateFunction` type.

The engine's own tree and parse are searched for the names
(`reach.Catalog.refused_aggregate`): its names are case-sensitive and
never trimmed, and in a read's or a write's tree a name built by an
expression is already folded into a constant. A definition's parse is not
folded, so there the calls that take a name by a string must give it as a
literal (`check_named`), and a `VALUES` row calling a function that takes
a type or an aggregate by a string is resolved by the engine
(`NAMES_BY_STRING`, `writes._all_literal_calls`).
"""

from __future__ import annotations

import re

from durable_obj.errors import ClassificationRefused


def refuse(name: str) -> ClassificationRefused:
    """A refused aggregate function (`reach.Catalog.refused_aggregates`) under any
    spelling."""
    return ClassificationRefused(
        f"the aggregate function {name[:60]} (a model-fitting function: refused with the "
        "engine's Machine Learning category, whether called, with a combinator such as -If or "
        "-State, through arrayReduce() or initializeAggregation(), or as an AggregateFunction "
        "type). Nothing was run or logged."
    )


#: Functions that take an aggregate function's name as a string: in a
#: definition it must be written as one literal, so that the name is in the
#: engine's parse (`reach._check_tree`), not folded from an expression later.
NAMED_CALLS = frozenset({"arrayreduce", "arrayreduceinranges", "initializeaggregation"})
#: Words in the names of functions that take a type or an aggregate
#: function by a string (CAST, accurateCastOrNull, defaultValueOfTypeName,
#: JSONExtract, dynamicElement, reinterpret, arrayReduce, ...), matched
#: loosely: a call of one is resolved by the engine, whose tree shows the
#: folded name (`writes._all_literal_calls`).
NAMES_BY_STRING = re.compile(r"cast|type|aggregat|reduce|json|variant|dynamic|reinterpret|element")


def check_named(lines: list[tuple[int, str]], k: int, name: str) -> None:
    """Refused unless the call `name` on line `k` of a definition's parse
    (`reach._check_tree`'s (depth, node) lines) takes a string literal
    first: the name it resolves, there for `Catalog.refused_aggregate`."""
    depth = lines[k][0]
    args = lines[k + 1] if k + 1 < len(lines) else (-1, "")
    first = lines[k + 2] if k + 2 < len(lines) else (-1, "")
    if not (
        args[0] == depth + 1
        and args[1].startswith("ExpressionList")
        and first[0] == depth + 2
        and first[1].startswith("Literal '")
    ):
        raise ClassificationRefused(
            f"{name[:60]}() in a definition must name its aggregate function by a plain "
            "string literal (the gate reads the name; an expression would be folded only "
            "when the definition runs). Nothing was run or logged."
        )
