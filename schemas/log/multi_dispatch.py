"""Multi-dispatch (RocketMQ 4.9.3+, LMQ: RocketMQ MQTT and every `INNER_MULTI_DISPATCH` user): a record of topic T
names more consume queues in its properties, `INNER_MULTI_DISPATCH` (queue names, comma-separated) and
`INNER_MULTI_QUEUE_OFFSET` (its queue offset in each, added by the CommitLog), and the dispatcher writes a unit
for it in each (`ConsumeQueue.multiDispatchLmqQueue`): queue id 0 for an LMQ (`%LMQ%` name), else the record's own
queue id; a name holding a path separator is skipped; nothing when the two lists differ in length, when either is
blank, or when the record's topic is a retry, system or schedule topic (`MultiDispatchUtils`).

A unit of such a queue points at a record of another topic, queue and offset: it agrees with its record when the
record dispatched to that queue at that offset (`dispatched_at`)."""
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.log import layout as L

DISPATCH = "INNER_MULTI_DISPATCH"
QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
NOT_DISPATCHED_PREFIXES = ("%RETRY%", "rmq_sys_")  # MixAll.RETRY_GROUP_TOPIC_PREFIX, TopicValidator.SYSTEM_TOPIC_PREFIX
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def is_lmq(name: str | None) -> bool:
    """MixAll.isLmq: a light message queue's name."""
    return name is not None and name.startswith(L.LMQ_PREFIX)


def _pieces(properties, name):
    """The property's value split as Java's String.split(",") splits it (trailing empty pieces dropped): a
    ListArray, null where the property is absent or blank."""
    values = pc.map_lookup(properties, pa.scalar(name), "first")
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(values), ""), True)
    return pc.split_pattern(pc.if_else(blank, pa.scalar(None, pa.string()), pc.utf8_rtrim(values, ",")), ",")


def dispatched_at(record_topics: pa.Array | pa.ChunkedArray, record_queue_ids: np.ndarray | Sequence[int],
                  properties: pa.Array | pa.ChunkedArray, unit_topics: pa.Array | pa.ChunkedArray,
                  unit_queue_ids: np.ndarray | Sequence[int], unit_offsets: np.ndarray | Sequence[int]) -> np.ndarray:
    """Per row (arrays of one length: a unit and its decoded record): whether the record's multi-dispatch wrote a
    unit in the unit's queue (topic, queue id) at the unit's queue offset."""
    n = len(unit_offsets)
    out = np.zeros(n, bool)
    if not n:
        return out
    queues, offsets = _pieces(properties, DISPATCH), _pieces(properties, QUEUE_OFFSET)
    same = pc.fill_null(pc.equal(pc.list_value_length(queues), pc.list_value_length(offsets)), False)
    same = same.to_numpy(zero_copy_only=False) & _dispatching(record_topics)
    if not same.any():
        return out
    parent = pc.list_parent_indices(queues).to_numpy()
    names = pc.list_flatten(queues)
    at = pc.list_flatten(offsets)
    unit_topic = pc.take(unit_topics, pa.array(parent))
    lmq = pc.starts_with(names, L.LMQ_PREFIX).to_numpy(zero_copy_only=False)
    want_queue = np.where(lmq, 0, np.asarray(record_queue_ids)[parent])
    hit = (pc.equal(names, unit_topic).to_numpy(zero_copy_only=False)
           & (want_queue == np.asarray(unit_queue_ids)[parent])
           & pc.equal(at, pc.cast(pa.array(np.asarray(unit_offsets)[parent]), pa.string())).to_numpy(
               zero_copy_only=False)
           & same[parent])
    np.logical_or.at(out, parent[hit], True)
    return out


def _dispatching(record_topics):
    """Whether records of these topics are multi-dispatched at all (MultiDispatchUtils.isNeedHandleMultiDispatch)."""
    skip = pc.equal(record_topics, SCHEDULE_TOPIC)
    for prefix in NOT_DISPATCHED_PREFIXES:
        skip = pc.or_(skip, pc.starts_with(record_topics, prefix))
    return ~pc.fill_null(skip, True).to_numpy(zero_copy_only=False)


def dispatched_queues(record_topics: pa.Array | pa.ChunkedArray, record_queue_ids: np.ndarray | Sequence[int],
                      properties: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The units each record's multi-dispatch wrote (ConsumeQueue.multiDispatchLmqQueue), as a table: `row` (the
    record's row), `topic` (the queue's name), `queue_id` (0 for an LMQ, else the record's) and `queue_offset`
    (its INNER_MULTI_QUEUE_OFFSET piece): what explain --key lists as a message's LMQ copies. A name holding a path
    separator, or an offset Long.parseLong refuses, writes no unit."""
    queues, offsets = _pieces(properties, DISPATCH), _pieces(properties, QUEUE_OFFSET)
    same = pc.fill_null(pc.equal(pc.list_value_length(queues), pc.list_value_length(offsets)), False)
    same = same.to_numpy(zero_copy_only=False) & _dispatching(record_topics)
    parent = pc.list_parent_indices(queues).to_numpy()
    names, at = pc.list_flatten(queues), pc.list_flatten(offsets)
    lmq = pc.starts_with(names, L.LMQ_PREFIX).to_numpy(zero_copy_only=False)
    keep = (same[parent] & ~pc.match_substring(names, "/").to_numpy(zero_copy_only=False)
            & pc.match_substring_regex(at, r"^[+-]?[0-9]{1,18}$").to_numpy(zero_copy_only=False))
    rows = parent[keep]
    return pa.table({"row": pa.array(rows, pa.int64()), "topic": names.filter(pa.array(keep)),
                     "queue_id": pa.array(np.where(lmq[keep], 0, np.asarray(record_queue_ids)[rows]), pa.int32()),
                     "queue_offset": pc.cast(at.filter(pa.array(keep)), pa.int64())})
