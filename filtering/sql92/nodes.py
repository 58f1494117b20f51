"""The selector's expression tree: one small dataclass per RocketMQ expression class.

Derived forms are not nodes of their own, exactly as RocketMQ builds them: `<>` is Not(Equal),
IS NULL is Equal(x, NULL), IS NOT NULL is Not(Equal(x, NULL)), BETWEEN is And(>=, <=) and NOT BETWEEN
is Or(<, >). Keeping the same shape keeps evaluation order and short-circuits identical.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """Base class; `is_boolean` is RocketMQ's `instanceof BooleanExpression`."""

    is_boolean = True

    def children(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True)
class Constant(Node):
    """A literal: str, int (Integer), java.Long, float (Double), or bool/None for TRUE/FALSE/NULL."""

    value: object

    @property
    def is_boolean(self) -> bool:  # type: ignore[override]  # the base class attribute, computed here
        return self.value is None or type(self.value) is bool


@dataclass(frozen=True)
class Property(Node):
    """A message property read by name (case-sensitive)."""

    name: str
    is_boolean = False


@dataclass(frozen=True)
class Negate(Node):
    """Unary minus: a number changes sign, anything else becomes null."""

    operand: Node
    is_boolean = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Not(Node):
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class BooleanCast(Node):
    """A bare property used as a condition: true only if the value is a java.lang.Boolean TRUE."""

    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Equal(Node):
    """`=`, with RocketMQ's asymmetric null handling (left null gives null, right null gives false)."""

    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Compare(Node):
    """`>`, `>=`, `<` or `<=`; the right side is not evaluated when the left one is null."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class In(Node):
    """[NOT] IN over string literals; only Strings can match, anything else gives null."""

    operand: Property
    values: frozenset
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class StringMatch(Node):
    """[NOT] CONTAINS / STARTSWITH / ENDSWITH one string literal (develop dialect only)."""

    op: str  # "contains", "startswith" or "endswith"
    operand: Node
    search: str
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class And(Node):
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Or(Node):
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


NULL = Constant(None)


def walk(root: Node) -> Iterator[Node]:
    """Every node, parents before children, left to right; iterative so deep trees are fine."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def depth(root: Node) -> int:
    """Height of the tree (a lone leaf is 1), computed without recursion."""
    best, stack = 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((child, d + 1) for child in node.children())
    return best
