"""A run parses only the store's config files it uses: a malformed subscriptionGroup.json or (without --from
committed) consumerOffset.json does not stop a replay of store_a; one it uses does (topics.json, which says which
queues the consume queue must have, is one)."""
import pytest

from jobs.plan.build import build_plan
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import ConfigError
from tests.jobs.conftest import writable_copy

MALFORMED = '{"topicConfigTable": {"TopicTest": '  # cut off mid-object, as a crash mid-write leaves it


def _plan(store, store_a, **options):
    return build_plan(JobOptions(store=str(store), subscription_files=(str(store_a / "registrations.json"),),
                                 **options))


@pytest.mark.parametrize("name", ["subscriptionGroup.json", "consumerOffset.json"])
def test_a_malformed_config_file_the_run_does_not_read_does_not_stop_it(store_a, tmp_path, name):
    copy = writable_copy(store_a, tmp_path)
    (copy / "config" / name).write_text(MALFORMED, encoding="utf-8")
    planned = _plan(copy, store_a)
    assert {c.sub.group for c in planned.subscriptions} >= {"G_TAG_A", "G_SQL_BETWEEN"}
    assert not planned.problems


def test_a_malformed_consumer_offsets_file_stops_a_run_from_committed_offsets(store_a, tmp_path):
    copy = writable_copy(store_a, tmp_path)
    (copy / "config" / "consumerOffset.json").write_text(MALFORMED, encoding="utf-8")
    with pytest.raises(ConfigError, match="consumerOffset.json"):
        _plan(copy, store_a, start_from="committed")


def test_a_malformed_topics_file_stops_a_run_or_is_audited_under_skip(store_a, tmp_path):
    copy = writable_copy(store_a, tmp_path)
    (copy / "config" / "topics.json").write_text(MALFORMED, encoding="utf-8")
    with pytest.raises(ConfigError, match="topics.json"):
        _plan(copy, store_a)
    planned = _plan(copy, store_a, on_corrupt=CorruptPolicy.SKIP)
    assert [p["file"].endswith("topics.json") for p in planned.problems] == [True]


def test_a_malformed_consumer_filter_file_stops_a_run(store_a, tmp_path):
    copy = writable_copy(store_a, tmp_path)
    (copy / "config" / "consumerFilter.json").write_text(MALFORMED, encoding="utf-8")
    with pytest.raises(ConfigError, match="consumerFilter.json"):
        _plan(copy, store_a)
