"""The aggregate functions refused with the engine's Machine Learning
category (stochasticLinearRegression, stochasticLogisticRegression,
hierarchicalKMeans) are refused under every spelling the engine resolves:
a combinator (-If, -State, -Array, ...), arrayReduce() or
initializeAggregation() naming them in a string (folded from an
expression, too), and an AggregateFunction type. Allowed aggregates keep
working in each of those spellings. A restored base holding one is
`tests/integration/test_restored_base.py`'s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core.object import DurableObject

SGD = "stochasticLinearRegression(0.1, 0.0, 5, 'SGD')"
FOLDED = "concat('stochasticLinear', 'Regression')"
STATE_TYPE = "AggregateFunction(stochasticLinearRegression, Float64, Float64)"
FOLDED_TYPE = (
    "concat('AggregateFunction(stochasticLinear', 'Regression(0.1, 0.0, 1, ''SGD''), "
    "Float64, Float64)')"
)

READS = [
    f"SELECT {SGD}(y, x) FROM t",
    "SELECT stochasticLinearRegressionIf(0.1, 0.0, 5, 'SGD')(y, x, 1) FROM t",
    "SELECT finalizeAggregation(stochasticLinearRegressionState(0.1, 0.0, 5, 'SGD')(y, x)) FROM t",
    "SELECT stochasticLogisticRegressionArray([y], [x]) FROM t",
    "SELECT hierarchicalKMeansIf(2)([x, y], 1) FROM t",
    "SELECT arrayReduce('stochasticLinearRegression', [2., 4.], [1., 2.])",
    f"SELECT arrayReduce({FOLDED}, [2., 4.], [1., 2.])",
    "SELECT arrayReduceInRanges('stochasticLinearRegression', [(1, 2)], [2., 4.], [1., 2.])",
    "SELECT initializeAggregation('stochasticLinearRegressionState', 2., 1.)",
    f"SELECT length(toString(defaultValueOfTypeName('{STATE_TYPE}')))",
    # a constant that is not UTF-8 text makes the tree so: it is still checked
    f"SELECT arrayReduce({FOLDED}, [2., 4.], [1., 2.]) WHERE unhex('FF') != ''",
]
WRITES = [
    f"INSERT INTO t SELECT arrayReduce({FOLDED}, [2., 4.], [1., 2.])[1], 1 WHERE unhex('FF') != ''",
    "DELETE FROM t WHERE x = arrayReduce('stochasticLinearRegression', [2., 4.], [1., 2.])[1]",
    "ALTER TABLE t UPDATE y = arrayReduce('stochasticLinearRegression', [2.], [1.])[1] WHERE 1",
    f"INSERT INTO t SELECT arrayReduce({FOLDED}, [2., 4.], [1., 2.])[1], 1",
    # a mutation's and a definition's expressions are folded only as they
    # run: a name or a type there must be a literal
    f"DELETE FROM t WHERE x = arrayReduce({FOLDED}, [2., 4.], [1., 2.])[1]",
    f"UPDATE t SET y = arrayReduce({FOLDED}, [2., 4.], [1., 2.])[1] WHERE 1",
    f"ALTER TABLE t UPDATE y = (arrayReduce({FOLDED}, [2.], [1.]) AS q)[1] WHERE 1",
    f"ALTER TABLE t UPDATE y = finalizeAggregation(CAST(unhex(''), {FOLDED_TYPE}))[1] WHERE 1",
    "ALTER TABLE t ADD COLUMN z Array(Float64) DEFAULT "
    f"finalizeAggregation(defaultValueOfTypeName({FOLDED_TYPE}))",
    "CREATE TABLE m (x Float64, w Array(Float64) MATERIALIZED "
    f"finalizeAggregation(CAST(unhex(''), {FOLDED_TYPE}))) ENGINE = MergeTree ORDER BY x",
    "CREATE VIEW pv AS SELECT finalizeAggregation(CAST(unhex({s:String}), {ty:String})) AS w",
    "CREATE TABLE d (x String, s String DEFAULT toString(getTypeSerializationStreams("
    f"{FOLDED_TYPE}))) ENGINE = Memory",
    "INSERT INTO t VALUES (arrayReduce('stochasticLinearRegression', [2., 4.], [1., 2.])[1], 1)",
    f"INSERT INTO t VALUES (arrayReduce({FOLDED}, [2., 4.], [1., 2.])[1], 1)",
    "INSERT INTO t VALUES (length(toString(defaultValueOfTypeName(concat("
    "'AggregateFunction(stochasticLinear', 'Regression, Float64, Float64)')))), 1)",
    "CREATE VIEW v AS SELECT stochasticLinearRegressionIf(0.1, 0.0, 5, 'SGD')(y, x, 1) AS w FROM t",
    f"CREATE VIEW v AS SELECT arrayReduce({FOLDED}, [y], [x]) AS w FROM t",
    f"CREATE TABLE a (s {STATE_TYPE}) ENGINE = MergeTree ORDER BY tuple()",
    "CREATE TABLE a (s AggregateFunction(1, `stochastic\\x4CinearRegression`, Float64, Float64)) "
    "ENGINE = Memory",
    "CREATE TABLE a (x Float64, s Array(Float64) DEFAULT "
    f"arrayReduce({FOLDED}, [x], [x])) ENGINE = Memory",
    "CREATE TABLE a (x Float64, s Array(Float64) DEFAULT "
    "arrayReduce('stochasticLinearRegression', [x], [x])) ENGINE = Memory",
]
ALLOWED_READS = [
    "SELECT hex(unhex('FF')) AS h WHERE unhex('FF') != ''",
    "SELECT sumIf(x, 1), finalizeAggregation(avgState(x)) FROM t",
    "SELECT arrayReduce('sumIf', [1, 2], [1, 0])",
    "SELECT arrayReduce(concat('su', 'm'), [1, 2])",
    "SELECT finalizeAggregation(initializeAggregation('sumState', 3))",
    "SELECT arrayReduceInRanges('sum', [(1, 2)], [1, 2, 3])",
]
ALLOWED_WRITES = [
    "ALTER TABLE t UPDATE y = CAST(x AS Float64) WHERE x > 100",
    "DELETE FROM t WHERE x = CAST('5', 'Float64')",
    "CREATE TABLE ok (x Float64, s String DEFAULT CAST(concat(toString(x), 'a') AS String), "
    "j String, e Int64 DEFAULT JSONExtract(j, 'a', 'Int64')) ENGINE = MergeTree ORDER BY x",
    "INSERT INTO t VALUES (arrayReduce('sum', [2., 4.]), 1)",
    "CREATE TABLE a (x Float64, s Float64 DEFAULT arrayReduce('sum', [x]), "
    "st AggregateFunction(sum, Float64)) ENGINE = Memory",
]


@pytest.fixture(scope="module")
def obj(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DurableObject]:
    root = tmp_path_factory.mktemp("aggregates")
    with durable_obj.open(str(root / "o"), owner="t") as o:
        o.execute("CREATE TABLE t (x Float64, y Float64) ENGINE = MergeTree ORDER BY x")
        o.execute("INSERT INTO t VALUES (1, 2), (2, 4)")
        o.flush()
        yield o


@pytest.mark.parametrize("sql", READS)
def test_a_read_of_a_refused_aggregate_is_refused(obj: DurableObject, sql: str) -> None:
    with pytest.raises(errors.ClassificationRefused, match=r"(?i)stochastic|hierarchical"):
        obj.query(sql)


@pytest.mark.parametrize("sql", WRITES)
def test_a_write_of_a_refused_aggregate_is_refused(obj: DurableObject, sql: str) -> None:
    before = obj.query("SELECT count() FROM t"), obj.query("SHOW TABLES")
    with pytest.raises(errors.ClassificationRefused):
        obj.execute(sql)
    assert (obj.query("SELECT count() FROM t"), obj.query("SHOW TABLES")) == before


@pytest.mark.parametrize("sql", ALLOWED_READS)
def test_allowed_aggregates_read_in_every_spelling(obj: DurableObject, sql: str) -> None:
    assert obj.query(sql, "TSV").strip()


def test_allowed_aggregates_write_and_replay(tmp_path: Path) -> None:
    url = str(tmp_path / "o")
    with durable_obj.open(url, owner="t") as o:
        o.execute("CREATE TABLE t (x Float64, y Float64) ENGINE = MergeTree ORDER BY x")
        for sql in ALLOWED_WRITES:
            o.execute(sql)
        o.execute("INSERT INTO a (x) VALUES (5)")
        o.flush()
        rows = o.query("SELECT * FROM t", "TSV"), o.query("SELECT x, s FROM a", "TSV")
    with durable_obj.open(url, owner="t", read_only=True) as again:
        again_rows = again.query("SELECT * FROM t", "TSV"), again.query("SELECT x, s FROM a", "TSV")
    assert again_rows == rows
    assert rows == ("6\t1\n", "5\t5\n")


def test_a_literal_cannot_forge_a_line_of_the_parse(obj: DurableObject) -> None:
    """The parse's lines end at "\\n" alone: a literal holding \\x0b or
    \\x85 (where `str.splitlines` also ends a line) neither hides a call's
    type argument behind a forged `Literal` line nor refuses a plain CAST."""
    obj.execute("CREATE TABLE IF NOT EXISTS lt (x String, y Float64) ENGINE = Memory")
    for sep in ("\x0b", "\x85", "\x1c", "\u2028"):
        obj.execute(f"ALTER TABLE lt UPDATE x = CAST('a{sep}b', 'String') WHERE y > 1")
        for depth in range(14):
            forged = f"{sep}{' ' * depth}Literal ''Float64''{sep}"
            with pytest.raises(errors.ClassificationRefused):
                obj.execute(
                    f"ALTER TABLE lt UPDATE y = CAST('{forged}', {FOLDED_TYPE}) WHERE y > 1"
                )
