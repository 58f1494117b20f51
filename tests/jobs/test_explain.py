"""python -m jobs.explain: one group's decision on one unit, equal to RocketMQ's read path and to the job's."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from filtering.bloom import BloomFilter
from filtering.decision import STAGES
from filtering.message_filter import NO_EXT_UNIT, stage1_sql
from filtering.subscriptions import Subscription
from jobs import explain
from jobs.explain.question import decide, load_context, read_queue_units, subscription_of
from jobs.explain.report import BLOOM_SKIPS, report
from jobs.plan.window import parse_store_time
from jobs.settings import JobOptions
from schemas.store.config import load_fastjson
from tests.jobs.conftest import writable_copy
from tools.store_writer import Message, StoreWriter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ctx(store_a):
    return load_context(JobOptions(store=str(store_a / "store"),
                                   subscription_files=(str(store_a / "registrations.json"),)))


@pytest.fixture(scope="module")
def unit_offsets(store_a):
    """{(topic, queue id): queue offsets} of every unit in RocketMQ's dump of store_a's consume queues."""
    offsets = {}
    with gzip.open(store_a / "cq.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            u = json.loads(line)
            offsets.setdefault((u["topic"], u["queueId"]), []).append(u["index"])
    return {key: sorted(o) for key, o in offsets.items()}


@pytest.fixture(scope="module")
def queues(ctx, unit_offsets):
    """{(topic, queue id): (units, messages)} of every unit, each queue read once."""
    return {key: read_queue_units(ctx, *key, offsets) for key, offsets in unit_offsets.items()}


def _cli(capsys, *args):
    code = explain.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _args(store_a, *more):
    return ["--store", store_a / "store", "--subscriptions", store_a / "registrations.json", *more]


def test_every_unit_of_every_group_gets_rocketmqs_verdict(ctx, queues, store_a_expected):
    """Delivered exactly where RocketMQ's consumer received it, stage `client` exactly where its broker
    returned it and the client's tag check dropped it (expected.json, expected_broker_raw.json)."""
    delivered, collided = store_a_expected
    checked, wrong = 0, []
    for csub in ctx.compiled:
        group, topic = csub.key
        for (t, queue_id), (units, messages) in queues.items():
            if t != topic:
                continue
            q = decide(ctx, csub, units, messages)
            for i, offset in enumerate(units.column("queue_offset").to_pylist()):
                key, stage = (group, topic, queue_id, offset), q.stage(i)
                want = None if key in delivered else "client" if key in collided else "filtered"
                if (stage is None) != (want is None) or (want == "client") != (stage == "client"):
                    wrong.append(f"{key}: stage {stage}, RocketMQ {want}")
                checked += 1
    assert checked > 17000 and not wrong[:10]


def test_an_ad_hoc_tag_group_gets_the_verdicts_written_out_by_hand(store_a):
    """An ad hoc TAG group "TagA || BB" on TopicTest, decided from RocketMQ's own decode of every message
    (messages.jsonl.gz): delivered where the tag is TagA or BB; dropped by the client where the tag is Aa (Java's
    "Aa".hashCode() == "BB".hashCode() == 2112: the broker returns it); filtered on the consume queue elsewhere."""
    options = JobOptions(store=str(store_a / "store"), ad_hoc=(("G_HAND", "TopicTest", "TAG", "TagA || BB"),),
                         retry=False)
    ctx = load_context(options)
    csub = subscription_of(ctx, "G_HAND", "TopicTest")
    want, tags = {}, {}
    with gzip.open(store_a / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            if m["topic"] == "TopicTest":
                tag = (m.get("properties") or {}).get("TAGS")
                tags[(m["queueId"], m["queueOffset"])] = tag
    for key, tag in tags.items():
        want[key] = None if tag in ("TagA", "BB") else "client" if tag == "Aa" else "consume_queue"
    got = {}
    for queue_id in sorted({q for q, _ in tags}):
        offsets = sorted(o for q, o in tags if q == queue_id)
        units, messages = read_queue_units(ctx, "TopicTest", queue_id, offsets)
        q = decide(ctx, csub, units, messages)
        got.update(((queue_id, o), q.stage(i)) for i, o in enumerate(units.column("queue_offset").to_pylist()))
    assert sorted(set(want.values()), key=str) == [None, "client", "consume_queue"]
    assert got == want


def test_sql92_trace_agrees_with_the_stage_two_verdict_on_every_unit_reaching_it(ctx, queues):
    """The tree comes from the row evaluator, the verdict from the job's vectorized one: same answer."""
    disagree = []
    for csub in (c for c in ctx.compiled if c.sql is not None):
        units, messages = queues[(csub.sub.topic, 0)]
        q = decide(ctx, csub, units, messages)
        for i in range(units.num_rows):
            stage2 = report(ctx, q, i)["commit_log"]
            if stage2["reached"] and stage2["passed"] != (stage2["result"] == "true"):
                disagree.append((csub.key, i, stage2["result"], stage2["error"]))
    assert not disagree[:5]


def test_tag_hash_collision_names_both_tags(capsys, store_a, store_a_expected):
    group, topic, queue_id, offset = min(k for k in store_a_expected[1] if k[0] == "G_TAG_Aa_collide")
    assert store_a_expected[1][(group, topic, queue_id, offset)]["tags"] == "BB"
    code, out, _ = _cli(capsys, *_args(store_a, "--group", group, "--topic", topic, "--queue-id", queue_id,
                                       "--queue-offset", offset))
    assert code == 0
    assert "NOT DELIVERED (stage client)" in out
    assert "tag BB has the hash code of Aa (2112)" in out


def test_msg_id_finds_the_same_unit_as_its_queue_offset(capsys, store_a, store_a_expected):
    (group, topic, queue_id, offset), row = min(store_a_expected[0].items())
    code, out, _ = _cli(capsys, *_args(store_a, "--group", group, "--topic", topic, "--msg-id", row["msgId"],
                                       "--json"))
    assert code == 0
    answer = json.loads(out)
    assert (answer["queue_id"], answer["queue_offset"], answer["delivered"], answer["stage"]) == \
        (queue_id, offset, True, None)
    assert answer["unit"]["commitlog_offset"] == row["commitLogOffset"]


def test_json_answer_shape(capsys, store_a):
    code, out, _ = _cli(capsys, *_args(store_a, "--group", "G_SQL_MISSING", "--topic", "TopicTest",
                                       "--queue-id", 0, "--queue-offset", 0, "--json"))
    answer = json.loads(out)
    assert code == 0 and isinstance(answer["delivered"], bool)
    assert answer["stage"] is None if answer["delivered"] else answer["stage"] in STAGES
    assert {"unit", "message", "subscription", "scope", "consume_queue", "commit_log", "client",
            "verdict"} <= set(answer)
    assert answer["subscription"]["bloom_bits"] == [10, 103, 73]  # registrations.json, as the broker holds it
    assert answer["commit_log"]["tree"][0]["node"] == "OR"


def test_late_registration_skips_the_bloom_for_messages_stored_before_it(ctx, queues):
    """G_SQL_LATE was registered after 1500 messages: their bitmaps lack its bits, stage 1 passes them."""
    csub = subscription_of(ctx, "G_SQL_LATE", "TopicTest")
    units, messages = queues[("TopicTest", 0)]
    first = report(ctx, decide(ctx, csub, units, messages), 0)["consume_queue"]
    assert first["passed"] and not first["bloom_checked"] and "before the registration's bornTime" in first["reason"]


def test_below_the_committed_offset_is_out_of_scope(capsys, store_a):
    offsets = load_fastjson(store_a / "store" / "config" / "consumerOffset.json")
    committed = offsets["offsetTable"]["TopicTest@G_TAG_ALL"]
    assert committed["0"] > 3
    code, out, _ = _cli(capsys, *_args(store_a, "--group", "G_TAG_ALL", "--topic", "TopicTest", "--queue-id", 0,
                                       "--queue-offset", 3, "--from", "committed", "--json"))
    answer = json.loads(out)
    assert (code, answer["delivered"], answer["stage"]) == (0, False, "scope")
    assert answer["scope"]["committed_offset"] == committed["0"]


def test_store_time_window_is_since_inclusive_until_exclusive(capsys, store_a):
    def stage(*window):
        code, out, _ = _cli(capsys, *_args(store_a, "--group", "G_TAG_ALL", "--topic", "TopicTest", "--queue-id", 0,
                                           "--queue-offset", 3, "--json", *window))
        assert code == 0
        return json.loads(out)

    t = stage()["message"]["store_timestamp"]
    assert stage("--since", t, "--until", t + 1)["stage"] is None
    assert stage("--until", t)["stage"] == "scope"
    assert stage("--since", t + 1)["stage"] == "scope"


def test_iso_times_need_an_offset():
    assert parse_store_time("2026-11-21T12:57:15.400+08:00") == 1795237035400
    assert parse_store_time("2026-11-21T04:57:15.400Z") == 1795237035400
    assert parse_store_time("1795237035400") == 1795237035400
    with pytest.raises(ValueError, match="no UTC offset"):
        parse_store_time("2026-11-21T12:57:15")


@pytest.fixture(scope="module")
def price_store(tmp_path_factory):
    """A one-message store: price "512.40" (a decimal string), stored at 1000 ms, no filter registered."""
    root = tmp_path_factory.mktemp("price")
    with StoreWriter(str(root / "store"), commitlog_file_size=1 << 16, cq_file_size=6000, ext_file_size=4096) as w:
        w.append(Message("Shop", 0, b"x", {"price": "512.40", "TAGS": "TagA"}, store_timestamp=1000))
    return root


def _price_subscription(root, expression, born_time):
    path = root / f"subs-{born_time}.json"
    path.write_text(json.dumps({"groups": [{"group": "G_PRICE", "topic": "Shop", "expressionType": "SQL92",
                                            "expression": expression, "bornTime": born_time}]}))
    return path


def test_integer_literal_on_a_decimal_price_fails_on_the_commit_log(capsys, price_store):
    """Registered after the message was stored: stage 1 passes, `price > 100` throws NumberFormatException."""
    subs = _price_subscription(price_store, "price > 100", 2000)
    code, out, _ = _cli(capsys, "--store", price_store / "store", "--subscriptions", subs, "--group", "G_PRICE",
                        "--topic", "Shop", "--queue-id", 0, "--queue-offset", 0)
    assert code == 0
    assert "NOT DELIVERED (stage commit_log)" in out
    assert 'Integer.valueOf("512.40") throws NumberFormatException' in out
    assert "throws RuntimeException: java.lang.NumberFormatException" in out


def test_double_literal_on_a_decimal_price_matches(capsys, price_store):
    subs = _price_subscription(price_store, "price > 100.0", 2000)
    code, out, _ = _cli(capsys, "--store", price_store / "store", "--subscriptions", subs, "--group", "G_PRICE",
                        "--topic", "Shop", "--queue-id", 0, "--queue-offset", 0, "--json")
    answer = json.loads(out)
    assert (code, answer["delivered"], answer["stage"]) == (0, True, None)
    assert answer["commit_log"]["result"] == "true"


def test_registration_live_at_dispatch_drops_it_on_the_bloom_instead(capsys, price_store):
    """With no bornTime the ad hoc registration counts from the first message: the dispatcher's evaluation
    threw, so the recomputed bitmap lacks its bits and stage 1 drops the unit."""
    code, out, _ = _cli(capsys, "--store", price_store / "store", "--subscription", "G_PRICE", "Shop", "SQL92",
                        "price > 100", "--group", "G_PRICE", "--topic", "Shop", "--queue-id", 0, "--queue-offset", 0,
                        "--json")
    answer = json.loads(out)
    assert (code, answer["stage"]) == (0, "consume_queue")
    assert not any(answer["consume_queue"]["bits_set"].values())
    assert "NumberFormatException" in answer["commit_log"]["error"]


@pytest.mark.parametrize("more, message", [
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 99999],
     "has no message at queue offset 99999"),
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--queue-id", 7, "--queue-offset", 0],
     "has no consume queue 7 of topic TopicTest"),
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--msg-id", "7F00000100002A9F0000000000000001"],
     "no message record starts at commit-log offset 1"),
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--msg-id", "not-hex"], "is not an offsetMsgId"),
    (["--group", "G_NOBODY", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 0],
     "group G_NOBODY has no subscription"),
    (["--group", "G_TAG_A", "--topic", "订单Topic", "--queue-id", 0, "--queue-offset", 0],
     "group G_TAG_A has no subscription to topic 订单Topic"),
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--queue-id", 0], "give either --queue-id and --queue-offset"),
    (["--group", "G_TAG_A", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 0, "--since", 1795237035400,
      "--until", 1795237035000], "the window would be empty"),
])
def test_questions_without_an_answer_exit_2_with_one_clear_line(capsys, store_a, more, message):
    code, out, err = _cli(capsys, *_args(store_a, *more))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_an_offset_past_the_data_names_the_offsets_the_queue_holds(capsys, store_a, tmp_path):
    """Not the files' capacity: TopicTest queue 0 holds 490 units (cq.jsonl.gz) in two files of 300 units
    (6,000 bytes), so its files could hold offsets 0 to 599; with the first file deleted (retention) it
    holds 300 to 489."""
    def error(store, offset):
        code, out, err = _cli(capsys, "--store", store, "--subscriptions", store_a / "registrations.json", "--group",
                              "G_TAG_ALL", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", offset)
        assert (code, out) == (2, "")
        return err

    assert error(store_a / "store", 500) == \
        "error: queue 0 of topic TopicTest has no message at queue offset 500 (the queue holds offsets 0 to 489)\n"
    store = writable_copy(store_a, tmp_path)
    (store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000").unlink()
    assert error(store, 3) == \
        "error: queue 0 of topic TopicTest has no message at queue offset 3 (the queue holds offsets 300 to 489)\n"


def test_a_reader_that_closed_the_output_ends_explain_quietly(store_a):
    """`explain --json | head`: the reader is gone before the answer is written. As a Unix tool, explain
    ends without a traceback, with 141 (128 + SIGPIPE, what a shell reports for a tool that signal ended)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: the first write fails, every time
    try:
        proc = subprocess.run([sys.executable, "-m", "jobs.explain", *map(str, _args(
            store_a, "--group", "G_TAG_ALL", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 5, "--json"))],
            stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_unparsable_expression_exits_2_with_the_parsers_position(capsys, store_a):
    code, out, err = _cli(capsys, "--store", store_a / "store", "--subscription", "G_BAD", "TopicTest", "SQL92",
                          "a > > 1", "--group", "G_BAD", "--topic", "TopicTest", "--queue-id", 0, "--queue-offset", 0)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("error: group G_BAD topic TopicTest: the SQL92 expression does not compile")
    assert lines[1:] == ["  a > > 1", "      ^"]  # the second `>`, offset 4


def test_an_ad_hoc_sql92_unit_without_an_ext_unit_is_said_to_have_none():
    # stage1_sql lets such a unit through for stored and ad hoc subscriptions alike: no bitmap to test
    # (the missing ext unit's store time reads 0, which must not be reported as stored before bornTime)
    bloom = BloomFilter(20, 32)
    sub = Subscription("G_NEW", "T", "SQL92", "a > 1", 1795000000000, tuple(bloom.registration_bits("G_NEW", "T")))
    batch = type("Batch", (), {"ext_ok": np.array([False]), "msg_store_time": np.array([0]),
                               "__len__": lambda self: 1})()
    passed, checked, skips = stage1_sql(sub, batch, bloom, np.zeros((1, bloom.m // 8), np.uint8), np.array([True]))
    assert (bool(passed[0]), bool(checked[0]), int(skips[0])) == (True, False, NO_EXT_UNIT)
    assert BLOOM_SKIPS[NO_EXT_UNIT] == "the unit has no readable ext unit"


def _index_without_data(root):
    (root / "dledger-n0" / "index").mkdir(parents=True)
    (root / "dledger-n0" / "index" / "00000000000000000000").write_bytes(bytes(64))


@pytest.mark.parametrize("make, words, exit_code", [
    (lambda root: (root / "dledger").mkdir(), "no commit log found (it holds dledger/)", 2),
    (_index_without_data, "dledger-n0/index/ holds DLedger index files but", 2),
    (lambda root: root.rmdir() or root.write_text("x"), "is a file", 2)])  # the caller's path: usage
def test_explain_refuses_a_store_the_job_refuses_with_the_same_words(capsys, tmp_path, make, words, exit_code):
    root = tmp_path / "store"
    root.mkdir()
    make(root)
    code, _, err = _cli(capsys, "--store", root, "--group", "G", "--topic", "T", "--queue-id", 0, "--queue-offset", 0)
    assert code == exit_code and words in err
