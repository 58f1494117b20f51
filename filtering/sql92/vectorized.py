"""Vectorized broker decision: the selector over a whole pyarrow map<string, string> column at once.

Every node yields a column carried as (value, is_null, is_error) masks, so Java's three-valued logic,
its exceptions and its short-circuits (an error right of `FALSE AND` or `TRUE OR` does not count) stay
exact. Each property is extracted once (map_lookup "first" semantics); Integer/Long/Double.valueOf
run as regex validation plus an Arrow cast, and only strings outside the simple ASCII forms (Unicode
digits, hex floats, " 5", "5d", "+5", 19-digit longs) go through java.py, once per distinct value.
Subtrees that read no property are evaluated once by the row evaluator and broadcast; properties are
always Strings here, so numbers only ever come from literals.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import kernels as K

from . import java
from .errors import FilterEvaluationError
from .evaluate import compile_node, recursion_room
from .nodes import (
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
    walk,
)

if TYPE_CHECKING:
    from . import Expression

_NUMBER_KINDS = {int: "int", java.Long: "long", float: "double"}
_ORDER_TESTS = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}

# Integer/Long.valueOf: the ASCII form Arrow can cast, and every string that might be valid at all.
_SIMPLE_INTEGRAL = r"^-?[0-9]{1,18}$"
_MAYBE_INTEGRAL = r"^[+-]?\p{Nd}+$"
# Double.valueOf: the ASCII form Arrow's (correctly rounded) cast reads, and Java's full grammar.
_SIMPLE_DOUBLE = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?$"
_JAVA_DOUBLE = (r"^[\x00-\x20]*[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
                r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)[\x00-\x20]*$")
_PARSERS = {"int": java.integer_value_of, "long": java.long_value_of, "double": java.double_value_of}


@dataclass
class Col:
    """One node's result for every row. kind: "bool", "str", "num" (a Java number) or "null".

    `value` is a numpy bool array for "bool", a pyarrow string array or a Python str for "str", a
    Java number for "num" and unused for "null". `null` and `err` are numpy bool masks; where `err`
    is set the other fields mean nothing.
    """

    kind: str
    value: object
    null: np.ndarray
    err: np.ndarray
    prop: str | None = None  # property name of a "str" column (key for the parsed-number cache)


class _Batch:
    """One map array: property columns, their distinct values and their Java number parses, each computed once."""

    def __init__(self, maps: pa.MapArray, constant_ids: set[int] | None, n: int | None = None,
                 coded: Mapping[str, pa.Array] | None = None) -> None:
        self.maps = maps
        self.constant_ids = constant_ids
        self.n = len(maps) if n is None else n  # n: the rows of `distinct`'s tuples, whose columns are given
        self.coded = coded or {}  # {name: dictionary column}: the decode's encoding of a property's values
        self.no = np.zeros(self.n, dtype=bool)
        self.yes = np.ones(self.n, dtype=bool)
        self._columns: dict[str, pa.Array] = {}
        self._parsed: dict[tuple[str | None, str], tuple[np.ndarray, np.ndarray]] = {}
        self._codes: dict[str, tuple[np.ndarray, pa.Array]] = {}
        self._entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def column(self, name: str) -> pa.Array:
        """The property's value per row (null where missing): map_lookup(name, "first").

        pc.map_lookup costs about 250 ns a row here; a compiled scan of the keys buffer for the first
        entry of that name per row, then one take of the values, gives the same column many times faster.
        """
        if name not in self._columns and name in self.coded:
            coded = self.coded[name]
            self._columns[name] = (coded.dictionary.take(coded.indices) if isinstance(coded, pa.DictionaryArray)
                                   else coded)
        if name not in self._columns:
            if self._entries is None:
                keys = self.maps.keys
                key_offsets = np.frombuffer(keys.buffers()[1], np.int32)[keys.offset: keys.offset + len(keys) + 1]
                key_data = (np.frombuffer(keys.buffers()[2], np.uint8) if keys.buffers()[2] is not None
                            else np.zeros(0, np.uint8))
                map_offsets = self.maps.offsets.to_numpy(zero_copy_only=False)
                self._entries = (key_data, key_offsets.astype(np.int64), map_offsets.astype(np.int64))
            key_data, key_offsets, map_offsets = self._entries
            take = K.first_entry_named(key_data, key_offsets, map_offsets, name)
            if self.maps.null_count:
                take[~self.maps.is_valid().to_numpy(zero_copy_only=False)] = -1
            self._columns[name] = self.maps.items.take(pa.array(take, mask=take < 0))
        return self._columns[name]

    def codes(self, name: str) -> tuple[np.ndarray, pa.Array]:
        """(index of each row's value into `dictionary`, dictionary): the column's distinct values, null one."""
        if name not in self._codes and isinstance(self.coded.get(name), pa.DictionaryArray):  # absent: a null last
            coded = self.coded[name]
            self._codes[name] = (pc.fill_null(coded.indices, len(coded.dictionary)).to_numpy().astype(np.int64),
                                 pa.concat_arrays([coded.dictionary, pa.nulls(1, pa.string())]))
        if name not in self._codes:
            encoded = pc.dictionary_encode(self.column(name), null_encoding="encode")
            self._codes[name] = (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                                 encoded.dictionary)
        return self._codes[name]

    def distinct(self, names: Sequence[str]) -> tuple[_Batch, np.ndarray] | None:
        """(a _Batch of tuples of the `names` columns' values, each row's index into it), or None when fewer
        than half the rows repeat one. A row's outcome depends on these values alone (its errors too), and
        real properties have few values (codes, regions, flags), so each tuple is evaluated once. The tuples
        are every combination of the columns' distinct values when there are at most half as many as rows
        (each row's index is then arithmetic), else the combinations that occur (numbered by a hash)."""
        if any(self._mostly_distinct(name) for name in names):
            return None
        encoded = [self.codes(name) for name in names]
        if any(2 * len(dictionary) > self.n for _, dictionary in encoded):
            return None
        combinations = int(np.prod([len(dictionary) for _, dictionary in encoded], dtype=object))
        key = np.zeros(self.n, np.int64)
        for codes, dictionary in encoded:
            key = key * len(dictionary) + codes
        if 2 * combinations <= self.n:
            strides = np.cumprod([1] + [len(d) for _, d in encoded[:0:-1]])[::-1]
            every = np.arange(combinations)
            columns = [d.take(pa.array(every // stride % len(d))) for (_, d), stride in zip(encoded, strides)]
            return self._tuples(names, columns, combinations), key
        if combinations >= 1 << 62:
            return None  # the key would overflow (four columns of over 30,000 values each)
        numbered = pc.dictionary_encode(pa.array(key))
        inverse = numbered.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        k = len(numbered.dictionary)
        if 2 * k > self.n:
            return None
        rows = np.empty(k, np.int64)
        rows[inverse] = np.arange(self.n)  # a row of each tuple (any: they hold the same values)
        return self._tuples(names, [self.column(name).take(pa.array(rows)) for name in names], k), inverse

    def _mostly_distinct(self, name):
        """Whether the decode found the property's values mostly distinct (more than half its rows'): it then gave
        up coding them and gave the plain column. Hashing them again here (for tuples, or before parsing numbers)
        finds as much, at some 3 ms per 65,536 rows; either way every row is evaluated, the same answer."""
        return name in self.coded and not isinstance(self.coded[name], pa.DictionaryArray)

    def _tuples(self, names, columns, n):
        tuples = _Batch(self.maps, self.constant_ids, n)
        tuples._columns = dict(zip(names, columns))
        return tuples

    def parsed(self, col: Col, number_kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, ok) of X.valueOf over a "str" column, with X the Java type of `number_kind`."""
        key = (col.prop, number_kind)
        if col.prop is None or key not in self._parsed:
            if col.prop in self._codes:  # its distinct values are known already: each parsed once
                codes, dictionary = self._codes[col.prop]
                values, ok = _parse_column(dictionary, dictionary.is_null().to_numpy(zero_copy_only=False),
                                           number_kind)
                result = values[codes], ok[codes]
            else:
                result = _parse_column(col.value, col.null, number_kind, repeats=not self._mostly_distinct(col.prop))
            if col.prop is None:
                return result
            self._parsed[key] = result
        return self._parsed[key]


def _mask(array):
    """A pyarrow boolean array as numpy, nulls as False."""
    return pc.fill_null(array, False).to_numpy(zero_copy_only=False)


def _python_parse(strings, parse, dtype):
    """Java conversion of the distinct values of `strings` (a pyarrow array without nulls)."""
    encoded = pc.dictionary_encode(strings)
    distinct = encoded.dictionary.to_pylist()
    values = np.zeros(len(distinct), dtype=dtype)
    ok = np.zeros(len(distinct), dtype=bool)
    for i, s in enumerate(distinct):
        try:
            values[i] = parse(s)
            ok[i] = True
        except java.NumberFormatError:
            pass
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return values[indices], ok[indices]


def _parse_column(strings, null, number_kind, repeats=True):
    """Integer/Long/Double.valueOf of each string: (values, ok); ok is False for null or invalid. repeats=False:
    the values are known to be mostly distinct, not worth parsing each distinct one once."""
    parse = _PARSERS[number_kind]
    dtype = np.float64 if number_kind == "double" else np.int64
    if isinstance(strings, str):  # a string literal operand
        try:
            return np.full(len(null), parse(strings), dtype=dtype), ~null
        except java.NumberFormatError:
            return np.zeros(len(null), dtype=dtype), np.zeros(len(null), dtype=bool)
    if repeats and len(strings) >= 1024:  # property values repeat (codes, flags, small numbers): parse each once
        encoded = pc.dictionary_encode(strings)
        if 2 * len(encoded.dictionary) < len(strings):
            values, ok = _parse_column(encoded.dictionary, np.zeros(len(encoded.dictionary), bool), number_kind)
            index = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
            return values[index], ok[index] & ~null
    simple_re, maybe_re = ((_SIMPLE_DOUBLE, _JAVA_DOUBLE) if number_kind == "double"
                           else (_SIMPLE_INTEGRAL, _MAYBE_INTEGRAL))
    simple = _mask(pc.match_substring_regex(strings, simple_re))
    target = pa.float64() if number_kind == "double" else pa.int64()
    values = pc.cast(pc.if_else(pa.array(simple), strings, "0"), target).to_numpy(zero_copy_only=False)
    ok = simple.copy()
    if number_kind == "int":
        ok &= (values >= java.INT_MIN) & (values <= java.INT_MAX)
    rest = np.flatnonzero(~simple & ~null)
    if len(rest):
        others = strings.take(pa.array(rest))
        maybe = _mask(pc.match_substring_regex(others, maybe_re))
        if maybe.any():
            values = values.copy()
            where = rest[maybe]
            values[where], ok[where] = _python_parse(others.filter(pa.array(maybe)), parse, dtype)
    return values, ok


def _double_compare(x, y):
    """Double.compare elementwise (NaN greatest and equal to itself, -0.0 below 0.0)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xb = np.where(np.isnan(x), np.int64(0x7FF8000000000000), x.view(np.int64))
    yb = np.where(np.isnan(y), np.int64(0x7FF8000000000000), y.view(np.int64))
    by_bits = np.where(xb == yb, 0, np.where(xb < yb, -1, 1))
    return np.where(x < y, -1, np.where(x > y, 1, by_bits)).astype(np.int8)


def _sign(x, y):
    return (np.greater(x, y).astype(np.int8) - np.less(x, y).astype(np.int8)).astype(np.int8)


def _numbers_vs_string(batch, number, col, number_on_left):
    """compare() of a Java number with a String column: the String is parsed with the number's type."""
    kind = _NUMBER_KINDS[type(number)]
    values, ok = batch.parsed(col, kind)
    cmp = _double_compare if kind == "double" else _sign
    c = cmp(number, values) if number_on_left else cmp(values, number)
    return np.broadcast_to(c, (batch.n,)), ~ok


def _java_compare(batch, left, right, ordering):
    """(compareTo result, error mask) for rows where both sides are non-null, like java.compare.

    `ordering` selects the `>`/`<` family, where two Strings are both read with Double.valueOf.
    """
    lk, rk = left.kind, right.kind
    n = batch.n
    if lk == "null" or rk == "null":
        return np.zeros(n, dtype=np.int8), batch.no
    if lk == "str" and rk == "str":
        if ordering:
            lv, lok = batch.parsed(left, "double")
            rv, rok = batch.parsed(right, "double")
            return _double_compare(lv, rv), ~(lok & rok)
        if isinstance(left.value, str) and isinstance(right.value, str):
            eq = np.full(n, left.value == right.value)
        else:  # String.equals
            eq = _mask(pc.equal(left.value, right.value))
        return np.where(eq, 0, 1).astype(np.int8), batch.no
    if lk == "str" and rk == "num":
        return _numbers_vs_string(batch, right.value, left, number_on_left=False)
    if lk == "num" and rk == "str":
        return _numbers_vs_string(batch, left.value, right, number_on_left=True)
    if lk == "str" and rk == "bool":
        if isinstance(left.value, str):
            lb = np.full(n, java.boolean_value_of(left.value))
        else:  # Boolean.valueOf: "true" ignoring case; only ASCII letters can case-fold to it
            lb = _mask(pc.equal(pc.ascii_lower(left.value), "true"))
        return _sign(lb, right.value), batch.no
    if lk == "bool" and rk == "str":
        return np.zeros(n, dtype=np.int8), batch.yes  # ClassCastException: RocketMQ casts the Boolean
    if lk == "bool" and rk == "bool":
        return _sign(left.value, right.value), batch.no
    if lk == "num" and rk == "num":
        return np.full(n, java.compare(left.value, right.value), dtype=np.int8), batch.no
    return np.full(n, -1, dtype=np.int8), batch.no  # Boolean vs number: __compare answers -1


def _v_constant(node, batch):
    return _broadcast(node, batch)


def _v_property(node, batch):
    values = batch.column(node.name)
    return Col("str", values, values.is_null().to_numpy(zero_copy_only=False), batch.no, node.name)


def _v_negate(node, batch):
    operand = evaluate_column(node.operand, batch)  # not constant, so not a number: the result is null
    return Col("null", None, batch.yes, operand.err)


def _v_not(node, batch):
    operand = evaluate_column(node.operand, batch)
    return Col("bool", ~operand.value, operand.null, operand.err)


def _v_boolean_cast(node, batch):
    operand = evaluate_column(node.operand, batch)
    value = operand.value if operand.kind == "bool" else batch.no
    null = operand.null if operand.kind != "null" else batch.yes
    return Col("bool", value, null, operand.err)


def _v_equal(node, batch):
    left, right = evaluate_column(node.left, batch), evaluate_column(node.right, batch)
    both = ~left.null & ~right.null
    c, conversion_error = _java_compare(batch, left, right, ordering=False)
    value = np.where(both, c == 0, left.null & right.null)
    return Col("bool", value, left.null & ~right.null, left.err | right.err | (both & conversion_error))


def _v_compare(node, batch):
    left = evaluate_column(node.left, batch)
    right = evaluate_column(node.right, batch)  # Java skips it where left is null or failed
    left_ok = ~left.err & ~left.null
    both = left_ok & ~right.err & ~right.null
    c, conversion_error = _java_compare(batch, left, right, ordering=True)
    err = left.err | (left_ok & right.err) | (both & conversion_error)
    null = (~left.err & left.null) | (left_ok & ~right.err & right.null)
    return Col("bool", _ORDER_TESTS[node.op](c, 0), null, err)


def _v_in(node, batch):
    operand = evaluate_column(node.operand, batch)
    found = _mask(pc.is_in(operand.value, value_set=pa.array(sorted(node.values), pa.string())))
    return Col("bool", found ^ node.negated, operand.null, operand.err)


_MATCHERS = {
    "contains": lambda values, s: pc.match_substring(values, s),
    "startswith": lambda values, s: pc.starts_with(values, s),
    "endswith": lambda values, s: pc.ends_with(values, s),
}


def _v_string_match(node, batch):
    if not node.search:
        return Col("bool", batch.no, batch.no, batch.no)  # false before the operand is evaluated
    operand = evaluate_column(node.operand, batch)
    if operand.kind != "str":
        return Col("bool", batch.no, batch.no, operand.err)
    hit = _mask(_MATCHERS[node.op](operand.value, node.search))
    return Col("bool", (hit ^ node.negated) & ~operand.null, batch.no, operand.err)


def _logic(left, right, stop_value):
    """AND (stop_value False) / OR (stop_value True) with Java's left-to-right short-circuit."""
    left_ok = ~left.err & ~left.null
    stops = left_ok & (left.value == stop_value)
    goes_on = ~left.err & ~stops
    right_stops = ~right.err & ~right.null & (right.value == stop_value)
    err = left.err | (goes_on & right.err)
    decided = stops | (goes_on & right_stops)
    null = goes_on & ~right.err & ~right_stops & (left.null | right.null)
    value = np.where(decided, stop_value, not stop_value)
    return Col("bool", value, null & ~err, err)


def _v_and(node, batch):
    return _logic(evaluate_column(node.left, batch), evaluate_column(node.right, batch), False)


def _v_or(node, batch):
    return _logic(evaluate_column(node.left, batch), evaluate_column(node.right, batch), True)


VECTOR_EVALUATORS = {
    Constant: _v_constant,
    Property: _v_property,
    Negate: _v_negate,
    Not: _v_not,
    BooleanCast: _v_boolean_cast,
    Equal: _v_equal,
    Compare: _v_compare,
    In: _v_in,
    StringMatch: _v_string_match,
    And: _v_and,
    Or: _v_or,
}


def _broadcast(node, batch):
    """A subtree that reads no property: evaluate it once with the row evaluator, repeat the result."""
    try:
        value = compile_node(node)({})
    except FilterEvaluationError:
        kind = "null" if type(node) is Negate else "bool"
        return Col(kind, batch.no if kind == "bool" else None, batch.no, batch.yes)
    if value is None:
        kind = "null" if type(node) is Negate else "bool"
        return Col(kind, batch.no if kind == "bool" else None, batch.yes, batch.no)
    if type(value) is bool:
        return Col("bool", batch.yes if value else batch.no, batch.no, batch.no)
    if type(value) is str:
        return Col("str", value, batch.no, batch.no)
    return Col("num", value, batch.no, batch.no)


def evaluate_column(node: Node, batch: _Batch) -> Col:
    """The Col of `node` over `batch`; constant subtrees are folded."""
    assert batch.constant_ids is not None  # _evaluated sets them before the tree is evaluated
    if id(node) in batch.constant_ids:
        return _broadcast(node, batch)
    return VECTOR_EVALUATORS[type(node)](node, batch)


def _constant_ids(tree):
    """ids of the nodes whose subtree reads no property (post-order, iterative for deep trees)."""
    order = list(walk(tree))
    reads = {}
    for node in reversed(order):
        reads[id(node)] = type(node) is Property or any(reads[id(c)] for c in node.children())
    return {key for key, read in reads.items() if not read}


def _outcomes_array(expression, maps, batch=None):
    if len(maps) == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    if batch is None:
        batch = _Batch(maps, None)
    distinct = batch.distinct(expression.properties)
    if distinct is not None:  # each distinct tuple of the values it reads evaluated once, then every row's
        tuples, inverse = distinct
        matched, errors = _evaluated(expression, tuples)
        return matched[inverse], errors[inverse]
    return _evaluated(expression, batch)


def _evaluated(expression, batch):
    """(matched, errors) of one expression over every row of `batch`."""
    batch.constant_ids = _constant_ids(expression.tree)
    with recursion_room(expression.depth):
        result = evaluate_column(expression.tree, batch)
    errors = np.asarray(result.err, dtype=bool) & np.ones(batch.n, dtype=bool)
    if result.kind != "bool":
        return np.zeros(batch.n, dtype=bool), errors
    return np.asarray(result.value, dtype=bool) & ~result.null & ~result.err, errors


def outcomes_many(expressions: Iterable[Expression], properties: pa.Array | pa.ChunkedArray,
                  coded: Mapping[str, pa.Array] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(matched, errors)] of several expressions over one map array: each property column (and its
    number parses) is extracted once and shared, as the dispatcher evaluates every registration. coded:
    {name: dictionary column} of properties the decode encoded already (row for row with `properties`)."""
    if isinstance(properties, pa.ChunkedArray):
        properties = properties.combine_chunks() if properties.num_chunks else pa.array([], properties.type)
    if not isinstance(properties, pa.MapArray):
        raise TypeError(f"expected a pyarrow map<string, string> array, got {type(properties).__name__}")
    batch = _Batch(properties, None, coded=None if properties.null_count else coded)  # a null map reads nothing
    return [_outcomes_array(e, properties, batch) for e in expressions]


def outcomes_batch(expression: Expression, properties: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(matched, errors) per row: the broker decision, and where evaluate() throws.

    `properties` is a pyarrow MapArray or ChunkedArray of map<string, string>, one message per row.
    """
    if isinstance(properties, pa.ChunkedArray):
        parts = [_outcomes_array(expression, chunk) for chunk in properties.chunks]
        if not parts:
            return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if not isinstance(properties, pa.MapArray):
        raise TypeError(f"expected a pyarrow map<string, string> array, got {type(properties).__name__}")
    return _outcomes_array(expression, properties)


def matches_batch(expression: Expression, properties: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Broker decision per row (True only where evaluate() returns exactly TRUE) as a numpy bool array."""
    return outcomes_batch(expression, properties)[0]
