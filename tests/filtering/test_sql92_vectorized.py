"""The vectorized evaluator gives RocketMQ's broker decision: on the vectors (RocketMQ's recorded
decision), on hand-worked cases, and on random selectors against the row evaluator (differential:
the row evaluator is the reference, itself checked on every vector)."""
import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from filtering import sql92
from filtering.sql92 import java
from filtering.sql92.vectorized import _parse_column, matches_batch
from tests.filtering.sql92_oracle import VECTORS, broker_match, string_typed

MAP_TYPE = pa.map_(pa.string(), pa.string())


def maps(rows):
    return pa.array([list(r.items()) for r in rows], type=MAP_TYPE)


def _parsed_selectors(dialect):
    """(expression, its vectors) of each distinct selector of the string-typed vectors that parses in `dialect`."""
    groups = collections.defaultdict(list)
    for v in VECTORS:
        if string_typed(v):
            groups[v["expr"]].append(v)
    for text, cases in groups.items():
        try:
            yield sql92.parse(text, dialect=dialect), cases
        except sql92.FilterSyntaxError:
            continue


@pytest.mark.parametrize("dialect", ["5", "4"])
def test_vectorized_gives_rocketmqs_decision_on_vectors(dialect):
    """One batch per distinct selector holding the props of all its vectors: every decision is the
    recorded broker_match (and the row evaluator's)."""
    failures, rows = [], 0
    for e, cases in _parsed_selectors(dialect):
        got = e.matches_batch(maps([v["props"] for v in cases]))
        assert got.dtype == np.bool_ and got.shape == (len(cases),)
        rows += len(cases)
        for v, decision in zip(cases, got.tolist()):
            if decision is not e.matches(v["props"]) or decision is not broker_match(v, dialect):
                failures.append(f"{v['id']} {e.text[:60]!r} {v['props']!r:.60} vectorized={decision}")
    assert rows > 7500
    assert not failures, "\n".join(failures[:40])


def test_chunked_arrays_sliced_maps_and_null_maps_give_the_same_decisions():
    e = sql92.parse("a between 10 and 40 or TAGS = 'x'")
    rows = [{"a": "15"}, {"a": "50", "TAGS": "x"}, {}, {"a": "abc"}, {"a": "10", "a2": "0"}]
    array = pa.array([list(r.items()) for r in rows] + [None], type=MAP_TYPE)
    want = [True, True, False, False, True, False]
    assert matches_batch(e, array).tolist() == want
    assert e.matches_batch(pa.chunked_array([array[:2], array[2:]])).tolist() == want
    assert e.matches_batch(array[1:4]).tolist() == want[1:4]
    assert e.matches_batch(pa.chunked_array([], type=MAP_TYPE)).tolist() == []
    with pytest.raises(TypeError):
        e.matches_batch([{"a": "15"}])


# ---- random selectors from the grammar and random property maps --------------------------------------

NAMES = ["a", "b", "TAGS"]
STRING_LITERALS = ["'x'", "'5'", "''", "'TagA'", "'true'", "'1e3'", "'it''s'", "'杭州'", "' 5'"]
NUMBERS = ["0", "5", "-5", "7L", "2147483648", "9223372036854775807", "2.5", "-1.5", "1E3", ".5", "5."]
VALUES = ["0", "-0", "5", "+5", " 5", "5 ", "05", "5.0", "5.", ".5", "-.5e-3", "1e3", "1E3", "1e400", "NaN",
          "-NaN", "Infinity", "-Infinity", "5d", "5f", "0x1p3", "0X1.8P1", "0x10", "1_000", "١٢", "٣.5",
          "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
          "00000000000000000000012", "4.9E-324", "\t7\n", "true", "TRUE", "false", "x", "", "TagA", "杭州",
          "it's", "abc", "7L", "1e", "+", "-", "."]

names = st.sampled_from(NAMES)
numbers = st.sampled_from(NUMBERS)
operands = st.one_of(names, numbers, st.sampled_from(STRING_LITERALS), names.map(lambda n: "-" + n))
order_operands = st.one_of(names, numbers, names.map(lambda n: "-" + n))


def _comparisons():
    return st.one_of(
        st.tuples(operands, st.sampled_from(["=", "<>"]), operands).map(" ".join),
        st.tuples(order_operands, st.sampled_from([">", ">=", "<", "<="]), order_operands).map(" ".join),
        st.tuples(names, st.sampled_from(["between", "not between"]), numbers, numbers).map(
            lambda t: f"{t[0]} {t[1]} {t[2]} and {t[3]}"),
        st.tuples(names, st.sampled_from(["in", "not in"]),
                  st.lists(st.sampled_from(STRING_LITERALS), min_size=1, max_size=6)).map(
            lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"),
        st.tuples(operands, st.sampled_from(["contains", "not contains", "startswith", "not startswith",
                                             "endswith", "not endswith"]),
                  st.sampled_from(STRING_LITERALS)).map(" ".join),
        st.tuples(operands, st.sampled_from(["is null", "is not null"])).map(" ".join),
        names,
        st.sampled_from(["TRUE", "FALSE", "NULL"]),
    )


selectors = st.recursive(
    _comparisons(),
    lambda inner: st.one_of(
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"NOT ({e})"),
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(" ".join),
        st.tuples(inner.map(lambda e: f"({e})"), st.sampled_from(["=", "<>"]), st.one_of(
            inner.map(lambda e: f"({e})"), operands)).map(" ".join),
    ),
    max_leaves=8,
)
values = st.one_of(st.sampled_from(VALUES), st.text(max_size=6),
                   st.from_regex(r"\A[ +-]?[0-9]{0,20}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,4})?[dDfF]?\Z"))
property_maps = st.dictionaries(st.sampled_from(NAMES + ["zz"]), values, max_size=4)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=selectors, rows=st.lists(property_maps, min_size=1, max_size=25),
       dialect=st.sampled_from(["5", "4"]))
def test_vectorized_equals_row_evaluator_on_random_batches(text, rows, dialect):
    try:
        e = sql92.parse(text, dialect=dialect)
    except sql92.FilterSyntaxError:
        e = None
    assume(e is not None)  # the property is about expressions that parse: hypothesis draws another
    rows = [{k: v.replace("\x00", "") for k, v in r.items()} for r in rows]
    want = [e.matches(r) for r in rows]
    assert e.matches_batch(maps(rows)).tolist() == want, text


numeric_strings = st.one_of(
    st.sampled_from(VALUES),
    st.from_regex(r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,5})?\Z"),
    st.from_regex(r"\A[+-]?0[xX][0-9a-fA-F]{0,20}(\.[0-9a-fA-F]{0,6})?[pP][+-]?[0-9]{1,4}[dDfF]?\Z"),
    st.from_regex(r"\A[+-]?[0-9٠-٩०-९]{1,22}\Z"),
    st.text(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(strings=st.lists(numeric_strings, min_size=1, max_size=40),
       kind=st.sampled_from(["int", "long", "double"]))
def test_vectorized_number_parsing_matches_the_java_helpers(strings, kind):
    """The Arrow fast path (regex + cast) must read each string exactly as Integer/Long/Double.valueOf."""
    strings = [s.replace("\x00", "") for s in strings]
    parse = {"int": java.integer_value_of, "long": java.long_value_of, "double": java.double_value_of}[kind]
    array = pa.array(strings + [None], pa.string())
    values, ok = _parse_column(array, np.array([False] * len(strings) + [True]), kind)
    for s, value, valid in zip(strings, values.tolist(), ok.tolist()):
        try:
            want = parse(s)
        except java.NumberFormatError:
            assert not valid, s
            continue
        assert valid, s
        assert value == want or (want != want and value != value), (s, value, want)
        if kind == "double":
            assert java.double_compare(value, want) == 0, (s, value, want)
    assert not ok[-1]


# RocketMQ's outcome of each selector on each row, worked out by hand from fixtures/README.md's rules:
# a String against an Integer literal goes through Integer.valueOf ("x", "12.5" and " 7" throw
# NumberFormatException), against a Double literal through Double.valueOf (" 7" is 7.0); a missing
# property gives null; OR/AND evaluate the left side first and stop on TRUE/FALSE. (match, error) per row.
ERROR_ROWS = [[("a", "5")], [("a", "x")], [], [("a", "12.5")], [("a", " 7")], [("b", "1")]]
ERROR_CASES = {
    "a > 3": ([1, 0, 0, 0, 0, 0], [0, 1, 0, 1, 1, 0]),
    "a > 3 OR b = '1'": ([1, 0, 0, 0, 0, 1], [0, 1, 0, 1, 1, 0]),
    "FALSE AND a > 3": ([0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]),
    "a = 'x' OR a > 3": ([1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0]),
    "a between 1 and 9": ([1, 0, 0, 0, 0, 0], [0, 1, 0, 1, 1, 0]),
}


@pytest.mark.parametrize("text", ERROR_CASES)
def test_vectorized_match_and_error_masks_follow_rocketmq(text):
    """outcomes' error mask is where evaluate() throws (the summary's evaluation_errors): by hand, and
    the vectorized sql_outcomes equal to the row-by-row row_outcomes (differential)."""
    from filtering.message_filter import row_outcomes, sql_outcomes
    from schemas.arrow_schemas import PROPERTIES_TYPE

    props = pa.array(ERROR_ROWS, PROPERTIES_TYPE)
    expr = sql92.parse(text)
    want = [[bool(x) for x in mask] for mask in ERROR_CASES[text]]
    got, row = sql_outcomes(expr, props), row_outcomes(expr, props)
    assert [got[0].tolist(), got[1].tolist()] == want
    assert [row[0].tolist(), row[1].tolist()] == want


# (match, error) per row, by hand as above; `a = 5.0` reads a with Double.valueOf
MANY_ROWS = [[("a", "5"), ("r", "hz")], [("a", "x")], [], [("a", "12.5"), ("r", "sh")], [("a", " 7")]]
MANY_CASES = {
    "a > 3": ([1, 0, 0, 0, 0], [0, 1, 0, 1, 1]),
    "a between 1 and 9": ([1, 0, 0, 0, 0], [0, 1, 0, 1, 1]),
    "r IN ('hz')": ([1, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
    "a = 5.0 OR r = 'sh'": ([1, 0, 0, 1, 0], [0, 1, 0, 0, 0]),
    "a IS NULL": ([0, 0, 1, 0, 0], [0, 0, 0, 0, 0]),
}


def test_shared_extraction_of_many_expressions_gives_each_expressions_outcomes():
    """outcomes_many (properties extracted once for all) gives, per expression, the hand-worked outcome,
    which is also what outcomes_batch gives for that expression alone (differential)."""
    from filtering.sql92.vectorized import outcomes_batch, outcomes_many
    from schemas.arrow_schemas import PROPERTIES_TYPE

    props = pa.array(MANY_ROWS, PROPERTIES_TYPE)
    exprs = [sql92.parse(t) for t in MANY_CASES]
    results = list(outcomes_many(exprs, props))
    assert len(results) == len(exprs)
    for (m, e), expr in zip(results, exprs):
        want = [[bool(x) for x in mask] for mask in MANY_CASES[expr.text]]
        assert [m.tolist(), e.tolist()] == want, expr.text
        alone = outcomes_batch(expr, props)
        assert [alone[0].tolist(), alone[1].tolist()] == want, expr.text


@pytest.mark.parametrize("dialect", ["5", "4"])
def test_rows_repeating_a_tuple_of_values_each_get_rocketmqs_decision_on_vectors(dialect):
    """Each selector over its vectors' properties three times over: every tuple of the values it reads repeats,
    so it is evaluated once per distinct tuple (that path checked taken), and every row gets the recorded
    decision."""
    from filtering.sql92.vectorized import _Batch

    failures, rows = [], 0
    for e, cases in _parsed_selectors(dialect):
        props = maps([v["props"] for v in cases] * 3)
        assert _Batch(props, None).distinct(e.properties) is not None
        rows += len(props)
        for v, decision in zip(cases * 3, e.matches_batch(props).tolist()):
            if decision is not broker_match(v, dialect):
                failures.append(f"{v['id']} {e.text[:60]!r} {v['props']!r:.60} vectorized={decision}")
    assert rows > 3 * 7500
    assert not failures, "\n".join(failures[:40])


def test_evaluation_errors_count_per_message_when_messages_repeat_a_tuple():
    """Each message keeps its own match and error (the summary's evaluation_errors), the tuple evaluated once."""
    from filtering.sql92.vectorized import outcomes_batch
    from schemas.arrow_schemas import PROPERTIES_TYPE

    props = pa.array(ERROR_ROWS * 4, PROPERTIES_TYPE)
    for text, (match, errors) in ERROR_CASES.items():
        got = outcomes_batch(sql92.parse(text), props)
        assert [got[0].tolist(), got[1].tolist()] == [[bool(x) for x in match * 4], [bool(x) for x in errors * 4]]


@pytest.mark.parametrize("times", [1, 3])
def test_columns_the_decode_encoded_give_each_expressions_outcomes(times):
    """outcomes_many over the dictionary columns the properties' split encodes (decode_records' coded; string
    columns where most values are distinct: times 1) gives the hand-worked outcomes."""
    from filtering.sql92.vectorized import outcomes_many
    from schemas.log.properties import parse_properties, properties_to_blob

    blobs = pa.array([properties_to_blob(dict(r)) for r in MANY_ROWS] * times)
    props, coded = parse_properties(blobs, coded=("a", "r"))[::2]
    assert isinstance(coded["a"], pa.DictionaryArray) is (times == 3)
    exprs = [sql92.parse(t) for t in MANY_CASES]
    for (m, e), expr in zip(outcomes_many(exprs, props, coded), exprs):
        want = [[bool(x) for x in mask * times] for mask in MANY_CASES[expr.text]]
        assert [m.tolist(), e.tolist()] == want, expr.text


def test_tuples_are_numbered_when_the_columns_combinations_outnumber_the_rows():
    """x has 40 values and y 20 (800 combinations for 200 rows), but only 40 tuples occur: those are numbered
    (a hash of the combined codes) and each evaluated once."""
    from filtering.sql92.vectorized import _Batch, outcomes_batch

    rows = [{"x": str(i % 40), "y": str(i % 40 // 2)} for i in range(200)]
    props = maps(rows)
    tuples, inverse = _Batch(props, None).distinct(["x", "y"])
    assert tuples.n == 40 and len(inverse) == 200
    matched, errors = outcomes_batch(sql92.parse("x > 30 AND y < 18"), props)
    assert matched.tolist() == [i % 40 > 30 and i % 40 // 2 < 18 for i in range(200)]
    assert not errors.any()
