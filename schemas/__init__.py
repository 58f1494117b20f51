"""RocketMQ store formats: layouts, vectorized decoders, Arrow and Spark schemas.

`schemas.read_messages` and `schemas.read_consume_queues` (schemas/store/local_api.py: a whole store as Arrow
tables) are loaded on first use (PEP 562), so that importing one format module (the filters import the tag
codes and columns) does not load the record decoders and their compiled kernels."""
from __future__ import annotations

import importlib
from typing import Any

from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA, MESSAGE_SCHEMA
from schemas.errors import CorruptStoreError, UnsupportedStoreError

_LAZY = {"read_messages": "schemas.store.local_api", "read_consume_queues": "schemas.store.local_api"}

__all__ = ["read_messages", "read_consume_queues", "MESSAGE_SCHEMA", "CONSUME_QUEUE_SCHEMA",
           "CorruptStoreError", "UnsupportedStoreError"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'schemas' has no attribute {name!r}")
