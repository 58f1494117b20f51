"""Tree construction with RocketMQ's build-time checks (the create* factories of its expression classes).

RocketMQ rejects some selectors while building the tree rather than while parsing them: literal-only
`>` comparisons, `= NULL`, BETWEEN with constant bounds in the wrong order, IN on a non-property,
out-of-range literals, a number where a condition is expected. Each check raises FilterSyntaxError,
because MQFilterException wraps them all as compile errors.
"""
from __future__ import annotations

from collections.abc import Iterable

from . import java
from .errors import FilterEvaluationError, FilterSyntaxError
from .nodes import (
    NULL,
    And,
    BooleanCast,
    Compare,
    Constant,
    Equal,
    In,
    Negate,
    Node,
    Not,
    Or,
    Property,
    StringMatch,
)

TRUE = Constant(True)
FALSE = Constant(False)


def decimal_literal(text: str) -> Constant:
    """ConstantExpression.createFromDecimal: an Integer when it fits in 32 bits, else a Long."""
    value = int(text.rstrip("lL"))
    if value > java.LONG_MAX:
        raise FilterSyntaxError(f"NumberFormatException: {text} is out of the Long range")
    return Constant(value if value <= java.INT_MAX else java.Long(value))


def float_literal(text: str) -> Constant:
    """ConstantExpression.createFloat: a Double in [Double.MIN_VALUE, Double.MAX_VALUE]."""
    value = java.double_value_of(text)
    if value > java.DOUBLE_MAX:
        raise FilterSyntaxError(f"{text} is greater than {java.DOUBLE_MAX!r}")
    if value < java.DOUBLE_MIN_VALUE:
        raise FilterSyntaxError(f"{text} is less than Double.MIN_VALUE")
    return Constant(value)


def as_boolean(node: Node) -> Node:
    """SelectorParser.asBooleanExpression: conditions pass, a property is cast, anything else fails."""
    if node.is_boolean:
        return node
    if type(node) is Property:
        return BooleanCast(node)
    raise FilterSyntaxError("Expression will not result in a boolean value")


def logical_and(left: Node, right: Node) -> And:
    return And(as_boolean(left), as_boolean(right))


def logical_or(left: Node, right: Node) -> Or:
    return Or(as_boolean(left), as_boolean(right))


def logical_not(operand: Node) -> Not:
    return Not(as_boolean(operand))


def negate(operand: Node) -> Negate:
    return Negate(operand)


def _check_equal_operand(node):
    if type(node) is Constant and node.value is None:
        raise FilterSyntaxError("NULL cannot be compared")


def equal(left: Node, right: Node) -> Equal:
    """createEqual: no NULL literal, and TRUE/FALSE may not be compared with another literal."""
    _check_equal_operand(left)
    _check_equal_operand(right)
    if type(left) is Constant and type(right) is Constant and left.is_boolean and not right.is_boolean:
        raise FilterSyntaxError(f"{left.value!r} cannot be compared with {right.value!r}")
    return Equal(left, right)


def not_equal(left: Node, right: Node) -> Not:
    return Not(equal(left, right))


def is_null(operand: Node) -> Equal:
    return Equal(operand, NULL)


def is_not_null(operand: Node) -> Not:
    return Not(Equal(operand, NULL))


def _check_less_than_operand(node):
    if type(node) is Constant:
        if type(node.value) in (int, java.Long, float):
            return
        raise FilterSyntaxError(f"Value {node.value!r} cannot be compared")
    if node.is_boolean:
        raise FilterSyntaxError("A condition cannot be compared with '>', '>=', '<' or '<='")


def compare(op: str, left: Node, right: Node) -> Compare:
    """createGreaterThan & co.: only numbers, properties and negations may be ordered."""
    _check_less_than_operand(left)
    _check_less_than_operand(right)
    return Compare(op, left, right)


def between(value: Node, low: Node, high: Node) -> And:
    """createBetween: constant bounds must be non-null and low <= high (compared like `=` does)."""
    if type(low) is Constant and type(high) is Constant:
        if low.value is None or high.value is None:
            raise FilterSyntaxError("Illegal values of between, values can not be null!")
        try:
            order = java.compare(high.value, low.value)
        except FilterEvaluationError as e:
            raise FilterSyntaxError(f"Illegal values of between: {e}") from None
        if order < 0:
            raise FilterSyntaxError(f"Illegal values of between, {low.value!r} is above {high.value!r}")
    return And(compare(">=", value, low), compare("<=", value, high))


def not_between(value: Node, low: Node, high: Node) -> Or:
    """createNotBetween has no bound check."""
    return Or(compare("<", value, low), compare(">", value, high))


def in_list(operand: Node, values: Iterable[str], negated: bool) -> In:
    if type(operand) is not Property:
        raise FilterSyntaxError("Expected a property for In expression")
    return In(operand, frozenset(values), negated)


def string_match(op: str, operand: Node, search: str, negated: bool) -> StringMatch:
    return StringMatch(op, operand, search, negated)
