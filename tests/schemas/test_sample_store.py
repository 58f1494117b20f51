"""The generated sample store is a store RocketMQ could have written: it decodes, its stored bitmaps are
what the dispatcher computes, and it round-trips through the writer."""
import pytest

import schemas
from jobs.local_replay import kind, replay_local
from jobs.plan import JobOptions, build_plan
from schemas.sample_store import DEFAULT_SUBSCRIPTIONS, generate_store


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample") / "store"
    generate_store(str(root), messages=1500, seed=3)
    return root


def test_sample_store_has_every_message_in_its_consume_queue(sample):
    messages = schemas.read_messages(sample)
    units = schemas.read_consume_queues(sample)
    assert messages.num_rows == units.num_rows == 1500
    assert set(messages.column("commitlog_offset").to_pylist()) == set(units.column("commitlog_offset").to_pylist())


def test_sample_store_bitmaps_differ_only_where_the_late_group_was_not_born(sample):
    planned = build_plan(JobOptions(store=str(sample), subscription_files=(DEFAULT_SUBSCRIPTIONS,)))
    audit = kind(replay_local(planned), "bitmap").to_pylist()
    assert audit and {(r["reason"], r["detail"]) for r in audit} == {
        ("registration born after the message", "G_SQL_LATE")}


def test_same_seed_gives_the_same_bytes(sample, tmp_path):
    again = tmp_path / "store"
    generate_store(str(again), messages=1500, seed=3)
    for path in sorted(p for p in sample.rglob("*") if p.is_file()):
        assert (again / path.relative_to(sample)).read_bytes() == path.read_bytes(), path
