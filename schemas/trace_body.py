"""The body of a RocketMQ message-trace message, decoded as the client's TraceDataEncoder.decoderFromTraceDataString
(apache/rocketmq 5.3.3, org.apache.rocketmq.client.trace) reads it, a batch of bodies at once with Arrow.

A body holds contexts, each ending with char 2 (FIELD_SPLITOR), its fields separated by char 1 (CONTENT_SPLITOR);
Java's String.split drops trailing empty strings, so a field count is that of the fields up to the last non-empty
one. The first field names the TraceType: Pub (12 to 15 fields: 13 without offsetMsgId, 15 with the old clients'
clientHost), SubBefore (8), SubAfter (6 to 9: contextCode from the 7th, timestamp and groupName from the 9th;
a cloud client leaves them out), EndTransaction (13), Recall (7). Values are kept as written: a missing tag or key
is the literal `null`. A context the decoder would throw on (a number that is not one, too few fields, an unknown
MessageType or LocalTransactionState) or of no known type makes its body undecodable: `bad`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FIELD_SPLITOR, CONTENT_SPLITOR = "\x02", "\x01"
PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL = "Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall"
# fewest fields each type's decoder reads without an ArrayIndexOutOfBoundsException
MIN_FIELDS = {PUB: 12, SUB_BEFORE: 8, SUB_AFTER: 6, END_TRANSACTION: 13, RECALL: 7}
MESSAGE_TYPES = 5  # MessageType.values(): Normal_Msg, Trans_Msg_Half, Trans_msg_Commit, Delay_Msg, Order_Msg
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")  # LocalTransactionState
RECORD_SCHEMA = pa.schema([
    ("body_index", pa.int64()), ("record_index", pa.int32()), ("field_count", pa.int32()),
    ("trace_type", pa.string()), ("timestamp", pa.int64()), ("region_id", pa.string()), ("group", pa.string()),
    ("topic", pa.string()), ("msg_id", pa.string()), ("offset_msg_id", pa.string()), ("tags", pa.string()),
    ("keys", pa.string()), ("store_host", pa.string()), ("body_length", pa.int32()), ("cost_time", pa.int32()),
    ("msg_type", pa.int32()), ("success", pa.bool_()), ("context_code", pa.int32()), ("retry_times", pa.int32()),
    ("request_id", pa.string()), ("client_host", pa.string()), ("transaction_id", pa.string()),
    ("transaction_state", pa.string()), ("from_transaction_check", pa.bool_()),
])
_LONG, _INT = r"^[+-]?[0-9]{1,18}$", r"^[+-]?[0-9]{1,10}$"
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)


def decode_bodies(bodies: pa.Array | pa.ChunkedArray) -> tuple[pa.Table, np.ndarray]:
    """(RECORD_SCHEMA table: one row per record of the bodies, `body_index` the body's position; a numpy bool
    per body: it does not decode). A body that is not UTF-8, holds no record or holds a context that does not
    decode yields no row at all: the client's decoder would throw for the whole body."""
    bodies = _array(bodies)
    text, bad = _as_text(bodies)
    contexts = pc.split_pattern(text, FIELD_SPLITOR)
    body_of = pc.list_parent_indices(contexts).to_numpy()
    flat = _array(pc.list_flatten(contexts))
    keep = np.flatnonzero(pc.not_equal(pc.utf8_length(flat), 0).to_numpy(zero_copy_only=False))
    flat, body_of = flat.take(pa.array(keep)), body_of[keep]
    fields = Fields(pc.split_pattern(flat, CONTENT_SPLITOR))
    records, ok = _records(fields)
    bad |= np.bincount(body_of[~ok], minlength=len(bodies)).astype(bool) if len(bodies) else bad
    bad |= np.bincount(body_of, minlength=len(bodies)) == 0 if len(bodies) else bad
    good = np.flatnonzero(~bad[body_of])
    records = records.take(pa.array(good))
    index = body_of[good]
    first = np.r_[True, index[1:] != index[:-1]] if len(index) else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(first)
    within = np.arange(len(index)) - np.repeat(starts, np.diff(np.r_[starts, len(index)]))
    records = records.set_column(0, "body_index", pa.array(index, pa.int64()))
    return records.set_column(1, "record_index", pa.array(within, pa.int32())), bad


def _as_text(bodies):
    """(the bodies as strings, null where they are not UTF-8 or null; those rows, marked bad)."""
    try:
        text = bodies.cast(pa.string())
        return text, ~text.is_valid().to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        pass
    bad = np.zeros(len(bodies), dtype=bool)
    for i, value in enumerate(bodies.to_pylist()):  # only a batch holding a body that is not UTF-8 comes here
        try:
            value.decode("utf-8") if value is not None else None
        except UnicodeDecodeError:
            bad[i] = True
        bad[i] |= value is None
    text = pc.if_else(pa.array(bad), pa.scalar(None, pa.binary()), bodies).cast(pa.string())
    return text, bad


class Fields:
    """The contexts' fields as Java's split leaves them: field(i) is each context's i-th field, null where the
    context has no such field (trailing empty fields dropped, as String.split does)."""

    def __init__(self, lists: pa.ListArray | pa.ChunkedArray) -> None:
        lists = _array(lists)
        self.values = _array(pc.list_flatten(lists))
        offsets = lists.offsets.to_numpy()
        self.starts = offsets[:-1] - offsets[0]
        sizes = np.diff(offsets)
        position = np.arange(len(self.values)) - np.repeat(self.starts, sizes)
        filled = np.where(pc.not_equal(pc.utf8_length(self.values), 0).to_numpy(zero_copy_only=False), position + 1, 0)
        self.count = np.maximum.reduceat(filled, self.starts) if len(self.values) else np.zeros(0, dtype=np.int64)
        self.count = np.where(sizes > 0, self.count, 0)

    def __len__(self) -> int:
        return len(self.starts)

    def field(self, i: int, where: Optional[np.ndarray] = None) -> pa.Array:
        """Each context's i-th field (null where it has none, or where `where` is False)."""
        has = self.count > i
        if where is not None:
            has &= where
        idx = pa.array(np.where(has, self.starts + i, 0), pa.int64(), mask=~has)
        return self.values.take(idx) if len(self.values) else pa.nulls(len(self), pa.string())


def _records(fields):
    """(a RECORD_SCHEMA table of the contexts, whether each decodes): each column taken from its type's field."""
    n = len(fields)
    kind = fields.field(0)
    typ = {t: pc.fill_null(pc.equal(kind, t), False).to_numpy(zero_copy_only=False) for t in MIN_FIELDS}
    ok = np.zeros(n, dtype=bool)
    for t, least in MIN_FIELDS.items():
        ok |= typ[t] & (fields.count >= least)
    pub, before, after, end, recall = (typ[t] for t in (PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL))
    head = pub | before | end | recall  # timestamp, regionId, groupName in fields 1-3
    count = fields.count
    checks = []

    def number(i: int, where: np.ndarray, pattern: str = _INT) -> pa.Array:
        values, good = _number(fields.field(i, where), pattern)
        checks.append(good | ~where)
        return values

    timestamp = _pick(n, pa.int64(), (head, number(1, head, _LONG)),
                      (after, number(7, after & (count >= 9), _LONG)))
    msg_type = _pick(n, pa.int64(), (pub, number(11, pub)), (end, number(9, end)))
    checks.append(~(pub | end) | pc.fill_null(pc.and_(pc.greater_equal(msg_type, 0),
                                                      pc.less(msg_type, MESSAGE_TYPES)), False)
                  .to_numpy(zero_copy_only=False))
    state = fields.field(11, end)
    checks.append(~end | pc.fill_null(pc.is_in(state, pa.array(TRANSACTION_STATES)), False)
                  .to_numpy(zero_copy_only=False))
    columns = {
        "timestamp": timestamp,
        "region_id": fields.field(2, head),
        "group": _pick(n, pa.string(), (head, fields.field(3, head)), (after, fields.field(8, after))),
        "topic": fields.field(4, pub | end | recall),
        "msg_id": _pick(n, pa.string(), (head, fields.field(5, head)), (after, fields.field(2, after))),
        "offset_msg_id": fields.field(12, pub & (count >= 14)),
        "tags": fields.field(6, pub | end),
        "keys": _pick(n, pa.string(), (pub | before | end, fields.field(7, pub | before | end)),
                      (after, fields.field(5, after))),
        "store_host": fields.field(8, pub | end),
        "body_length": number(9, pub),
        "cost_time": _pick(n, pa.int64(), (pub, number(10, pub)), (after, number(3, after))),
        "msg_type": msg_type,
        "success": _success(fields, pub, after, recall),
        "context_code": number(6, after & (count >= 7)),
        "retry_times": number(6, before),
        "request_id": _pick(n, pa.string(), (before, fields.field(4, before)), (after, fields.field(1, after))),
        "client_host": fields.field(14, pub & (count >= 15)),
        "transaction_id": fields.field(10, end),
        "transaction_state": state,
        "from_transaction_check": _true(fields.field(12, end)),
    }
    for good in checks:
        ok &= good
    ok &= _fits_int(columns, ("body_length", "cost_time", "msg_type", "context_code", "retry_times"))
    table = pa.table({"body_index": pa.nulls(n, pa.int64()), "record_index": pa.nulls(n, pa.int32()),
                      "field_count": pa.array(count, pa.int32()), "trace_type": kind,
                      **{name: columns[name] for name in RECORD_SCHEMA.names[4:]}})
    return table.cast(RECORD_SCHEMA, safe=False), ok


def _success(fields, pub, after, recall):
    """isSuccess as each type's decoder sets it: Pub's 13th field of 13, 14th of 14 or more (12 fields: false,
    the context's default); SubAfter's 5th; Recall's 7th; null for the types that carry none."""
    count = fields.count
    return _pick(len(fields), pa.bool_(),
                 (pub & (count == 12), pa.repeat(pa.scalar(False), len(fields))),
                 (pub & (count == 13), _true(fields.field(12))), (pub & (count >= 14), _true(fields.field(13))),
                 (after, _true(fields.field(4))), (recall, _true(fields.field(6))))


def _pick(n, typ, *choices):
    """A column of type `typ`: each row's value from the first (mask, values) whose mask holds there, else null."""
    out = pa.nulls(n, typ)
    for mask, values in reversed(choices):
        out = pc.if_else(pa.array(mask), pc.cast(values, typ, safe=False), out)
    return out


def _number(values, pattern):
    """(values parsed where they are numbers Java's parseInt / parseLong takes, as int64; where they are or are
    null)."""
    good = pc.fill_null(pc.match_substring_regex(values, pattern), False)
    parsed = pc.cast(pc.if_else(good, pc.utf8_ltrim(values, characters="+"), pa.scalar(None, pa.string())),
                     pa.int64(), safe=False)
    return parsed, good.to_numpy(zero_copy_only=False) | ~values.is_valid().to_numpy(zero_copy_only=False)


def _fits_int(columns, names):
    """Whether each row's int fields lie in Java's int range (parseInt throws beyond)."""
    ok = np.ones(len(columns[names[0]]), dtype=bool)
    for name in names:
        v = columns[name]
        ok &= pc.fill_null(pc.and_(pc.greater_equal(v, _INT_RANGE[0]), pc.less_equal(v, _INT_RANGE[1])), True) \
            .to_numpy(zero_copy_only=False)
    return ok


def _true(values):
    """Boolean.parseBoolean: "true" in any case is true, anything else false (null where there is no field)."""
    return pc.equal(pc.utf8_lower(values), "true")


def _array(values):
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
