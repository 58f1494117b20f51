"""The replay core (no Spark) gives exactly what RocketMQ's read path returned for store_a."""
import pyarrow.compute as pc
import pytest

from jobs.local_replay import kind, replay_local
from jobs.plan import JobOptions, build_plan
from tests.jobs.conftest import assert_rows_equal


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


def test_every_unit_is_counted_once_per_subscription(replayed, store_a):
    import schemas

    planned, result = replayed
    units = schemas.read_consume_queues(store_a / "store")
    stats = kind(result, "stats").to_pylist()
    for c in planned.subscriptions:
        want = pc.sum(pc.equal(units.column("topic"), c.sub.topic)).as_py() or 0
        got = sum(r["units"] for r in stats if (r["group"], r["topic"]) == c.key)
        assert got == want, c.key


def test_stored_bitmaps_differ_only_where_a_registration_was_born_later(replayed):
    _, result = replayed
    bitmaps = kind(result, "bitmap").to_pylist()
    assert bitmaps, "the late group's registration must show in the audit"
    assert all(r["reason"] == "registration born after the message" for r in bitmaps)
    assert {r["detail"] for r in bitmaps} == {"G_SQL_LATE"}


def test_late_sql_group_uses_bloom_only_for_messages_stored_after_its_born_time(replayed):
    planned, result = replayed
    late = next(c for c in planned.subscriptions if c.sub.group == "G_SQL_LATE" and c.sub.topic == "TopicTest")
    stats = [r for r in kind(result, "stats").to_pylist() if (r["group"], r["topic"]) == late.key]
    # messages before bornTime pass stage 1 unchecked: stage 1 lets through more than SQL92 matches
    assert sum(r["stage1_passed"] for r in stats) > sum(r["broker_delivered"] for r in stats)


def test_dialect_4_gives_the_same_result_without_contains(store_a, store_a_expected):
    _, result = _replay(store_a, dialect="4")
    assert_rows_equal(kind(result, "matched").to_pylist(), store_a_expected[0])


def test_unparsable_subscription_fails_only_its_group(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"),
                                    ad_hoc=(("G_BAD", "TopicTest", "SQL92", "a >"),
                                            ("G_OK", "TopicTest", "TAG", "TagA"))))
    failed = {c.sub.group: c.error for c in planned.subscriptions if c.error}
    assert list(failed) == ["G_BAD"] and failed["G_BAD"].startswith("SUBSCRIPTION_PARSE_FAILED")
    result = replay_local(planned)
    assert set(kind(result, "matched").column("group").to_pylist()) >= {"G_OK"}
    assert "G_BAD" not in set(kind(result, "matched").column("group").to_pylist())


def test_ad_hoc_sql_equals_row_evaluation_of_every_message(store_a):
    import schemas
    from filtering import sql92

    expr = "a > 30 AND region IS NULL"
    planned = build_plan(JobOptions(store=str(store_a / "store"), retry=False,
                                    ad_hoc=(("G_WHATIF", "TopicTest", "SQL92", expr),)))
    got = {(r["queue_id"], r["queue_offset"]) for r in kind(replay_local(planned), "matched").to_pylist()
           if r["group"] == "G_WHATIF"}
    compiled = sql92.parse(expr)
    want = {(m["queue_id"], m["queue_offset"]) for m in schemas.read_messages(store_a / "store").to_pylist()
            if m["topic"] == "TopicTest" and compiled.matches(dict(m["properties"]))}
    assert got == want and got


def test_committed_offsets_start_each_group_at_its_backlog(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"), start_from="committed",
                                    subscription_files=(str(store_a / "registrations.json"),)))
    stats = kind(replay_local(planned), "stats").to_pylist()
    # store_a's consumerOffset.json holds the end of every queue read: nothing is left to consume
    assert sum(r["units"] for r in stats) == 0


def test_python_filter_runs_and_counts_its_exceptions(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"), retry=False, ad_hoc=(
        ("G_PY", "TopicTest", "PYTHON", "tests.jobs.custom_filters:region_is_hangzhou"),
        ("G_PY_ERR", "TopicTest", "PYTHON", "tests.jobs.custom_filters:always_fails"))))
    result = replay_local(planned)
    matched = kind(result, "matched").to_pylist()
    assert matched and all(r["properties"] and dict(r["properties"]).get("region") == "杭州"
                           for r in matched if r["group"] == "G_PY")
    stats = {r["group"]: r for r in kind(result, "stats").to_pylist()}
    assert stats["G_PY_ERR"]["evaluation_errors"] == stats["G_PY_ERR"]["units"] > 0
    assert not [r for r in matched if r["group"] == "G_PY_ERR"]


@pytest.mark.parametrize("groups,rows", [(5, 10), (5, 3000), (20, 3000), (70, 300)])
def test_group_lists_name_the_groups_set_in_each_row(groups, rows):
    """Both ways of building the lists (per cell, per distinct group set) against a plain loop."""
    import numpy as np
    import pyarrow as pa

    from jobs.split_task import _group_lists

    rng = np.random.default_rng(groups * rows)
    mask = rng.random((groups, rows)) < rng.random((groups, 1))  # groups of different selectivity
    names = [f"G{i}" for i in range(groups)]
    got = _group_lists(mask, pa.array(names)).to_pylist()
    assert got == [[names[g] for g in range(groups) if mask[g, r]] for r in range(rows)]


def test_units_are_ordered_by_topic_then_commit_log_offset():
    """The split task's order (topic by topic, each in log order) equals a plain sort by both keys."""
    import numpy as np
    import pyarrow as pa

    from jobs.split_task import _by_topic_then_offset

    rng = np.random.default_rng(3)
    n = 2000
    units = pa.table({"topic": pa.array(rng.choice(["TopicB", "TopicA", "%RETRY%G", "Z"], n)),
                      "commitlog_offset": pa.array(rng.permutation(n).astype(np.int64) * 100),
                      "queue_id": pa.array(rng.integers(0, 4, n).astype(np.int32))})
    want = units.sort_by([("topic", "ascending"), ("commitlog_offset", "ascending")])
    assert _by_topic_then_offset(units).equals(want)
    assert _by_topic_then_offset(want) is want  # already ordered: no copy
