"""The two ways a selector can fail, kept apart from the rest so every module can raise them; both under the
project's one error root (schemas/errors.py)."""
from typing import Any

from schemas.errors import EXIT_USAGE, ReplayError


class FilterSyntaxError(ReplayError, ValueError):
    """RocketMQ's compile rejects the selector (MQFilterException: a syntax, token or build-time error)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, position: int | None = None) -> None:
        if position is not None:
            message = f"{message} (at offset {position})"
        super().__init__(message)
        self.position = position


class FilterEvaluationError(ReplayError):
    """RocketMQ's evaluate throws; `java_class` names the exception the broker would have caught.

    A failed String conversion also says which: `value` (the property's string), `target` (the Java
    class it was converted to, the other side's) and `literal` (that other side's value)."""

    def __init__(self, message: str, java_class: str = "RuntimeException", cause: str | None = None,
                 value: str | None = None, target: str | None = None, literal: Any = None) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.cause = cause
        self.value, self.target, self.literal = value, target, literal
