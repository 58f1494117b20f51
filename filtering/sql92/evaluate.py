"""Row evaluator: RocketMQ's evaluate() for one property map.

The tree is compiled once into nested closures through a table from node class to compiler
function, so a row costs a few Python calls per node; an optional recorder wraps each node's closure
to trace one evaluation. Evaluation order, null handling and short-circuits follow the Java classes
line by line; Java conversions and compareTo live in java.py.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import java
from .errors import FilterEvaluationError
from .nodes import And, BooleanCast, Compare, Constant, Equal, In, Negate, Node, Not, Or, Property, StringMatch

if TYPE_CHECKING:
    from .trace import Recorder

_ORDER_TESTS = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}
_STRING_TESTS = {
    "contains": lambda value, search: search in value,
    "startswith": str.startswith,
    "endswith": str.endswith,
}


def _compile_constant(node, recorder):
    value = node.value
    return lambda props: value


def _compile_property(node, recorder):
    name = node.name

    def read(props: Mapping[str, Any]) -> Any:
        value = props.get(name)
        if value is None or type(value) is str:
            return value
        return java.from_python(value)
    return read


def _compile_negate(node, recorder):
    operand = compile_node(node.operand, recorder)
    return lambda props: java.negate(operand(props))


def _compile_not(node, recorder):
    operand = compile_node(node.operand, recorder)

    def evaluate(props: Mapping[str, Any]) -> Any:
        value = operand(props)
        return None if value is None else not value
    return evaluate


def _compile_boolean_cast(node, recorder):
    operand = compile_node(node.operand, recorder)

    def evaluate(props: Mapping[str, Any]) -> Any:
        value = operand(props)
        if value is None:
            return None
        return value if type(value) is bool else False
    return evaluate


def equal_values(lv: Any, rv: Any) -> bool | None:
    """The `=` of doCreateEqual for two evaluated sides (both are evaluated before this)."""
    if lv is None or rv is None:
        if lv is None and rv is None:
            return True
        return None if lv is None else False
    if java.is_comparable(lv) and java.is_comparable(rv):
        return java.compare(lv, rv) == 0
    return lv is rv


def _compile_equal(node, recorder):
    left, right = compile_node(node.left, recorder), compile_node(node.right, recorder)
    return lambda props: equal_values(left(props), right(props))


def _cast_comparable(value):
    if value is not None and not java.is_comparable(value):
        raise FilterEvaluationError(
            f"class java.lang.{java.java_class(value)} cannot be cast to class java.lang.Comparable",
            "ClassCastException")
    return value


def _compile_compare(node, recorder):
    left, right, test = compile_node(node.left, recorder), compile_node(node.right, recorder), _ORDER_TESTS[node.op]

    def evaluate(props: Mapping[str, Any]) -> Any:
        lv = _cast_comparable(left(props))
        if lv is None:
            return None
        rv = _cast_comparable(right(props))
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(java.compare_strings_as_doubles(lv, rv))
        return test(java.compare(lv, rv))
    return evaluate


def _compile_in(node, recorder):
    operand, values, negated = compile_node(node.operand, recorder), node.values, node.negated

    def evaluate(props: Mapping[str, Any]) -> Any:
        value = operand(props)
        if type(value) is not str:
            return None
        return (value in values) is not negated
    return evaluate


def _compile_string_match(node, recorder):
    if not node.search:
        return lambda props: False  # checked before the operand is even evaluated
    operand, search, negated = compile_node(node.operand, recorder), node.search, node.negated
    test = _STRING_TESTS[node.op]

    def evaluate(props: Mapping[str, Any]) -> Any:
        value = operand(props)
        if type(value) is not str:
            return False
        return test(value, search) is not negated
    return evaluate


def _compile_and(node, recorder):
    left, right = compile_node(node.left, recorder), compile_node(node.right, recorder)

    def evaluate(props: Mapping[str, Any]) -> Any:
        lv = left(props)
        if lv is False:
            return False
        rv = right(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return evaluate


def _compile_or(node, recorder):
    left, right = compile_node(node.left, recorder), compile_node(node.right, recorder)

    def evaluate(props: Mapping[str, Any]) -> Any:
        lv = left(props)
        if lv is True:
            return True
        rv = right(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return evaluate


COMPILERS = {
    Constant: _compile_constant,
    Property: _compile_property,
    Negate: _compile_negate,
    Not: _compile_not,
    BooleanCast: _compile_boolean_cast,
    Equal: _compile_equal,
    Compare: _compile_compare,
    In: _compile_in,
    StringMatch: _compile_string_match,
    And: _compile_and,
    Or: _compile_or,
}


def compile_node(node: Node, recorder: Recorder | None = None) -> Callable[[Mapping[str, Any]], Any]:
    """A function props -> Java value (None/bool/int/Long/float/str) for the subtree at `node`.

    recorder: None for filtering; explain passes a trace.Recorder, whose `record(node, build)` compiles the
    node through `build()` and wraps the function it returns, so the per-node trace comes from this
    evaluator itself rather than from a copy of its semantics."""
    compiler = COMPILERS[type(node)]
    if recorder is None:
        return compiler(node, None)
    return recorder.record(node, lambda: compiler(node, recorder))


@contextmanager
def recursion_room(tree_depth: int) -> Iterator[None]:
    """Let recursion go `tree_depth` levels deep (1000 chained NOTs are legal), then restore the limit."""
    needed = 4 * tree_depth + 200
    old = sys.getrecursionlimit()
    if needed <= old:
        yield
        return
    sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
