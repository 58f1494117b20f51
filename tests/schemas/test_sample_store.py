"""The generated sample store is a store RocketMQ could have written: it decodes, its stored bitmaps are
what the dispatcher computes, and it round-trips through the writer."""
import struct

import pytest

import schemas
from jobs.plan.build import build_plan
from jobs.settings import JobOptions
from tests.local_replay import kind, replay_local
from tools.sample_store import DEFAULT_SUBSCRIPTIONS, generate_store


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample") / "store"
    generate_store(str(root), messages=1500, seed=3)
    return root


MAGIC_MESSAGE, MAGIC_BLANK = -626843481, -875286124  # 0xDAA320A7, 0xCBD43194 (fixtures/README.md)


def _walk_commit_log(store):
    """{physical offset: (topic, queue id, queue offset, size)} of every record, read with struct by the
    layout fixtures/README.md writes out: totalSize i32, magic i32, bodyCRC i32, queueId i32, flag i32,
    queueOffset i64, physicalOffset i64, ...; a file ends at a blank record or its zero tail."""
    records = {}
    for path in sorted((store / "commitlog").iterdir()):
        data, pos = path.read_bytes(), 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">ii", data, pos)
            if size == 0 or magic == MAGIC_BLANK:
                break
            assert magic == MAGIC_MESSAGE, (path.name, pos)
            queue_id, queue_offset, physical = struct.unpack_from(">i4xqq", data, pos + 12)
            assert physical == int(path.name) + pos
            records[physical] = (queue_id, queue_offset, size)
            pos += size
    return records


def _walk_consume_queues(store):
    """{physical offset: (queue id, queue offset, size)} of every 20-byte unit (phyOffset i64, size i32,
    tagsCode i64), up to the zero tail of the preallocated files."""
    units = {}
    for queue in sorted((store / "consumequeue").glob("*/*")):
        for path in sorted(queue.iterdir()):
            data = path.read_bytes()
            for i in range(0, len(data) - 19, 20):
                physical, size, _ = struct.unpack_from(">qiq", data, i)
                if size == 0:
                    break
                units[physical] = (int(queue.name), (int(path.name) + i) // 20, size)
    return units


def test_sample_store_has_every_message_in_its_consume_queue(sample):
    """Read with plain struct code, not the project's decoders: 1500 records, each the target of one unit
    with its queue, offset and size."""
    records, units = _walk_commit_log(sample), _walk_consume_queues(sample)
    assert len(records) == 1500 and units == records
    assert sorted(schemas.read_messages(sample).column("commitlog_offset").to_pylist()) == sorted(records)


def test_sample_store_bitmaps_differ_only_where_the_late_group_was_not_born(sample):
    planned = build_plan(JobOptions(store=str(sample), subscription_files=(DEFAULT_SUBSCRIPTIONS,)))
    audit = kind(replay_local(planned), "bitmap").to_pylist()
    assert audit and {(r["reason"], r["groups_missing"]) for r in audit} == {
        ("registration born after the message", "G_SQL_LATE")}


def test_same_seed_gives_the_same_bytes(sample, tmp_path):
    again = tmp_path / "store"
    generate_store(str(again), messages=1500, seed=3)
    for path in sorted(p for p in sample.rglob("*") if p.is_file()):
        assert (again / path.relative_to(sample)).read_bytes() == path.read_bytes(), path


def test_sample_store_has_committed_offsets_at_80_percent_of_each_queue(sample):
    """`make run` can show --from committed: every group's queues of its topic have an offset (4/5 of the
    queue's units, counted here from the consume-queue files' sizes)."""
    import json

    table = json.loads((sample / "config" / "consumerOffset.json").read_text(encoding="utf-8"))["offsetTable"]
    groups = json.loads(open(DEFAULT_SUBSCRIPTIONS, encoding="utf-8").read())["groups"]
    for g in groups:
        queues = sample / "consumequeue" / g["topic"]
        want = {}
        for q in queues.iterdir():
            units = 0
            for f in q.iterdir():
                data = f.read_bytes()
                units += sum(1 for i in range(0, len(data), 20) if data[i + 12:i + 20] != b"\0" * 8
                             or data[i:i + 12] != b"\0" * 12)
            want[q.name] = units * 4 // 5
        assert table[f"{g['topic']}@{g['group']}"] == want
