"""The aggregate functions refused with the engine's Machine Learning
category (`reach.REFUSED_CATEGORIES`: stochasticLinearRegression,
stochasticLogisticRegression, hierarchicalKMeans), under every spelling
the engine resolves besides a plain call: a combinator (`-If`, `-State`,
`-Array`, ...), a name in a string (`arrayReduce`, `arrayReduceInRanges`,
`initializeAggregation`) and an `AggregateFunction` type.

The engine's own tree and parse, and the statement's code, are searched
for the names (`reach.Catalog.refused_aggregate`): the engine's names are
case-sensitive and never trimmed, and in a read's or a write's tree a name
built by an expression is already folded into a constant. A definition's
or a mutation's expressions are folded only as they run, so there every
call that takes a name or a type by a string must give it as a literal
(`NAMED_CALLS`, `check_named`), and a `VALUES` row calling a function that
may take one is resolved by the engine (`NAMES_BY_STRING`,
`writes._all_literal_calls`).
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


#: Functions that take an aggregate function's name or a type by a string,
#: and which argument that is (-1: the last). In a definition or a
#: mutation, whose expressions the engine folds only as they run, that
#: argument must be written as one literal, so that the name is in the
#: engine's parse (`reach._check_tree`, `Catalog.refused_aggregate`).
NAMED_CALLS = {
    "arrayreduce": 0,
    "arrayreduceinranges": 0,
    "initializeaggregation": 0,
    "defaultvalueoftypename": 0,
    "cast": 1,
    "_cast": 1,
    "accuratecast": 1,
    "accuratecastornull": 1,
    "accuratecastordefault": 1,
    "reinterpret": 1,
    "dynamicelement": 1,
    "variantelement": 1,
    "jsonextract": -1,
    "jsonextractkeysandvalues": -1,
    "gettypeserializationstreams": 0,
    "structuretocapnprotoschema": 0,
    "structuretoprotobufschema": 0,
}
#: Words in the names of functions that take a type or an aggregate
#: function by a string (CAST, accurateCastOrNull, defaultValueOfTypeName,
#: JSONExtract, dynamicElement, reinterpret, arrayReduce, ...), matched
#: loosely: a call of one is resolved by the engine, whose tree shows the
#: folded name (`writes._all_literal_calls`).
NAMES_BY_STRING = re.compile(r"cast|type|aggregat|reduce|json|variant|dynamic|reinterpret|element")


def check_named(lines: list[tuple[int, str]], k: int, name: str) -> None:
    """Refused unless the call `name` (a key of `NAMED_CALLS`) on line `k`
    of an engine's parse (`reach._check_tree`'s (depth, node) lines) takes
    a string literal where it takes the name or the type."""
    depth = lines[k][0]
    args = lines[k + 1] if k + 1 < len(lines) else (-1, "")
    given: list[str] = []
    if args[0] == depth + 1 and args[1].startswith("ExpressionList"):
        for at, node in lines[k + 2 :]:
            if at <= depth + 1:
                break
            if at == depth + 2:
                given.append(node)
    position = NAMED_CALLS[name.lower()]
    if not given or position >= len(given) or not given[position].startswith("Literal '"):
        what = "aggregate function" if position == 0 and "reduce" in name.lower() else "type"
        if name.lower() == "initializeaggregation":
            what = "aggregate function"
        raise ClassificationRefused(
            f"{name[:60]}() in a definition or a mutation must name its {what} by a plain "
            "string literal (the gate reads the name; an expression or a parameter would be "
            "folded only as it runs). Nothing was run or logged."
        )
