"""The tag hash code a consume-queue unit holds: Java's `String.hashCode` of the message's tag, as the broker's
`MessageExtBrokerInner.tagsString2tagsCode` computes it. An on-disk fact, so it lives with the formats: the
store writer writes it, the decoder derives it, the filters compare with it."""
from __future__ import annotations

import sys
from array import array
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MASK32 = 0xFFFFFFFF
_NUMPY_HASH_MIN_UNITS = 256  # longer strings are hashed with numpy instead of a Python loop


def int32(value: int) -> int:
    """Java ``(int) value``: keep the low 32 bits, as a signed int."""
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _utf16_units(s: str) -> array:
    """UTF-16 code units of ``s`` as Java holds them (non-BMP chars are two surrogates; lone ones pass)."""
    units = array("H")
    units.frombytes(s.encode("utf-16-le", "surrogatepass"))
    if sys.byteorder == "big":
        units.byteswap()
    return units


def java_hash(s: str) -> int:
    """Java ``String.hashCode()``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, wrapped to int32."""
    units = _utf16_units(s)
    if len(units) >= _NUMPY_HASH_MIN_UNITS:
        u = np.frombuffer(units, dtype=np.uint16).astype(np.uint32)
        powers = np.empty(len(u), dtype=np.uint32)
        powers[-1] = 1
        powers[:-1] = 31
        powers = np.cumprod(powers[::-1], dtype=np.uint32)[::-1]  # 31^(n-1-i) mod 2^32 (uint32 wraps)
        return int32(int((u * powers).sum(dtype=np.uint64)))
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return int32(h)


def tags_code(tag: str | None) -> int:
    """``MessageExtBrokerInner.tagsString2tagsCode``: 0 for null or "", else the sign-extended hash."""
    if tag is None or tag == "":
        return 0
    return java_hash(tag)


def string_array(values: pa.Array | pa.ChunkedArray | Sequence[Optional[str]]) -> pa.ChunkedArray:
    """Any pyarrow string-like array, chunked array or Python sequence, as a chunked array of strings."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values], type=values.type)
    elif not isinstance(values, pa.ChunkedArray):
        values = pa.chunked_array([pa.array(values, type=pa.string())])
    t = values.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        if not pa.types.is_string_view(t):
            raise TypeError(f"expected a string column, got {values.type}")
        t = pa.string()
    if values.type != t:
        values = values.cast(t)
    return values


def tags_code_array(tags: pa.Array | pa.ChunkedArray | Sequence[Optional[str]]) -> np.ndarray:
    """``tags_code`` of a whole string column (int64); nulls and "" give 0.

    Tags have few distinct values, so each distinct value is hashed once (dictionary-encode, then map).
    """
    col = string_array(tags)
    cache: dict = {}
    parts = []
    for chunk in col.chunks:
        encoded = pc.dictionary_encode(chunk)
        values = encoded.dictionary.to_pylist()
        codes = np.empty(len(values) + 1, dtype=np.int64)
        for i, v in enumerate(values):
            code = cache.get(v)
            if code is None:
                code = cache[v] = tags_code(v)
            codes[i] = code
        codes[-1] = 0  # where nulls point
        indices = pc.fill_null(encoded.indices, len(values)).to_numpy(zero_copy_only=False)
        parts.append(codes[indices])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
