"""Damaged copies of store_a: with `fail` a clear error naming the file; with `skip` the audit lists
exactly the damaged items, every undamaged message is still matched, and every unit is accounted for.

Which bytes to damage and what is lost are read from RocketMQ's dumps of store_a (messages.jsonl.gz,
cq.jsonl.gz), not from the project's decoders."""
import base64
import shutil

import pytest

from jobs.plan.build import build_plan
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError
from schemas.store.config import ConfigError
from tests.jobs.conftest import writable_copy
from tests.local_replay import kind, replay_local

CLOG = "00000000000000000000"


@pytest.fixture
def damaged(store_a, tmp_path):
    """A writable copy of store_a/store."""
    return writable_copy(store_a, tmp_path)


def _plan(store, store_a, on_corrupt):
    return build_plan(JobOptions(store=str(store), on_corrupt=on_corrupt,
                                 subscription_files=(str(store_a / "registrations.json"),)))


def _replay(store, store_a, on_corrupt=CorruptPolicy.SKIP):
    planned = _plan(store, store_a, on_corrupt)
    return planned, replay_local(planned)


def _matched(result):
    return {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in kind(result, "matched").to_pylist()}


def _expected_without(store_a_expected, lost_offsets, store_a):
    import json

    data = json.loads((store_a / "expected.json").read_text(encoding="utf-8"))
    return {(g, t, r["queueId"], r["queueOffset"]) for g, ts in data.items() for t, rows in ts.items()
            for r in rows if r["commitLogOffset"] not in lost_offsets}


def _assert_every_unit_accounted(planned, result, store_a_cq):
    """The damage leaves the consume queues as they were: every subscription still scans all its topic's units."""
    per_topic = {}
    for u in store_a_cq:
        per_topic[u["topic"]] = per_topic.get(u["topic"], 0) + 1
    stats = {}
    for r in kind(result, "stats").to_pylist():
        s = stats.setdefault((r["group"], r["topic"]), {})
        for k, v in r.items():
            if isinstance(v, int):
                s[k] = s.get(k, 0) + v
    for c in planned.subscriptions:
        s = stats.get(c.key, {})
        assert s.get("units", 0) == per_topic.get(c.sub.topic, 0), c.key
        filtered = s.get("units", 0) - s.get("skipped", 0) - s.get("broker_delivered", 0)
        assert filtered >= 0 and s.get("broker_delivered", 0) == s.get("client_delivered", 0) + s.get("collisions", 0)


def _record_offset(store_a_messages, topic="TopicTest"):
    return next(m["commitLogOffset"] for m in store_a_messages if m["topic"] == topic and m["commitLogOffset"] > 0)


def test_flipped_magic_fails_naming_file_and_offset(damaged, store_a, store_a_messages):
    offset = _record_offset(store_a_messages)
    with open(damaged / "commitlog" / CLOG, "r+b") as f:
        f.seek(offset + 4)
        f.write(b"\x00\x00\x00\x01")
    planned = _plan(damaged, store_a, CorruptPolicy.FAIL)
    with pytest.raises(CorruptStoreError) as err:
        replay_local(planned)
    assert CLOG in str(err.value) and str(offset) in str(err.value) and "magic" in str(err.value)


def test_flipped_magic_is_skipped_and_audited(damaged, store_a, store_a_expected, store_a_messages, store_a_cq):
    offset = _record_offset(store_a_messages)
    with open(damaged / "commitlog" / CLOG, "r+b") as f:
        f.seek(offset + 4)
        f.write(b"\x00\x00\x00\x01")
    planned, result = _replay(damaged, store_a)
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["commitlog_offset"], "magic" in r["reason"]) for r in audit] == [(offset, True)]
    assert _matched(result) == _expected_without(store_a_expected, {offset}, store_a)
    _assert_every_unit_accounted(planned, result, store_a_cq)


def test_truncated_commit_log_fails_or_audits_the_lost_units(damaged, store_a, store_a_expected, store_a_cq):
    last = sorted((damaged / "commitlog").iterdir())[-1]
    start = int(last.name)
    with open(last, "r+b") as f:
        f.truncate(5000)
    with pytest.raises(CorruptStoreError, match="truncated commit-log file"):
        _plan(damaged, store_a, CorruptPolicy.FAIL)
    planned, result = _replay(damaged, store_a)
    lost = {u["phyOffset"] for u in store_a_cq if u["phyOffset"] + u["size"] > start + 5000}
    assert lost
    audit = kind(result, "corrupt").to_pylist()
    assert {r["commitlog_offset"] for r in audit} == lost
    assert [p["file"] for p in planned.problems] == [str(last)]
    assert _matched(result) == _expected_without(store_a_expected, lost, store_a)
    _assert_every_unit_accounted(planned, result, store_a_cq)


def test_deleted_first_commit_log_file_skips_units_as_offset_too_small(damaged, store_a, store_a_expected,
                                                                       store_a_cq):
    (damaged / "commitlog" / CLOG).unlink()
    planned, result = _replay(damaged, store_a, on_corrupt=CorruptPolicy.FAIL)  # retention is not damage
    lost = {u["phyOffset"] for u in store_a_cq if u["phyOffset"] < 1 << 20}  # the first 1 MiB file
    audit = kind(result, "corrupt").to_pylist()
    assert {r["commitlog_offset"] for r in audit} == lost
    assert all(r["reason"].startswith("OFFSET_TOO_SMALL") for r in audit)
    assert _matched(result) == _expected_without(store_a_expected, lost, store_a)
    _assert_every_unit_accounted(planned, result, store_a_cq)


def test_broken_consumer_filter_json_fails_or_is_audited(damaged, store_a, store_a_expected):
    path = damaged / "config" / "consumerFilter.json"
    path.write_text(path.read_text(encoding="utf-8")[:200], encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        _plan(damaged, store_a, CorruptPolicy.FAIL)
    assert "consumerFilter.json" in str(err.value)
    planned, result = _replay(damaged, store_a)
    assert [p["file"] for p in planned.problems] == [str(path)]
    assert _matched(result) == _expected_without(store_a_expected, set(), store_a)


def test_corrupt_ext_unit_fails_or_counts_the_tag_code_as_missing(damaged, store_a, store_a_expected, store_a_cq):
    unit = next(u for u in store_a_cq if (u["topic"], u["queueId"], u["index"]) == ("TopicTest", 0, 3))
    position = unit["ext_offset"]
    ext_file = sorted((damaged / "consumequeue_ext" / "TopicTest" / "0").iterdir())[0]
    assert position + unit["ext_size"] <= ext_file.stat().st_size  # the unit is in the first ext file
    with open(ext_file, "r+b") as f:
        f.seek(position)
        f.write(b"\x00\x00")  # unit size 0: CqExtUnit.read fails
    with pytest.raises(CorruptStoreError, match="consumequeue_ext/TopicTest/0"):
        replay_local(_plan(damaged, store_a, CorruptPolicy.FAIL))
    planned, result = _replay(damaged, store_a)
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["topic"], r["queue_id"], r["queue_offset"]) for r in audit] == [("TopicTest", 0, 3)]
    assert _matched(result) == _expected_without(store_a_expected, set(), store_a)
    stats = [r for r in kind(result, "stats").to_pylist() if r["topic"] == "TopicTest"]
    topic_groups = {c.sub.group for c in planned.subscriptions if c.sub.topic == "TopicTest"}
    assert {r["group"] for r in stats if r["ext_unreadable"]} == topic_groups
    _assert_every_unit_accounted(planned, result, store_a_cq)


def test_stray_tmp_file_is_reported(damaged, store_a):
    (damaged / "commitlog" / "00000000000005242880.tmp").write_bytes(b"x")
    with pytest.raises(CorruptStoreError, match=r"\.tmp"):
        _plan(damaged, store_a, CorruptPolicy.FAIL)
    planned = _plan(damaged, store_a, CorruptPolicy.SKIP)
    assert [p["reason"] for p in planned.problems][0].startswith("not a segment file")


def test_a_rocksdb_consume_queue_that_cannot_be_opened_is_damaged_data(damaged, store_a):
    shutil.rmtree(damaged / "consumequeue")
    (damaged / "consumequeue").mkdir()
    (damaged / "consumequeue" / "CURRENT").write_text("MANIFEST-000001\n")  # names a MANIFEST that is not there
    with pytest.raises(CorruptStoreError, match="consumequeue: RocksDB cannot be opened read-only.*MANIFEST-000001"):
        _plan(damaged, store_a, CorruptPolicy.FAIL)


def test_body_crc_mismatch_is_found_only_with_verify_crc(damaged, store_a, store_a_expected, store_a_messages):
    msg = next(m for m in store_a_messages
               if m["topic"] == "TopicTest" and not m["sysFlag"] & 1 and m["commitLogOffset"] < 1 << 20)
    offset = msg["commitLogOffset"]
    assert len(base64.b64decode(msg["body_base64"])) > 200  # the body starts within the first 100 bytes
    with open(damaged / "commitlog" / CLOG, "r+b") as f:  # flip one byte inside the body
        f.seek(offset + 200)
        byte = f.read(1)
        f.seek(offset + 200)
        f.write(bytes([byte[0] ^ 0xFF]))
    planned, result = _replay(damaged, store_a)  # not verified: the damage goes unnoticed
    assert not kind(result, "corrupt").num_rows
    planned = build_plan(JobOptions(store=str(damaged), on_corrupt=CorruptPolicy.SKIP, verify_crc=True,
                                    subscription_files=(str(store_a / "registrations.json"),)))
    result = replay_local(planned)
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["commitlog_offset"], r["reason"]) for r in audit] == [(offset, "body CRC mismatch")]
    assert _matched(result) == _expected_without(store_a_expected, {offset}, store_a)


def test_missing_consume_queue_segment_is_reported(damaged, store_a):
    queue = damaged / "consumequeue" / "TopicTest" / "0"
    files = sorted(queue.iterdir())
    extra = queue / f"{int(files[-1].name) + 2 * 6000:020d}"
    shutil.copy(files[-1], extra)  # a hole: the file in between is missing
    with pytest.raises(CorruptStoreError, match="missing consume-queue file"):
        _plan(damaged, store_a, CorruptPolicy.FAIL)


def test_unit_pointing_at_another_queues_record_is_audited(damaged, store_a, store_a_cq):
    a, b = sorted((u for u in store_a_cq if u["topic"] == "TopicTest" and u["queueId"] == 0),
                  key=lambda u: u["index"])[:2]
    path = sorted((damaged / "consumequeue" / "TopicTest" / "0").iterdir())[0]
    with open(path, "r+b") as f:  # unit a now points at b's record (size too)
        f.seek(a["index"] * 20)
        f.write(b["phyOffset"].to_bytes(8, "big") + b["size"].to_bytes(4, "big"))
    planned, result = _replay(damaged, store_a)
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["queue_id"], r["queue_offset"]) for r in audit] == [(0, a["index"])]
    assert "differ from the unit" in audit[0]["reason"]


def test_record_with_a_bad_body_length_is_isolated_in_skip_mode(damaged, store_a, store_a_expected,
                                                                store_a_messages):
    offset = next(m["commitLogOffset"] for m in store_a_messages
                  if m["topic"] == "TopicTest" and not m["sysFlag"] & 0x30 and 0 < m["commitLogOffset"] < 1 << 20)
    body_length_at = offset + 48 + 8 + 8 + 8 + 4 + 8  # IPv4 hosts
    with open(damaged / "commitlog" / CLOG, "r+b") as f:
        f.seek(body_length_at)
        f.write((10 ** 6).to_bytes(4, "big"))
    with pytest.raises(CorruptStoreError, match="body length"):
        replay_local(_plan(damaged, store_a, CorruptPolicy.FAIL))
    planned, result = _replay(damaged, store_a)
    audit = kind(result, "corrupt").to_pylist()
    assert [(r["commitlog_offset"], "body length" in r["reason"]) for r in audit] == [(offset, True)]
    assert _matched(result) == _expected_without(store_a_expected, {offset}, store_a)


def test_what_a_5x_broker_writes_beside_a_store_is_no_damage(damaged, store_a, store_a_expected):
    # RocketMQ 5.x's timer wheel, timer log and their config files, the 5-long checkpoint, compaction/,
    # abort.bak, and a BatchCQ topic the run does not select (issue 45: none of it refuses the store)
    (damaged / "batchconsumequeue" / "BatchTopic" / "0").mkdir(parents=True)
    (damaged / "batchconsumequeue" / "BatchTopic" / "0" / CLOG).write_bytes(bytes(46 * 4))
    (damaged / "timerwheel").write_bytes(bytes(4096))
    (damaged / "timerlog").mkdir()
    (damaged / "timerlog" / CLOG).write_bytes(bytes(52 * 4))
    (damaged / "config" / "timercheck").write_bytes(bytes(40))
    (damaged / "config" / "timermetrics").write_text('{"dataVersion":{},"timingCount":{}}')
    (damaged / "compaction").mkdir()
    (damaged / "compaction" / "position-checkpoint").write_bytes(bytes(8))
    (damaged / "abort.bak").write_bytes(b"")
    (damaged / "checkpoint").write_bytes(bytes(40))
    planned, result = _replay(damaged, store_a, CorruptPolicy.FAIL)
    assert planned.problems == []
    assert _matched(result) == set(store_a_expected[0])


@pytest.mark.parametrize("queue", [("TopicTest", "0", CLOG), ("TopicTest", "3", "00000000000000006000"),
                                   ("%RETRY%G_TAG_A", "0", CLOG)])
def test_bytes_appended_to_one_consume_queue_file_are_blamed_on_that_file_only(damaged, store_a, store_a_expected,
                                                                               queue):
    path = damaged / "consumequeue" / queue[0] / queue[1] / queue[2]
    with open(path, "ab") as f:
        f.write(b"\x07" * 7)  # 6000 + 7 bytes: not whole units, and longer than every other file of the store
    with pytest.raises(CorruptStoreError) as err:
        _plan(damaged, store_a, CorruptPolicy.FAIL)
    assert (err.value.path, err.value.offset) == (str(path), int(queue[2]) + 6000)
    assert "partial unit" in err.value.reason
    planned, result = _replay(damaged, store_a)
    assert [(p["file"], p["topic"]) for p in planned.problems] == [(str(path), queue[0])]
    assert _matched(result) == set(store_a_expected[0])  # its 300 whole units are the broker's: nothing lost


def test_a_consume_queue_file_longer_by_whole_units_is_blamed_on_itself_and_its_extra_units_unread(
        damaged, store_a, store_a_expected):
    path = damaged / "consumequeue" / "订单Topic" / "1" / CLOG
    first_unit = path.read_bytes()[:20]
    with open(path, "ab") as f:
        f.write(first_unit * 2)  # two real-looking units past the file's end: queue offsets 300 and 301 again
    with pytest.raises(CorruptStoreError, match="longer than the store's 6000") as err:
        _plan(damaged, store_a, CorruptPolicy.FAIL)
    assert (err.value.path, err.value.offset) == (str(path), 6000)
    planned, result = _replay(damaged, store_a)
    assert [p["file"] for p in planned.problems] == [str(path)]
    assert _matched(result) == set(store_a_expected[0])  # no unit past the file's length delivered again
