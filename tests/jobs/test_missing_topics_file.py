"""A store's identity does not change with a config file that went missing: a bare store is named by the broker-name
topic of its config/topics.json (store_cluster's broker-a/store: `broker-a`); a copy without that file is named
`broker`, and a lake that holds the store as broker-a refuses it (exit 2, saying which name to give) instead of
taking it for a new store and committing every row again. A run says, in its summary's warnings, which config file
it reads is missing and what it therefore cannot know."""
import shutil

import pytest

from jobs.errors import UsageError
from jobs.plan.brokers import brokers_of
from jobs.plan.cluster import plan_cluster
from jobs.settings import JobOptions
from jobs.sinks.iceberg import tables as iceberg_sink
from tests.jobs.lake_parts import parts, target, write_run

BROKER_A = ("broker-a@10.10.0.1:10911", "0:1795585953574")  # broker-a/messages.jsonl.gz: its first record


@pytest.fixture
def copy_without_topics(store_cluster, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store_cluster / "broker-a" / "store", copy)
    for p in copy.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (copy / "config" / "topics.json").unlink()
    return copy


def _night_of_broker_a(tgt, out):
    """A night committed for broker-a: G1's rows of TopicA/0 [0, 3)."""
    written = write_run(str(out), [("G1", "TopicA", 0, 0)], broker="broker-a")
    iceberg_sink.publish_tables(tgt, str(out), written, "n1", True,
                                parts([("G1", "TopicA")], [("TopicA", 0, 0, 3)], broker="broker-a"))


def _target(tmp_path, store, continuing):
    return iceberg_sink.with_stores(target(tmp_path), brokers_of([str(store)]), continuing)


@pytest.mark.parametrize("continuing", [False, True])
def test_a_lake_refuses_a_copy_of_its_store_that_lost_the_name_giving_file(store_cluster, copy_without_topics,
                                                                           tmp_path, continuing):
    first = _target(tmp_path, store_cluster / "broker-a" / "store", False)
    assert [r.broker for r in first.refs] == ["broker-a"]
    _night_of_broker_a(first, tmp_path / "n1")
    again = _target(tmp_path, copy_without_topics, continuing)
    assert [r.broker for r in again.refs] == ["broker"]
    with pytest.raises(UsageError) as refused:
        iceberg_sink.check_lake(again, parts([("G1", "TopicA")], [("TopicA", 0, 3, 5)], broker="broker"))
    assert "holds this store as broker broker-a" in str(refused.value)
    assert "Give --store broker-a=STORE" in str(refused.value)


def test_the_copy_named_as_the_lake_knows_it_continues(store_cluster, copy_without_topics, tmp_path):
    first = _target(tmp_path, store_cluster / "broker-a" / "store", False)
    _night_of_broker_a(first, tmp_path / "n1")
    named = iceberg_sink.with_stores(target(tmp_path), brokers_of([f"broker-a={copy_without_topics}"]), True)
    assert [(r.key, r.head) for r in named.refs] == [BROKER_A]
    assert iceberg_sink.check_lake(named, parts([("G1", "TopicA")], [("TopicA", 0, 3, 5)], broker="broker-a")) == []


def test_a_missing_topics_file_is_a_warning_saying_what_the_run_calls_the_broker(store_cluster, copy_without_topics):
    options = JobOptions(store=str(copy_without_topics), allow_missing=True,
                         subscription_files=(str(store_cluster / "registrations.json"),))
    planned = plan_cluster(options, brokers_of([str(copy_without_topics)]))
    missing = [w for w in planned.parts[0][1].warnings if w.startswith("config/topics.json is missing")]
    assert len(missing) == 1 and "this run calls it 'broker'" in missing[0]
    whole = plan_cluster(options, brokers_of([str(store_cluster / "broker-a" / "store")]))
    assert not [w for w in whole.parts[0][1].warnings if "config/" in w]  # every file it reads is there
