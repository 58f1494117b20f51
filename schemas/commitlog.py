"""Decode commit-log records from any byte range that starts on a record boundary.

Two steps: find record starts (walk the 8-byte size+magic headers, or take them from consume-queue
units), then decode every field of all records in one compiled pass (schemas/kernels.py) and Arrow
`take` for the long fields (bodies).
"""
import struct
import zlib

import numpy as np
import pyarrow as pa

from schemas import kernels as K
from schemas import layout as L
from schemas.columns import gather_bytes, slices_to_binary, to_utf8
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


def decode_records(buf, starts, base_offset=0, path="commitlog", with_body=True, raw=False, fields=None):
    """An Arrow RecordBatch (MESSAGE_SCHEMA) of the records starting at `starts` (relative to buf).

    One compiled pass finds every field of every record (`kernels.record_fields`); variable fields are then
    copied once into Arrow buffers. raw=True adds what decoding loses, for byte-exact re-encoding:
    `stored_body` (as on disk) and `properties_raw` (the blob, with the pieces RocketMQ drops).
    fields: `kernels.record_fields(buf, starts)` when the caller already has it."""
    from filtering.tags import tags_code_array
    from schemas.arrow_schemas import MESSAGE_SCHEMA

    buf = np.asarray(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    f = K.record_fields(buf, starts) if fields is None else fields
    _raise_first_error(f, starts, base_offset, path)
    sys_flag = f["sys_flag"]
    born_v6 = (sys_flag & L.BORNHOST_V6) != 0
    store_v6 = (sys_flag & L.STOREHOST_V6) != 0
    properties_raw = to_utf8(slices_to_binary(buf, f["properties_at"], f["properties_length"]))
    properties, named = parse_properties(properties_raw, extract=("TAGS", "KEYS"))
    stored_body = slices_to_binary(buf, f["body_at"], f["body_length"]) if (with_body or raw) else None
    tags = named["TAGS"]
    columns = {
        "topic": to_utf8(slices_to_binary(buf, f["topic_at"], f["topic_length"])),
        "queue_id": f["queue_id"],
        "queue_offset": f["queue_offset"],
        "commitlog_offset": base_offset + starts,
        "store_size": f["total_size"],
        "sys_flag": sys_flag,
        "flag": f["flag"],
        "born_timestamp": f["born_timestamp"],
        "born_host": _hosts(buf, f["born_at"], born_v6, f["born_port"], f["born_v4_key"]),
        "store_timestamp": f["store_timestamp"],
        "store_host": _hosts(buf, f["store_at"], store_v6, f["store_port"], f["store_v4_key"]),
        "msg_id": K.msg_ids(buf, f, store_v6, starts + L.PHYSICAL_OFFSET_AT),
        "reconsume_times": f["reconsume_times"],
        "prepared_transaction_offset": f["prepared_transaction_offset"],
        "body_crc": f["body_crc"],
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


_ERRORS = (
    (K.BAD_MAGIC, lambda f, i: f"bad magic code {int(f['magic'][i]):#010x}"),
    (K.BAD_SIZE, lambda f, i: f"record size {int(f['total_size'][i])} runs past its range"),
    (K.BAD_BODY, lambda f, i: "bad body length"),
    (K.BAD_TOPIC, lambda f, i: "bad topic length"),
    (K.BAD_PROPERTIES, lambda f, i: "bad properties length (record does not end where totalSize says)"),
)


def _raise_first_error(fields, starts, base_offset, path):
    """CorruptStoreError for the first record failing the earliest check (checks apply in record order)."""
    err = fields["error"]
    if not err.any():
        return
    for code, reason in _ERRORS:
        bad = err == code
        if bad.any():
            i = int(np.argmax(bad))
            raise CorruptStoreError(path, base_offset + int(starts[i]), reason(fields, i))


def _hosts(buf, at, v6, ports, v4_keys):
    """'ip:port' texts: IPv4 by a compiled loop over the keys; IPv6 (rare) as Java prints it, per distinct address."""
    texts = K.ipv4_hosts(v4_keys)
    if not v6.any():
        return texts
    rows = np.flatnonzero(v6)
    return K.merge_rows(texts, rows, format_hosts(gather_bytes(buf, at[rows], 16), np.ones(len(rows), bool),
                                                  ports[rows]))


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
