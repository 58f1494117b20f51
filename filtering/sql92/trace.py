"""One evaluation of a selector, node by node: what RocketMQ's evaluate() computed at every node of the tree
for one message's properties (`python -m jobs.explain` prints it).

The values come from the row evaluator itself: `evaluate.compile_node` is given a Recorder, which wraps
each node's closure and keeps what it returned or threw. Nodes that a short-circuit skipped keep
`evaluated` False. Nothing here decides a match; the Java conversion lines only name what java.py did.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import java
from .errors import FilterEvaluationError
from .evaluate import compile_node, recursion_room
from .nodes import And, BooleanCast, Compare, Constant, Equal, In, Negate, Node, Not, Or, Property, StringMatch

if TYPE_CHECKING:
    from . import Expression


@dataclass
class Step:
    """One node of the tree and what its evaluation gave (a value, or the exception Java throws)."""

    node: object
    children: list = field(default_factory=list)
    evaluated: bool = False
    value: object = None
    error: FilterEvaluationError | None = None


class Recorder:
    """The hook compile_node calls for every node: one Step per node, filled in when the node runs."""

    def __init__(self) -> None:
        self.root = Step(None)
        self._open = [self.root]

    def record(self, node: Node,
               build: Callable[[], Callable[[Mapping[str, Any]], Any]]) -> Callable[[Mapping[str, Any]], Any]:
        step = Step(node)
        self._open[-1].children.append(step)
        self._open.append(step)
        try:
            evaluate = build()
        finally:
            self._open.pop()

        def traced(props: Mapping[str, Any]) -> Any:
            step.evaluated = True
            try:
                step.value = evaluate(props)
            except FilterEvaluationError as exc:
                step.error = exc
                raise
            return step.value
        return traced


def trace(expression: Expression, props: Mapping[str, Any]) -> tuple[Any, FilterEvaluationError | None, Step]:
    """(result, error, root Step) of `expression.evaluate(props)`, every node's outcome recorded."""
    recorder = Recorder()
    with recursion_room(2 * expression.depth):  # each node adds the recorder's frame to the evaluator's
        evaluate = compile_node(expression.tree, recorder)
        try:
            result, error = evaluate(props), None
        except FilterEvaluationError as exc:
            result, error = None, exc
    return result, error, recorder.root.children[0]


def rows(root: Step) -> list[dict[str, Any]]:
    """The traced tree as rows in reading order (parents first), each with its depth: the indented tree of
    the text output and the `tree` list of the JSON output."""
    out, stack = [], [(root, 0)]
    while stack:
        step, depth = stack.pop()
        value = None
        if step.evaluated and step.error is None:
            value = java_text(step.value)
            if step.value is None and type(step.node) is Property:
                value += " (no such property)"
        out.append({"depth": depth, "node": label(step.node), "evaluated": step.evaluated, "value": value,
                    "error": error_text(step.error) if step.error is not None else None,
                    "conversion": conversion(step)})
        stack.extend((child, depth + 1) for child in reversed(step.children))
    return out


def render(tree: Iterable[Mapping[str, Any]], indent: str = "  ") -> list[str]:
    """The indented tree of `rows(root)`, one line per node (`node  ->  value`); a Java conversion is
    shown under the operands it converted."""
    pending: list[tuple[int, str]]
    lines, pending = [], []  # pending: (depth, line) of conversions, printed once their subtree is done
    for row in tree:
        while pending and pending[-1][0] >= row["depth"]:
            lines.append(pending.pop()[1])
        pad = indent * row["depth"]
        lines.append(f"{pad}{row['node']}  ->  {outcome_text(row)}")
        if row["conversion"]:
            pending.append((row["depth"], f"{pad}{indent}conversion: {row['conversion']}"))
    lines.extend(line for _, line in reversed(pending))
    return lines


def outcome_text(row: Mapping[str, Any]) -> str:
    """A row's value, the exception it threw, or that a short-circuit skipped it."""
    if not row["evaluated"]:
        return "not evaluated"
    if row["error"]:
        return f"throws {row['error']}"
    return row["value"]


def java_text(value: Any) -> str:
    """A Java value as RocketMQ's code sees it: null, true/false, "text" (String), 100 (Integer), 100L (Long)."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is str:
        return f'"{value}" (String)'
    return f"{value!r} ({java.java_class(value)})"


def error_text(error: FilterEvaluationError) -> str:
    """The exception the broker catches, with its cause: `RuntimeException (NumberFormatException): ...`."""
    cause = f" ({error.cause})" if error.cause and error.cause not in str(error) else ""
    return f"{error.java_class}{cause}: {error}"


def conversion(step: Step) -> str | None:
    """What java.py converted before comparing a String with a number or a Boolean (None when nothing was).

    RocketMQ converts the String side with the valueOf of the other side's class; `>`, `>=`, `<`, `<=` on
    two Strings parse both with Double.valueOf."""
    if type(step.node) not in (Equal, Compare) or not all(c.evaluated and c.error is None for c in step.children):
        return None
    lv, rv = (c.value for c in step.children)
    if lv is None or rv is None:
        return None
    if type(lv) is str and type(rv) is str:
        if type(step.node) is Equal:
            return None  # String.equals, no conversion
        return "; ".join(_value_of("Double", s, java.double_value_of) for s in (lv, rv))
    if str not in (type(lv), type(rv)):
        return None
    text, other = (lv, rv) if type(lv) is str else (rv, lv)
    try:
        promoted = java.promote(lv, rv)
    except java.NumberFormatError:
        return f'{java.java_class(other)}.valueOf("{text}") throws NumberFormatException'
    except FilterEvaluationError as exc:  # a Boolean compared with a String: RocketMQ casts the wrong side
        return error_text(exc)
    if promoted is None:
        return None
    converted = promoted[0] if type(lv) is str else promoted[1]
    return f'{java.java_class(other)}.valueOf("{text}") = {java_text(converted)}'


def _value_of(cls, text, parse):
    try:
        return f'{cls}.valueOf("{text}") = {java_text(parse(text))}'
    except java.NumberFormatError:
        return f'{cls}.valueOf("{text}") throws NumberFormatException'


def label(node: Any) -> str:
    """A node as the selector writes it: its operator, or the literal or property name of a leaf."""
    kind = type(node)
    if kind is Constant:
        return _literal(node.value)
    if kind is Property:
        return node.name
    if kind is In:
        values = ", ".join(_literal(v) for v in sorted(node.values))
        return f"{'NOT IN' if node.negated else 'IN'} ({values})"
    if kind is StringMatch:
        return f"{'NOT ' if node.negated else ''}{node.op.upper()} {_literal(node.search)}"
    if kind is Compare:
        return node.op
    return _OPERATORS[kind]


_OPERATORS = {Equal: "=", Not: "NOT", Negate: "- (negate)", BooleanCast: "(as a condition)", And: "AND", Or: "OR"}


def _literal(value):
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "TRUE" if value else "FALSE"
    if type(value) is str:
        return "'" + value.replace("'", "''") + "'"
    return repr(value)
