"""Compiled byte loops (numba) for the three scans no numpy or Arrow kernel does in one pass.

A commit-log record is a chain of variable-length fields, so finding where each field starts is
sequential within a record; properties are pieces split on two separators with RocketMQ's drop rules;
hex message ids and host texts are formatted per byte. Done as chains of numpy passes these cost a dozen
temporaries the size of the split; one compiled loop per job reads each byte once and writes Arrow's
offset and data buffers directly. Everything else stays numpy and Arrow. Compiled once per machine
(`cache=True`); loops release the GIL.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence

import numba
import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from schemas.log import layout as L

# cached machine code needs a real source file; from a --py-files zip each worker process compiles once
JIT: dict[str, Any] = dict(cache=os.path.isfile(__file__), nogil=True, boundscheck=False)

# record_fields error codes, in the order the checks apply (the first failing check names the error)
OK, BAD_MAGIC, BAD_SIZE, BAD_BODY, BAD_TOPIC, BAD_PROPERTIES = 0, 1, 2, 3, 4, 5


@numba.njit(**JIT)
def _u32(buf, p):
    return (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])


@numba.njit(**JIT)
def read_i32(buf, p):
    v = _u32(buf, p)
    return v - (1 << 32) if v >= (1 << 31) else v


@numba.njit(**JIT)
def read_i64(buf, p):
    hi = _u32(buf, p)
    lo = _u32(buf, p + 4)
    return np.int64(np.uint64(hi) << np.uint64(32) | np.uint64(lo))


@numba.njit(**JIT)
def read_i16(buf, p):
    v = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    return v - (1 << 16) if v >= (1 << 15) else v


@intrinsic
def _prefetch_intrinsic(typingctx, arr, at):
    """LLVM's prefetch of the cache line holding arr[at] (a read, kept in every cache level): a hint, no fault."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]], wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(arr, at), codegen


@numba.njit(inline="always", **JIT)
def prefetch(buf, at):
    """Ask for buf[at]'s cache line ahead of its read, when at lies in buf. A task reads one topic's records at a
    time, every third or so of a split's: the hardware's own prefetch does not follow that stride, and each
    record's lines then came from memory as it was reached (record_fields took 2.4x as long as over every
    record in log order; measured in docs/performance.md)."""
    if 0 <= at < len(buf):
        _prefetch_intrinsic(buf, at)


# records ahead of the one decoded whose lines are asked for: their heads at twice this, their tails (where the
# head says they are) at this. 2-4 measured best on the bench store (8 and 16 slower: lines evicted before use)
AHEAD = 4


# how a walk of record headers ended (walk_headers)
WALK_LIMIT, WALK_BLANK, WALK_ZERO, WALK_BAD_MAGIC, WALK_BAD_SIZE, WALK_TRUNCATED = 0, 1, 2, 3, 4, 5


@numba.njit(**JIT)
def _walk(buf, limit, v1, v2, blank, min_size, starts):
    """Hop over the records' size and magic headers from position 0: (records, end position, how it ended);
    their starts into `starts` when it is not empty (a first pass only counts)."""
    pos = 0
    n = 0
    while pos + 8 <= limit:
        size = read_i32(buf, pos + L.TOTAL_SIZE_AT)
        magic = read_i32(buf, pos + L.MAGIC_AT)
        if magic == v1 or magic == v2:
            if size < min_size or pos + size > limit:
                return n, pos, WALK_BAD_SIZE
            if len(starts):
                starts[n] = pos
            n += 1
            pos += size
        elif magic == blank:
            return n, pos, WALK_BLANK
        elif size == 0 and magic == 0:
            return n, pos, WALK_ZERO
        else:
            return n, pos, WALK_BAD_MAGIC
    return n, pos, WALK_LIMIT if pos >= limit else WALK_TRUNCATED


def walk_headers(buf: np.ndarray, limit: int) -> tuple[np.ndarray, int, int]:
    """(starts, end position, how it ended: WALK_*) of the records in buf[:limit], hopping over their headers
    in compiled code (two passes: count, then fill)."""
    args = (L.MAGIC_V1, L.MAGIC_V2, L.BLANK_MAGIC, L.MIN_RECORD_SIZE)
    n, _, _ = _walk(buf, limit, *args, np.zeros(0, np.int64))
    starts = np.empty(n, np.int64)
    _, pos, how = _walk(buf, limit, *args, starts if n else np.zeros(0, np.int64))
    return starts, pos, how


@numba.njit(inline="always", **JIT)  # inlined where called (a call per record costs the decoder 25%)
def record_walk(buf, s, limit):
    """The one walk of a commit-log record's header (schemas/log/layout.py names every offset): the record at s,
    buf[:limit] holding it, checked as MessageDecoder reads it. Returns (error, total, magic, sys_flag, born_at,
    born_ip, store_at, store_ip, mid_at, body_at, body_len, topic_at, topic_len, props_at, props_len): positions
    in buf, `*_ip` the width of a host's address (4 or 16; its port follows it, the store timestamp the born
    port), `mid_at` where reconsumeTimes starts. `error` is the first check the record fails (BAD_*) or OK; what
    a failed record's walk did not reach is 0. The decoder (record_fields) and the consume-queue rebuild
    (schemas/queues/cq_rebuild.py) both walk records with it."""
    z = np.int64(0)
    if s < 0 or s + 8 > limit:
        return BAD_SIZE, z, z, z, z, z, z, z, z, z, z, z, z, z, z
    total = read_i32(buf, s + L.TOTAL_SIZE_AT)
    magic = read_i32(buf, s + L.MAGIC_AT)
    if magic != L.MAGIC_V1 and magic != L.MAGIC_V2:
        return BAD_MAGIC, total, magic, z, z, z, z, z, z, z, z, z, z, z, z
    end = s + total
    if total < L.MIN_RECORD_SIZE or end > limit:
        return BAD_SIZE, total, magic, z, z, z, z, z, z, z, z, z, z, z, z
    flag = read_i32(buf, s + L.SYS_FLAG_AT)
    born_at = s + L.BORN_HOST_AT
    born_ip = L.IP_V6_SIZE if (flag & L.BORNHOST_V6) != 0 else L.IP_V4_SIZE
    store_at = born_at + born_ip + 4 + L.STORE_TIMESTAMP_SIZE
    store_ip = L.IP_V6_SIZE if (flag & L.STOREHOST_V6) != 0 else L.IP_V4_SIZE
    mid_at = store_at + store_ip + 4
    body_at = mid_at + L.MID_SIZE
    if body_at > end:
        return BAD_BODY, total, magic, flag, z, z, z, z, z, z, z, z, z, z, z
    body_len = read_i32(buf, mid_at + L.BODY_LENGTH_AT)
    if body_len < 0 or body_at + body_len + 1 > end:
        return BAD_BODY, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len, z, z, z, z
    tl_at = body_at + body_len
    if magic == L.MAGIC_V2:
        if tl_at + 2 > end:
            return (BAD_TOPIC, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len,
                    z, z, z, z)
        topic_len = read_i16(buf, tl_at)  # Java's getShort
        topic_at = tl_at + 2
    else:
        topic_len = np.int64(buf[tl_at])  # a signed byte
        if topic_len >= 128:
            topic_len -= 256
        topic_at = tl_at + 1
    if topic_len < 0 or topic_at + topic_len + 2 > end:
        return (BAD_TOPIC, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len,
                topic_at, topic_len, z, z)
    pl_at = topic_at + topic_len
    props_len = read_i16(buf, pl_at)
    err = OK if props_len >= 0 and pl_at + 2 + props_len == end else BAD_PROPERTIES
    return (err, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len, topic_at,
            topic_len, pl_at + 2, props_len)


@numba.njit(**JIT)
def _record_fields(buf, starts):
    n = len(starts)
    size = len(buf)
    i32 = np.zeros((8, n), np.int32)  # total, magic, crc, queue_id, flag, sys_flag, reconsume, ports...
    i64 = np.zeros((16, n), np.int64)
    err = np.zeros(n, np.int8)
    for i in range(n):
        if i + 2 * AHEAD < n:  # the head of a record ahead, then the tail of a nearer one, whose head came
            prefetch(buf, starts[i + 2 * AHEAD])
            prefetch(buf, starts[i + 2 * AHEAD] + 64)
        if i + AHEAD < n and 0 <= starts[i + AHEAD] <= size - 4:
            ahead = starts[i + AHEAD] + read_i32(buf, starts[i + AHEAD])
            prefetch(buf, ahead - 64)
            prefetch(buf, ahead - 1)
        s = starts[i]
        (e, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len, topic_at, topic_len,
         props_at, props_len) = record_walk(buf, s, size)
        if e != OK:
            err[i] = e
        i32[0, i] = total
        i32[1, i] = magic
        if e == BAD_MAGIC or e == BAD_SIZE:  # not a record, or not whole in buf: nothing more read
            continue
        i32[2, i] = read_i32(buf, s + L.BODY_CRC_AT)
        i32[3, i] = read_i32(buf, s + L.QUEUE_ID_AT)
        i32[4, i] = read_i32(buf, s + L.FLAG_AT)
        i64[0, i] = read_i64(buf, s + L.QUEUE_OFFSET_AT)
        i64[1, i] = read_i64(buf, s + L.PHYSICAL_OFFSET_AT)
        i32[5, i] = flag
        i64[2, i] = read_i64(buf, s + L.BORN_TIMESTAMP_AT)
        if born_at == 0:  # the hosts run past the record's end
            continue
        i64[3, i] = born_at
        i32[6, i] = read_i32(buf, born_at + born_ip)
        i64[4, i] = read_i64(buf, store_at - L.STORE_TIMESTAMP_SIZE)
        i64[5, i] = store_at
        i32[7, i] = read_i32(buf, store_at + store_ip)
        if born_ip == L.IP_V4_SIZE:
            i64[14, i] = read_i64(buf, born_at)  # IPv4 + port as one number: formatted later without buf
        if store_ip == L.IP_V4_SIZE:
            i64[15, i] = read_i64(buf, store_at)
        i64[6, i] = read_i32(buf, mid_at + L.RECONSUME_TIMES_AT)
        i64[7, i] = read_i64(buf, mid_at + L.PREPARED_TRANSACTION_OFFSET_AT)
        i64[8, i] = body_at
        i64[9, i] = body_len
        i64[10, i] = topic_at
        i64[11, i] = topic_len
        i64[12, i] = props_at
        i64[13, i] = props_len
    return i32, i64, err


def record_fields(buf: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """Every field of the records at `starts` (positions in the uint8 array `buf`), as {name: array}.

    Positions (`*_at`) are relative to buf; `*_v4_key` are the 8 bytes of an IPv4 host (address, port) as
    one big-endian number (0 for IPv6), so that texts are made without going back to buf. `error` is per
    record: the first check it fails (BAD_*), or OK; the fields a failed record did not reach are 0."""
    i32, i64, err = _record_fields(buf, np.asarray(starts, np.int64))
    names32 = ("total_size", "magic", "body_crc", "queue_id", "flag", "sys_flag", "born_port", "store_port")
    names64 = ("queue_offset", "physical_offset", "born_timestamp", "born_at", "store_timestamp", "store_at",
               "reconsume_times", "prepared_transaction_offset", "body_at", "body_length", "topic_at",
               "topic_length", "properties_at", "properties_length", "born_v4_key", "store_v4_key")
    out = {name: i32[k] for k, name in enumerate(names32)}
    out.update({name: i64[k] for k, name in enumerate(names64)})
    out["reconsume_times"] = out["reconsume_times"].astype(np.int32)
    out["error"] = err
    return out


@numba.njit(**JIT)
def same_bytes(a, a_at, b, b_at, width):
    """a[a_at:a_at + width] == b[b_at:b_at + width], without slicing (slices cost more than short names)."""
    for k in range(width):
        if a[a_at + k] != b[b_at + k]:
            return False
    return True


@numba.njit(**JIT)
def next_piece(data, pos, end):
    """(kv, stop) of the properties piece starting at pos: where its first \x01 is (-1: none before the piece
    ends) and where it ends (its \x02, or end). string2messageProperties keeps it when kv > pos and
    kv < stop - 1 (a non-empty name, a non-empty value); the next piece starts at stop + 1."""
    stop = pos
    while stop < end and data[stop] != 1 and data[stop] != 2:
        stop += 1
    kv = stop if stop < end and data[stop] == 1 else -1
    while stop < end and data[stop] != 2:
        stop += 1
    return kv, stop


@numba.njit(**JIT)
def _split_properties(data, starts, ends, names, name_lens):
    """RocketMQ 4.9.x string2messageProperties over every blob, copying keys and values into Arrow
    buffers in the one scan that finds them (each byte read once: 0.076 -> 0.059 CPU-s a split of the bench store
    against a scan, then a copy): pieces split on \\x02, a piece kept when a non-empty name precedes its first \\x01
    and a non-empty value follows (next_piece's rule). Also the piece index of each name in `names` per blob. A
    repeated name within a blob is copied too and marked in `first_of` (the piece of its first occurrence);
    `split_properties` then keeps the first position with the last value. Blob `row` is
    data[starts[row]:ends[row]] (a string column's offsets, or fields of records in a commit-log buffer);
    `high` ORs every byte kept, so that below 0x80 says the keys and values are ASCII (valid UTF-8)."""
    n = len(starts)
    total = 0
    for row in range(n):
        total += ends[row] - starts[row]
    cap = total // 3 + 1  # a kept piece holds at least a name byte, \\x01 and a value byte
    k_off = np.empty(cap + 1, np.int32)
    v_off = np.empty(cap + 1, np.int32)
    k_data = np.empty(total, np.uint8)  # a piece's bytes are copied as they are scanned, kept or not: each fits
    v_data = np.empty(total, np.uint8)
    first_of = np.empty(cap, np.int64)  # written for every kept piece
    map_offsets = np.zeros(n + 1, np.int32)
    named = np.full((len(name_lens), n), -1, np.int64)
    k_off[0] = 0
    v_off[0] = 0
    m = 0
    ko = 0
    vo = 0
    repeats = False
    high = 0
    for row in range(n):
        if row + AHEAD < n:
            prefetch(data, starts[row + AHEAD] + 64)
        first = m
        pos = starts[row]
        end = ends[row]
        while pos < end:
            kv = pos  # the name: up to the piece's first \\x01 (or its \\x02, or the blob's end: no value)
            bits = 0
            while kv < end:
                c = data[kv]  # read once: a store to k_data could alias data for the compiler
                if c == 1 or c == 2:
                    break
                k_data[ko + kv - pos] = c
                bits |= c
                kv += 1
            if kv == end or data[kv] == 2:  # no \\x01 in the piece: dropped
                pos = kv + 1
                continue
            stop = kv + 1  # the value: up to the piece's \\x02
            while stop < end:
                c = data[stop]
                if c == 2:
                    break
                v_data[vo + stop - kv - 1] = c
                bits |= c
                stop += 1
            klen = kv - pos
            if klen > 0 and stop - kv > 1:
                first_of[m] = -1
                for j in range(first, m):  # a handful of pieces per blob; the first match is a first occurrence
                    if k_off[j + 1] - k_off[j] == klen and same_bytes(k_data, k_off[j], k_data, ko, klen):
                        first_of[m] = j
                        repeats = True
                        break
                if first_of[m] < 0:
                    for t in range(len(name_lens)):
                        if name_lens[t] == klen and same_bytes(names[t], 0, k_data, ko, klen):
                            named[t, row] = m
                high |= bits
                ko += klen
                vo += stop - kv - 1
                m += 1
                k_off[m] = ko
                v_off[m] = vo
            pos = stop + 1
        map_offsets[row + 1] = m
    return k_off[:m + 1], k_data[:ko], v_off[:m + 1], v_data[:vo], map_offsets, named, first_of[:m], repeats, high


def split_properties(data: np.ndarray, offsets: np.ndarray, names: Sequence[str] = (), ends: Optional[np.ndarray] = None
                     ) -> tuple[pa.Array, pa.Array, np.ndarray, dict[str, np.ndarray], bool]:
    """(keys, values, map_offsets, {name: entry index per blob, -1 if absent}, ascii) of the blobs in `data`
    between `offsets` (or, with `ends`, at data[offsets[i]:ends[i]]): keys and values as string arrays, not
    validated (ascii: every byte of them is below 0x80; else the caller validates the blobs or them)."""
    starts = np.asarray(offsets, np.int64)
    if ends is None:
        starts, ends = starts[:-1], starts[1:]
    widths = np.array([len(x.encode()) for x in names], np.int64)
    table = np.zeros((len(names), max([1] + list(widths))), np.uint8)
    for t, name in enumerate(names):
        table[t, :widths[t]] = np.frombuffer(name.encode(), np.uint8)
    k_off, k_data, v_off, v_data, map_offsets, named, first_of, repeats, high = _split_properties(
        data, starts, np.asarray(ends, np.int64), table, widths)
    m = len(k_off) - 1
    keys = pa.Array.from_buffers(pa.string(), m, [None, pa.py_buffer(k_off), pa.py_buffer(k_data)])
    values = pa.Array.from_buffers(pa.string(), m, [None, pa.py_buffer(v_off), pa.py_buffer(v_data)])
    if repeats:  # rare (a producer sending a map): keep each name's first position and its last value
        keys, values, map_offsets, named = _last_value_wins(keys, values, map_offsets, named, first_of)
    return keys, values, map_offsets, dict(zip(names, named)), high < 0x80


def _last_value_wins(keys, values, map_offsets, named, first_of):
    """Drop the repeated pieces; each first occurrence takes the value of its name's last one (HashMap.put)."""
    repeated = np.flatnonzero(first_of >= 0)
    last = np.arange(len(first_of))
    np.maximum.at(last, first_of[repeated], repeated)  # later pieces have larger indexes
    kept = first_of < 0
    rows = np.searchsorted(map_offsets, np.arange(len(first_of)), side="right") - 1
    new_offsets = np.zeros_like(map_offsets)
    np.cumsum(np.bincount(rows[kept], minlength=len(map_offsets) - 1), out=new_offsets[1:])
    position = np.cumsum(kept) - 1  # a kept piece's index after the drop
    named = np.where(named >= 0, position[np.maximum(named, 0)], -1)
    return keys.filter(pa.array(kept)), values.take(pa.array(last[kept])), new_offsets, named


@numba.njit(**JIT)
def _value_codes(offsets, data, entries, limit):
    n = len(entries)
    size = 2
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, np.int32)  # code of the value hashed to a slot (linear probing)
    first = np.empty(n, np.int64)
    codes = np.full(n, -1, np.int32)
    k = 0
    for row in range(n):
        e = entries[row]
        if e < 0:
            continue
        a = offsets[e]
        width = offsets[e + 1] - a
        h = np.uint64(14695981039346656037)  # FNV-1a
        for p in range(a, a + width):
            h = (h ^ np.uint64(data[p])) * np.uint64(1099511628211)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            c = table[slot]
            if c < 0:
                if k == limit:
                    return codes, first[:0], False
                table[slot] = k
                first[k] = e
                codes[row] = k
                k += 1
                break
            f = first[c]
            if offsets[f + 1] - offsets[f] == width and same_bytes(data, offsets[f], data, a, width):
                codes[row] = c
                break
            slot = (slot + 1) & (size - 1)
    return codes, first[:k], True


def value_codes(values: pa.Array, entries: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """(codes, first, ok) of the entries of a string array `values` at `entries` (-1: none, code -1): each
    distinct value's code in order of first appearance, and the entry of its first appearance: a dictionary
    encoding done while the bytes are hot (the properties' split), not by a take and a hash of the taken column
    later. ok False: more than `limit` distinct values (then codes and first mean nothing)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset: values.offset + len(values) + 1]
    data = np.frombuffer(values.buffers()[2], np.uint8) if values.buffers()[2] is not None else np.zeros(0, np.uint8)
    return _value_codes(offsets, data, np.asarray(entries, np.int64), limit)


@numba.njit(**JIT)
def _first_entry_named(key_data, key_offsets, map_offsets, name):
    n = len(map_offsets) - 1
    out = np.full(n, -1, np.int64)
    w = len(name)
    for row in range(n):
        for j in range(map_offsets[row], map_offsets[row + 1]):
            a = key_offsets[j]
            if key_offsets[j + 1] - a == w and same_bytes(key_data, a, name, 0, w):
                out[row] = j
                break
    return out


def first_entry_named(key_data: np.ndarray, key_offsets: np.ndarray, map_offsets: np.ndarray, name: str) -> np.ndarray:
    """Per map of a map<string, _> column, the entry index of its first key equal to `name` (-1: none);
    `key_offsets` are the keys array's offsets, `map_offsets` the map's (entry indexes into the keys)."""
    return _first_entry_named(key_data, key_offsets, map_offsets, np.frombuffer(name.encode(), np.uint8))


_HEX_PAIRS = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint16)


@numba.njit(**JIT)
def _msg_ids(store_key, physical_offset, pairs):
    n = len(store_key)
    out = np.empty(n * 16, np.uint16)  # two hex digits per byte: 8 bytes of host, 8 of offset
    for i in range(n):
        o = i * 16
        k = np.uint64(store_key[i])
        f = np.uint64(physical_offset[i])
        for b in range(8):
            shift = np.uint64(56 - 8 * b)
            out[o + b] = pairs[(k >> shift) & np.uint64(255)]
            out[o + 8 + b] = pairs[(f >> shift) & np.uint64(255)]
    return out


@numba.njit(**JIT)
def _msg_ids_v6(buf, store_at, offset_at, pairs):
    n = len(store_at)
    out = np.empty(n * 28, np.uint16)
    for i in range(n):
        for b in range(20):
            out[i * 28 + b] = pairs[buf[store_at[i] + b]]
        for b in range(8):
            out[i * 28 + 20 + b] = pairs[buf[offset_at[i] + b]]
    return out


def msg_ids(buf: np.ndarray, fields: Mapping[str, np.ndarray], store_v6: np.ndarray, offset_at: np.ndarray) -> pa.Array:
    """offsetMsgId strings: uppercase hex of the store host as stored (ip + port), then of the record's
    physicalOffset field (at `offset_at` in buf). IPv4 hosts from the fields alone, IPv6 from buf."""
    v4 = _string_array(_msg_ids(fields["store_v4_key"], fields["physical_offset"], _HEX_PAIRS), 32)
    if not store_v6.any():
        return v4
    rows = np.flatnonzero(store_v6)
    v6 = _string_array(_msg_ids_v6(buf, fields["store_at"][rows], offset_at[rows], _HEX_PAIRS), 56)
    return merge_rows(v4, rows, v6)


def _string_array(data, width):
    """A string array of fixed-width values laid end to end in `data`."""
    n = data.nbytes // width
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(0, width * n + 1, width, np.int32)),
                                                  pa.py_buffer(data)])


def merge_rows(base: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """`base` with its rows at `rows` replaced by `values` (one take over both)."""
    where = np.arange(len(base))
    where[rows] = len(base) + np.arange(len(rows))
    return pa.concat_arrays([base, values.cast(base.type)]).take(pa.array(where))


@numba.njit(**JIT)
def _put_decimal(out, o, v):
    if v >= 100:
        out[o] = 48 + v // 100
        o += 1
    if v >= 10:
        out[o] = 48 + (v // 10) % 10
        o += 1
    out[o] = 48 + v % 10
    return o + 1


@numba.njit(**JIT)
def _ipv4_hosts(keys):
    n = len(keys)
    out = np.empty(n * 22, np.uint8)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    o = 0
    digits = np.empty(11, np.uint8)
    for i in range(n):
        if i and keys[i] == keys[i - 1]:  # hosts repeat: copy the text just written
            w = offsets[i] - offsets[i - 1]
            for b in range(w):
                out[o + b] = out[o - w + b]
            o += w
            offsets[i + 1] = o
            continue
        key = np.uint64(keys[i])
        for b in range(4):
            o = _put_decimal(out, o, np.int64((key >> np.uint64(56 - 8 * b)) & np.uint64(255)))
            out[o] = 46 if b < 3 else 58  # '.' or ':'
            o += 1
        p = np.int64(key & np.uint64(0xFFFFFFFF))
        if p >= (1 << 31):
            p -= 1 << 32
        if p < 0:
            out[o] = 45
            o += 1
            p = -p
        k = 0
        while True:
            digits[k] = 48 + p % 10
            k += 1
            p //= 10
            if p == 0:
                break
        for d in range(k - 1, -1, -1):
            out[o] = digits[d]
            o += 1
        offsets[i + 1] = o
    return offsets, out[:o]


def ipv4_hosts(keys: np.ndarray) -> pa.Array:
    """'a.b.c.d:port' of IPv4 hosts given as `*_v4_key` numbers (Java's getHostAddress + ":" + port)."""
    offsets, data = _ipv4_hosts(np.asarray(keys, np.int64))
    return pa.Array.from_buffers(pa.string(), len(keys),
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
