"""The per-node trace of one evaluation: the row evaluator's own values, node by node, for explain."""
from filtering import sql92
from filtering.sql92.trace import render, rows, trace
from tests.filtering.sql92_oracle import VECTORS, expected, same, string_typed


def _outcome(result, error):
    if error is not None:
        return ("error", error.java_class)
    java_type = {bool: "Boolean", type(None): "null", int: "Integer", float: "Double", str: "String"}
    return ("value", result, java_type.get(type(result), type(result).__name__))


def test_traced_evaluation_gives_rocketmq_result_on_every_string_vector():
    """The recorder wraps every node's closure; the outcome must stay exactly RocketMQ's."""
    failures = []
    for v in (v for v in VECTORS if string_typed(v)):
        want = expected(v, "5")
        if want[0] == "parse":
            continue
        result, error, root = trace(sql92.parse(v["expr"]), v["props"])
        if not same(_outcome(result, error), want):
            failures.append(f"{v['id']} {v['expr'][:60]!r}: got {_outcome(result, error)!r}, want {want!r}")
        elif error is None and root.value is not result and root.value != result:
            failures.append(f"{v['id']}: the root step holds {root.value!r}, evaluate gave {result!r}")
    assert not failures, "\n".join(failures[:20])


def test_integer_literal_against_a_decimal_string_throws_number_format_exception():
    result, error, root = trace(sql92.parse("price > 100"), {"price": "512.40"})
    assert result is None and error.java_class == "RuntimeException"
    lines = render(rows(root))
    assert lines[0].startswith(">  ->  throws RuntimeException")
    assert '  price  ->  "512.40" (String)' in lines
    assert '  conversion: Integer.valueOf("512.40") throws NumberFormatException' in lines


def test_double_literal_converts_the_string_with_double_value_of():
    result, error, root = trace(sql92.parse("price > 100.0"), {"price": "512.40"})
    assert result is True and error is None
    assert '  conversion: Double.valueOf("512.40") = 512.4 (Double)' in render(rows(root))


def test_short_circuited_operands_are_shown_as_not_evaluated():
    result, _, root = trace(sql92.parse("a = 'x' AND b > 1"), {"a": "y", "b": "oops"})
    assert result is False
    by_node = [(r["depth"], r["node"], r["evaluated"], r["value"]) for r in rows(root)]
    assert by_node == [(0, "AND", True, "false"), (1, "=", True, "false"), (2, "a", True, '"y" (String)'),
                       (2, "'x'", True, '"x" (String)'), (1, ">", False, None), (2, "b", False, None),
                       (2, "1", False, None)]


def test_missing_property_is_null_and_named_so():
    result, _, root = trace(sql92.parse("nosuch = 'x' OR price > 900.5"), {"price": "512.40"})
    assert result is None
    assert "    nosuch  ->  null (no such property)" in render(rows(root))


def test_deep_trees_trace_within_the_recursion_room():
    expr = "NOT (" * 600 + "a = 'x'" + ")" * 600
    result, error, root = trace(sql92.parse(expr), {"a": "x"})
    assert (result, error) == (True, None) and len(rows(root)) == 603
