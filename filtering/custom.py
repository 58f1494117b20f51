"""Custom filters: user Python code in place of 4.2's class filter (FilterServer, removed in 4.3).

A subscription of type PYTHON names `module:callable`. The callable gets a decoded message (a dict with
topic, queue_id, queue_offset, commitlog_offset, tags, keys, properties, body, timestamps...) and a
FilterContext, and returns a bool. It runs on executors; an exception counts as "not matched" and is
counted, it never stops the job."""
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas import no_pandas


@dataclass(frozen=True)
class FilterContext:
    """What a filter may know besides the message (like 4.2's FilterContext.consumerGroup)."""

    consumer_group: str
    topic: str


def load_filter(spec: str) -> Callable[..., Any]:
    """Import `module:callable` (the module must be importable on executors: ship it with --py-files)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"a PYTHON filter is written 'module:callable', got {spec!r}")
    with no_pandas.allowed():  # user code imports what it likes
        target = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target


def run_filter(fn: Callable[..., Any], messages: Sequence[dict[str, Any]],
               context: FilterContext) -> tuple[np.ndarray, np.ndarray]:
    """(matched, errors) bool arrays over a list of message dicts; True only for a True return."""
    matched = np.zeros(len(messages), dtype=bool)
    errors = np.zeros(len(messages), dtype=bool)
    with no_pandas.allowed():
        for i, message in enumerate(messages):
            matched[i], errors[i] = _run_one(fn, message, context)
    return matched, errors


def _run_one(fn, message, context):
    """(matched, error) of one call of a user filter."""
    try:
        result = fn(message, context)
    except Exception:  # noqa: BLE001 - user code: not matched, counted
        return False, True
    return isinstance(result, (bool, np.bool_)) and bool(result), False
