"""TAG filtering exactly as RocketMQ 4.x does it: Java hash codes, subscription parsing, both match stages.

The broker only compares 32-bit hash codes (consume-queue stage); the 4.x client then compares the tag
strings. Hash collisions (``Aa`` / ``BB``) are where the two stages disagree, so both are kept apart here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.queues.tag_codes import int32, java_hash, string_array, tags_code, tags_code_array

# The hash codes are the store's (schemas/queues/tag_codes.py); they are part of this module's API too, as the codes
# both match stages compare: filtering.tags.java_hash and tags_code are what the vectors are checked through.
__all__ = ["java_hash", "tags_code", "tags_code_array", "TagSubscription", "parse_subscription", "broker_tag_match",
           "client_tag_match", "broker_tag_match_array", "encode_tags", "client_tag_match_encoded",
           "client_tag_match_array"]

SUB_ALL = "*"
# Java String.trim() strips every char <= U+0020 (so also NUL and control chars), nothing else.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


@dataclass(frozen=True)
class TagSubscription:
    """What ``FilterAPI.buildSubscriptionData`` keeps for a TAG subscription string."""

    expression: str  # SubscriptionData.subString: "*" for null / "" / "*", else the string unchanged
    tags: frozenset  # tagsSet: the trimmed, non-empty pieces
    codes: frozenset  # codeSet: their Java hash codes (int32)
    match_all: bool  # subString is "*": the broker lets every message through


def parse_subscription(s: str | None) -> TagSubscription:
    """Parse like RocketMQ 4.9.8's ``FilterAPI.buildSubscriptionData``.

    Raises ValueError where RocketMQ throws ("subString split error"): a string that is only ``||``
    separators, because Java's ``split`` then returns an empty array.
    """
    if s is None or s == "" or s == SUB_ALL:
        return TagSubscription(SUB_ALL, frozenset(), frozenset(), True)
    if not isinstance(s, str):
        raise TypeError(f"subscription must be a str or None, not {type(s).__name__}")
    pieces = s.split("||")
    if all(p == "" for p in pieces):  # Java drops trailing empty strings: nothing is left
        raise ValueError(f"subString split error: {s!r}")
    tags = frozenset(t for t in (p.strip(_JAVA_TRIM) for p in pieces) if t)
    return TagSubscription(s, tags, frozenset(java_hash(t) for t in tags), False)


def broker_tag_match(sub: TagSubscription, tags_code: int | None) -> bool:
    """Consume-queue stage (``ExpressionMessageFilter.isMatchedByConsumeQueue``): hash codes only.

    A missing code (ext unit unreadable) matches; the broker truncates the long code to int.
    """
    if sub.match_all or tags_code is None:
        return True
    return int32(tags_code) in sub.codes


def client_tag_match(sub: TagSubscription, tag: str | None) -> bool:
    """4.x client check (``PullAPIWrapper.processPullResult``): string equality, unless tagsSet is empty.

    The client filters only when tagsSet is non-empty, so ``"*"`` and a blank string like ``"  "`` keep all.
    """
    if not sub.tags:
        return True
    return tag in sub.tags


def broker_tag_match_array(sub: TagSubscription, tags_code: np.ndarray | pa.Array | pa.ChunkedArray,
                           code_missing: np.ndarray | None = None) -> np.ndarray:
    """Vectorized ``broker_tag_match``; ``code_missing`` marks rows whose code the broker could not read.

    ``tags_code`` may be a numpy int64 array or a pyarrow integer column (its nulls count as missing).
    """
    if isinstance(tags_code, (pa.Array, pa.ChunkedArray)):
        nulls = tags_code.is_null().to_numpy(zero_copy_only=False)
        codes = pc.fill_null(tags_code, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        missing = nulls if code_missing is None else nulls | np.asarray(code_missing, dtype=bool)
    else:
        codes = np.asarray(tags_code, dtype=np.int64)
        missing = None if code_missing is None else np.asarray(code_missing, dtype=bool)
    if missing is not None and missing.shape != codes.shape:
        raise ValueError(f"code_missing has shape {missing.shape}, tags_code has {codes.shape}")
    if sub.match_all:
        return np.ones(codes.shape, dtype=bool)
    wanted = np.fromiter(sub.codes, dtype=np.int32, count=len(sub.codes))
    out = np.isin(codes.astype(np.int32), wanted)  # astype wraps like Java's (int) cast
    if missing is not None:
        out |= missing
    return out


def encode_tags(tags: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> tuple[np.ndarray, list[Any]]:
    """A tag column as (indices, distinct values): nulls index one past the values. Encoded once per batch,
    every group's client check is then a lookup over the few distinct tags and a gather."""
    col = string_array(tags)
    if col.num_chunks != 1:
        col = pa.chunked_array([col.combine_chunks()], type=col.type)
    encoded = pc.dictionary_encode(col.chunk(0)) if len(col) else pa.array([], pa.dictionary(pa.int32(), col.type))
    values = encoded.dictionary.to_pylist()
    indices = pc.fill_null(encoded.indices, len(values)).to_numpy(zero_copy_only=False)
    return indices, values


def client_tag_match_encoded(sub: TagSubscription, encoded: tuple[np.ndarray, list[Any]]) -> np.ndarray:
    """client_tag_match_array over encode_tags output."""
    indices, values = encoded
    if not sub.tags:
        return np.ones(len(indices), dtype=bool)
    wanted = np.array([v in sub.tags for v in values] + [False], dtype=bool)  # a null tag never matches
    return wanted[indices]


def client_tag_match_array(sub: TagSubscription, tags: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> np.ndarray:
    """Vectorized ``client_tag_match`` over a string column (a null tag never matches a non-empty set)."""
    return client_tag_match_encoded(sub, encode_tags(tags))
