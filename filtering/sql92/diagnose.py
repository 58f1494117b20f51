"""Why a selector throws for a message, in words a user can act on (the summary's warnings)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import FilterEvaluationError
from .java import NumberFormatError, double_value_of

if TYPE_CHECKING:
    from . import Expression


def failure(expression: Expression, props: Mapping[str, Any]) -> str | None:
    """A one-line description of the exception RocketMQ's evaluate throws for `props`, or None."""
    try:
        expression.evaluate(props)
    except FilterEvaluationError as exc:
        return describe(exc)
    return None


def describe(exc: FilterEvaluationError) -> str:
    """`NumberFormatException ('512.40' is not an Integer): did you mean 100.0?` and the like."""
    cause = exc.cause or exc.java_class
    if exc.value is None or exc.target is None:
        return f"{cause}: {exc}"
    article = "an" if exc.target[:1] in "AEIOU" else "a"
    text = f"{cause} ({exc.value!r} is not {article} {exc.target})"
    if exc.target in ("Integer", "Long") and exc.literal is not None and _is_double(exc.value):
        text += f": did you mean {int(exc.literal)}.0?"
    return text


def _is_double(text):
    try:
        double_value_of(text)
    except NumberFormatError:
        return False
    return True
