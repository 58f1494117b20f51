"""Vectorized helpers that turn byte positions in a buffer into numpy and Arrow columns, and bool matrices
into their few distinct rows."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, index) of an (N, k) bool matrix with k <= 62: its distinct rows, a (P, k) bool matrix, and
    the index of each row's pattern in it. Such rows (the registrations a message matches, the groups
    that receive it) repeat a lot, so work done per pattern and then gathered per row is cheap."""
    n, k = matrix.shape
    if k > 62:
        raise ValueError(f"{k} columns: a row's bit code needs k <= 62")
    codes = matrix.astype(np.int64) @ (np.int64(1) << np.arange(k, dtype=np.int64))
    if k <= 16:  # a table over every possible code: no sort
        seen = np.zeros(1 << k, dtype=bool)
        seen[codes] = True
        patterns = np.flatnonzero(seen)
        lookup = np.zeros(1 << k, dtype=np.int64)
        lookup[patterns] = np.arange(len(patterns))
        index = lookup[codes]
    else:
        patterns, index = np.unique(codes, return_inverse=True)
    return ((patterns[:, None] >> np.arange(k)) & 1).astype(bool), index.reshape(-1)


def gather_bytes(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """A (len(pos), width) uint8 matrix of the bytes at each position (rows of a zero-copy window view)."""
    if len(pos) == 0 or len(buf) < width:
        if len(pos) == 0:
            return np.zeros((0, width), np.uint8)
        return buf[np.asarray(pos)[:, None] + np.arange(width)]  # raises IndexError: past the buffer
    return np.lib.stride_tricks.sliding_window_view(buf, width)[pos]


def gather_struct(buf: np.ndarray, pos: np.ndarray, dtype: Any) -> dict[str, np.ndarray]:
    """A structured big-endian record at each position: {field: native numpy array}."""
    dt = np.dtype(dtype)
    recs = np.ascontiguousarray(gather_bytes(buf, pos, dt.itemsize)).view(dt).reshape(-1)
    return {name: recs[name].astype(recs.dtype[name].newbyteorder("=")) for name in dt.names}


def slices_to_binary(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                     type_: pa.DataType = pa.binary()) -> pa.Array:
    """Arrow binary (or string) array of buf[starts[i]:starts[i]+lengths[i]], with no per-row Python.

    The slices (non-overlapping) and the gaps between them become one zero-copy Arrow array over the
    buffer; `take` of every other element then copies just the slices, in C++."""
    n = len(starts)
    if n == 0:
        return pa.array([], type_)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    order = None
    if n > 1 and (np.diff(starts) < 0).any():
        order = np.argsort(starts, kind="stable")
        starts, lengths = starts[order], lengths[order]
    ends = starts + lengths
    base = int(starts[0])
    if int(ends[-1]) - base >= 2**31 - 1:
        raise ValueError("slices span 2 GiB or more: use a smaller split")
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = starts - base
    offsets[1::2] = ends - base
    data = pa.py_buffer(np.ascontiguousarray(buf[base:int(ends[-1])]))
    interleaved = pa.Array.from_buffers(type_, 2 * n - 1, [None, pa.py_buffer(offsets), data])
    if order is None:
        return interleaved.take(pa.array(np.arange(0, 2 * n - 1, 2)))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return interleaved.take(pa.array(2 * rank))  # straight into the caller's order: one copy


def to_utf8(binary: pa.Array) -> pa.Array:
    """Cast a binary array to string; invalid UTF-8 is replaced as Java's `new String(bytes, UTF_8)` does."""
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in binary.to_pylist()],
                        pa.string())


def queue_index(table: pa.Table, queues: Sequence[tuple[Any, ...]]) -> np.ndarray:
    """Per row of a table with `topic` and `queue_id` columns, the index in `queues` ((topic, queue_id, ...)
    tuples) of its queue (the last where one repeats), -1 where it is none of them: one dictionary encoding, one
    integer key per row and per queue, and a sorted lookup: no string per row, no pass per queue."""
    out = np.full(table.num_rows, -1, np.int64)
    if not queues or not table.num_rows:
        return out
    encoded = pc.dictionary_encode(one_array(table.column("topic")))
    names = {name: k for k, name in enumerate(encoded.dictionary.to_pylist())}
    wanted = [(names[topic], int(qid), k) for k, (topic, qid, *_) in enumerate(queues) if topic in names]
    if not wanted:
        return out
    topic_ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    queue_ids = one_array(table.column("queue_id")).to_numpy(zero_copy_only=False).astype(np.int64)
    keys = _queue_keys(topic_ids, queue_ids)
    known = np.array(wanted, dtype=np.int64)
    order = np.argsort(_queue_keys(known[:, 0], known[:, 1]), kind="stable")
    sorted_keys, index = _queue_keys(known[order, 0], known[order, 1]), known[order, 2]
    at = np.searchsorted(sorted_keys, keys, side="right") - 1  # the last of equal keys: the last queue given
    hit = (at >= 0) & (sorted_keys[np.maximum(at, 0)] == keys)
    out[hit] = index[at[hit]]
    return out


def _queue_keys(topic_ids, queue_ids):
    """One int64 per (topic number, queue id): queue ids are Java ints."""
    return (topic_ids << 32) + (queue_ids + (1 << 31))


def one_array(column: pa.ChunkedArray) -> pa.Array:
    """A ChunkedArray as one Array: its only chunk as is (combine_chunks would copy it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def batch_bounds(sizes: np.ndarray, max_rows: int, max_bytes: int) -> np.ndarray:
    """(lo, hi) row ranges, in order, that cover `sizes`: each of at most max_rows rows and max_bytes in all,
    or of one row larger than that alone. An (n, 2) array: a search per range, not a step per row."""
    ends = np.cumsum(sizes, dtype=np.int64)
    bounds, lo = [], 0
    while lo < len(ends):
        fit = int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + max_bytes, side="right"))
        hi = min(max(fit, lo + 1), lo + max_rows)
        bounds.append((lo, hi))
        lo = hi
    return np.array(bounds, dtype=np.int64).reshape(-1, 2)
