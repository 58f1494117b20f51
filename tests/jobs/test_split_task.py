"""The replay core (no Spark) gives exactly what RocketMQ's read path returned for store_a."""
import json
import re
import shutil
from collections import Counter

import pytest

from jobs.plan.build import build_plan
from jobs.settings import JobOptions
from tests.jobs.conftest import assert_rows_equal
from tests.local_replay import kind, replay_local


def _replay(store_a, **kw):
    planned = build_plan(JobOptions(store=str(store_a / "store"),
                                    subscription_files=(str(store_a / "registrations.json"),), **kw))
    return planned, replay_local(planned)


@pytest.fixture(scope="module")
def replayed(store_a):
    return _replay(store_a)


def test_matched_rows_equal_rocketmq_after_the_client_check(replayed, store_a_expected):
    _, result = replayed
    assert_rows_equal(kind(result, "matched").to_pylist(), store_a_expected[0])


def test_collisions_are_broker_rows_the_client_drops(replayed, store_a_expected):
    _, result = replayed
    assert_rows_equal(kind(result, "collision").to_pylist(), store_a_expected[1])


def _stats(result, key):
    """The stats counters of one (group, topic), summed over the task's rows."""
    rows = [r for r in kind(result, "stats").to_pylist() if (r["group"], r["topic"]) == key]
    return {f: sum(r[f] for r in rows) for f in ("units", "stage1_passed", "broker_delivered", "client_delivered",
                                                 "bloom_false_positives", "evaluation_errors")}


def _expected_json(store_a, name="expected.json"):
    return json.loads((store_a / name).read_text(encoding="utf-8"))


def test_every_unit_is_counted_once_per_subscription(replayed, store_a_cq):
    planned, result = replayed
    per_topic = Counter(u["topic"] for u in store_a_cq)  # RocketMQ's own reading of the consume queues
    assert per_topic["TopicTest"] == 1929 and len(planned.subscriptions) > 10
    for c in planned.subscriptions:
        assert _stats(result, c.key)["units"] == per_topic[c.sub.topic], c.key


def _bit_is_set(bitmap_hex, position):
    """BitsArray order (fixtures/README.md): bit i is in byte i / 8, with value 1 << (i % 8)."""
    return bool(bytes.fromhex(bitmap_hex)[position // 8] >> (position % 8) & 1)


def _late_condition(props):
    """G_SQL_LATE's `a >= 50 AND TAGS <> 'TagB'` by hand: `a` an integer string (Integer.valueOf throws on
    "abc" and "12.5"), a missing TAGS makes `<>` null, so only a present tag other than TagB is TRUE."""
    a, tags = props.get("a"), props.get("TAGS")
    return a is not None and re.fullmatch(r"-?[0-9]+", a) is not None and int(a) >= 50 and tags not in (None, "TagB")


def test_stored_bitmaps_differ_only_where_a_registration_was_born_later(replayed, store_a, store_a_cq,
                                                                        store_a_messages):
    """The audit lists exactly the units stored before G_SQL_LATE's bornTime whose message its SQL matches
    and whose stored bitmap lacks one of its bloom bits: the bits the dispatcher would have set, had the
    group been registered (fixtures/README.md: messages before the registration carry no bit for it)."""
    _, result = replayed
    late = next(g for g in _expected_json(store_a, "registrations.json")["groups"] if g["group"] == "G_SQL_LATE")
    props = {(m["queueId"], m["queueOffset"]): m["properties"] for m in store_a_messages if m["topic"] == "TopicTest"}
    want = {(u["queueId"], u["index"]) for u in store_a_cq
            if u["topic"] == "TopicTest" and u["ext_msgStoreTime"] < late["bornTime"]
            and _late_condition(props[(u["queueId"], u["index"])])
            and not all(_bit_is_set(u["ext_filterBitMap_hex"], p) for p in late["bloomBitPos"])}
    bitmaps = kind(result, "bitmap").to_pylist()
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in bitmaps} == {("TopicTest", *k) for k in want}
    assert len(bitmaps) == len(want) > 0
    assert {(r["reason"], r["groups_missing"]) for r in bitmaps} == {
        ("registration born after the message", "G_SQL_LATE")}


def test_late_sql_group_uses_bloom_only_for_messages_stored_after_its_born_time(replayed, store_a, store_a_cq,
                                                                                store_a_messages):
    """Each counter worked out from RocketMQ's data: a unit passes stage 1 unchecked when its msgStoreTime is
    before the registration's bornTime (isMsgInLive), otherwise only if its stored bitmap has all of the
    group's bloom bits; `a >= 50` throws on a non-integer `a` ("abc", "12.5"): the replay's dispatcher
    evaluates the registration on every message of the topic, so every such message counts as an error."""
    _, result = replayed
    late = next(g for g in _expected_json(store_a, "registrations.json")["groups"] if g["group"] == "G_SQL_LATE")
    delivered = {(r["queueId"], r["queueOffset"])
                 for r in _expected_json(store_a, "expected_broker_raw.json")["G_SQL_LATE"]["TopicTest"]}
    props = {(m["queueId"], m["queueOffset"]): m["properties"] for m in store_a_messages if m["topic"] == "TopicTest"}
    unchecked = passed = false_positives = errors = 0
    for u in (u for u in store_a_cq if u["topic"] == "TopicTest"):
        key = (u["queueId"], u["index"])
        a = props[key].get("a")
        errors += a is not None and re.fullmatch(r"-?[0-9]+", a) is None
        if u["ext_msgStoreTime"] < late["bornTime"]:
            unchecked += 1
        elif not all(_bit_is_set(u["ext_filterBitMap_hex"], p) for p in late["bloomBitPos"]):
            continue
        else:
            false_positives += key not in delivered
        passed += 1
    assert unchecked > 0 and errors > 0  # store_a has both (no bloom false positive for this group)
    assert _stats(result, ("G_SQL_LATE", "TopicTest")) == {
        "units": 1929, "stage1_passed": passed, "broker_delivered": len(delivered),
        "client_delivered": len(delivered), "bloom_false_positives": false_positives, "evaluation_errors": errors}


def test_dialect_4_gives_the_same_result_without_contains(store_a, store_a_expected):
    _, result = _replay(store_a, dialect="4")
    assert_rows_equal(kind(result, "matched").to_pylist(), store_a_expected[0])


def test_unparsable_subscription_fails_only_its_group(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"),
                                    ad_hoc=(("G_BAD", "TopicTest", "SQL92", "a >"),
                                            ("G_OK", "TopicTest", "TAG", "TagA"))))
    failed = {c.sub.group: c.error for c in planned.subscriptions if c.error}
    assert list(failed) == ["G_BAD"] and failed["G_BAD"].startswith("SUBSCRIPTION_PARSE_FAILED")
    matched = kind(replay_local(planned), "matched").to_pylist()
    assert "G_BAD" not in {r["group"] for r in matched}
    # G_OK subscribes like store_a's G_TAG_A, so it receives what RocketMQ delivered to G_TAG_A
    want = {(r["queueId"], r["queueOffset"]) for r in _expected_json(store_a)["G_TAG_A"]["TopicTest"]}
    assert {(r["queue_id"], r["queue_offset"]) for r in matched if r["group"] == "G_OK"} == want


def _a_above_30_and_no_region(props):
    """`a > 30 AND region IS NULL` by hand, for store_a's values of `a` (integers, "abc", "12.5" or none):
    Integer.valueOf(a) throws on "abc" and "12.5" (not matched), a missing `a` gives null (not matched)."""
    a = props.get("a")
    return a is not None and re.fullmatch(r"-?[0-9]+", a) is not None and int(a) > 30 and "region" not in props


def test_ad_hoc_sql_subscription_receives_the_messages_its_condition_selects(store_a, store_a_messages):
    expr = "a > 30 AND region IS NULL"
    planned = build_plan(JobOptions(store=str(store_a / "store"), retry=False,
                                    ad_hoc=(("G_WHATIF", "TopicTest", "SQL92", expr),)))
    got = {(r["queue_id"], r["queue_offset"]) for r in kind(replay_local(planned), "matched").to_pylist()
           if r["group"] == "G_WHATIF"}
    want = {(m["queueId"], m["queueOffset"]) for m in store_a_messages
            if m["topic"] == "TopicTest" and _a_above_30_and_no_region(m["properties"])}
    assert got == want and len(want) > 100


def test_committed_offsets_at_the_queue_ends_leave_nothing_to_consume(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"), start_from="committed",
                                    subscription_files=(str(store_a / "registrations.json"),)))
    result = replay_local(planned)
    # store_a's consumerOffset.json holds the end of every queue read: nothing is left to consume
    assert sum(r["units"] for r in kind(result, "stats").to_pylist()) == 0
    assert kind(result, "matched").num_rows == 0


# consumerOffset.json of store_a, two entries edited by hand: G_TAG_ALL is behind on queues 0 and 2 and has
# no offset for queue 3 (read from the start); G_SQL_BETWEEN is behind on queues 0 and 3
COMMITTED_EDITS = {
    '"TopicTest@G_TAG_ALL":{0:490,1:477,2:485,3:477': '"TopicTest@G_TAG_ALL":{0:400,1:477,2:0',
    '"TopicTest@G_SQL_BETWEEN":{0:490,1:477,2:485,3:477': '"TopicTest@G_SQL_BETWEEN":{0:250,1:477,2:485,3:100',
}
COMMITTED = {"G_TAG_ALL": {0: 400, 1: 477, 2: 0, 3: 0}, "G_SQL_BETWEEN": {0: 250, 1: 477, 2: 485, 3: 100}}


def test_committed_offsets_start_each_group_at_its_backlog(store_a, store_a_cq, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(store_a / "store", store)
    path = store / "config" / "consumerOffset.json"
    path.chmod(0o644)
    text = path.read_text(encoding="utf-8")
    for old, new in COMMITTED_EDITS.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    planned = build_plan(JobOptions(store=str(store), start_from="committed",
                                    subscription_files=(str(store_a / "registrations.json"),)))
    result = replay_local(planned)
    queue_ends = Counter(u["queueId"] for u in store_a_cq if u["topic"] == "TopicTest")
    assert queue_ends == {0: 490, 1: 477, 2: 485, 3: 477}
    units = {r["group"]: 0 for r in kind(result, "stats").to_pylist()}
    for r in kind(result, "stats").to_pylist():
        units[r["group"]] += r["units"]
    assert {g: n for g, n in units.items() if n} == {
        g: sum(queue_ends[q] - offset for q, offset in table.items()) for g, table in COMMITTED.items()}
    expected = _expected_json(store_a)
    want = {(g, r["queueId"], r["queueOffset"]) for g, table in COMMITTED.items()
            for r in expected[g]["TopicTest"] if r["queueOffset"] >= table[r["queueId"]]}
    got = {(r["group"], r["queue_id"], r["queue_offset"]) for r in kind(result, "matched").to_pylist()}
    assert got == want and {g for g, _, _ in got} == set(COMMITTED)


def test_python_filter_runs_and_counts_its_exceptions(store_a, store_a_messages):
    planned = build_plan(JobOptions(store=str(store_a / "store"), retry=False, ad_hoc=(
        ("G_PY", "TopicTest", "PYTHON", "tests.jobs.custom_filters:region_is_hangzhou"),
        ("G_PY_ERR", "TopicTest", "PYTHON", "tests.jobs.custom_filters:always_fails"))))
    result = replay_local(planned)
    matched = kind(result, "matched").to_pylist()
    want = {(m["queueId"], m["queueOffset"]) for m in store_a_messages
            if m["topic"] == "TopicTest" and m["properties"].get("region") == "杭州"}
    assert {(r["queue_id"], r["queue_offset"]) for r in matched if r["group"] == "G_PY"} == want
    assert len(want) == 307
    assert _stats(result, ("G_PY_ERR", "TopicTest"))["evaluation_errors"] == 1929  # every unit of TopicTest
    assert not [r for r in matched if r["group"] == "G_PY_ERR"]


def test_units_are_ordered_by_topic_then_commit_log_offset():
    """The split task's order (topic by topic, each in log order) equals a plain sort by both keys."""
    import numpy as np
    import pyarrow as pa

    from jobs.task.split_task import _by_topic_then_offset

    rng = np.random.default_rng(3)
    n = 2000
    units = pa.table({"topic": pa.array(rng.choice(["TopicB", "TopicA", "%RETRY%G", "Z"], n)),
                      "commitlog_offset": pa.array(rng.permutation(n).astype(np.int64) * 100),
                      "queue_id": pa.array(rng.integers(0, 4, n).astype(np.int32))})
    want = units.sort_by([("topic", "ascending"), ("commitlog_offset", "ascending")])
    ordered, names, codes = _by_topic_then_offset(units)
    assert ordered.equals(want)
    assert [names[c] for c in codes] == want.column("topic").to_pylist()
    assert _by_topic_then_offset(want)[0] is want  # already ordered: no copy


def test_a_split_decoded_a_few_units_at_a_time_gives_rocketmq_s_answer(store_a, store_a_expected, monkeypatch):
    """Batches of 7 units (not 65,536): each one topic's, none larger, and the matched and collided rows
    are still exactly RocketMQ's."""
    import jobs.task.split_task as task

    monkeypatch.setattr(task, "BATCH_ROWS", 7)
    sizes = []
    decode = task.decode_messages

    def recording(plan, units, out):
        sizes.append((units.num_rows, len(set(units.column("topic").to_pylist()))))
        return decode(plan, units, out)

    monkeypatch.setattr(task, "decode_messages", recording)
    _, result = _replay(store_a)
    assert_rows_equal(kind(result, "matched").to_pylist(), store_a_expected[0])
    assert_rows_equal(kind(result, "collision").to_pylist(), store_a_expected[1])
    assert len(sizes) > 1929 // 7 and all(n <= 7 and topics == 1 for n, topics in sizes)


def test_a_batch_is_decoded_only_when_the_one_before_was_handed_on(store_a, monkeypatch):
    """A task holds one batch's records: the generator decodes the next batch only when asked for it."""
    import jobs.task.split_task as task
    from jobs.task.split_task import Pieces, decoded_topics
    from jobs.task.split_units import commitlog_splits, split_units

    monkeypatch.setattr(task, "BATCH_ROWS", 100)
    calls = []
    decode = task.decode_messages
    monkeypatch.setattr(task, "decode_messages", lambda *a: calls.append(1) or decode(*a))
    planned = build_plan(JobOptions(store=str(store_a / "store"),
                                    subscription_files=(str(store_a / "registrations.json"),)))
    start, end = commitlog_splits(planned.plan)[0]
    batches = decoded_topics(planned.plan, split_units(planned.plan, start, end).units, Pieces())
    next(batches)
    assert len(calls) == 1
    next(batches)
    assert len(calls) == 2


def test_a_split_s_bytes_are_mapped_once_for_all_its_batches_and_let_go_after(store_a, monkeypatch):
    """Every batch of a split reads a view of one mapping of the split's range (a fresh mapping per batch
    faulted the split's pages in again for each); the mapping is dropped when the split is done."""
    import jobs.task.split_decode as decode
    import jobs.task.split_task as task
    from jobs.task.split_task import Pieces, decoded_topics
    from jobs.task.split_units import commitlog_splits, split_units

    monkeypatch.setattr(task, "BATCH_ROWS", 100)
    reads = []
    read_range = decode.storefs.read_range
    monkeypatch.setattr(decode.storefs, "read_range", lambda fs, path, *a: (
        "/commitlog/" in path and reads.append(tuple(a))) or read_range(fs, path, *a))
    planned = build_plan(JobOptions(store=str(store_a / "store"),
                                    subscription_files=(str(store_a / "registrations.json"),)))
    start, end = commitlog_splits(planned.plan)[0]
    units = split_units(planned.plan, start, end).units
    offsets, sizes = units.column("commitlog_offset").to_numpy(), units.column("size").to_numpy()
    batches = list(decoded_topics(planned.plan, units, Pieces()))
    assert len(batches) > 10 and sum(b[1].num_rows for b in batches) == units.num_rows
    assert reads == [(int(offsets.min()), int((offsets + sizes).max() - offsets.min()))]  # one file from 0
    assert decode._HELD == {}
