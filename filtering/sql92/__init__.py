"""RocketMQ's SQL92 message selector, offline: parse like the broker's compile, evaluate like its filter.

    expr = parse("a between 10 and 40")
    expr.evaluate({"a": "15"})   # True, exactly what Java's evaluate() returns (True/False/None/...)
    expr.matches({"a": "x"})     # False: the broker's decision (an exception means "not matched")

Dialect "5" is the develop grammar (with CONTAINS / STARTSWITH / ENDSWITH), dialect "4" the 4.x one.
The PLY lexers and the parser are built once per process, on first use, and write no files.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import nodes, vectorized
from .errors import FilterEvaluationError, FilterSyntaxError
from .evaluate import compile_node, recursion_room
from .lexer import KEYWORDS_4, KEYWORDS_5, SelectorLexer
from .parser import SelectorParser, selector_tokens

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["Expression", "FilterEvaluationError", "FilterSyntaxError", "parse", "DIALECTS"]

DIALECTS = {"5": KEYWORDS_5, "4": KEYWORDS_4}
_DEEP = 150  # trees deeper than this get a temporarily raised recursion limit

_lock = threading.Lock()
_lexers: dict = {}
_parser: list = []


def _tools(dialect):
    """The dialect's lexer and the shared parser, built on first use (caller holds _lock)."""
    if dialect not in _lexers:
        _lexers[dialect] = SelectorLexer(DIALECTS[dialect]).build()
    if not _parser:
        _parser.append(SelectorParser().build())
    return _lexers[dialect], _parser[0]


def _normalize_dialect(dialect: Any) -> str:
    if isinstance(dialect, int) and not isinstance(dialect, bool):
        dialect = str(dialect)
    if not isinstance(dialect, str) or dialect not in DIALECTS:
        raise ValueError(f"unknown SQL92 dialect {dialect!r}; expected one of {sorted(DIALECTS)}")
    return dialect


@lru_cache(maxsize=512)
def _parse_tree(text, dialect):
    """(tree, cut): the tree of what JavaCC reads, and where the input it ignores starts (or None)."""
    with _lock:
        lexer, parser = _tools(dialect)
        tokens, cut = selector_tokens(lexer, text)
        return parser.parse(tokens), cut


def parse(expr: str, dialect: str | int = "5") -> Expression:
    """Compile a selector as RocketMQ does; FilterSyntaxError wherever its compile throws."""
    dialect = _normalize_dialect(dialect)
    if not isinstance(expr, str):
        raise TypeError(f"selector must be a str, not {type(expr).__name__}")
    tree, cut = _parse_tree(expr, dialect)
    return Expression(expr, dialect, tree, cut)


class Expression:
    """A compiled selector: the source text, its dialect and the tree (pickled as text + dialect)."""

    __slots__ = ("text", "dialect", "tree", "cut", "depth", "_properties", "_compiled")

    def __init__(self, text: str, dialect: str, tree: nodes.Node, cut: int | None = None) -> None:
        self.text, self.dialect, self.tree, self.cut = text, dialect, tree, cut
        self.depth = nodes.depth(tree)
        self._properties: tuple[str, ...] | None = None
        self._compiled: Callable[[Mapping[str, Any]], Any] | None = None

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return parse, (self.text, self.dialect)

    def __repr__(self) -> str:
        return f"Expression({self.text!r}, dialect={self.dialect!r})"

    @property
    def ignored(self) -> str:
        """The trailing text RocketMQ's parser never reads (its grammar has no <EOF>): '' when none.

        `TAGS CONTAINS 'Tag'` in the 4.x dialect is the selector `TAGS`, with "CONTAINS 'Tag'" ignored."""
        return "" if self.cut is None else self.text[self.cut:].strip()

    @property
    def properties(self) -> tuple[str, ...]:
        """Names of the properties the selector reads, in order of first appearance."""
        if self._properties is None:
            seen: dict[str, None] = {}
            for node in nodes.walk(self.tree):
                if type(node) is nodes.Property:
                    seen.setdefault(node.name, None)
            self._properties = tuple(seen)
        return self._properties

    def _function(self):
        if self._compiled is None:
            with recursion_room(self.depth):
                self._compiled = compile_node(self.tree)
        return self._compiled

    def evaluate(self, props: Mapping[str, Any]) -> Any:
        """Java's evaluate(): True/False/None (or the raw value); FilterEvaluationError where it throws."""
        fn = self._function()
        if self.depth < _DEEP:
            return fn(props)
        with recursion_room(self.depth):
            return fn(props)

    def matches(self, props: Mapping[str, Any]) -> bool:
        """The broker's decision: only an exact TRUE matches; null, non-Boolean or an exception do not."""
        try:
            return self.evaluate(props) is True
        except FilterEvaluationError:
            return False

    def matches_batch(self, properties: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Vectorized `matches` over a pyarrow map<string, string> column: a numpy bool array."""
        return vectorized.matches_batch(self, properties)
