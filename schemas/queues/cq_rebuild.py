"""Consume-queue units as the broker builds them from its commit log: what ReputMessageService dispatches to
CommitLogDispatcherBuildConsumeQueue for every record (RocketMQ `CommitLog.checkMessageAndReturnSize`,
`DefaultMessageStore.putMessagePositionInfo`), read from the records' headers and properties in one compiled
pass (bodies are hopped over, never read). Every fact a unit holds is in its record, so a lost or doubted
consume queue can be checked or rebuilt from the log.

The broker's rules:
- a unit per record, except transaction PREPARED and ROLLBACK records (half messages are not consumable);
- the unit's topic, queue id, queue offset, commit-log offset and size are the record's;
- the tag code is the hash of the TAGS property (schemas/queues/tag_codes.py; 0 without a tag) as
  string2messageProperties reads it (the last piece of a name wins), except for SCHEDULE_TOPIC_XXXX records with
  a positive DELAY level: the delivery time, store time + that level's delay
  (ScheduleMessageService.computeDeliverTimestamp; a level beyond the highest is the highest);
- a multi-dispatched record (INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET, 4.9.3+: LMQ) adds a unit in each
  queue it names, at the offset it names (ConsumeQueue.multiDispatchLmqQueue; schemas/log/multi_dispatch.py says which);
- a 5.x inner batch (INNER_NUM and INNER_BASE: CommitLog.setBatchSizeIfNeeded) is one unit at queue offset
  INNER_BASE covering INNER_NUM messages (`batch_num`; 1 for any other record), as BatchConsumeQueue stores it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numba
import numpy as np
import pyarrow as pa

from schemas.kernels import BAD_MAGIC, BAD_SIZE, JIT, OK, next_piece, read_i32, read_i64, record_walk, same_bytes
from schemas.log import layout as L
from schemas.queues.tag_codes import tags_code

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# MessageStoreConfig.messageDelayLevel's default, "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_LEVELS_MS = np.array([1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200],
                           dtype=np.int64) * 1000
_NAMES = ("TAGS", "DELAY", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM", "INNER_BASE")
_TAGS, _DELAY, _DISPATCH, _DISPATCH_OFFSETS, _INNER_NUM, _INNER_BASE = range(len(_NAMES))
# topics whose records are not multi-dispatched (MultiDispatchUtils.isNeedHandleMultiDispatch), and the LMQ prefix
_NOT_DISPATCHED = ("%RETRY%", "rmq_sys_")

UNITS_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                          ("commitlog_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64())])

# how a pass over records ended: the stop position reached, the end of the data (a blank record or zero fill),
# a record that is not one (its position is where the pass stopped), a record not whole in the buffer
END_STOP, END_DATA, END_DAMAGED, END_SHORT = 0, 1, 2, 3
# per record: whether its properties hold a non-ASCII tag (hashed in Python), a DELAY
_NON_ASCII_TAG, _DELAYED = 1, 4


@numba.njit(**JIT)
def _properties(buf, pos, end, names, name_lens, at, length):
    """Where the values of `names` are in a properties blob (at[t], length[t]; -1: absent), as
    string2messageProperties reads it: pieces split on \x02, kept when a non-empty name precedes its first \x01 and
    a non-empty value follows, a later piece of a name replacing an earlier one."""
    at[:] = -1
    length[:] = 0
    while pos < end:
        kv, stop = next_piece(buf, pos, end)
        if kv > pos and kv < stop - 1:
            klen = kv - pos
            for t in range(len(name_lens)):
                if name_lens[t] == klen and same_bytes(names[t], 0, buf, pos, klen):
                    at[t], length[t] = kv + 1, stop - kv - 1
        pos = stop + 1


@numba.njit(**JIT)
def _parse_long(buf, at, n):
    """(Long.parseLong of an ASCII decimal with an optional sign, whether it parses)."""
    if at < 0 or n == 0:
        return 0, False
    sign, k = 1, at
    if buf[k] == 45 or buf[k] == 43:  # '-', '+'
        sign, k = (-1 if buf[k] == 45 else 1), k + 1
    if k == at + n or n - (k - at) > 18:
        return 0, False
    v = 0
    while k < at + n:
        d = buf[k] - 48
        if d < 0 or d > 9:
            return 0, False
        v = v * 10 + d
        k += 1
    return sign * v, True


@numba.njit(**JIT)
def _pieces(buf, at, n):
    """The end of a comma-separated value as Java's split(",") reads it (trailing empty pieces dropped) and its
    pieces' count."""
    end = at + n
    while end > at and buf[end - 1] == 44:
        end -= 1
    if end == at:
        return end, 0
    count = 1
    for k in range(at, end):
        if buf[k] == 44:
            count += 1
    return end, count


@numba.njit(**JIT)
def _next_comma(buf, pos, end):
    while pos < end and buf[pos] != 44:
        pos += 1
    return pos


@numba.njit(**JIT)
def _has_prefix(buf, at, n, prefix):
    return n >= len(prefix) and same_bytes(prefix, 0, buf, at, len(prefix))


@numba.njit(**JIT)
def _delay_level(buf, at, n):
    """Integer.parseInt of an ASCII decimal with an optional sign (0 where parseInt would throw: not a number,
    or beyond an int; the broker then dispatches no delivery time)."""
    if at < 0 or n == 0:
        return 0
    sign, k = 1, at
    if buf[k] == 45 or buf[k] == 43:  # '-', '+'
        sign, k = (-1 if buf[k] == 45 else 1), k + 1
    if k == at + n:
        return 0
    v = 0
    while k < at + n:
        d = buf[k] - 48
        if d < 0 or d > 9:
            return 0
        v = v * 10 + d
        if v > 2147483648:
            return 0
        k += 1
    v *= sign
    return v if -2147483648 <= v <= 2147483647 else 0


@numba.njit(**JIT)
def _slot(buf, at, n, mask):
    """FNV-1a of buf[at:at + n], masked: where a topic's search in the table starts."""
    h = np.uint64(14695981039346656037)
    for k in range(n):
        h = (h ^ np.uint64(buf[at + k])) * np.uint64(1099511628211)
    return np.int64(h & np.uint64(mask))


@numba.njit(**JIT)
def _topic_id(buf, at, n, table, slot_at, slot_len, count):
    """The id of the topic at buf[at:at + n] in an open-addressing table of the topics seen (a new id when it is
    new; -1 when the table is half full): found by hash, then compared byte for byte, so no two topics share
    an id."""
    mask = len(table) - 1
    s = _slot(buf, at, n, mask)
    while table[s] >= 0:
        j = table[s]
        if slot_len[j] == n and same_bytes(buf, slot_at[j], buf, at, n):
            return j
        s = (s + 1) & mask
    if count[0] * 2 >= len(table):
        return -1
    j = count[0]
    table[s] = j
    slot_at[j], slot_len[j] = at, n
    count[0] += 1
    return j


@numba.njit(**JIT)
def _reinsert(buf, table, slot_at, slot_len, count):
    """A bigger table's slots for the topics seen (their ids unchanged)."""
    mask = len(table) - 1
    for j in range(count):
        s = _slot(buf, slot_at[j], slot_len[j], mask)
        while table[s] >= 0:
            s = (s + 1) & mask
        table[s] = j


@numba.njit(**JIT)
def _units(buf, pos, stop, starts, names, name_lens, schedule, excluded, lmq, table, slot_at, slot_len, count, c32,
           c64, flags):
    """Hop over the records from pos while they start before stop (or, when `starts` is not empty, take the
    records at starts[pos:stop], pos and stop then indexes into it): each unit's fields into c32 (topic id, queue
    id, size, delay level, batch_num), c64 (queue offset, position, tag code, store time, where a non-ASCII tag is)
    and flags; a multi-dispatched record's further units follow its own. Returns (units written, position (or
    index) reached, END_*); stops early, END_STOP, when the columns are full."""
    limit = len(buf)
    n = 0
    cap = c32.shape[1]
    given = len(starts) > 0
    at = pos
    value_at = np.empty(len(name_lens), np.int64)
    value_len = np.empty(len(name_lens), np.int64)
    while at < stop:
        pos = starts[at] if given else at
        if pos + 8 > limit:
            return n, at, END_SHORT
        (err, total, magic, sys_flag, _, _, store_at, _, _, _, _, topic_at, topic_len, props_at,
         _) = record_walk(buf, pos, limit)
        if err == BAD_MAGIC or err == BAD_SIZE:
            if magic == L.BLANK_MAGIC or (magic == 0 and total == 0):
                return n, at, END_DATA
            if err == BAD_MAGIC:
                return n, at, END_DAMAGED
            return n, at, END_SHORT if pos + total > limit and total >= L.MIN_RECORD_SIZE else END_DAMAGED
        if n == cap:
            return n, at, END_STOP
        if err != OK or topic_len == 0:
            return n, at, END_DAMAGED
        end = pos + total
        store_ts_at = store_at - L.STORE_TIMESTAMP_SIZE
        tx = sys_flag & L.TRANSACTION_MASK
        if tx != L.TRANSACTION_PREPARED and tx != L.TRANSACTION_ROLLBACK:
            topic = _topic_id(buf, topic_at, topic_len, table, slot_at, slot_len, count)
            if topic < 0:  # the table is full: the caller grows it and goes on from here
                return n, at, END_STOP
            _properties(buf, props_at, end, names, name_lens, value_at, value_len)
            tag_at, tag_len = value_at[_TAGS], value_len[_TAGS]
            code = np.int64(0)
            f = 0
            for k in range(tag_len):
                b = buf[tag_at + k]
                if b >= 128:
                    f |= 1
                    break
                code = (code * 31 + b) & 0xFFFFFFFF
            if code >= 0x80000000:
                code -= 0x100000000
            store_time = read_i64(buf, store_ts_at)
            level = 0
            scheduled = topic_len == len(schedule) and same_bytes(schedule, 0, buf, topic_at, topic_len)
            if scheduled and value_at[_DELAY] >= 0:
                level = _delay_level(buf, value_at[_DELAY], value_len[_DELAY])
                if level > 0:
                    f |= 4
            queue_id = read_i32(buf, pos + L.QUEUE_ID_AT)
            queue_offset = read_i64(buf, pos + L.QUEUE_OFFSET_AT)
            batch_num = 1
            if value_at[_INNER_NUM] >= 0 and value_at[_INNER_BASE] >= 0:  # an inner batch: INNER_BASE, INNER_NUM
                base, ok_base = _parse_long(buf, value_at[_INNER_BASE], value_len[_INNER_BASE])
                num, ok_num = _parse_long(buf, value_at[_INNER_NUM], value_len[_INNER_NUM])
                if ok_base and ok_num and -32768 <= num <= 32767:
                    queue_offset, batch_num = base, num
            # multi-dispatch: its queues' units after its own (pieces counted, ids found, before any is written)
            fan = 0
            d_end, o_end = 0, 0
            if value_at[_DISPATCH] >= 0 and value_at[_DISPATCH_OFFSETS] >= 0:
                d_end, fan = _pieces(buf, value_at[_DISPATCH], value_len[_DISPATCH])
                o_end, fan_offsets = _pieces(buf, value_at[_DISPATCH_OFFSETS], value_len[_DISPATCH_OFFSETS])
                skip = scheduled
                for e in range(excluded.shape[0]):
                    if _has_prefix(buf, topic_at, topic_len, excluded[e, :excluded_len(excluded, e)]):
                        skip = True
                if fan != fan_offsets or skip:
                    fan = 0
            if n + 1 + fan > cap:
                return n, at, END_STOP
            fan_ids = np.empty(fan, np.int64)
            a = value_at[_DISPATCH]
            for i in range(fan):
                b = _next_comma(buf, a, d_end)
                fan_ids[i] = _topic_id(buf, a, b - a, table, slot_at, slot_len, count) if b > a else -2
                if fan_ids[i] == -1:
                    return n, at, END_STOP
                a = b + 1
            _put(c32, c64, flags, n, topic, queue_id, total, level, batch_num, queue_offset, pos, code, store_time,
                 (tag_at << 16) | tag_len, f)
            n += 1
            a, c = value_at[_DISPATCH], value_at[_DISPATCH_OFFSETS]
            for i in range(fan):
                b = _next_comma(buf, a, d_end)
                d = _next_comma(buf, c, o_end)
                offset, parsed = _parse_long(buf, c, d - c)
                slash = False
                for k in range(a, b):
                    if buf[k] == 47:
                        slash = True
                if fan_ids[i] >= 0 and parsed and not slash:  # an LMQ's queue is 0, another queue's the record's
                    _put(c32, c64, flags, n, fan_ids[i], 0 if _has_prefix(buf, a, b - a, lmq) else queue_id, total, 0,
                         1, offset, pos, code, store_time, (tag_at << 16) | tag_len, f & 1)
                    n += 1
                a, c = b + 1, d + 1
        at = at + 1 if given else end
    return n, at, END_STOP


@numba.njit(inline="always", **JIT)
def _put(c32, c64, flags, n, topic, queue_id, size, level, batch_num, queue_offset, pos, code, store_time, tag, f):
    """Unit n's fields into the pass's columns (_units); `tag` (where a non-ASCII tag is) kept only when f says so."""
    c32[0, n], c32[1, n], c32[2, n], c32[3, n], c32[4, n] = topic, queue_id, size, level, batch_num
    c64[0, n], c64[1, n], c64[2, n], c64[3, n] = queue_offset, pos, code, store_time
    if (f & 1) != 0:
        c64[4, n] = tag
    flags[n] = f


@numba.njit(**JIT)
def excluded_len(excluded, e):
    """The length of row e of a zero-padded table of names."""
    k = excluded.shape[1]
    while k > 0 and excluded[e, k - 1] == 0:
        k -= 1
    return k


_NAME_TABLE = np.zeros((len(_NAMES), max(len(x) for x in _NAMES)), np.uint8)
for _t, _name in enumerate(_NAMES):
    _NAME_TABLE[_t, :len(_name)] = np.frombuffer(_name.encode(), np.uint8)
_NAME_LENS = np.array([len(x) for x in _NAMES], np.int64)
_SCHEDULE = np.frombuffer(SCHEDULE_TOPIC.encode(), np.uint8)
_EXCLUDED = np.zeros((len(_NOT_DISPATCHED), max(len(x) for x in _NOT_DISPATCHED)), np.uint8)
for _t, _name in enumerate(_NOT_DISPATCHED):
    _EXCLUDED[_t, :len(_name)] = np.frombuffer(_name.encode(), np.uint8)
_LMQ = np.frombuffer(L.LMQ_PREFIX.encode(), np.uint8)


@dataclass
class Walked:
    """The units of a pass over records: UNITS_SCHEMA plus `store_timestamp`, in record order; where the pass
    ended (a position of the buffer) and how (END_*)."""

    units: pa.Table
    end: int
    how: int


def rebuild_units(buf: np.ndarray, base: int, pos: int = 0, stop: Optional[int] = None,
                  starts: Optional[np.ndarray] = None, delay_levels_ms: np.ndarray = DELAY_LEVELS_MS,
                  batch: int = 1 << 22) -> Walked:
    """The units of the records starting in buf[pos:stop) (buf a uint8 array whose byte 0 is commit-log
    offset `base`; records run on past stop to their end), as the broker dispatches them: a Walked. The end of
    the data ends the pass (END_DATA), so does a record not whole in buf (END_SHORT) and a damaged one
    (END_DAMAGED), at its position.
    With `starts` (a DLedger file's record positions, schemas/log/dledger.py) the records there, pos and stop
    then indexes into starts, as is Walked.end."""
    buf = np.asarray(buf, np.uint8)
    given = np.zeros(0, np.int64) if starts is None else np.asarray(starts, np.int64)
    stop = (len(buf) if starts is None else len(given)) if stop is None else stop
    table = np.full(1 << 10, -1, np.int64)
    slot_at, slot_len = np.zeros(len(table) // 2, np.int64), np.zeros(len(table) // 2, np.int64)
    count = np.zeros(1, np.int64)
    c32: np.ndarray
    c64: np.ndarray
    flags: np.ndarray
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    how = END_STOP
    extra = 0  # room beyond a unit per record: a multi-dispatched record makes more than one
    while pos < stop:
        # room for every record the rest can hold (at most `batch`): one part, no copy; np.empty's pages are
        # touched only where written, so the room costs no memory beyond the units
        cap = min(batch, (stop - pos) // (1 if starts is not None else L.MIN_RECORD_SIZE) + 1) + extra
        c32, c64, flags = np.empty((5, cap), np.int32), np.empty((5, cap), np.int64), np.empty(cap, np.int8)
        n, pos, how = _units(buf, pos, stop, given, _NAME_TABLE, _NAME_LENS, _SCHEDULE, _EXCLUDED, _LMQ, table,
                             slot_at, slot_len, count, c32, c64, flags)
        if n:
            parts.append((c32[:, :n], c64[:, :n], flags[:n]))
        if how != END_STOP:
            break
        if count[0] * 2 >= len(table):  # more topics than the table holds: twice the room, the same ids
            table = np.full(2 * len(table), -1, np.int64)
            slot_at, slot_len = (np.concatenate([a, np.zeros(len(a), np.int64)]) for a in (slot_at, slot_len))
            _reinsert(buf, table, slot_at, slot_len, int(count[0]))
            extra = 0
        else:  # the columns were full: more room where a record's units did not fit at all
            extra = 2 * extra + 64 if n == 0 else 0
    names = [bytes(buf[a:a + m]).decode("utf-8", "replace") for a, m in zip(slot_at[:count[0]], slot_len[:count[0]])]
    if len(parts) == 1:
        c32, c64, flags = parts[0]
    else:
        c32, c64, flags = (np.concatenate([p[k] for p in parts], axis=-1) if parts else
                           np.zeros(((5, 0), (5, 0), (0,))[k], (np.int32, np.int64, np.int8)[k]) for k in range(3))
    return Walked(_table(buf, base, names, c32, c64, flags, delay_levels_ms), int(pos), int(how))


def _table(buf, base, names, c32, c64, flags, delay_levels_ms):
    """UNITS_SCHEMA plus store_timestamp and batch_num of a pass's columns: topic names, non-ASCII tags hashed
    from their decoded text, delivery times of scheduled records."""
    codes = c64[2]
    special = np.flatnonzero(flags & (_NON_ASCII_TAG | _DELAYED))
    if len(special):  # rare: a tag outside ASCII, hashed as Java decodes it; a scheduled record's delivery time
        codes = codes.copy()
        for row in special[(flags[special] & _NON_ASCII_TAG) != 0]:
            at, n = int(c64[4, row]) >> 16, int(c64[4, row]) & 0xFFFF
            codes[row] = tags_code(bytes(buf[at:at + n]).decode("utf-8", "replace"))
        delayed = special[(flags[special] & _DELAYED) != 0]
        level = np.minimum(c32[3, delayed], len(delay_levels_ms))
        codes[delayed] = c64[3, delayed] + delay_levels_ms[level - 1]
    topics = pa.DictionaryArray.from_arrays(pa.array(c32[0]), pa.array(names, pa.string()))
    return pa.table({"topic": topics.cast(pa.string()), "queue_id": pa.array(c32[1]), "queue_offset": pa.array(c64[0]),
                     "commitlog_offset": pa.array(c64[1] + base if base else c64[1]), "size": pa.array(c32[2]),
                     "tags_code": pa.array(codes), "store_timestamp": pa.array(c64[3]),
                     "batch_num": pa.array(c32[4])})


@numba.njit(**JIT)
def _hop(buf, base, pos, cuts, k, out, v1, v2, min_size):
    """Hop over record headers in buf (byte 0 at file position base) from pos (only the 8 bytes of each header
    need be in buf), writing for each cut from index k on, in order, the first record start at or after it
    (file positions): (pos, k, END_*). END_STOP: the next header is beyond buf."""
    while pos + 8 <= len(buf):
        while k < len(cuts) and cuts[k] <= base + pos:
            out[k] = base + pos
            k += 1
        if k == len(cuts):
            return pos, k, END_STOP
        total = read_i32(buf, pos + L.TOTAL_SIZE_AT)
        magic = read_i32(buf, pos + L.MAGIC_AT)
        if magic != v1 and magic != v2:
            return pos, k, END_DATA
        if total < min_size:
            return pos, k, END_DAMAGED
        pos += total
    return pos, k, END_STOP


def record_cuts(read: Callable[[int, int], np.ndarray], length: int, cuts: np.ndarray | Sequence[int],
                chunk: int = 64 << 20) -> np.ndarray:
    """For each position of `cuts` (sorted, relative to a plain commit-log file), the first record start at or
    after it, hopping over the file's record headers from its first byte; positions at or past the end of its
    data (or of a damaged record, where the hop stops) give that end. read(start, n): n bytes of the file
    from start, a chunk at a time, so memory stays a chunk's whatever the file."""
    cuts = np.asarray(cuts, np.int64)
    out = np.empty(len(cuts), np.int64)
    pos, k, how = 0, 0, END_STOP
    while k < len(cuts) and pos < length and how == END_STOP:
        buf = np.asarray(read(pos, min(chunk, length - pos)), np.uint8)
        if len(buf) < 8:
            break
        rel, k, how = _hop(buf, pos, 0, cuts, k, out, L.MAGIC_V1, L.MAGIC_V2, L.MIN_RECORD_SIZE)
        pos += rel
    out[k:] = pos
    return out
