"""RocketMQ's bloom filter (``filter.util.BloomFilter`` / ``BitsArray``), bit for bit.

The broker ORs the bits of every SQL92 registration a message matches into the message's CQ-ext bitmap
(``CommitLogDispatcherCalcBitMap``) and, at pull time, lets a message through stage 1 only when all of the
pulling group's bits are set (``isHit``). Replaying that needs the same positions and the same byte layout.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering.tags import int32
from schemas.columns import distinct_rows

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _java_int_arg(name: str, value) -> int:
    """A Java ``int`` parameter: integral and within 32 bits."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = int(value)
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{name} = {value} does not fit in a Java int")
    return value


def _d2i(x: float) -> int:
    """Java ``(int)`` of a double: truncate, saturate at the int range (NaN gives 0)."""
    if math.isnan(x):
        return 0
    return int(max(_INT_MIN, min(_INT_MAX, math.trunc(x))))


def _java_utf8(s: str) -> bytes:
    """``String.getBytes(UTF_8)``: surrogate pairs join, a lone surrogate becomes ``?``."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        joined = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def _check_positions(bit_positions, m: int) -> list:
    """Positions as ints, each in [0, m): BitsArray throws on anything else (or indexes past the end)."""
    out = []
    for p in bit_positions:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise TypeError(f"bit position must be an int, not {type(p).__name__}")
        p = int(p)
        if p < 0:
            raise ValueError("BitPos is less than 0")
        if p >= m:
            raise ValueError(f"BitPos {p} is out of range for {m} bits")
        out.append(p)
    return out


# The broker's defaults (BrokerConfig.maxErrorRateOfBloomFilter, expectConsumerNumUseFilter): the bloom filter
# every SQL92 registration's bits come from unless the broker was configured otherwise.
BROKER_BLOOM_F, BROKER_BLOOM_N = 20, 32


class BloomFilter:
    """``BloomFilter.createByFn(f, n)``: f = error rate in percent, n = expected number of registrations."""

    __slots__ = ("f", "n", "k", "m")

    def __init__(self, f: int = BROKER_BLOOM_F, n: int = BROKER_BLOOM_N) -> None:
        f = _java_int_arg("f", f)
        n = _java_int_arg("n", n)
        if f < 1 or f >= 100:
            raise ValueError("f must be greater or equal than 1 and less than 100")
        if n < 1:
            raise ValueError("n must be greater than 0")
        error_rate = f / 100.0
        # Same double operations, in the same order, as the Java constructor.
        k = _d2i(math.ceil(math.log(error_rate) / math.log(0.5)))
        if k < 1:
            raise ValueError("Hash function num is less than 1, maybe you should change the value of "
                             "error rate or bit num!")
        m = _d2i(math.ceil(n * (math.log(1 / error_rate) / math.log(2)) * (math.log(math.e) / math.log(2))))
        self.f, self.n, self.k = f, n, k
        self.m = _d2i(8 * math.ceil(m / 8.0))

    def __repr__(self) -> str:
        return f"BloomFilter(f={self.f}, n={self.n}, k={self.k}, m={self.m})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BloomFilter) and (self.f, self.n, self.k, self.m) == (
            other.f, other.n, other.k, other.m)

    def __hash__(self) -> int:
        return hash((self.f, self.n, self.k, self.m))

    def bit_positions(self, s: str) -> list:
        """``calcBitPositions``: k positions from murmur3_x64_128 (Kirsch-Mitzenmacher double hashing)."""
        h64 = mmh3.hash64(_java_utf8(s), 0, True, True)[0]  # Guava HashCode.asLong(): first 8 bytes, LE
        hash1, hash2 = int32(h64), int32(h64 >> 32)
        out = []
        for i in range(1, self.k + 1):
            c = int32(hash1 + i * hash2)
            if c < 0:
                c = ~c
            out.append(c % self.m)
        return out

    def registration_bits(self, group: str, topic: str) -> list:
        """Bits of a SQL92 registration, as ``ConsumerFilterManager.register`` computes them."""
        return self.bit_positions(group + "#" + topic)

    def empty_bitmap(self) -> bytearray:
        """An all-zero bitmap in the CQ-ext layout (m // 8 bytes)."""
        return bytearray(self.m // 8)

    def _check_bitmap(self, bitmap) -> None:
        """``BloomFilter.check``: the bitmap must hold exactly m bits."""
        if len(bitmap) * 8 != self.m:
            raise ValueError(f"Length({len(bitmap) * 8}) of bits in BitsArray is not equal to {self.m}!")

    def hash_to(self, bit_positions: Sequence[int], bitmap: bytearray) -> None:
        """``hashTo``: set the given bits (bit p is byte p // 8, mask 1 << p % 8) in place."""
        self._check_bitmap(bitmap)
        for p in _check_positions(bit_positions, self.m):  # all checked before any bit is set
            bitmap[p >> 3] |= 1 << (p & 7)

    def is_hit(self, bit_positions: Sequence[int], bitmap: bytes | bytearray) -> bool:
        """``isHit``: all given bits are set. Java reads ``bitPositions[0]`` first, so none at all throws."""
        self._check_bitmap(bitmap)
        positions = _check_positions(bit_positions, self.m)
        if not positions:
            raise ValueError("no bit positions to check (Java: ArrayIndexOutOfBoundsException)")
        return all(bitmap[p >> 3] & (1 << (p & 7)) for p in positions)


def _position_mask(bit_positions, m: int) -> np.ndarray:
    """The m // 8 byte mask of one registration's bits."""
    bits = np.zeros(m, dtype=bool)
    bits[_check_positions(bit_positions, m)] = True
    return np.packbits(bits, bitorder="little")


def _check_m(m: int) -> int:
    m = _java_int_arg("m", m)
    if m < 8 or m % 8:
        raise ValueError(f"m = {m} must be a positive multiple of 8")
    return m


def or_bits(match: Any, bit_positions: Sequence[Sequence[int]], m: int) -> np.ndarray:
    """Dispatch bitmaps: row i is the OR of the bits of every registration r with ``match[i, r]``.

    ``match`` is (N, R) bool, ``bit_positions`` holds R position lists; the result is (N, m // 8) uint8.
    """
    m = _check_m(m)
    match = np.asarray(match, dtype=bool)
    if match.ndim != 2 or match.shape[1] != len(bit_positions):
        raise ValueError(f"match has shape {match.shape}, expected (N, {len(bit_positions)})")
    n, regs = match.shape
    if n > 256 and 0 < regs <= 16:  # rows share few match patterns: one bitmap per pattern, then a gather
        patterns, index = distinct_rows(match)
        if len(patterns) * 4 < n:
            return or_bits(patterns, bit_positions, m)[index]
    out = np.zeros((n, m // 8), dtype=np.uint8)
    for r, positions in enumerate(bit_positions):  # one numpy pass per registration, none per row
        out |= match[:, r, None].astype(np.uint8) * _position_mask(positions, m)
    return out


def is_hit_array(bitmaps: Any, bit_positions: Sequence[int], m: int | None = None) -> np.ndarray:
    """Vectorized ``is_hit`` of one registration over an (N, m // 8) uint8 bitmap matrix."""
    bitmaps = np.asarray(bitmaps)
    if bitmaps.ndim != 2 or bitmaps.dtype != np.uint8:
        raise ValueError(f"bitmaps must be a 2-d uint8 matrix, got {bitmaps.dtype} {bitmaps.shape}")
    width = bitmaps.shape[1] * 8
    if m is not None and _check_m(m) != width:
        raise ValueError(f"Length({width}) of bits in BitsArray is not equal to {m}!")
    if len(bit_positions) == 0:
        raise ValueError("no bit positions to check (Java: ArrayIndexOutOfBoundsException)")
    mask = _position_mask(bit_positions, width)
    hit = np.ones(len(bitmaps), dtype=bool)
    for byte in np.flatnonzero(mask):  # k bits touch at most k bytes: test those columns, not whole rows
        hit &= (bitmaps[:, byte] & mask[byte]) == mask[byte]
    return hit


def bitmap_matrix(column: pa.Array | pa.ChunkedArray | Sequence[bytes | None],
                  m: int) -> tuple[np.ndarray, np.ndarray]:
    """A binary / fixed_size_binary column of bitmaps as ((N, m // 8) uint8, valid (N,) bool).

    A row is valid only when it holds exactly m // 8 bytes. Null, empty (``bitMapSize`` 0) and other
    lengths give a zero row and ``valid`` False: the broker lets such a message through stage 1 unchecked.
    """
    width = _check_m(m) // 8
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], type=column.type)
    elif not isinstance(column, pa.Array):
        column = pa.array(column, type=pa.binary())
    t = column.type
    if pa.types.is_binary_view(t):
        column, t = column.cast(pa.binary()), pa.binary()
    n = len(column)
    out = np.zeros((n, width), dtype=np.uint8)
    if n == 0:
        return out, np.zeros(0, dtype=bool)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_binary(t):
        if t.byte_width != width:
            return out, np.zeros(n, dtype=bool)
        data = np.frombuffer(column.buffers()[1], dtype=np.uint8)
        start = column.offset * width
        out[:] = data[start:start + n * width].reshape(n, width)
        out[~valid] = 0
        return out, valid
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        raise TypeError(f"expected a binary column, got {t}")
    lengths = pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False)
    valid &= lengths == width
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(t) else np.int32)
    starts = offsets[column.offset:column.offset + n][valid].astype(np.int64)
    if len(starts):
        raw = np.frombuffer(column.buffers()[2], dtype=np.uint8)
        first = int(starts[0])
        if len(starts) == n and int(starts[-1]) == first + (n - 1) * width:  # all rows, back to back
            out[:] = raw[first:first + n * width].reshape(n, width)
        else:
            out[valid] = raw[starts[:, None] + np.arange(width)]
    return out, valid
