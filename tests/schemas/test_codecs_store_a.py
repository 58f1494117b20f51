"""Decoding fixture store_a gives, field by field, what RocketMQ's MessageDecoder and ConsumeQueue read."""
import base64
import gzip
import json

import pytest

import schemas

MESSAGE_FIELDS = {
    "topic": "topic", "queueId": "queue_id", "queueOffset": "queue_offset",
    "commitLogOffset": "commitlog_offset", "storeSize": "store_size", "sysFlag": "sys_flag", "flag": "flag",
    "bornTimestamp": "born_timestamp", "bornHost": "born_host", "storeTimestamp": "store_timestamp",
    "storeHost": "store_host", "msgId": "msg_id", "reconsumeTimes": "reconsume_times",
    "preparedTransactionOffset": "prepared_transaction_offset", "bodyCRC": "body_crc", "tagsCode": "tags_code",
}


def _jsonl_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def decoded(store_a):
    return schemas.read_messages(store_a / "store").to_pylist()


@pytest.fixture(scope="module")
def units(store_a):
    return schemas.read_consume_queues(store_a / "store").to_pylist()


def test_every_message_field_equals_rocketmq_decode(store_a, decoded):
    expected = _jsonl_gz(store_a / "messages.jsonl.gz")
    assert len(decoded) == len(expected)
    for got, want in zip(decoded, expected):  # log order is part of read_messages' contract
        diffs = {col: (got[col], want[key]) for key, col in MESSAGE_FIELDS.items() if got[col] != want[key]}
        assert not diffs, (want["commitLogOffset"], diffs)
        assert base64.b64encode(got["body"]).decode() == want["body_base64"]
        assert dict(got["properties"]) == want["properties"]
        assert got["tags"] == want["properties"].get("TAGS")
        assert got["keys"] == want["properties"].get("KEYS")


def test_ipv6_born_hosts_print_like_java(decoded):
    v6 = [m["born_host"] for m in decoded if m["sys_flag"] & 0x10]
    assert v6 and all(h.startswith("fe80:0:0:0:0:0:1:") for h in v6)


def test_compressed_bodies_are_inflated(decoded):
    compressed = [m for m in decoded if m["sys_flag"] & 1]
    assert compressed
    assert all(len(m["body"]) >= 4096 for m in compressed)


def test_every_consume_queue_unit_equals_rocketmq_read(store_a, units):
    expected = _jsonl_gz(store_a / "cq.jsonl.gz")
    got = {(u["topic"], u["queue_id"], u["queue_offset"]): u for u in units}
    assert len(got) == len(units) == len(expected)
    for e in expected:
        g = got[(e["topic"], e["queueId"], e["index"])]
        assert g["commitlog_offset"] == e["phyOffset"]
        assert g["size"] == e["size"]
        assert g["tags_code_raw"] == e["tagsCode_raw"]
        assert g["is_ext_addr"] == e["isExtAddr"]
        if e["ext_ok"]:
            assert (g["tags_code"], g["msg_store_time"]) == (e["ext_tagsCode"], e["ext_msgStoreTime"])
        bitmap = g["filter_bitmap"]
        assert (bitmap.hex() if bitmap is not None else None) == e["ext_filterBitMap_hex"]


def test_every_decoded_message_is_the_target_of_exactly_one_rocketmq_unit(store_a, decoded):
    """store_a has no message without a consume-queue unit: the records decoded from the commit log are
    exactly the ones RocketMQ's consume queues point at (cq.jsonl.gz), each at the unit's size."""
    cq = _jsonl_gz(store_a / "cq.jsonl.gz")
    targets = {u["phyOffset"]: u["size"] for u in cq}
    assert len(targets) == len(cq) == len(decoded)
    assert {m["commitlog_offset"]: m["store_size"] for m in decoded} == targets
