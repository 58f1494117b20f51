"""Decode commit-log records from any byte range that starts on a record boundary.

Two steps: find record starts (walk the 8-byte size+magic headers, or take them from consume-queue
units), then decode every field of all records at once with numpy gathers and Arrow string kernels.
"""
import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import layout as L
from schemas.columns import gather, gather_bytes, gather_struct, hex_upper, slices_to_binary, to_utf8
from schemas.errors import CorruptStoreError, UnsupportedStoreError
from schemas.hosts import format_hosts
from schemas.properties import parse_properties

_SIZE_MAGIC = struct.Struct(">ii")

END_BLANK = "blank"  # a blank end-of-file record: the rest of the file is unused
END_ZERO = "zero"  # totalSize 0: nothing more was written
END_LIMIT = "limit"  # the range ended on a record boundary


def walk_records(buf, base_offset=0, path="commitlog", limit=None):
    """Relative start positions of the message records in buf[:limit], and how the walk ended.

    Returns (starts: int64 array, end_position, end_kind). Raises CorruptStoreError on a bad magic code or
    a record that runs past the range."""
    data = buf.data if isinstance(buf, np.ndarray) else memoryview(buf)
    limit = len(buf) if limit is None else limit
    starts = []
    pos = 0
    unpack = _SIZE_MAGIC.unpack_from
    while pos + 8 <= limit:
        size, magic = unpack(data, pos)
        if magic == L.MAGIC_V1 or magic == L.MAGIC_V2:
            if size < L.MIN_RECORD_SIZE or pos + size > limit:
                raise CorruptStoreError(path, base_offset + pos,
                                        f"record size {size} runs past the end of the range "
                                        f"(ends at {base_offset + limit})" if size >= L.MIN_RECORD_SIZE
                                        else f"record size {size} is smaller than any record")
            starts.append(pos)
            pos += size
        elif magic == L.BLANK_MAGIC:
            return np.array(starts, dtype=np.int64), pos, END_BLANK
        elif size == 0 and magic == 0:
            return np.array(starts, dtype=np.int64), pos, END_ZERO
        else:
            raise CorruptStoreError(path, base_offset + pos, f"bad magic code {magic:#010x} (size {size})")
    if pos < limit and not np.any(np.asarray(buf[pos:limit])):
        return np.array(starts, dtype=np.int64), pos, END_ZERO
    if pos < limit:
        raise CorruptStoreError(path, base_offset + pos, f"truncated record header ({limit - pos} bytes left)")
    return np.array(starts, dtype=np.int64), pos, END_LIMIT


def decode_records(buf, starts, base_offset=0, path="commitlog", with_body=True, raw=False):
    """An Arrow RecordBatch (MESSAGE_SCHEMA) of the records starting at `starts` (relative to buf).

    raw=True adds what decoding loses, for byte-exact re-encoding: `stored_body` (as on disk) and
    `properties_raw` (the blob, with the pieces RocketMQ drops, such as empty values)."""
    from filtering.tags import tags_code_array
    from schemas.arrow_schemas import MESSAGE_SCHEMA

    buf = np.asarray(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    head = gather_struct(buf, starts, L.HEAD_DTYPE)
    _check_heads(head, starts, base_offset, path, len(buf))
    sys_flag = head["sys_flag"]
    born_v6 = (sys_flag & L.BORNHOST_V6) != 0
    store_v6 = (sys_flag & L.STOREHOST_V6) != 0
    born_at = starts + L.HEAD_SIZE
    store_ts_at = born_at + np.where(born_v6, L.HOST_V6_SIZE, L.HOST_V4_SIZE)
    store_at = store_ts_at + 8
    mid_at = store_at + np.where(store_v6, L.HOST_V6_SIZE, L.HOST_V4_SIZE)
    mid = gather_struct(buf, mid_at, L.MID_DTYPE)
    body_len = mid["body_length"].astype(np.int64)
    body_at = mid_at + L.MID_DTYPE.itemsize
    ends = starts + head["total_size"]
    _check_within(body_len >= 0, body_at + body_len + 1 <= ends, starts, base_offset, path, "body length")
    topic_len_at = body_at + body_len
    v2 = head["magic"] == L.MAGIC_V2
    topic_len = np.where(v2, _u16(buf, topic_len_at, v2), gather(buf, topic_len_at, ">i1").astype(np.int64))
    topic_at = topic_len_at + np.where(v2, 2, 1)
    _check_within(topic_len >= 0, topic_at + topic_len + 2 <= ends, starts, base_offset, path, "topic length")
    props_len_at = topic_at + topic_len
    props_len = gather(buf, props_len_at, ">i2").astype(np.int64)
    props_at = props_len_at + 2
    _check_within(props_len >= 0, props_at + props_len == ends, starts, base_offset, path,
                  "properties length (record does not end where totalSize says)")

    properties_raw = to_utf8(slices_to_binary(buf, props_at, props_len))
    properties, named = parse_properties(properties_raw, extract=("TAGS", "KEYS"))
    stored_body = slices_to_binary(buf, body_at, body_len) if (with_body or raw) else None
    tags = named["TAGS"]
    store_port = gather(buf, store_at + np.where(store_v6, 16, 4), ">i4")
    born_port = gather(buf, born_at + np.where(born_v6, 16, 4), ">i4")
    columns = {
        "topic": to_utf8(slices_to_binary(buf, topic_at, topic_len)),
        "queue_id": head["queue_id"],
        "queue_offset": head["queue_offset"],
        "commitlog_offset": base_offset + starts,
        "store_size": head["total_size"],
        "sys_flag": sys_flag,
        "flag": head["flag"],
        "born_timestamp": head["born_timestamp"],
        "born_host": format_hosts(_ip_rows(buf, born_at, born_v6), born_v6, born_port),
        "store_timestamp": gather(buf, store_ts_at, ">i8"),
        "store_host": format_hosts(_ip_rows(buf, store_at, store_v6), store_v6, store_port),
        "msg_id": _msg_ids(buf, store_at, store_v6, head["physical_offset"]),
        "reconsume_times": mid["reconsume_times"],
        "prepared_transaction_offset": mid["prepared_transaction_offset"],
        "body_crc": head["body_crc"],
        "body": (_bodies(stored_body, sys_flag, base_offset + starts, path)
                 if with_body else pa.nulls(len(starts), pa.binary())),
        "tags_code": tags_code_array(tags),
        "properties": properties,
        "tags": tags,
        "keys": named["KEYS"],
    }
    schema = MESSAGE_SCHEMA
    if raw:
        columns.update(stored_body=stored_body, properties_raw=properties_raw)
        schema = schema.append(pa.field("stored_body", pa.binary())).append(pa.field("properties_raw", pa.string()))
    return pa.RecordBatch.from_arrays([pa.array(columns[f.name], f.type) if isinstance(columns[f.name], np.ndarray)
                                       else columns[f.name].cast(f.type) for f in schema], schema=schema)


def _u16(buf, pos, where):
    out = np.zeros(len(pos), dtype=np.int64)
    if where.any():
        out[where] = gather(buf, pos[where], ">u2")
    return out


def _check_heads(head, starts, base_offset, path, buf_len):
    bad = ~np.isin(head["magic"], L.MESSAGE_MAGICS)
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptStoreError(path, base_offset + int(starts[i]), f"bad magic code {int(head['magic'][i]):#010x}")
    over = (head["total_size"] < L.MIN_RECORD_SIZE) | (starts + head["total_size"] > buf_len)
    if over.any():
        i = int(np.argmax(over))
        raise CorruptStoreError(path, base_offset + int(starts[i]),
                                f"record size {int(head['total_size'][i])} runs past its range")


def _check_within(ok_sign, ok_bound, starts, base_offset, path, what):
    bad = ~(ok_sign & ok_bound)
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptStoreError(path, base_offset + int(starts[i]), f"bad {what}")


def _ip_rows(buf, at, v6):
    """(N, 16) address bytes: IPv6 rows whole, IPv4 rows in the first 4 bytes."""
    rows = np.zeros((len(at), 16), dtype=np.uint8)
    if (~v6).any():
        rows[~v6, :4] = gather_bytes(buf, at[~v6], 4)
    if v6.any():
        rows[v6] = gather_bytes(buf, at[v6], 16)
    return rows


def _msg_ids(buf, store_at, store_v6, physical_offset):
    """offsetMsgId: uppercase hex of store host ip + port (as stored) + physical offset."""
    n = len(store_at)
    off_bytes = physical_offset.astype(">i8").view(np.uint8).reshape(n, 8)
    out = pa.array(hex_upper(np.concatenate([gather_bytes(buf, store_at, 8), off_bytes], axis=1)), pa.binary())
    if store_v6.any():
        v6 = np.concatenate([gather_bytes(buf, store_at, 20), off_bytes], axis=1)
        out = pc.if_else(pa.array(store_v6), pa.array(hex_upper(v6), pa.binary()), out)
    return out.cast(pa.string())


def _bodies(stored, sys_flag, offsets, path):
    """Decompressed bodies: only compressed records leave Arrow (zlib, or LZ4/ZSTD frames since 4.9.4)."""
    compressed = (sys_flag & L.COMPRESSED) != 0
    if not compressed.any():
        return stored
    values = stored.to_pylist()
    for i in np.flatnonzero(compressed):
        ctype = (int(sys_flag[i]) & L.COMPRESSION_TYPE_MASK) >> L.COMPRESSION_TYPE_SHIFT
        values[i] = decompress(values[i], ctype, path, int(offsets[i]))
    return pa.array(values, pa.binary())


def decompress(data, ctype, path="commitlog", offset=None):
    """RocketMQ's CompressorFactory: type 0 (pre-4.9.4) and 3 are zlib; 1 is an LZ4 frame; 2 a ZSTD frame."""
    try:
        if ctype in (0, L.COMPRESSION_ZLIB):
            return zlib.decompress(data)
        if ctype == L.COMPRESSION_LZ4:
            import lz4.frame
            return lz4.frame.decompress(data)
        if ctype == L.COMPRESSION_ZSTD:
            import zstandard
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except Exception as exc:  # noqa: BLE001 - every codec has its own error class
        raise CorruptStoreError(path, offset, f"body does not decompress (type {ctype}): {exc}") from exc
    raise UnsupportedStoreError(f"{path} at offset {offset}: unknown compression type {ctype}")
