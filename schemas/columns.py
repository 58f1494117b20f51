"""Vectorized helpers that turn byte positions in a buffer into numpy and Arrow columns."""
import numpy as np
import pyarrow as pa


def gather(buf, pos, dtype):
    """Values of a big-endian `dtype` at byte positions `pos` of `buf`, in native byte order."""
    dt = np.dtype(dtype)
    if len(pos) == 0:
        return np.zeros(0, dtype=dt.newbyteorder("="))
    rows = buf[pos[:, None] + np.arange(dt.itemsize)]
    return rows.view(dt).reshape(-1).astype(dt.newbyteorder("="))


def gather_struct(buf, pos, dtype):
    """A structured big-endian record at each position: {field: native numpy array}."""
    dt = np.dtype(dtype)
    rows = buf[pos[:, None] + np.arange(dt.itemsize)] if len(pos) else np.zeros((0, dt.itemsize), np.uint8)
    recs = rows.view(dt).reshape(-1)
    return {name: recs[name].astype(recs.dtype[name].newbyteorder("=")) for name in dt.names}


def gather_bytes(buf, pos, width):
    """A (len(pos), width) uint8 matrix of the bytes at each position."""
    return buf[pos[:, None] + np.arange(width)] if len(pos) else np.zeros((0, width), np.uint8)


def slices_to_binary(buf, starts, lengths, type_=pa.binary()):
    """Arrow binary (or string) array of buf[starts[i]:starts[i]+lengths[i]]: one mask, no per-row Python.

    The slices must not overlap and must be in increasing order (true for fields of consecutive records).
    """
    n = len(starts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31 - 1:
        raise ValueError("slices exceed 2 GiB: use a smaller split")
    if n == 0 or offsets[-1] == 0:
        data = np.zeros(0, np.uint8)
    else:
        diff = np.zeros(len(buf) + 1, dtype=np.int8)
        diff[starts] += 1
        diff[starts + lengths] -= 1  # ends are unique (slices do not overlap); an end may be a start
        mask = np.cumsum(diff[:-1], dtype=np.int8).view(np.bool_)
        data = buf[mask]
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint16)


def hex_upper(matrix):
    """Uppercase hex of each row of a uint8 matrix, as a numpy fixed-width bytes array."""
    n, width = matrix.shape
    return np.ascontiguousarray(_HEX[matrix]).view(f"S{2 * width}").reshape(n)


def to_utf8(binary):
    """Cast a binary array to string; invalid UTF-8 is replaced as Java's `new String(bytes, UTF_8)` does."""
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in binary.to_pylist()],
                        pa.string())
