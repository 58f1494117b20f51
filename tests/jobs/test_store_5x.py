"""RocketMQ 5.x stores (issue 45), in process (no Spark): store_5x, written by RocketMQ 5.3.3's own store code (LMQ
queues by multi-dispatch, a BatchCQ topic with inner batches, the timer wheel's files), replays exactly as
RocketMQ's read path returned it, from its consume queues and rebuilt from its commit log; the rebuilt LMQ and
BatchCQ units equal the store's (RocketMQ's lmq.json, batchcq.json); nothing a 5.x broker writes is damage.

Expectations come from the fixture's expected/ files (RocketMQ's getMessage and its client's unwrap)."""
import json
import shutil
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from jobs.datasource import register
from jobs.errors import UsageError
from jobs.plan.build import build_plan
from jobs.plan.units.choose import UnitsFrom
from jobs.settings import JobOptions
from schemas.log.inner_batch import unwrap
from schemas.log.multi_dispatch import dispatched_at
from schemas.queues.cq_rebuild import rebuild_units
from tests.local_replay import kind, replay_local


@pytest.fixture(scope="module")
def groups(store_5x):
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((store_5x / "expected" / "groups").iterdir())]


@pytest.fixture(scope="module")
def subscriptions(store_5x, groups, tmp_path_factory):
    path = tmp_path_factory.mktemp("subs") / "subs5.json"
    path.write_text(json.dumps({"groups": [{k: g[k] for k in ("group", "topic", "expressionType", "expression")}
                                           for g in groups]}), encoding="utf-8")
    return path


def expected_keys(groups):
    """(group, topic, queue_id, queue_offset) of every row a consumer gets, as RocketMQ returned them: an LMQ's
    rows at their offset in the LMQ queue, an inner batch's as its messages after the client's unwrap, TAG rows
    that the client's exact tag check keeps."""
    keys = Counter()
    for g in groups:
        for r in g["rows"]:
            if r.get("clientTagMatch") is False:
                continue
            if r.get("inner"):
                keys.update((g["group"], g["topic"], r["queueId"], m["queueOffset"]) for m in r["inner"])
            elif g["topic"].startswith("%LMQ%"):
                keys[(g["group"], g["topic"], 0, r["cqOffset"])] += 1
            else:
                keys[(g["group"], g["topic"], r["queueId"], r["queueOffset"])] += 1
    return keys


def replayed(store, subscriptions, **options):
    result = replay_local(build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),),
                                                retry=False, **options)))
    return result, Counter((r["group"], r["topic"], r["queue_id"], r["queue_offset"])
                           for r in kind(result, "matched").to_pylist())


@pytest.mark.parametrize("units_from", [UnitsFrom.AUTO, UnitsFrom.COMMIT_LOG])
def test_a_5x_store_replays_exactly_as_rocketmq_returned_it(store_5x, groups, subscriptions, units_from):
    result, got = replayed(store_5x / "store", subscriptions, units_from=units_from)
    want = expected_keys(groups)
    assert got == want
    assert sum(n for k, n in want.items() if k[1] == "TopicBatch") == 274  # groups_summary: inner messages
    assert sum(n for k, n in want.items() if k[1].startswith("%LMQ%")) == 824


def test_every_delivered_row_carries_the_uniq_key_rocketmqs_client_shows(store_5x, groups, subscriptions):
    """The 5.x client's getMsgId is the UNIQ_KEY: an inner batch message's its own, an LMQ copy's its message's."""
    want = {}
    for g in groups:
        for r in g["rows"]:
            if r.get("clientTagMatch") is False:
                continue
            if r.get("inner"):
                want.update({(g["group"], g["topic"], r["queueId"], m["queueOffset"]): m["msgId"] for m in r["inner"]})
            elif g["topic"].startswith("%LMQ%"):
                want[(g["group"], g["topic"], 0, r["cqOffset"])] = r["msgId"]
            else:
                want[(g["group"], g["topic"], r["queueId"], r["queueOffset"])] = r["msgId"]
    result, _ = replayed(store_5x / "store", subscriptions)
    got = {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r["uniq_key"]
           for r in kind(result, "matched").to_pylist()}
    assert got == want and len(set(want.values())) > 1000


def test_an_lmq_row_names_its_lmq_queue_and_the_message_own_queue(store_5x, subscriptions):
    result, _ = replayed(store_5x / "store", subscriptions, groups=("G_LMQ_VIP1",))
    rows = {r["queue_offset"]: r for r in kind(result, "matched").to_pylist()}
    lmq = json.loads((store_5x / "expected" / "lmq.json").read_text(encoding="utf-8"))["%LMQ%vip_1"]["units"]
    assert len(rows) == len(lmq) == 189
    for unit in lmq:
        row = rows[unit["queueOffset"]]
        assert (row["topic"], row["queue_id"], row["commitlog_offset"]) == ("%LMQ%vip_1", 0, unit["commitLogOffset"])
        assert (row["source_topic"], row["source_queue_id"], row["source_queue_offset"]) == \
            (unit["sourceTopic"], unit["sourceQueueId"], unit["sourceQueueOffset"])


def test_an_inner_batch_is_a_row_per_message_with_its_own_offset_key_and_tags(store_5x, groups, subscriptions):
    result, _ = replayed(store_5x / "store", subscriptions, groups=("G_BATCH_ALL",))
    rows = {(r["queue_id"], r["queue_offset"]): r for r in kind(result, "matched").to_pylist()}
    batch = next(g for g in groups if g["group"] == "G_BATCH_ALL")
    inner = [(r, m) for r in batch["rows"] for m in r.get("inner", ())]
    assert len(inner) == 237  # run.json: 48 inner batches holding 237 messages
    for record, message in inner:
        row = rows[(record["queueId"], message["queueOffset"])]
        assert dict(row["properties"]).get("UNIQ_KEY") == message["msgId"]
        assert row["tags"] == message["tags"]
        assert row["commitlog_offset"] == record["commitLogOffset"]
        assert row["msg_id"] == record["offsetMsgId"]


def test_sql92_on_a_batchcq_topic_reads_the_batch_record_not_its_messages(store_5x, subscriptions, groups):
    # G_BATCH_SQL (qty >= 10): RocketMQ returned single messages only; inner messages carry qty, the batch record
    # (CLUSTER, INNER_BASE, INNER_NUM, UNIQ_KEY, WAIT) does not
    result, got = replayed(store_5x / "store", subscriptions, groups=("G_BATCH_SQL",))
    assert sum(got.values()) == 6
    assert got == Counter({k: n for k, n in expected_keys(groups).items() if k[0] == "G_BATCH_SQL"})


def _walked(store):
    parts = []
    for path in sorted((store / "commitlog").iterdir()):
        parts.append(rebuild_units(np.fromfile(path, np.uint8), int(path.name)).units)
    return pa.concat_tables(parts)


def test_rebuilt_lmq_and_batchcq_units_equal_the_store_own(store_5x):
    units = _walked(store_5x / "store")
    lmq = json.loads((store_5x / "expected" / "lmq.json").read_text(encoding="utf-8"))
    for name, queue in lmq.items():
        got = units.filter(pc.equal(units["topic"], name)).to_pylist()
        assert [(u["queue_id"], u["queue_offset"], u["commitlog_offset"], u["size"], u["tags_code"]) for u in got] == \
            [(0, w["queueOffset"], w["commitLogOffset"], w["size"], w["tagsCode"]) for w in queue["units"]]
    batchcq = json.loads((store_5x / "expected" / "batchcq.json").read_text(encoding="utf-8"))
    for qid, want in batchcq.items():
        got = units.filter(pc.and_(pc.equal(units["topic"], "TopicBatch"), pc.equal(units["queue_id"], int(qid))))
        assert [(u["queue_offset"], u["batch_num"], u["commitlog_offset"], u["size"], u["tags_code"])
                for u in got.to_pylist()] == \
            [(w["queueOffset"], w["batchNum"], w["commitLogOffset"], w["size"], w["tagsCode"]) for w in want]


def test_the_audit_finds_the_5x_consume_queues_clean(store_5x, subscriptions):
    result = replay_local(build_plan(JobOptions(store=str(store_5x / "store"), subscription_files=(str(subscriptions),),
                                                retry=False, audit_consume_queue=True)))
    assert kind(result, "cq_audit").num_rows == 0


def test_a_5x_store_without_consume_queues_is_rebuilt_with_its_lmq_queues(store_5x, groups, subscriptions, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(store_5x / "store", store)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "batchconsumequeue")
    _, got = replayed(store, subscriptions)
    assert got == expected_keys(groups)


def test_a_lost_lmq_folder_is_a_lost_queue_rebuilt_from_the_records_that_name_it(store_5x, groups, subscriptions,
                                                                                 tmp_path):
    store = tmp_path / "store"
    shutil.copytree(store_5x / "store", store)
    shutil.rmtree(store / "consumequeue" / "%LMQ%vip_1")
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), retry=False))
    assert not [w for w in planned.warnings if "not in the store" in w]
    _, got = replayed(store, subscriptions)
    assert got == expected_keys(groups)
    assert sum(n for k, n in got.items() if k[1] == "%LMQ%vip_1") > 0


def test_a_missing_consumer_filter_file_is_warned_only_where_a_sql92_group_needs_it(store_5x, groups, tmp_path):
    def warned(kinds):
        path = tmp_path / f"subs-{'-'.join(kinds)}.json"
        path.write_text(json.dumps({"groups": [{k: g[k] for k in ("group", "topic", "expressionType", "expression")}
                                               for g in groups if g["expressionType"] in kinds]}), encoding="utf-8")
        planned = build_plan(JobOptions(store=str(store_5x / "store"), subscription_files=(str(path),), retry=False))
        return [w for w in planned.warnings if "consumerFilter.json" in w]
    assert warned(("TAG",)) == []  # store_5x has no consumerFilter.json: a tag consumer's store never writes one
    assert len(warned(("TAG", "SQL92"))) == 1


def test_a_record_dispatched_to_an_lmq_agrees_with_that_queue_units_only():
    props = pa.array([[("INNER_MULTI_DISPATCH", "%LMQ%a,%LMQ%b"), ("INNER_MULTI_QUEUE_OFFSET", "7,3")]] * 4,
                     pa.map_(pa.string(), pa.string()))
    got = dispatched_at(pa.array(["T"] * 4), np.array([2] * 4), props, pa.array(["%LMQ%a", "%LMQ%b", "%LMQ%b", "X"]),
                        np.array([0, 0, 0, 0]), np.array([7, 3, 7, 7]))
    assert got.tolist() == [True, True, False, False]
    retry = dispatched_at(pa.array(["%RETRY%G"]), np.array([0]), props.slice(0, 1), pa.array(["%LMQ%a"]),
                          np.array([0]), np.array([7]))
    assert retry.tolist() == [False]  # MultiDispatchUtils: retry topics are not dispatched


def test_an_inner_batch_whose_messages_run_past_its_body_is_damaged():
    def encoded(body, props):
        p = props.encode()
        return (len(body) + len(p) + 22).to_bytes(4, "big") + bytes(8) + (0).to_bytes(4, "big") + \
            len(body).to_bytes(4, "big") + body + len(p).to_bytes(2, "big") + p
    whole = encoded(b"a", "TAGS\x01x\x02KEYS\x01k\x02UNIQ_KEY\x01U1") + encoded(b"bc", "TAGS\x01y")
    schema_fields = [("topic", pa.string()), ("queue_offset", pa.int64()), ("sys_flag", pa.int32()),
                     ("flag", pa.int32()), ("body", pa.binary()), ("tags_code", pa.int64()),
                     ("properties", pa.map_(pa.string(), pa.string())), ("tags", pa.string()), ("keys", pa.string()),
                     ("uniq_key", pa.string())]
    messages = pa.table([pa.array(["T", "T"]), pa.array([10, 20]), pa.array([192, 192], pa.int32()),
                         pa.array([0, 0], pa.int32()), pa.array([whole, whole[:-3]]), pa.array([0, 0]),
                         pa.array([[("INNER_NUM", "2")]] * 2, pa.map_(pa.string(), pa.string())),
                         pa.array([None, None], pa.string()), pa.array([None, None], pa.string()),
                         pa.array(["BATCH", "BATCH"])], schema=pa.schema(schema_fields))
    out, parent, index, damaged = unwrap(messages)
    assert damaged.tolist() == [1]
    assert parent.tolist() == [0, 0] and index.tolist() == [0, 1]
    assert out.column("queue_offset").to_pylist() == [10, 11]
    assert out.column("tags").to_pylist() == ["x", "y"]
    assert out.column("keys").to_pylist() == ["k", None]
    assert out.column("uniq_key").to_pylist() == ["U1", None]  # each inner message's own
    assert out.column("body").to_pylist() == [b"a", b"bc"]
    assert [dict(p) for p in out.column("batch_properties").to_pylist()] == [{"INNER_NUM": "2"}] * 2


def test_a_topic_this_version_cannot_read_refuses_only_a_run_that_selects_it(store_5x, subscriptions, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(store_5x / "store", store)
    topics = json.loads((store / "config" / "topics.json").read_text(encoding="utf-8"))
    topics["topicConfigTable"]["TopicMix"]["attributes"] = {"cleanup.policy": "COMPACTION"}
    (store / "config" / "topics.json").write_text(json.dumps(topics), encoding="utf-8")
    with pytest.raises(UsageError, match="topic 'TopicMix': a compaction topic"):
        build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), retry=False))
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), retry=False,
                                    groups=("G_TAG_ALL",)))
    assert any("topic 'TopicMix' left alone: a compaction topic" in w for w in planned.warnings)


def test_the_data_source_reads_lmq_queues_and_inner_batches_as_rocketmq_delivers_them(
        spark, store_5x, groups, subscriptions):
    register(spark)
    df = spark.read.format("rocketmq").option("subscriptions", str(subscriptions)).option("retry", "false") \
        .option("topics", "%LMQ%vip_1,TopicBatch").load(str(store_5x / "store"))
    got = Counter((r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in df.select(
        F.explode("delivered_to").alias("group"), "topic", "queue_id", "queue_offset").collect())
    want = Counter({k: n for k, n in expected_keys(groups).items() if k[1] in ("%LMQ%vip_1", "TopicBatch")})
    assert got == want
    assert df.where(F.col("topic") == "TopicBatch").count() == 266  # a row per message: queue offsets 0-97, 0-167


def test_a_time_window_on_a_batchcq_queue_starts_and_ends_at_the_units_stored_at_its_bounds(store_5x, subscriptions):
    """The window's bounds on a BatchCQ queue, found by single-unit reads: the first unit stored at or after
    `since`, up to the first stored at or after `until` (units from batchcq.json, their store times those of
    the records they point at in messages.jsonl.gz)."""
    import gzip

    from jobs.plan.window import parse_window

    expected = store_5x / "expected"
    stored = {}
    with gzip.open(expected / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            stored.setdefault(m["commitLogOffset"], m["storeTimestamp"])
    units = json.loads((expected / "batchcq.json").read_text())["1"]
    times = [stored[u["commitLogOffset"]] for u in units]
    since, until = times[5], times[30]

    def first_at_or_after(bound):
        return min(u["queueOffset"] for u, t in zip(units, times) if t >= bound)

    planned = build_plan(JobOptions(store=str(store_5x / "store"), subscription_files=(str(subscriptions),),
                                    window=parse_window(since=str(since), until=str(until))))
    ranges = {(t, q): (first, end) for t, q, first, end in planned.ranges}
    assert ranges[("TopicBatch", 1)] == (first_at_or_after(since), first_at_or_after(until))
    assert ranges[("TopicBatch", 1)][0] > 0 and ranges[("TopicBatch", 1)][1] < units[-1]["queueOffset"]
