"""Inner batches (RocketMQ 5.x BatchCQ topics): one commit-log record (sysFlag NEED_UNWRAP | INNER_BATCH, properties
INNER_NUM, INNER_BASE) whose body is the batch's messages as `MessageDecoder.encodeMessages` wrote them, each:

    totalSize int32 | magic int32 | bodyCRC int32 | flag int32 | bodyLength int32 | body | propertiesLength int16 |
    properties (name \\x01 value \\x02 ...)

The 4.x/5.x client unwraps it (PullAPIWrapper.processPullResult -> MessageDecoder.decodeMessage(MessageExt, list)):
inner message i gets the record's topic, queue id, store and born hosts and times, sysFlag and commit-log offset,
queue offset record's + i, and its own flag, body and properties (the record's are not kept). The messages are
read one after another (decodeMessages), as the client reads them; a body whose messages run past its end is
damaged (the client's decode throws)."""
import numba
import numpy as np
import pyarrow as pa

from schemas.columns import one_array, slices_to_binary
from schemas.kernels import JIT, read_i16, read_i32
from schemas.log import layout as L
from schemas.log.properties import NAMED, parse_properties_at
from schemas.queues.tag_codes import tags_code_array

INNER_HEAD = 20  # totalSize, magic, bodyCRC, flag, bodyLength


@numba.njit(**JIT)
def _count(data, starts, ends):
    """Per body [starts[r], ends[r]): its messages, or -1 where one runs past the body's end."""
    out = np.zeros(len(starts), np.int64)
    for r in range(len(starts)):
        pos, end, n = starts[r], ends[r], 0
        while pos < end:
            if pos + INNER_HEAD > end:
                n = -1
                break
            body = read_i32(data, pos + 16)
            if body < 0 or pos + INNER_HEAD + body + 2 > end:
                n = -1
                break
            props = read_i16(data, pos + INNER_HEAD + body)
            if props < 0 or pos + INNER_HEAD + body + 2 + props > end:
                n = -1
                break
            pos += INNER_HEAD + body + 2 + props
            n += 1
        out[r] = n
    return out


@numba.njit(**JIT)
def _fields(data, starts, ends, total, flag, body_at, body_len, props_at, props_len):
    """The fields of every message of bodies that _count found whole, in order."""
    k = 0
    for r in range(len(starts)):
        pos, end = starts[r], ends[r]
        while pos < end:
            flag[k] = read_i32(data, pos + 12)
            body_len[k] = read_i32(data, pos + 16)
            body_at[k] = pos + INNER_HEAD
            props_len[k] = read_i16(data, body_at[k] + body_len[k])
            props_at[k] = body_at[k] + body_len[k] + 2
            pos = props_at[k] + props_len[k]
            k += 1


def is_inner_batch(sys_flag: np.ndarray) -> np.ndarray:
    """MessageSysFlag INNER_BATCH and NEED_UNWRAP both set: what the client unwraps (bool array)."""
    wanted = L.INNER_BATCH | L.NEED_UNWRAP
    return (np.asarray(sys_flag) & wanted) == wanted


def unwrap(messages: pa.Table, with_body: bool = True) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """(messages, parent, index, damaged) of a MESSAGE_SCHEMA table whose inner batches are unwrapped as the client
    unwraps them: a row per inner message in place of its record (other rows as they are), plus a column
    `batch_properties`, the record's own properties (what the broker's SQL92 filter evaluated: an inner batch is
    filtered as one record); parent: the input row of each output row; damaged: input rows whose body does not
    hold whole messages (left out); index: each output row's place in its batch (0 for a row not unwrapped).
    The bodies must be present (decode_records reads an inner batch's body whatever with_body says); with_body
    False leaves the inner bodies null."""
    batch = is_inner_batch(messages.column("sys_flag").to_numpy())
    props = messages.column("properties")
    if not batch.any():
        none = np.zeros(0, np.int64)
        return (messages.append_column("batch_properties", props), np.arange(messages.num_rows),
                np.zeros(messages.num_rows, np.int64), none)
    rows = np.flatnonzero(batch)
    bodies = one_array(messages.column("body")).take(pa.array(rows))
    offsets = np.frombuffer(bodies.buffers()[1], np.int32, len(bodies) + 1, bodies.offset * 4).astype(np.int64)
    data = np.frombuffer(bodies.buffers()[2], np.uint8) if bodies.buffers()[2] is not None else np.zeros(0, np.uint8)
    counts = _count(data, offsets[:-1], offsets[1:])
    damaged = rows[counts < 0]
    per_row = np.ones(messages.num_rows, np.int64)
    per_row[rows] = np.maximum(counts, 0)
    parent = np.repeat(np.arange(messages.num_rows), per_row)
    total = int(counts[counts > 0].sum())
    whole = counts >= 0
    flag, body_len, props_len = (np.empty(total, np.int32) for _ in range(3))
    body_at, props_at = np.empty(total, np.int64), np.empty(total, np.int64)
    _fields(data, offsets[:-1][whole], offsets[1:][whole], total, flag, body_at, body_len, props_at, props_len)
    inner = batch[parent]  # output rows that are inner messages, in order: the `total` fields above
    first = np.r_[0, np.cumsum(per_row)[:-1]]
    index = np.arange(len(parent)) - first[parent]
    out = messages.take(pa.array(parent))
    properties, named = parse_properties_at(data, props_at, props_len.astype(np.int64), NAMED)
    body = (slices_to_binary(data, body_at, body_len.astype(np.int64)) if with_body
            else pa.nulls(total, pa.binary()))
    replaced = {"flag": pa.array(flag), "body": body, "properties": properties, "tags": named["TAGS"],
                "keys": named["KEYS"], "uniq_key": named["UNIQ_KEY"],
                "tags_code": pa.array(tags_code_array(named["TAGS"]))}
    order = _placing(inner)
    for name, values in replaced.items():
        i = out.schema.get_field_index(name)
        kept = one_array(out.column(name)).filter(pa.array(~inner))
        merged = pa.concat_arrays([kept.cast(values.type), values]).take(pa.array(order))
        out = out.set_column(i, out.schema.field(name), merged.cast(out.schema.field(name).type))
    index = np.where(inner, index, 0)
    queue_offset = out.column("queue_offset").to_numpy() + index
    out = out.set_column(out.schema.get_field_index("queue_offset"), "queue_offset", pa.array(queue_offset))
    return out.append_column("batch_properties", props.take(pa.array(parent))), parent, index, damaged


def _placing(inner):
    """The take() order that puts [rows not inner..., inner rows...] back in row order."""
    order = np.empty(len(inner), np.int64)
    kept = np.flatnonzero(~inner)
    order[kept] = np.arange(len(kept))
    order[np.flatnonzero(inner)] = len(kept) + np.arange(int(inner.sum()))
    return order
