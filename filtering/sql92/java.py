"""Java value semantics the selector depends on: boxed types, valueOf parsing and compareTo.

RocketMQ's ComparisonExpression converts Strings with Integer/Long/Double/Boolean.valueOf and then
calls compareTo, so these helpers follow the JDK rules exactly (not Python's int()/float(), which
accept underscores, Unicode spaces and non-ASCII digits in floats). Value model: None is Java null,
bool is Boolean, int is Integer, `Long` is Long, float is Double, str is String; anything else is an
opaque non-Comparable Object.
"""
from __future__ import annotations

import math
import re
import struct
import unicodedata
from typing import Any

from schemas.errors import ReplayError

from .errors import FilterEvaluationError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MAX = 1.7976931348623157e308
DOUBLE_MIN_VALUE = 5e-324


class Long(int):
    """A java.lang.Long; a plain int stands for java.lang.Integer, so the two stay distinct types."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"

    def __reduce__(self) -> tuple[type[Long], tuple[int]]:
        return Long, (int(self),)


class NumberFormatError(ReplayError, ValueError):
    """java.lang.NumberFormatException, raised by the valueOf helpers."""


_ASCII_INTEGRAL = re.compile(r"[+-]?[0-9]+")
_DECIMAL_FLOAT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_HEX_FLOAT = re.compile(
    r"([+-]?)0[xX](?:([0-9a-fA-F]+)\.?|([0-9a-fA-F]*)\.([0-9a-fA-F]+))[pP]([+-]?)([0-9]+)[fFdD]?")
_JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))  # String.trim() drops every char <= ' '
_CANONICAL_NAN_BITS = 0x7FF8000000000000


def _digit(ch):
    """Character.digit(ch, 10) for one UTF-16 unit: any BMP decimal digit (Nd), else -1."""
    code = ord(ch)
    if 48 <= code <= 57:
        return code - 48
    if code < 0x10000 and unicodedata.category(ch) == "Nd":
        return unicodedata.decimal(ch)
    return -1


def _parse_integral(s, low, high):
    """Integer.parseInt / Long.parseLong (radix 10): optional sign, Unicode digits, no spaces."""
    if s.isascii():
        if not _ASCII_INTEGRAL.fullmatch(s):
            raise NumberFormatError(s)
        value = int(s)
    else:
        start, negative = 0, False
        if s[0] < "0":
            if s[0] == "-":
                negative = True
            elif s[0] != "+":
                raise NumberFormatError(s)
            if len(s) == 1:
                raise NumberFormatError(s)
            start = 1
        value = 0
        for ch in s[start:]:
            d = _digit(ch)
            if d < 0:
                raise NumberFormatError(s)
            value = value * 10 + d
        if negative:
            value = -value
    if not low <= value <= high:
        raise NumberFormatError(s)
    return value


def integer_value_of(s: str) -> int:
    """Integer.valueOf(String)."""
    return _parse_integral(s, INT_MIN, INT_MAX)


def long_value_of(s: str) -> Long:
    """Long.valueOf(String)."""
    return Long(_parse_integral(s, LONG_MIN, LONG_MAX))


def _scaled(mantissa, exp2):
    """mantissa * 2**exp2 rounded once to the nearest double (ties to even), as the JDK does."""
    if mantissa == 0:
        return 0.0
    magnitude = mantissa.bit_length() + exp2
    if magnitude > 1025:
        return math.inf
    if magnitude < -1100:
        return 0.0
    try:
        return float(mantissa << exp2) if exp2 >= 0 else mantissa / (1 << -exp2)
    except OverflowError:
        return math.inf


def _hex_value_of(m):
    """FloatingDecimal.parseHexString for a match of _HEX_FLOAT."""
    sign = -1.0 if m.group(1) == "-" else 1.0
    exponent = int(m.group(6))
    if exponent > INT_MAX:  # the JDK's Integer.parseInt of the exponent overflows: zero or infinity
        return sign * (0.0 if m.group(5) == "-" else math.inf)
    if m.group(2) is not None:
        digits, fraction_len = m.group(2), 0
    else:
        digits, fraction_len = m.group(3) + m.group(4), len(m.group(4))
    exp2 = (-exponent if m.group(5) == "-" else exponent) - 4 * fraction_len
    return math.copysign(_scaled(int(digits, 16), exp2), sign)


def double_value_of(s: str) -> float:
    """Double.valueOf(String): trims, accepts NaN/Infinity, hex floats and one f/F/d/D suffix."""
    t = s.strip(_JAVA_TRIMMED)
    if _DECIMAL_FLOAT.fullmatch(t):
        body = t.lstrip("+-")
        if body == "NaN":
            return math.nan
        if body == "Infinity":
            return -math.inf if t[0] == "-" else math.inf
        if t[-1] in "fFdD":
            t = t[:-1]
        return float(t)
    m = _HEX_FLOAT.fullmatch(t)
    if m:
        return _hex_value_of(m)
    raise NumberFormatError(s)


def boolean_value_of(s: str | None) -> bool:
    """Boolean.valueOf(String): "true" ignoring case; everything else, null included, is false."""
    return s is not None and len(s) == 4 and s.lower() == "true"


def _double_bits(d):
    if d != d:
        return _CANONICAL_NAN_BITS
    return struct.unpack("<q", struct.pack("<d", d))[0]


def double_compare(a: float, b: float) -> int:
    """Double.compare: NaN is above +Infinity and equal to itself, -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    x, y = _double_bits(a), _double_bits(b)
    return 0 if x == y else (-1 if x < y else 1)


def string_compare(a: str, b: str) -> int:
    """String.compareTo's sign: UTF-16 code unit order (differs from code point order above U+E000)."""
    if a == b:
        return 0
    if a.isascii() and b.isascii():
        return -1 if a < b else 1
    x, y = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    return -1 if x < y else 1


def is_comparable(v: Any) -> bool:
    """instanceof Comparable for the values a selector can see."""
    t = type(v)
    return t is str or t is int or t is float or t is bool or t is Long


def java_class(v: Any) -> str:
    """Simple name of the Java class standing for a Python value (diagnostics)."""
    return {str: "String", int: "Integer", Long: "Long", float: "Double", bool: "Boolean",
            type(None): "null"}.get(type(v), "Object")


def from_python(v: Any) -> Any:
    """Map a non-String property value to the Java object the broker would hold (tests use these)."""
    t = type(v)
    if t is int and not INT_MIN <= v <= INT_MAX:
        return Long(v)
    return v


def negate(v: Any) -> Any:
    """UnaryExpression.createNegate: numbers change sign with Java overflow, anything else is null."""
    t = type(v)
    if t is int:
        return INT_MIN if v == INT_MIN else -v
    if t is Long:
        return Long(LONG_MIN if v == LONG_MIN else -v)
    if t is float:
        return -v
    return None


def _class_cast(value, target):
    return FilterEvaluationError(
        f"class java.lang.{java_class(value)} cannot be cast to class java.lang.{target}",
        "ClassCastException")


def promote(lv: Any, rv: Any) -> tuple[Any, Any] | None:
    """The type-conversion half of ComparisonExpression.__compare (with CONVERT_STRING_EXPRESSIONS): the pair
    converted toward each other, or None when Java compares them as -1; NumberFormatError where valueOf throws."""
    lt, rt = type(lv), type(rv)
    if lt is bool:
        if rt is str:  # RocketMQ casts the Boolean side to String here
            raise _class_cast(lv, "String")
        return None
    if lt is int:
        if rt is Long:
            return lv, rv
        if rt is float:
            return float(lv), rv
        if rt is str:
            return lv, integer_value_of(rv)
        return None
    if lt is Long:
        if rt is int:
            return lv, rv
        if rt is float:
            return float(lv), rv
        if rt is str:
            return lv, long_value_of(rv)
        return None
    if lt is float:
        if rt is int or rt is Long:
            return lv, float(rv)
        if rt is str:
            return lv, double_value_of(rv)
        return None
    if lt is str:
        if rt is bool:
            return boolean_value_of(lv), rv
        if rt is int:
            return integer_value_of(lv), rv
        if rt is Long:
            return long_value_of(lv), rv
        if rt is float:
            return double_value_of(lv), rv
    return None


def compare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare(lv, rv, true) for two non-null Comparables: <0, 0 or >0.

    Mismatched types are converted toward the other side (a String is parsed with the other side's
    valueOf); pairs it cannot convert compare as -1. NumberFormatException becomes RuntimeException.
    """
    if type(lv) is not type(rv):
        try:
            promoted = promote(lv, rv)
        except NumberFormatError as e:
            text, other = (lv, rv) if type(lv) is str else (rv, lv)
            raise FilterEvaluationError(
                f'java.lang.NumberFormatException: For input string: "{e}"', "RuntimeException",
                "NumberFormatException", value=text, target=java_class(other), literal=other) from None
        if promoted is None:
            return -1
        lv, rv = promoted
    if type(lv) is float:
        return double_compare(lv, rv)
    if type(lv) is str:
        return string_compare(lv, rv)
    return (lv > rv) - (lv < rv)


def compare_strings_as_doubles(lv: str, rv: str) -> int:
    """`>`, `>=`, `<`, `<=` on two Strings: both go through Double.valueOf, or RuntimeException."""
    try:
        return double_compare(double_value_of(lv), double_value_of(rv))
    except NumberFormatError:
        raise FilterEvaluationError(
            f"It's illegal to compare string by '>=', '>', '<', '<='. lv={lv}, rv={rv}",
            "RuntimeException", "NumberFormatException") from None
