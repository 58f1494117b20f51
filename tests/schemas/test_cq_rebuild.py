"""Consume-queue units rebuilt from the commit log equal the units RocketMQ's dispatcher wrote (cq.jsonl.gz),
unit for unit, on every fixture store: topic, queue id, queue offset, commit-log offset, size and tag code
(for a unit with an ext address, the ext unit's tag code)."""
import gzip
import json

import numpy as np
import pytest

import schemas
from schemas.log import layout as L
from schemas.queues.cq_rebuild import END_DAMAGED, END_DATA, rebuild_units
from schemas.store.local_api import rebuilt_units
from tools.store_writer import Message, encode_record


def _rocketmq_units(fixture):
    units = {}
    with gzip.open(fixture / "cq.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            u = json.loads(line)
            code = u["ext_tagsCode"] if u["isExtAddr"] else u["tagsCode_raw"]
            units[(u["topic"], u["queueId"], u["index"])] = (u["phyOffset"], u["size"], code)
    return units


@pytest.mark.parametrize("name", ["store_a", "store_dledger"])
def test_units_rebuilt_from_the_commit_log_equal_rocketmqs_consume_queue(request, name):
    fixture = request.getfixturevalue(name)
    units = rebuilt_units(str(fixture / "store")).to_pylist()
    got = {(u["topic"], u["queue_id"], u["queue_offset"]): (u["commitlog_offset"], u["size"], u["tags_code"])
           for u in units}
    assert len(got) == len(units)  # no queue offset twice
    assert got == _rocketmq_units(fixture)


def test_the_fixtures_hold_what_the_rules_are_about(store_dledger):
    """Half and rollback records (no unit) and scheduled messages (tag code: delivery time) are there."""
    messages = schemas.read_messages(str(store_dledger / "store"), with_body=False)
    tx = {f & L.TRANSACTION_MASK for f in messages.column("sys_flag").to_pylist()}
    assert {L.TRANSACTION_PREPARED, L.TRANSACTION_ROLLBACK} <= tx
    assert "SCHEDULE_TOPIC_XXXX" in set(messages.column("topic").to_pylist())


def _log(*messages, blank=True):
    """A commit log's bytes holding the records of `messages` at offset 1,000 (queue offsets 7, 8, ...)."""
    out, at = b"", 1000
    for k, m in enumerate(messages):
        record = encode_record(m, at + len(out), 7 + k)
        out += record
    if blank:
        out += (16).to_bytes(4, "big") + (L.BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big") + bytes(8)
    return np.frombuffer(out, np.uint8)


def _codes(*messages):
    return rebuild_units(_log(*messages), 1000).units.column("tags_code").to_pylist()


def _msg(topic, properties=None, store_time=1_000_000, sys_flag=0, raw=None):
    return Message(topic, 0, b"body", dict(properties or {}), sys_flag=sys_flag, store_timestamp=store_time,
                   properties_raw=raw)


def test_a_scheduled_messages_tag_code_is_its_delivery_time():
    # levels by hand from messageDelayLevel "1s 5s 10s 30s 1m ... 2h": level 3 = 10 s, level 99 = the last, 2 h
    codes = _codes(_msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "3", "TAGS": "A"}),
                   _msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "99"}),
                   _msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "0", "TAGS": "A"}),
                   _msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "x1", "TAGS": "A"}),
                   _msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "+0000000002"}),  # Integer.parseInt reads 2: 5 s
                   _msg("SCHEDULE_TOPIC_XXXX", {"DELAY": "2147483648", "TAGS": "A"}),  # beyond an int: throws
                   _msg("TopicTest", {"DELAY": "3", "TAGS": "A"}))
    assert codes == [1_010_000, 1_000_000 + 7_200_000, 65, 65, 1_005_000, 65, 65]


def test_half_and_rollback_records_get_no_unit():
    assert _codes(_msg("T", sys_flag=L.TRANSACTION_PREPARED), _msg("T", sys_flag=L.TRANSACTION_ROLLBACK),
                  _msg("T", {"TAGS": "B"}, sys_flag=L.TRANSACTION_COMMIT)) == [66]


def test_tags_are_read_as_string2messageProperties_reads_them():
    # "TagA".hashCode() = 2598919, "订单".hashCode() = 35746 * 31 + 21333 = 1129459 (by hand: U+8BA2, U+5355);
    # a later TAGS piece wins; a piece without a value is dropped; no TAGS: 0
    assert _codes(_msg("T", raw="KEYS\x01k\x02TAGS\x01TagA"), _msg("T", raw="TAGS\x01x\x02TAGS\x01TagA"),
                  _msg("T", raw="TAGS\x01订单"), _msg("T", raw="TAGS\x01\x02KEYS\x01k"),
                  _msg("T", raw="")) == [2598919, 2598919, 1129459, 0, 0]


def test_every_unit_field_is_the_records():
    units = rebuild_units(_log(_msg("订单Topic", {"TAGS": "A"}, store_time=5), _msg("T2", {})), 1000).units
    first = encode_record(_msg("订单Topic", {"TAGS": "A"}, store_time=5), 1000, 7)
    second = encode_record(_msg("T2", {}), 1000 + len(first), 8)
    assert units.to_pylist() == [
        dict(topic="订单Topic", queue_id=0, queue_offset=7, commitlog_offset=1000, size=len(first), tags_code=65,
             store_timestamp=5, batch_num=1),
        dict(topic="T2", queue_id=0, queue_offset=8, commitlog_offset=1000 + len(first), size=len(second),
             tags_code=0, store_timestamp=1_000_000, batch_num=1)]


def test_a_pass_ends_at_the_blank_record_or_at_a_damaged_one():
    log = _log(_msg("T"), _msg("T"))
    walked = rebuild_units(log, 1000)
    assert (walked.units.num_rows, walked.how, walked.end) == (2, END_DATA, len(log) - 16)
    damaged = log.copy()
    second = walked.units.column("commitlog_offset")[1].as_py() - 1000
    damaged[second + 4] ^= 0xFF  # its magic code
    walked = rebuild_units(damaged, 1000)
    assert (walked.units.num_rows, walked.how, walked.end) == (1, END_DAMAGED, second)


def test_many_topics_keep_their_names():
    names = [f"T{k}" for k in range(1500)]  # more than the first topic table holds
    units = rebuild_units(_log(*[_msg(t) for t in names]), 1000).units
    assert units.column("topic").to_pylist() == names


def _queues(*messages):
    units = rebuild_units(_log(*messages), 1000).units
    return [(u["topic"], u["queue_id"], u["queue_offset"], u["commitlog_offset"]) for u in units.to_pylist()]


def test_a_multi_dispatched_record_adds_a_unit_in_each_queue_it_names():
    # ConsumeQueue.multiDispatchLmqQueue, by hand: queue 0 for an %LMQ% name, the record's queue id for another
    # name, the offset INNER_MULTI_QUEUE_OFFSET gives; a name with a path separator skipped
    got = _queues(_msg("T", {"INNER_MULTI_DISPATCH": "%LMQ%a,plain,%LMQ%b/c,%LMQ%d",
                             "INNER_MULTI_QUEUE_OFFSET": "3,4,5,6", "TAGS": "A"}))
    assert got == [("T", 0, 7, 1000), ("%LMQ%a", 0, 3, 1000), ("plain", 0, 4, 1000), ("%LMQ%d", 0, 6, 1000)]
    assert _codes(_msg("T", {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "3", "TAGS": "A"})) == \
        [65, 65]  # the LMQ unit's tag code is the record's


def test_a_record_is_not_multi_dispatched_when_the_lists_differ_or_its_topic_is_a_system_one():
    assert _queues(_msg("T", {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "3"})) == \
        [("T", 0, 7, 1000)]
    assert _queues(_msg("%RETRY%G", {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "3"})) == \
        [("%RETRY%G", 0, 7, 1000)]
    assert _queues(_msg("rmq_sys_x", {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "3"})) == \
        [("rmq_sys_x", 0, 7, 1000)]
    # Java's split(",") drops trailing empty pieces: "a," is one queue, as "3" is one offset
    assert _queues(_msg("T", {"INNER_MULTI_DISPATCH": "%LMQ%a,", "INNER_MULTI_QUEUE_OFFSET": "3"})) == \
        [("T", 0, 7, 1000), ("%LMQ%a", 0, 3, 1000)]


def test_an_inner_batch_is_one_unit_at_its_base_offset_covering_its_messages():
    # CommitLog.setBatchSizeIfNeeded: msgBaseOffset INNER_BASE, batchSize INNER_NUM (both needed)
    units = rebuild_units(_log(_msg("B", {"INNER_NUM": "3", "INNER_BASE": "40"}), _msg("B", {"INNER_NUM": "3"})),
                          1000).units
    assert [(u["queue_offset"], u["batch_num"]) for u in units.to_pylist()] == [(40, 3), (8, 1)]
