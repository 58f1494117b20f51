"""Consume-queue units as the broker builds them from its commit log: what ReputMessageService dispatches to
CommitLogDispatcherBuildConsumeQueue for every record (RocketMQ 4.9.x `CommitLog.checkMessageAndReturnSize`,
`DefaultMessageStore.putMessagePositionInfo`), derived from the decoded records alone. Every fact a unit holds
is in its record, so a lost or doubted consume queue can be checked or rebuilt from the log.

The broker's rules:
- a unit per record, except transaction PREPARED and ROLLBACK records (half messages are not consumable);
- the unit's topic, queue id, queue offset, commit-log offset and size are the record's;
- the tag code is the tag's hash (schemas/tag_codes.py; 0 without a tag), except for SCHEDULE_TOPIC_XXXX
  records with a positive delay level: the delivery time, store time + that level's delay
  (ScheduleMessageService.computeDeliverTimestamp; a level beyond the highest is the highest);
- LMQ records (INNER_MULTI_DISPATCH, 4.9.3+) and inner batches (INNER_NUM, 5.x BatchCQ) dispatch to more queues
  or more offsets than one unit: refused here, naming the topic (UnsupportedStoreError).
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import layout as L
from schemas.errors import UnsupportedStoreError
from schemas.tag_codes import tags_code_array

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# MessageStoreConfig.messageDelayLevel's default, "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_LEVELS_MS = np.array([1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200],
                           dtype=np.int64) * 1000
FAN_OUT = ("INNER_MULTI_DISPATCH", "INNER_NUM")

UNITS_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                          ("commitlog_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64())])


def units_of(messages, delay_levels_ms=DELAY_LEVELS_MS):
    """The units (UNITS_SCHEMA) the broker dispatches for decoded records (MESSAGE_SCHEMA, bodies not needed),
    in record order."""
    tx = messages.column("sys_flag").to_numpy() & L.TRANSACTION_MASK
    keep = (tx != L.TRANSACTION_PREPARED) & (tx != L.TRANSACTION_ROLLBACK)
    if not keep.all():
        messages = messages.filter(pa.array(keep))
    properties = messages.column("properties")
    for name in FAN_OUT:
        fanned = pc.is_valid(pc.map_lookup(properties, name, "first")).to_numpy(zero_copy_only=False)
        if fanned.any():
            topic = messages.column("topic")[int(np.argmax(fanned))].as_py()
            raise UnsupportedStoreError(f"topic {topic}: records with {name} dispatch more than one consume-queue "
                                        "unit each; rebuilding their units from the commit log is not supported")
    codes = tags_code_array(messages.column("tags"))
    scheduled = pc.equal(messages.column("topic"), SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    if scheduled.any():
        codes = np.where(scheduled, _delivery_times(messages, delay_levels_ms, codes), codes)
    return pa.table({"topic": messages.column("topic"), "queue_id": messages.column("queue_id"),
                     "queue_offset": messages.column("queue_offset"),
                     "commitlog_offset": messages.column("commitlog_offset"),
                     "size": messages.column("store_size"), "tags_code": pa.array(codes, pa.int64())},
                    schema=UNITS_SCHEMA)


def _delivery_times(messages, delay_levels_ms, codes):
    """Per record: store time + its delay level's delay where DELAY is a positive level (clamped to the
    highest), else the tag code it has."""
    text = pc.map_lookup(messages.column("properties"), "DELAY", "first")
    numeric = pc.fill_null(pc.match_substring_regex(text, r"^-?[0-9]{1,9}$"), False).to_numpy(zero_copy_only=False)
    level = np.zeros(len(codes), dtype=np.int64)
    if numeric.any():
        level[numeric] = pc.cast(text.filter(pa.array(numeric)), pa.int64()).to_numpy(zero_copy_only=False)
    level = np.minimum(level, len(delay_levels_ms))
    delayed = level > 0
    out = codes.copy()
    store_time = messages.column("store_timestamp").to_numpy()
    out[delayed] = store_time[delayed] + delay_levels_ms[level[delayed] - 1]
    return out
