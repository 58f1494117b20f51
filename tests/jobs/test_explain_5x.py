"""python -m jobs.explain --key K on RocketMQ 5.x stores: every copy of a key (each LMQ queue multi-dispatch put the
message in, a BatchCQ batch's record and each inner message by its own UNIQ_KEY, a POP retry copy), every group's
verdict on each copy, the timer's records named (the recall marker among them), times in ISO-8601 beside epoch ms.

Expectations come from the fixtures' expected/ files (RocketMQ 5.3.3's getMessage, its LMQ consume queues, its
client's unwrap, the timer and POP ledgers RocketMQ's reads gave) or are written out by hand."""
import json
from datetime import datetime

import pytest

from jobs import explain
from jobs.explain.times import iso


@pytest.fixture(scope="module")
def groups(store_5x):
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((store_5x / "expected" / "groups").iterdir())]


@pytest.fixture(scope="module")
def subscriptions(groups, tmp_path_factory):
    path = tmp_path_factory.mktemp("subs") / "subs5.json"
    path.write_text(json.dumps({"groups": [{k: g[k] for k in ("group", "topic", "expressionType", "expression")}
                                           for g in groups]}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lmq(store_5x):
    return json.loads((store_5x / "expected" / "lmq.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ledger(store_5x):
    return json.loads((store_5x / "expected" / "timer_ledger.json").read_text(encoding="utf-8"))["ledger"]


def _returned(groups):
    """{(group, topic, msgId)} of every row RocketMQ returned."""
    return {(g["group"], g["topic"], r["msgId"]) for g in groups for r in g["rows"]}


def _groups_of(groups, topic):
    return {g["group"] for g in groups if g["topic"] == topic}


def _key(capsys, store_5x, subscriptions, key, *more):
    code = explain.main([str(a) for a in ["--store", store_5x / "store", "--subscriptions", subscriptions,
                                          "--key", key, *more]])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def _units_of(lmq, key):
    """{(LMQ queue, its queue offset): the unit} of RocketMQ's LMQ units that point at the message `key`."""
    return {(q, u["queueOffset"]): u for q, v in lmq.items() for u in v["units"] if u["msgId"] == key}


def _in_several_lmqs(lmq):
    counts = {}
    for q, v in lmq.items():
        for u in v["units"]:
            counts.setdefault(u["msgId"], set()).add(q)
    return next(k for k, qs in sorted(counts.items()) if len(qs) >= 2)


def test_a_message_is_found_in_every_lmq_queue_multi_dispatch_put_it_in(
        capsys, store_5x, subscriptions, groups, lmq):
    key = _in_several_lmqs(lmq)
    rows = json.loads(_key(capsys, store_5x, subscriptions, key, "--json")[0])
    units = _units_of(lmq, key)
    copies = [r for r in rows if r["copy"] == "lmq"]
    assert {(r["topic"], r["queue_offset"]) for r in copies} == set(units)
    returned = _returned(groups)
    for (queue, offset), unit in units.items():
        mine = [r for r in copies if (r["topic"], r["queue_offset"]) == (queue, offset)]
        assert {r["group"] for r in mine} == _groups_of(groups, queue)
        for r in mine:
            assert r["queue_id"] == 0 and r["uniq_key"] == key and r["commit_log_offset"] == unit["commitLogOffset"]
            assert r["copy_of"] == {"topic": unit["sourceTopic"], "queue_id": unit["sourceQueueId"],
                                    "queue_offset": unit["sourceQueueOffset"]}
            assert r["delivered"] == ((r["group"], queue, key) in returned)
    source = {r["topic"] for r in rows if r["copy"] == "message"}
    assert source == {next(iter(units.values()))["sourceTopic"]}  # and the message in its own topic


def test_topic_lmq_with_key_finds_the_message_in_that_lmq_queue(capsys, store_5x, subscriptions, groups, lmq):
    key = _in_several_lmqs(lmq)
    queue, offset = min(_units_of(lmq, key))
    rows = json.loads(_key(capsys, store_5x, subscriptions, key, "--topic", queue, "--json")[0])
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows} == {(queue, 0, offset)}
    returned = _returned(groups)
    assert {r["group"]: r["delivered"] for r in rows} == \
        {g: (g, queue, key) in returned for g in _groups_of(groups, queue)}


def _batches(groups):
    """The rows of the inner batches G_BATCH_ALL ('*': every batch) returned."""
    every = next(g for g in groups if g["group"] == "G_BATCH_ALL")
    return [r for r in every["rows"] if r.get("inner")]


def test_an_inner_batch_message_is_found_by_its_own_uniq_key(capsys, store_5x, subscriptions, groups):
    batch = next(r for r in _batches(groups) if len(r["inner"]) >= 3)
    inner = batch["inner"][1]
    out = _key(capsys, store_5x, subscriptions, inner["msgId"], "--json")[0]
    rows = json.loads(out)
    assert {r["copy"] for r in rows} == {"batch_inner"}
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows} == \
        {("TopicBatch", batch["queueId"], inner["queueOffset"])}
    returned = _returned(groups)
    for r in rows:
        assert r["uniq_key"] == inner["msgId"] and r["properties"]["UNIQ_KEY"] == inner["msgId"]
        assert r["tags"] == inner["tags"] and r["commit_log_offset"] == batch["commitLogOffset"]
        assert r["batch"] == {"index": 1, "size": batch["batchNum"], "base_offset": batch["queueOffset"],
                              "record_uniq_key": batch["msgId"]}
        # the broker returns a batch as one record; '*' and SQL92 consumers keep every inner message of it
        assert r["delivered"] == ((r["group"], "TopicBatch", batch["msgId"]) in returned)
    assert {r["group"] for r in rows} == _groups_of(groups, "TopicBatch")


def test_a_batch_record_is_labelled_with_its_own_uniq_key(capsys, store_5x, subscriptions, groups):
    batch = _batches(groups)[0]
    rows = json.loads(_key(capsys, store_5x, subscriptions, batch["msgId"], "--json")[0])
    returned = _returned(groups)
    assert {(r["copy"], r["queue_offset"], r["uniq_key"]) for r in rows} == \
        {("batch_record", batch["queueOffset"], batch["msgId"])}
    assert {r["group"]: r["delivered"] for r in rows} == \
        {g: (g, "TopicBatch", batch["msgId"]) in returned for g in _groups_of(groups, "TopicBatch")}
    assert rows[0]["batch"] == {"size": batch["batchNum"], "base_offset": batch["queueOffset"]}


def test_a_recall_marker_is_named_as_one(capsys, store_5x, subscriptions, ledger):
    key, entry = next((k, v) for k, v in sorted(ledger.items()) if v["state"] == "cancelled")
    out, _ = _key(capsys, store_5x, subscriptions, key, "--json")
    kinds = {r["commit_log_offset"]: r["copy"] for r in json.loads(out)}
    assert kinds == {entry["scheduledCommitLogOffset"]: "timer_scheduled",
                     entry["cancelMarkerCommitLogOffset"]: "recall_marker"}
    text, _ = _key(capsys, store_5x, subscriptions, key)
    assert "(recall marker: cancels the timer message of this UNIQ_KEY)" in text


def test_a_delivered_timer_message_names_its_scheduled_record_and_delivered_copy(
        capsys, store_5x, subscriptions, ledger):
    key, entry = next((k, v) for k, v in sorted(ledger.items()) if v["state"] == "delivered" and not v["direct"])
    rows = json.loads(_key(capsys, store_5x, subscriptions, key, "--json")[0])
    assert {r["commit_log_offset"]: r["copy"] for r in rows} == {
        entry["scheduledCommitLogOffset"]: "timer_scheduled", entry["deliveredCommitLogOffset"]: "timer_delivered"}
    timer = rows[0]["timer"]
    assert timer["deliver_ms"] == entry["deliverMs"]
    assert timer["deliver_ms_iso"] == _iso_by_hand(entry["deliverMs"])
    assert timer["delivered_store_timestamp_iso"] == _iso_by_hand(entry["deliveredStoreTs"])


def _iso_by_hand(ms):
    """The fixture's times all fall on 2026-11-27 UTC (its README: made in 2026-11): that day's midnight is
    1795737600000 ms (20,784 days after 1970-01-01), so the time of day is the rest."""
    rest = ms - 1795737600000
    assert 0 <= rest < 86400000
    h, m, s, milli = rest // 3600000, rest // 60000 % 60, rest // 1000 % 60, rest % 1000
    return f"2026-11-27T{h:02d}:{m:02d}:{s:02d}.{milli:03d}Z"


def test_times_are_iso_8601_beside_epoch_ms(capsys, store_5x, subscriptions, groups):
    row = next(g for g in groups if g["group"] == "G_TAG_PAY")["rows"][0]
    rows = json.loads(_key(capsys, store_5x, subscriptions, row["msgId"], "--json")[0])
    for r in rows:
        assert r["store_timestamp"] == row["storeTimestamp"]
        assert r["store_timestamp_iso"] == _iso_by_hand(row["storeTimestamp"])
        assert datetime.fromisoformat(r["store_timestamp_iso"]).timestamp() * 1000 == row["storeTimestamp"]
    text, _ = _key(capsys, store_5x, subscriptions, row["msgId"])
    assert f"storeTimestamp {row['storeTimestamp']} ({_iso_by_hand(row['storeTimestamp'])})" in text


def test_iso_of_well_known_instants():
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1700000000000) == "2023-11-14T22:13:20.000Z"
    assert iso(1700000000001) == "2023-11-14T22:13:20.001Z"
    assert iso(None) is None


@pytest.fixture(scope="module")
def pop_ledger(store_pop):
    return json.loads((store_pop / "expected" / "pop_ledger.json").read_text(encoding="utf-8"))


def test_a_pop_retry_copy_is_found_and_named(capsys, store_pop, pop_ledger, tmp_path):
    subs = tmp_path / "subs_pop.json"
    subs.write_text(json.dumps({"groups": [{"group": g, "topic": t, "expressionType": x, "expression": e}
                                           for g, x, e in pop_ledger["groups"] for t in ("PopTopicA", "PopTopicB")]}),
                    encoding="utf-8")
    entry = next(e for e in pop_ledger["ledger"]["G_POP_TAG"] if e["revived"])
    code = explain.main([str(a) for a in ["--store", store_pop / "store", "--subscriptions", subs,
                                          "--key", entry["uniqKey"], "--json"]])
    rows = json.loads(capsys.readouterr()[0])
    assert code == 0
    kinds = {(r["topic"], r["queue_offset"]): r["copy"] for r in rows}
    assert kinds[(entry["revived"]["retryTopic"], entry["revived"]["retryQueueOffset"])] == "pop_retry"
    assert kinds[(entry["topic"], entry["queueOffset"])] == "message"
