"""Windows of store time and of queue offsets, and runs that continue from the last one's offsets.json
(in process, no Spark).

Expectations come from RocketMQ's expected.json of store_a (its rows carry storeTimestamp), or from the
messages the tests write themselves with the project's StoreWriter."""
import json

import pytest

from jobs import replay
from jobs.errors import UsageError
from jobs.plan.build import build_plan
from jobs.plan.window import OffsetOutOfRange, offsets_json, parse_window
from jobs.settings import JobOptions
from tests.local_replay import replay_local
from tools.store_writer import Message, StoreWriter

SINCE, UNTIL = 1795237035000, 1795237035400  # store_a's messages were stored from ...034764 to ...035698


def _expected(store_a, lo=0, hi=1 << 62):
    rows = json.loads((store_a / "expected.json").read_text(encoding="utf-8"))
    return {(g, t, r["queueId"], r["queueOffset"]) for g, topics in rows.items() for t, lst in topics.items()
            for r in lst if lo <= r["storeTimestamp"] < hi}


def _matched(store, window, **options):
    """(planned, [(group, topic, queue_id, queue_offset)] delivered) of an in-process replay."""
    planned = build_plan(JobOptions(store=str(store), window=window, **options))
    table = replay_local(planned)["matched"]
    cols = [table.column(c).to_pylist() for c in ("group", "topic", "queue_id", "queue_offset")] \
        if table.num_rows else [[]] * 4
    return planned, [(str(g), str(t), q, o) for g, t, q, o in zip(*cols)]


@pytest.fixture
def regs(store_a):
    return {"subscription_files": (str(store_a / "registrations.json"),)}


@pytest.mark.parametrize("since, until", [(str(SINCE), str(UNTIL)),
                                          ("2026-11-21T12:57:15.000+08:00", "2026-11-21T12:57:15.400+08:00"),
                                          ("2026-11-21T04:57:15Z", "2026-11-21T04:57:15.400Z")])
def test_a_time_window_delivers_the_rows_stored_inside_it(store_a, regs, since, until):
    planned, got = _matched(store_a / "store", parse_window(since, until), **regs)
    assert len(got) == len(set(got))
    assert set(got) == _expected(store_a, SINCE, UNTIL)
    # units outside the window are not counted: G_TAG_ALL's TopicTest units are those the window covers
    covered = sum(end - first for topic, _, first, end in planned.ranges if topic == "TopicTest")
    stats = replay_local(planned)["stats"].to_pylist()
    assert [r["units"] for r in stats if (r["group"], r["topic"]) == ("G_TAG_ALL", "TopicTest")] == [covered]
    assert covered == len({k for k in _expected(store_a, SINCE, UNTIL) if k[:2] == ("G_TAG_ALL", "TopicTest")})


def test_until_then_its_offsets_deliver_everything_once(store_a, regs, tmp_path):
    first_planned, first = _matched(store_a / "store", parse_window(until=str(UNTIL)), **regs)
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(offsets_json(first_planned.ranges)))
    _, rest = _matched(store_a / "store", parse_window(starting=str(path)), **regs)
    assert set(first) == _expected(store_a, 0, UNTIL)
    assert set(rest) == _expected(store_a, UNTIL)
    assert len(first + rest) == len(set(first + rest)) == len(_expected(store_a))


def test_offsets_json_names_every_queue_read_with_the_end_of_what_was_covered(store_a, regs):
    planned, _ = _matched(store_a / "store", parse_window(), **regs)
    ends = offsets_json(planned.ranges)
    # cq.jsonl.gz: TopicTest queue 0 holds 490 units, 订单Topic queue 1 holds 300
    assert ends["TopicTest"]["0"] == 490 and ends["订单Topic"]["1"] == 300


def test_ending_offsets_are_exclusive_and_unnamed_queues_run_whole(store_a, regs):
    window = parse_window(starting='{"TopicTest": {"0": 10, "1": -1}}', ending='{"TopicTest": {"0": 20}}')
    _, got = _matched(store_a / "store", window, **regs)
    topic_test = {(q, o) for _, t, q, o in got if t == "TopicTest"}
    assert {q for q, _ in topic_test} == {0, 2, 3}
    assert {o for q, o in topic_test if q == 0} <= set(range(10, 20))
    want = {k for k in _expected(store_a) if k[1] != "TopicTest" or (k[2] == 0 and 10 <= k[3] < 20) or k[2] > 1}
    assert set(got) == want


def _messages(count, queues, start_ms, first=0):
    """`count` TagA/TagB messages of topic T spread over `queues`, stored a millisecond apart."""
    return [Message("T", queues[i % len(queues)], b"m%d" % i, {"TAGS": "TagA" if i % 2 else "TagB"},
                    store_timestamp=start_ms + i) for i in range(first, first + count)]


def _write(root, messages):
    with StoreWriter(str(root), commitlog_file_size=1 << 16, cq_file_size=20 * 50, ext_file_size=4096) as w:
        for m in messages:
            w.append(m)


def test_a_run_continues_where_the_last_one_ended_after_the_broker_appended(tmp_path):
    store = tmp_path / "store"
    before = _messages(120, [0, 1], 1_000_000)
    after = before + _messages(200, [0, 1, 2], 1_000_000, first=120)  # queue 2 is new
    sub = {"ad_hoc": (("G", "T", "TAG", "TagA"),), "retry": False}
    _write(store, before)
    first_planned, first = _matched(store, parse_window(), **sub)
    _write(store, after)  # the same bytes, then the broker's appends
    _, rest = _matched(store, parse_window(starting=json.dumps(offsets_json(first_planned.ranges))), **sub)
    _, whole = _matched(tmp_path / "store", parse_window(), **sub)
    assert not set(first) & set(rest)
    assert sorted(first + rest) == sorted(whole)
    assert len(whole) == 160  # every odd i of 320 is a TagA
    assert {q for _, _, q, _ in rest} == {0, 1, 2}


def test_a_window_narrows_the_committed_backlog(tmp_path):
    store = tmp_path / "store"
    with StoreWriter(str(store), commitlog_file_size=1 << 16, cq_file_size=1000, ext_file_size=4096) as w:
        for m in _messages(100, [0], SINCE):
            w.append(m)
        w.write_config("consumerOffset.json", {"offsetTable": {"T@G": {"0": 30}}})
    sub = {"ad_hoc": (("G", "T", "TAG", "*"),), "retry": False, "start_from": "committed"}
    _, got = _matched(store, parse_window(since=str(SINCE + 10), until=str(SINCE + 50)), **sub)
    assert sorted(o for _, _, _, o in got) == list(range(30, 50))  # committed 30, window [10, 50)


@pytest.mark.parametrize("args, words", [
    (("1795237035400", "1795237035000"), ["--since 1795237035400", "--until 1795237035000"]),
    (("2026-11-21T12:57:15.000", None), ["--since", "no UTC offset"]),
    (("yesterday", None), ["--since", "neither epoch milliseconds"]),
])
def test_bad_times_are_usage_errors(args, words):
    with pytest.raises(UsageError) as err:
        parse_window(*args)
    assert all(w in str(err.value) for w in words)


@pytest.mark.parametrize("text, words", [
    ('{"TopicTest": [1]}', ["--starting-offsets", "TopicTest"]),
    ('{"TopicTest": {"0": "x"}}', ["queue '0'", "'x'"]),
    ('{"TopicTest": {"0": -3}}', ["-3"]),
    ('{"TopicTest": ', ["not JSON"]),
    ("/no/such/offsets.json", ["/no/such/offsets.json", "neither JSON nor a readable file"]),
])
def test_bad_offsets_are_usage_errors(text, words):
    with pytest.raises(UsageError) as err:
        parse_window(starting=text)
    assert all(w in str(err.value) for w in words)


def test_offsets_the_store_cannot_have_are_named(store_a, regs):
    with pytest.raises(UsageError, match="topic 'NoSuchTopic' is not in the store"):
        build_plan(JobOptions(store=str(store_a / "store"), window=parse_window(starting='{"NoSuchTopic": {"0": 1}}'),
                              **regs))
    with pytest.raises(UsageError, match="'TopicTest' has no queue 9"):
        build_plan(JobOptions(store=str(store_a / "store"), window=parse_window(ending='{"TopicTest": {"9": 1}}'),
                              **regs))
    with pytest.raises(OffsetOutOfRange, match="topic TopicTest queue 1 offset 478 is beyond the queue's latest"):
        build_plan(JobOptions(store=str(store_a / "store"),
                              window=parse_window(starting='{"TopicTest": {"1": 478}}'), **regs))


def test_a_window_that_ends_before_it_starts_exits_2_and_writes_nothing(store_a, tmp_path, capsys):
    out = tmp_path / "out"
    code = replay.main(["--store", str(store_a / "store"), "--subscriptions", str(store_a / "registrations.json"),
                        "--out", str(out), "--since", "1795237035400", "--until", "2026-11-21T12:57:15.000+08:00"])
    assert code == 2 and not out.exists() and not list(tmp_path.iterdir())
    assert "--since 1795237035400" in capsys.readouterr().err


def test_a_starting_offset_below_the_earliest_is_reported_as_offset_too_small(tmp_path):
    store = tmp_path / "store"
    _write(store, _messages(120, [0], 1_000))
    (store / "consumequeue" / "T" / "0" / "00000000000000000000").unlink()  # retention: units 0 to 49 gone
    planned, got = _matched(store, parse_window(starting='{"T": {"0": 10}}'), ad_hoc=(("G", "T", "TAG", "*"),),
                            retry=False)
    [problem] = planned.problems
    assert problem["reason"].startswith("OFFSET_TOO_SMALL") and "10" in problem["reason"] and "50" in problem["reason"]
    assert sorted(o for _, _, _, o in got) == list(range(50, 120))


def test_an_ending_offset_before_the_starting_offset_is_a_usage_error(store_a, regs):
    window = parse_window(starting='{"TopicTest": {"1": 20}}', ending='{"TopicTest": {"1": 10, "2": 5}}')
    with pytest.raises(UsageError, match="topic TopicTest queue 1 ends at offset 10, before --starting-offsets "
                                         "starts it at 20"):
        build_plan(JobOptions(store=str(store_a / "store"), window=window, **regs))
