"""Consume-queue units rebuilt from the commit log equal the units RocketMQ's dispatcher wrote (cq.jsonl.gz),
unit for unit, on every fixture store: topic, queue id, queue offset, commit-log offset, size and tag code
(for a unit with an ext address, the ext unit's tag code)."""
import gzip
import json

import pyarrow as pa
import pytest

import schemas
from schemas import layout as L
from schemas.cq_rebuild import units_of
from schemas.errors import UnsupportedStoreError


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
    units = units_of(schemas.read_messages(str(fixture / "store"), with_body=False)).to_pylist()
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


def _record(topic, properties, store_time=1_000_000, sys_flag=0):
    return {"topic": topic, "queue_id": 0, "queue_offset": 7, "commitlog_offset": 100, "store_size": 200,
            "sys_flag": sys_flag, "store_timestamp": store_time, "tags": properties.get("TAGS"),
            "properties": list(properties.items())}


def _units(*records):
    table = pa.Table.from_pylist(list(records), schema=pa.schema([
        ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()), ("store_size", pa.int32()), ("sys_flag", pa.int32()),
        ("store_timestamp", pa.int64()), ("tags", pa.string()), ("properties", pa.map_(pa.string(), pa.string()))]))
    return units_of(table).column("tags_code").to_pylist()


def test_a_scheduled_messages_tag_code_is_its_delivery_time():
    # levels by hand from messageDelayLevel "1s 5s 10s 30s 1m ... 2h": level 3 = 10 s, level 99 = the last, 2 h
    assert _units(_record("SCHEDULE_TOPIC_XXXX", {"DELAY": "3", "TAGS": "A"}),
                  _record("SCHEDULE_TOPIC_XXXX", {"DELAY": "99"}),
                  _record("SCHEDULE_TOPIC_XXXX", {"DELAY": "0", "TAGS": "A"}),
                  _record("TopicTest", {"DELAY": "3", "TAGS": "A"})) == [1_010_000, 1_000_000 + 7_200_000, 65, 65]


def test_half_and_rollback_records_get_no_unit():
    assert _units(_record("T", {}, sys_flag=L.TRANSACTION_PREPARED), _record("T", {}, sys_flag=L.TRANSACTION_ROLLBACK),
                  _record("T", {"TAGS": "B"}, sys_flag=L.TRANSACTION_COMMIT)) == [66]


def test_records_that_dispatch_to_several_queues_are_refused_naming_the_topic():
    with pytest.raises(UnsupportedStoreError, match="topic LMQ_T: records with INNER_MULTI_DISPATCH"):
        _units(_record("LMQ_T", {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b"}))
