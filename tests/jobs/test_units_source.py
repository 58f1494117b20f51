"""Stores without a file consume queue (issue 26), in process (no Spark): units rebuilt from the commit log or
read from a 5.2+ RocksDB consume queue replay exactly as RocketMQ's read path returned the store (expected.json:
deliveries; expected_broker_raw.json less those: the collisions); a queue the consume queue lacks is rebuilt
under `auto` and is damaged data under `consumequeue`; --from committed reads a RocksDB offsets database.

Stores are made from the fixtures: folders deleted, or the consume queue written into a RocksDB with RocketMQ's
key and value layout by tools/rocksdb_store_writer.py (read from RocksDBConsumeQueueTable.java)."""
import json
import os
import shutil

import pyarrow as pa
import pytest

from jobs import explain
from jobs.plan.build import build_plan
from jobs.plan.units.choose import UnitsFrom
from jobs.plan.window import offsets_json, parse_window
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError
from schemas.queues import rocksdb_store
from tests.jobs.conftest import assert_rows_equal, expected_rows, writable_copy
from tests.local_replay import kind, replay_local
from tools.rocksdb_store_writer import write_rocksdb_consume_queue, write_rocksdb_consumer_offsets


def _plan(store, fixture, **options):
    return build_plan(JobOptions(store=str(store), subscription_files=(str(fixture / "registrations.json"),),
                                 **options))


def _expected(fixture):
    final = expected_rows(fixture / "expected.json")
    raw = expected_rows(fixture / "expected_broker_raw.json")
    return final, {k: v for k, v in raw.items() if k not in final}


def _assert_exact(planned, fixture):
    final, collisions = _expected(fixture)
    result = replay_local(planned)
    assert_rows_equal(kind(result, "matched").to_pylist(), final)
    got = {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in kind(result, "collision").to_pylist()}
    assert got == set(collisions)
    assert kind(result, "corrupt").num_rows == 0
    return result


def _without_consume_queue(fixture, tmp_path):
    store = writable_copy(fixture, tmp_path)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "consumequeue_ext")
    return store


@pytest.mark.parametrize("name", ["store_a", "store_dledger"])
def test_a_store_without_its_consume_queue_replays_exactly(request, name, tmp_path):
    fixture = request.getfixturevalue(name)
    planned = _plan(_without_consume_queue(fixture, tmp_path), fixture)
    assert planned.sources.describe() == {"default": "commitlog", "queues": {}}
    _assert_exact(planned, fixture)


def test_units_rebuilt_in_many_small_splits_are_the_same(store_a, tmp_path):
    # 64 KiB splits: every split but the first starts inside a record until it is moved to the next record
    planned = _plan(_without_consume_queue(store_a, tmp_path), store_a, split_size=64 << 10)
    _assert_exact(planned, store_a)


def test_units_from_commitlog_ignores_the_consume_queue(store_a):
    planned = _plan(store_a / "store", store_a, units_from=UnitsFrom.COMMIT_LOG)
    assert planned.sources.describe() == {"default": "commitlog", "queues": {}}
    assert planned.segments.queues == ()
    _assert_exact(planned, store_a)


def test_a_lost_queue_folder_is_rebuilt_and_said(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "2")  # 485 messages, lost without a word before
    planned = _plan(store, store_a)
    assert planned.sources.describe() == {"default": "consumequeue", "queues": {"TopicTest": {"2": "commitlog"}}}
    assert any("TopicTest/2" in note for note in planned.sources.notes)
    result = _assert_exact(planned, store_a)
    units = {r["topic"]: r["units"] for r in kind(result, "topic_stats").to_pylist()}
    assert units["TopicTest"] == 490 + 477 + 485 + 477  # every queue's units, the rebuilt one's too


def test_a_lost_queue_folder_is_damaged_data_when_units_must_come_from_the_consume_queue(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "2")
    with pytest.raises(CorruptStoreError, match="consumequeue/TopicTest/2.*topics.json names 4 queues"):
        _plan(store, store_a, units_from=UnitsFrom.CONSUME_QUEUE)
    planned = _plan(store, store_a, units_from=UnitsFrom.CONSUME_QUEUE, on_corrupt=CorruptPolicy.SKIP)
    assert [(p["topic"], p["queue_id"]) for p in planned.problems] == [("TopicTest", 2)]


@pytest.mark.parametrize("keep_files", [False, True])
def test_a_rocksdb_consume_queue_replays_exactly(store_a, tmp_path, keep_files):
    store = writable_copy(store_a, tmp_path)
    assert write_rocksdb_consume_queue(store, keep_files=keep_files) == 3000
    planned = _plan(store, store_a)
    # with the files beside it (5.3.1+ double write) the files are read; else every queue from the RocksDB
    assert planned.sources.default == ("consumequeue" if keep_files else "rocksdb")
    assert [s.KIND for s in planned.plan.units] == (["consumequeue"] if keep_files else ["consumequeue", "rocksdb"])
    _assert_exact(planned, store_a)


def _open_files_under(folder):
    """How many of this process's file descriptors are open on files under `folder` (Linux's /proc)."""
    folder, n = str(folder), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(folder + "/")
        except OSError:
            continue
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads Linux's /proc/self/fd")
def test_a_rocksdb_consume_queue_is_closed_when_the_plan_and_each_task_end(store_a, tmp_path):
    """A worker runs other tasks (and other code) after a task: no handle of the task's RocksDB outlives it."""
    store = writable_copy(store_a, tmp_path)
    write_rocksdb_consume_queue(store)
    planned = _plan(store, store_a)
    assert [s.KIND for s in planned.plan.units] == ["consumequeue", "rocksdb"]
    assert _open_files_under(store / "consumequeue") == 0  # planning read it, and closed it
    assert kind(replay_local(planned), "matched").num_rows  # the tasks read it
    assert _open_files_under(store / "consumequeue") == 0
    assert rocksdb_store.held_paths() == ()


def test_committed_offsets_are_read_from_a_rocksdb_config(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    json_offsets = _plan(store, store_a, start_from="committed").committed
    offsets = {("TopicTest", "G_TAG_A"): {0: 100, 1: 7}}  # by hand, unlike the JSON's
    write_rocksdb_consumer_offsets(store, offsets)
    planned = _plan(store, store_a, start_from="committed")
    assert planned.committed == offsets != json_offsets
    assert ("G_TAG_A", "TopicTest", 0, 100) in planned.plan.start_offsets


SINCE, UNTIL = 1795237035000, 1795237035400  # store_a's messages were stored from ...034787 on


def _stores(store_a, tmp_path):
    """store_a without its consume queue (rebuilt) and with a RocksDB consume queue."""
    rebuilt = _without_consume_queue(store_a, tmp_path / "rebuilt")
    rocks = writable_copy(store_a, tmp_path / "rocks")
    write_rocksdb_consume_queue(rocks)
    return {"commitlog": rebuilt, "rocksdb": rocks}


@pytest.mark.parametrize("source", ["commitlog", "rocksdb"])
def test_a_time_window_delivers_the_rows_stored_inside_it(store_a, tmp_path, source):
    final, _ = _expected(store_a)
    planned = _plan(_stores(store_a, tmp_path)[source], store_a, window=parse_window(str(SINCE), str(UNTIL)))
    assert planned.sources.describe()["default"] == source
    got = kind(replay_local(planned), "matched").to_pylist()
    assert_rows_equal(got, {k: r for k, r in final.items() if SINCE <= r["storeTimestamp"] < UNTIL})


@pytest.mark.parametrize("source", ["commitlog", "rocksdb"])
def test_until_then_its_offsets_json_delivers_everything_once(store_a, tmp_path, source):
    final, _ = _expected(store_a)
    store = _stores(store_a, tmp_path)[source]
    first_planned = _plan(store, store_a, window=parse_window(until=str(UNTIL)))
    first = kind(replay_local(first_planned), "matched").to_pylist()
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(offsets_json(first_planned.ranges)))
    assert set(json.loads(path.read_text())["TopicTest"]) == {"0", "1", "2", "3"}
    rest = kind(replay_local(_plan(store, store_a, window=parse_window(starting=str(path)))), "matched").to_pylist()
    assert_rows_equal(first, {k: r for k, r in final.items() if r["storeTimestamp"] < UNTIL})
    assert_rows_equal(rest, {k: r for k, r in final.items() if r["storeTimestamp"] >= UNTIL})


def _swap_units(store, topic, queue_id, a, b):
    """Swap the 20-byte units a and b of a consume-queue file (the first file of the queue)."""
    path = store / "consumequeue" / topic / str(queue_id) / "00000000000000000000"
    raw = bytearray(path.read_bytes())
    raw[a * 20:a * 20 + 20], raw[b * 20:b * 20 + 20] = raw[b * 20:b * 20 + 20], raw[a * 20:a * 20 + 20]
    path.write_bytes(bytes(raw))


def test_the_audit_names_two_swapped_units_and_nothing_on_a_clean_store(store_a, tmp_path):
    clean = replay_local(_plan(store_a / "store", store_a, audit_consume_queue=True))
    assert kind(clean, "cq_audit").num_rows == 0
    store = writable_copy(store_a, tmp_path)
    _swap_units(store, "TopicTest", 1, 5, 6)
    found = kind(replay_local(_plan(store, store_a, audit_consume_queue=True)), "cq_audit").to_pylist()
    named = sorted((r["topic"], r["queue_id"], r["queue_offset"]) for r in found)
    assert named == [("TopicTest", 1, 5), ("TopicTest", 1, 6)]
    assert "queue 1 offset 6" in next(r["reason"] for r in found if r["queue_offset"] == 5)


def test_the_audit_finds_a_unit_the_queue_lacks(store_a, tmp_path):
    store = writable_copy(store_a, tmp_path)
    path = store / "consumequeue" / "订单Topic" / "0" / "00000000000000006000"  # units 300 to 599 (352 written)
    raw = path.read_bytes()
    path.write_bytes(raw[:20 * 51] + bytes(20) + raw[20 * 52:])  # the last unit (offset 351) zeroed: gone
    found = kind(replay_local(_plan(store, store_a, audit_consume_queue=True)), "cq_audit").to_pylist()
    assert [(r["topic"], r["queue_id"], r["queue_offset"], r["reason"]) for r in found] == [
        ("订单Topic", 0, 351, "the commit log holds this record of the queue, and no unit points at it")]


@pytest.mark.parametrize("source", ["commitlog", "rocksdb"])
def test_explain_answers_where_the_consume_queue_files_are_gone(store_a, tmp_path, capsys, source):
    final, collisions = _expected(store_a)
    store = _stores(store_a, tmp_path)[source]
    for key in [next(k for k in final if k[:2] == ("G_TAG_A", "TopicTest")),
                next(k for k in collisions if k[:2] == ("G_TAG_Aa_collide", "TopicTest"))]:
        group, topic, queue_id, offset = key
        code = explain.main(["--store", str(store), "--subscriptions", str(store_a / "registrations.json"),
                             "--group", group, "--topic", topic, "--queue-id", str(queue_id),
                             "--queue-offset", str(offset), "--json"])
        answer = json.loads(capsys.readouterr().out)
        assert code == 0 and answer["delivered"] == (key in final)
        assert answer["stage"] == (None if key in final else "client")


def test_the_audit_of_one_queue_among_a_splits_records_of_two_finds_nothing_when_its_units_are_all_there():
    """Keys of the audited records and of the units on one numbering of the queues: the split's records hold a
    queue the run does not audit (A), and the audited queue's (B) units are complete. (Keys made on two
    numberings found every record of B "lacking", depending on Arrow's group_by order.)"""
    from jobs.task.cq_audit import audit_units
    from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
    from schemas.queues.cq_rebuild import UNITS_SCHEMA

    records = pa.Table.from_pylist([
        dict(topic="A", queue_id=0, queue_offset=0, commitlog_offset=0, size=100, tags_code=7),
        dict(topic="B", queue_id=0, queue_offset=0, commitlog_offset=100, size=100, tags_code=8),
        dict(topic="B", queue_id=0, queue_offset=1, commitlog_offset=200, size=100, tags_code=8)], schema=UNITS_SCHEMA)
    base = {f.name: None for f in CONSUME_QUEUE_SCHEMA}
    units = pa.Table.from_pylist([dict(base, topic="B", queue_id=0, queue_offset=o, commitlog_offset=c, size=100,
                                       tags_code_raw=8, is_ext_addr=False, tags_code=8)
                                  for o, c in ((0, 100), (1, 200))], schema=CONSUME_QUEUE_SCHEMA)
    found, wrong = audit_units(units, records, (("B", 0, 0, 2),))
    assert found.num_rows == 0 and wrong.tolist() == []
