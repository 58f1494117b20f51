"""Decode commit-log records from any byte range that starts on a record boundary.

Two steps: find record starts (walk the 8-byte size+magic headers, or take them from consume-queue
units), then decode every field of all records in one compiled pass (schemas/kernels.py) and Arrow
`take` for the long fields (bodies).
"""
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import kernels as K
from schemas.arrow_schemas import CODED_PROPERTIES, MESSAGE_SCHEMA
from schemas.columns import gather_bytes, slices_to_binary, to_utf8
from schemas.errors import CorruptStoreError, UnsupportedStoreError
from schemas.log import layout as L
from schemas.log.hosts import format_hosts
from schemas.log.inner_batch import is_inner_batch
from schemas.log.properties import NAMED, parse_properties, parse_properties_at
from schemas.queues.tag_codes import tags_code_array

_SIZE_MAGIC = struct.Struct(">ii")

END_BLANK = "blank"  # a blank end-of-file record: the rest of the file is unused
END_ZERO = "zero"  # totalSize 0: nothing more was written
END_LIMIT = "limit"  # the range ended on a record boundary


def walk_records(buf: np.ndarray | bytes, base_offset: int = 0, path: str = "commitlog",
                 limit: int | None = None) -> tuple[np.ndarray, int, str]:
    """Relative start positions of the message records in buf[:limit], and how the walk ended.

    Returns (starts: int64 array, end_position, end_kind). Raises CorruptStoreError on a bad magic code or
    a record that runs past the range."""
    buf = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.view(np.uint8).reshape(-1)
    limit = len(buf) if limit is None else min(limit, len(buf))
    starts, pos, how = K.walk_headers(buf, limit)  # compiled: the hops only; the errors are named here
    if how == K.WALK_BAD_SIZE:
        size = int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)
        raise CorruptStoreError(path, base_offset + pos,
                                f"record size {size} runs past the end of the range "
                                f"(ends at {base_offset + limit})" if size >= L.MIN_RECORD_SIZE
                                else f"record size {size} is smaller than any record")
    if how == K.WALK_BAD_MAGIC:
        size, magic = _SIZE_MAGIC.unpack_from(bytes(buf[pos:pos + 8]))
        raise CorruptStoreError(path, base_offset + pos, f"bad magic code {magic:#010x} (size {size})")
    if how == K.WALK_BLANK:
        return starts, pos, END_BLANK
    if how == K.WALK_ZERO:
        return starts, pos, END_ZERO
    if pos < limit and not np.any(buf[pos:limit]):
        return starts, pos, END_ZERO
    if pos < limit:
        raise CorruptStoreError(path, base_offset + pos, f"truncated record header ({limit - pos} bytes left)")
    return starts, pos, END_LIMIT


def decode_records(buf: np.ndarray | bytes, starts: np.ndarray | Sequence[int], base_offset: int = 0,
                   path: str = "commitlog", with_body: bool = True, raw: bool = False,
                   fields: Mapping[str, np.ndarray] | None = None, max_body: int | None = None, inflate: bool = True,
                   coded: Iterable[str] = ()) -> pa.RecordBatch:
    """An Arrow RecordBatch (MESSAGE_SCHEMA) of the records starting at `starts` (relative to buf).

    One compiled pass finds every field of every record (`kernels.record_fields`); variable fields are then
    copied once into Arrow buffers. raw=True adds what decoding loses, for byte-exact re-encoding:
    `stored_body` (as on disk) and `properties_raw` (the blob, with the pieces RocketMQ drops).
    fields: `kernels.record_fields(buf, starts)` when the caller already has it. A compressed body that
    inflates beyond max_body bytes is null (never inflated whole: see decompress). inflate=False leaves
    compressed bodies as stored, for a caller that inflates them itself (jobs/task/split_decode.py, a budget of
    bytes at a time). coded: property names (those SQL92 reads) also given as dictionary columns, fields of one
    struct column CODED_PROPERTIES appended to the schema, encoded in the properties' split
    (schemas/log/properties.py)."""
    buf = np.asarray(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    f = K.record_fields(buf, starts) if fields is None else fields
    _raise_first_error(f, starts, base_offset, path)
    sys_flag = f["sys_flag"]
    born_v6 = (sys_flag & L.BORNHOST_V6) != 0
    store_v6 = (sys_flag & L.STOREHOST_V6) != 0
    if raw:
        properties_raw = to_utf8(slices_to_binary(buf, f["properties_at"], f["properties_length"]))
        properties, named, *dictionaries = parse_properties(properties_raw, NAMED, tuple(coded))
    else:  # split where they lie in buf: no string column of the blobs
        properties, named, *dictionaries = parse_properties_at(buf, f["properties_at"], f["properties_length"],
                                                               NAMED, tuple(coded))
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
        "body": ((_bodies(stored_body, sys_flag, base_offset + starts, path, max_body) if inflate else stored_body)
                 if with_body else _inner_batch_bodies(buf, f, sys_flag)),
        "tags_code": tags_code_array(tags),
        "properties": properties,
        "tags": tags,
        "keys": named["KEYS"],
        "uniq_key": named["UNIQ_KEY"],
    }
    schema = MESSAGE_SCHEMA
    if raw:
        columns.update(stored_body=stored_body, properties_raw=properties_raw)
        schema = schema.append(pa.field("stored_body", pa.binary())).append(pa.field("properties_raw", pa.string()))
    arrays = [pa.array(columns[f.name], f.type) if isinstance(columns[f.name], np.ndarray)
              else columns[f.name].cast(f.type) for f in schema]
    if dictionaries:
        arrays.append(pa.StructArray.from_arrays(list(dictionaries[0].values()), list(dictionaries[0])))
        schema = schema.append(pa.field(CODED_PROPERTIES, arrays[-1].type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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


def _inner_batch_bodies(buf, f, sys_flag):
    """Without bodies, the bodies of inner batches still: they are the batch's messages (schemas/log/inner_batch.py)."""
    batch = is_inner_batch(sys_flag)
    if not batch.any():
        return pa.nulls(len(sys_flag), pa.binary())
    bodies = slices_to_binary(buf, f["body_at"], np.where(batch, f["body_length"], 0))
    return pc.if_else(pa.array(batch), bodies, pa.scalar(None, pa.binary()))


def _hosts(buf, at, v6, ports, v4_keys):
    """'ip:port' texts: IPv4 by a compiled loop over the keys; IPv6 (rare) as Java prints it, per distinct address."""
    texts = K.ipv4_hosts(v4_keys)
    if not v6.any():
        return texts
    rows = np.flatnonzero(v6)
    return K.merge_rows(texts, rows, format_hosts(gather_bytes(buf, at[rows], 16), np.ones(len(rows), bool),
                                                  ports[rows]))


def _bodies(stored, sys_flag, offsets, path, max_body):
    """Inflated bodies (zlib, or LZ4/ZSTD frames since 4.9.4), null beyond max_body: only compressed records
    leave Arrow, one at a time."""
    rows = np.flatnonzero(sys_flag & L.COMPRESSED)
    if not len(rows):
        return stored
    ctypes = compression_types(sys_flag)
    values = [decompress(data, ctypes[i], path, int(offsets[i]), max_body)
              for i, data in zip(rows, stored.take(pa.array(rows)).to_pylist())]
    return inflated_into(stored, rows, values)


def inflated_into(stored: pa.Array, rows: np.ndarray, values: Sequence[bytes | None]) -> pa.Array:
    """`stored` (a binary array) with the bodies at `rows` replaced by `values` (bytes or None), in Arrow."""
    mask = np.zeros(len(stored), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(stored, pa.array(mask), pa.array(values, pa.binary()))


def compression_types(sys_flag: np.ndarray | int) -> Any:  # an array, or one number for one sys_flag
    """Each record's compression type: sysFlag bits 8-10 (0 before 4.9.4, zlib)."""
    return (np.asarray(sys_flag) & L.COMPRESSION_TYPE_MASK) >> L.COMPRESSION_TYPE_SHIFT


CODECS = {0: "zlib", L.COMPRESSION_ZLIB: "zlib", L.COMPRESSION_LZ4: "LZ4", L.COMPRESSION_ZSTD: "ZSTD"}


def not_inflated_reason(ctype: int, max_body: int) -> str:
    """Why a body is null: the reason audit/bodies, the data source and explain give."""
    return f"{CODECS[int(ctype)]} body inflates beyond max_body_mb ({max_body / (1 << 20):g} MiB): " \
           "not inflated"


# inflated output is gathered in steps of 1 MiB: an output buffer of the whole bound (64 MiB) for each body
# cost LZ4 and ZSTD 10-20 us more than inflating a 10 KiB body (the allocator maps and unmaps that much)
_STEP = 1 << 20


def decompress(data: bytes, ctype: int, path: str = "commitlog", offset: int | None = None,
               limit: int | None = None) -> bytes | None:
    """RocketMQ's CompressorFactory: type 0 (pre-4.9.4) and 3 are zlib; 1 is an LZ4 frame; 2 a ZSTD frame.

    With a limit, None for a body that inflates to more than `limit` bytes, found by inflating at most about
    limit + 1 MiB of it (a ZSTD frame that declares a larger content size: none): a body of a few MB can
    inflate to gigabytes (zlib's ratio reaches 1032:1), which no Arrow array (2 GiB) and no task's memory
    holds, and which the decision never needs (filters read properties only). A zlib or LZ4 stream that ends
    before its end mark, or a ZSTD frame shorter than its declared size, is damaged."""
    try:
        if ctype in (0, L.COMPRESSION_ZLIB):
            out, done = _zlib(data, limit)
        elif ctype == L.COMPRESSION_LZ4:
            out, done = _lz4(data, limit)
        elif ctype == L.COMPRESSION_ZSTD:
            out, done = _zstd(data, limit)
        else:
            raise UnsupportedStoreError(f"{path} at offset {offset}: unknown compression type {ctype}")
    except UnsupportedStoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - every codec has its own error class
        raise CorruptStoreError(path, offset, f"body does not decompress (type {ctype}): {exc}") from exc
    if out is not None and not done:
        raise CorruptStoreError(path, offset, f"body does not decompress (type {ctype}): incomplete or truncated")
    return out


def _over(n, limit):
    return limit is not None and n > limit


def _zlib(data, limit):
    """(body or None beyond limit, whether the stream ended): zlib's own output buffer grows as it fills."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, 0 if limit is None else limit + 1)
    return (None if _over(len(out), limit) else out), inflater.eof


def _lz4(data, limit):
    import lz4.frame

    inflater = lz4.frame.LZ4FrameDecompressor()
    parts = [inflater.decompress(data, max_length=_STEP)]
    n = len(parts[0])
    while not inflater.eof and not inflater.needs_input and not _over(n, limit):
        parts.append(inflater.decompress(b"", max_length=_STEP))
        n += len(parts[-1])
    return (None if _over(n, limit) else b"".join(parts)), inflater.eof


def _zstd(data, limit):
    import zstandard

    size = zstandard.frame_content_size(data)  # -1: not declared (zstd-jni's Zstd.compress declares it)
    if _over(size, limit):
        return None, True
    parts, n = [], 0
    with zstandard.ZstdDecompressor().stream_reader(data) as reader:
        while not _over(n, limit):
            part = reader.read(size + 1 if size >= 0 else _STEP)
            if not part:
                break
            parts.append(part)
            n += len(part)
    return (None if _over(n, limit) else b"".join(parts)), size < 0 or n == size
