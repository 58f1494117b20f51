"""A run of several brokers (jobs/plan/brokers.py, cluster.py): the brokers named and checked, each planned
with its own config, all splits pooled, every row naming its broker; against each broker's own read path
(store_cluster's expected_cluster.json and expected_committed.json, written by RocketMQ 4.9.8)."""
import json
import os
import shutil
from collections import Counter

import pyarrow.dataset as ds
import pytest

from jobs import replay
from jobs.errors import UsageError
from jobs.output.layouts import NORMALIZED
from jobs.output.writers import SinkSpec, commit
from jobs.plan.brokers import brokers_of, split_store
from jobs.plan.cluster import plan_cluster
from jobs.plan.window import parse_window
from jobs.report.summary import Counters, build_summary, cluster_summary
from jobs.settings import JobOptions
from jobs.task import stage as T


def _stores(cluster):
    return [f"broker-a={cluster / 'broker-a' / 'store'}", f"broker-b={cluster / 'broker-b' / 'store'}"]


def _options(cluster, **given):
    return JobOptions(store=str(cluster / "broker-a" / "store"),
                      subscription_files=(str(cluster / "registrations.json"),), **given)


def _replay(cluster, tmp_path, stores=None, **given):
    """(matched rows, ClusterPlan, report rows) of a run of the brokers, its tasks one after another (no Spark)."""
    brokers = brokers_of(stores or _stores(cluster))
    planned = plan_cluster(_options(cluster, **given), brokers)
    plans = [p.plan for _, p in planned.parts]
    out = tmp_path / "out"
    out.mkdir()  # the temporary OUT, made by the run's claim
    spec = SinkSpec(str(out), NORMALIZED, True)
    reports = T.replay(T.in_process, plans, spec, T.broker_splits(T.in_process, plans))
    commit(str(out), reports)
    rows = ds.dataset(out / "matched", format="parquet").to_table().to_pylist()
    return rows, planned, reports


def _expected(path):
    want = Counter()
    ids = {}
    for group, topics in json.loads(path.read_text()).items():
        for topic, rows in topics.items():
            for r in rows:
                key = (r["broker"], group, topic, int(r["queueId"]), int(r["queueOffset"]))
                want[key] += 1
                ids[key] = r["msgId"]
    return want, ids


def _assert_matches(rows, path):
    want, ids = _expected(path)
    got = Counter((r["broker"], r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert got == want
    assert all(r["msg_id"] == ids[(r["broker"], r["group"], r["topic"], r["queue_id"], r["queue_offset"])]
               for r in rows)


def test_two_brokers_in_one_run_deliver_what_each_brokers_read_path_returned(store_cluster, tmp_path):
    rows, planned, _ = _replay(store_cluster, tmp_path)
    _assert_matches(rows, store_cluster / "expected_cluster.json")
    assert [b.name for b in planned.brokers] == ["broker-a", "broker-b"]


def test_from_committed_starts_each_broker_at_its_own_consumer_offsets(store_cluster, tmp_path):
    rows, _, _ = _replay(store_cluster, tmp_path, start_from="committed")
    _assert_matches(rows, store_cluster / "expected_committed.json")


def test_a_topic_on_one_broker_only_is_planned_there_and_a_topic_on_none_is_refused(store_cluster, tmp_path):
    brokers = brokers_of(_stores(store_cluster))
    planned = plan_cluster(_options(store_cluster), brokers)
    topics = {b.name: {c.sub.topic for c in p.plan.subscriptions} for b, p in planned.parts}
    assert "TopicOnlyB" in topics["broker-b"] and "TopicOnlyB" not in topics["broker-a"]
    assert not planned.warnings
    typo = _options(store_cluster, ad_hoc=(("G_TYPO", "TopicNowhere", "TAG", "*"),))
    with pytest.raises(UsageError, match="TopicNowhere"):
        plan_cluster(typo, brokers)
    allowed = plan_cluster(_options(store_cluster, ad_hoc=(("G_TYPO", "TopicNowhere", "TAG", "*"),),
                                    allow_missing=True), brokers)
    assert any("TopicNowhere" in w for w in allowed.warnings)


def test_a_bare_store_is_named_by_its_broker_name_topic(store_cluster, store_a):
    [b] = brokers_of([str(store_cluster / "broker-b" / "store")])
    assert (b.name, b.named) == ("broker-b", False)
    topics = json.loads((store_a / "store" / "config" / "topics.json").read_text())["topicConfigTable"]
    [a] = brokers_of([str(store_a / "store")])
    # store_a's broker-name topic, found by hand in its topics.json: perm with PERM_INHERIT, one queue
    named = [t for t, c in topics.items() if c["perm"] & 1 and c["readQueueNums"] == 1 and t != "SELF_TEST_TOPIC"]
    assert a.name == (named[0] if len(named) == 1 else "broker")


def test_a_store_without_topics_json_is_named_broker(tmp_path):
    (tmp_path / "store" / "commitlog").mkdir(parents=True)
    [b] = brokers_of([str(tmp_path / "store")])
    assert b.name == "broker"


@pytest.mark.parametrize("value, name, uri", [
    ("broker-a=/data/a/store", "broker-a", "/data/a/store"),
    ("/data/date=2026/store", None, "/data/date=2026/store"),
    ("s3://bucket/store?endpoint_override=localhost:9000", None, "s3://bucket/store?endpoint_override=localhost:9000"),
    ("./rel=1/store", None, "./rel=1/store"),
    ("b=s3://bucket/store?scheme=http", "b", "s3://bucket/store?scheme=http"),
])
def test_a_store_value_is_named_only_when_what_precedes_the_equals_sign_is_no_path(value, name, uri):
    assert split_store(value) == (name, uri)


def test_bad_brokers_are_refused(store_cluster, tmp_path):
    a, b = store_cluster / "broker-a" / "store", store_cluster / "broker-b" / "store"
    os.symlink(a, tmp_path / "link")
    cases = {
        "two brokers named 'x'": [f"x={a}", f"x={b}"],
        "one store under two names": [f"x={a}", f"y={a}/"],
        "one store under two names ": [f"x={a}", f"y={tmp_path / 'link'}"],
        "broker name 'a b' holds whitespace": [f"a b={a}"],
        "a broker name is empty": [f"={a}", f"y={b}"],
        "broker name 'a/b' holds /": [f"a/b={a}"],
        "bare and named stores mixed": [str(a), f"y={b}"],
    }
    for message, stores in cases.items():
        with pytest.raises(UsageError, match=message.strip()):
            brokers_of(stores)
    with pytest.raises(UsageError, match="holds ="):
        brokers_of([f"x={a}"], _write(tmp_path / "b.txt", f"y=z={b}\n"))


def test_one_store_copied_elsewhere_is_the_same_store(store_cluster, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store_cluster / "broker-a" / "store", copy)
    with pytest.raises(UsageError, match="same store"):
        brokers_of([f"x={store_cluster / 'broker-a' / 'store'}", f"y={copy}"])


def test_the_brokers_file_lists_name_uri_lines_with_comments(store_cluster, tmp_path):
    text = "# the cluster\n\n" + "\n".join(_stores(store_cluster)) + "\n"
    brokers = brokers_of([], _write(tmp_path / "brokers.txt", text))
    assert [b.name for b in brokers] == ["broker-a", "broker-b"]
    with pytest.raises(UsageError, match="line 1: .* is not NAME=URI"):
        brokers_of([], _write(tmp_path / "bad.txt", f"{store_cluster / 'broker-a' / 'store'}\n"))


def test_bad_brokers_exit_2_before_anything_is_written(store_cluster, tmp_path, capsys):
    a = store_cluster / "broker-a" / "store"
    out = tmp_path / "out"
    for stores in ([f"x={a}", f"x={store_cluster / 'broker-b' / 'store'}"], [str(a), f"y={a}"], [f"a=b={a}"]):
        argv = [x for s in stores for x in ("--store", s)]
        regs = ["--subscriptions", str(store_cluster / "registrations.json")]
        assert replay.main(argv + ["--out", str(out)] + regs) == 2
        assert not out.exists() and not list(tmp_path.glob("out*"))
    assert "error:" in capsys.readouterr().err


def test_offsets_are_per_topic_for_a_bare_store_and_per_broker_for_named_ones(store_cluster, tmp_path):
    a = str(store_cluster / "broker-a" / "store")
    bare = plan_cluster(_options(store_cluster, allow_missing=True), brokers_of([a]))
    assert "TopicOrder" in bare.offsets() and "brokers" not in bare.offsets()
    named = plan_cluster(_options(store_cluster), brokers_of(_stores(store_cluster)))
    offsets = named.offsets()
    assert sorted(offsets) == ["brokers"] and sorted(offsets["brokers"]) == ["broker-a", "broker-b"]
    # expected: each broker's queue ends, from its own consume queues (store_cluster's README table)
    assert sum(offsets["brokers"]["broker-a"]["TopicOrder"].values()) == 1185
    assert sum(offsets["brokers"]["broker-b"]["TopicOnlyB"].values()) == 392
    assert "TopicOnlyB" not in offsets["brokers"]["broker-a"]


def test_a_brokers_offsets_json_continues_each_broker(store_cluster, tmp_path):
    first = plan_cluster(_options(store_cluster), brokers_of(_stores(store_cluster))).offsets()
    window = parse_window(starting=json.dumps(first), brokers=True)
    rest = plan_cluster(_options(store_cluster, window=window), brokers_of(_stores(store_cluster)))
    assert all(first == end for _, _, first, end in rest.parts[0][1].ranges + rest.parts[1][1].ranges)
    assert rest.offsets() == first


def test_offsets_per_topic_are_refused_for_several_brokers(store_cluster):
    window = parse_window(starting='{"TopicOrder": {"0": 3}}', brokers=True)
    with pytest.raises(UsageError, match="per broker"):
        plan_cluster(_options(store_cluster, window=window), brokers_of(_stores(store_cluster)))


def test_a_missing_store_with_allow_missing_keeps_its_offsets(store_cluster, tmp_path):
    kept = {"TopicOnlyB": {"0": 7, "1": 9}}
    stores = [_stores(store_cluster)[0], f"broker-b={tmp_path / 'gone'}"]
    window = parse_window(starting=json.dumps({"brokers": {"broker-b": kept}}), brokers=True)
    with pytest.raises(Exception, match="not found"):
        plan_cluster(_options(store_cluster, window=window), brokers_of(stores))
    planned = plan_cluster(_options(store_cluster, window=window, allow_missing=True), brokers_of(stores))
    assert [b.name for b in planned.brokers] == ["broker-a"]
    assert planned.offsets()["brokers"]["broker-b"] == {"TopicOnlyB": {"0": 7, "1": 9}}
    assert any("broker-b" in w for w in planned.warnings)


def test_every_report_row_and_the_summary_name_their_broker(store_cluster, tmp_path):
    rows, planned, reports = _replay(store_cluster, tmp_path)
    assert {r["broker"] for r in reports} == {"broker-a", "broker-b"}
    summaries = []
    for b, part in planned.parts:
        counters = Counters.of([r for r in reports if r["broker"] == b.name])
        summaries.append((b.name, build_summary(part, counters, _options(store_cluster))))
    summary = cluster_summary(summaries)
    per = summary["brokers"]
    # expected: the rows each broker's read path returned, counted from expected_cluster.json
    want, _ = _expected(store_cluster / "expected_cluster.json")
    for name in ("broker-a", "broker-b"):
        assert per[name]["totals"]["client_delivered"] == sum(n for k, n in want.items() if k[0] == name)
    assert summary["totals"]["client_delivered"] == sum(want.values())
    assert {r["broker"] for r in summary["subscriptions"]} == {"broker-a", "broker-b"}


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_the_console_table_and_the_report_show_each_brokers_rows(store_cluster, tmp_path):
    from jobs.report import html as report
    from jobs.report.summary import summary_table

    _, planned, reports = _replay(store_cluster, tmp_path)
    summaries = [(b.name, build_summary(part, Counters.of([r for r in reports if r["broker"] == b.name]),
                                        _options(store_cluster))) for b, part in planned.parts]
    summary = cluster_summary(summaries)
    table = summary_table(summary).splitlines()
    assert table[0].split()[:3] == ["broker", "group", "topic"]
    assert any(line.split()[:3] == ["broker-b", "GC_TAG_ALL", "TopicOnlyB"] for line in table)
    assert not any(line.split()[:3] == ["broker-a", "GC_TAG_ALL", "TopicOnlyB"] for line in table)
    page = report.render(summary, {}, 0)
    assert "<h2>Brokers</h2>" in page and "broker-b: GC_TAG_ALL / TopicOnlyB" in page


def test_the_consoles_bitmap_audit_of_a_cluster_names_each_topics_broker():
    from jobs.report.summary import summary_table

    audit = [{"broker": b, "topic": "T", "bitmaps_compared": n, "bitmap_mismatches": m,
              "bitmap_mismatches_explained": m} for b, n, m in (("broker-a", 5, 0), ("broker-b", 4, 1))]
    summary = {"subscriptions": [], "bitmap_audit": {"topics": audit}, "brokers": {"broker-a": {}, "broker-b": {}}}
    table = summary_table(summary).splitlines()
    start = table.index("bitmap audit (stored ConsumeQueueExt bitmaps against all the store's registrations):")
    assert [line.split() for line in table[start + 1:start + 5] if not set(line) <= {"-", " "}] == [
        ["broker", "topic", "compared", "mismatches", "explained"], ["broker-a", "T", "5", "0", "0"],
        ["broker-b", "T", "4", "1", "1"]]


@pytest.mark.system
@pytest.mark.spark
def test_spark_runs_both_brokers_in_one_stage_and_publishes_per_broker_outputs(store_cluster, tmp_path):
    from tests.jobs.test_exit_codes import _submit

    out = tmp_path / "out"
    stores = [x for s in _stores(store_cluster) for x in ("--store", s)]
    proc = _submit(*stores, "--subscriptions", store_cluster / "registrations.json", "--out", out)
    assert proc.returncode == 0, proc.console[-2000:]
    _assert_matches(ds.dataset(out / "matched", format="parquet").to_table().to_pylist(),
                    store_cluster / "expected_cluster.json")
    messages = ds.dataset(out / "messages", format="parquet", partitioning="hive").to_table()
    assert set(messages.column("broker").to_pylist()) == {"broker-a", "broker-b"}
    offsets = json.loads((out / "offsets.json").read_text())
    assert sorted(offsets["brokers"]) == ["broker-a", "broker-b"]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["brokers"]) == ["broker-a", "broker-b"]


def test_explain_finds_a_msg_ids_broker_and_needs_a_broker_for_a_queue_position(store_cluster, capsys):
    from jobs import explain

    stores = [x for s in _stores(store_cluster) for x in ("--store", s)]
    regs = ["--subscriptions", str(store_cluster / "registrations.json")]
    # expected: expected_cluster.json's first GC_TAG_ALL row of TopicOnlyB (broker-b, queue 0, offset 0)
    args = stores + regs + ["--group", "GC_TAG_ALL", "--topic", "TopicOnlyB", "--json"]
    assert explain.main(args + ["--msg-id", "0A0A000200002A9F000000000000986C"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["broker"], got["queue_id"], got["queue_offset"], got["delivered"]) == ("broker-b", 0, 0, True)
    position = stores + regs + ["--group", "GC_TAG_AB", "--topic", "TopicOrder", "--queue-id", "0",
                                "--queue-offset", "4"]
    assert explain.main(position) == 2
    assert "--broker" in capsys.readouterr().err
    assert explain.main(position + ["--broker", "broker-a", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    # expected: broker-a's GC_TAG_AB rows of TopicOrder queue 0 include offset 4 (expected_cluster.json)
    assert (got["broker"], got["delivered"]) == ("broker-a", True)


def test_a_topic_named_brokers_is_read_as_a_topic_and_a_bare_run_takes_its_own_entry():
    flat = parse_window(starting='{"brokers": {"0": 5}}', brokers=True)
    assert flat.starting == {"brokers": {0: 5}} and flat.starting_by_broker is None
    per = parse_window(starting='{"brokers": {"broker-a": {"T": {"1": 7}}, "broker-b": {}}}', brokers=True)
    assert per.for_broker("broker-a", False).starting == {"T": {1: 7}}
    assert per.for_broker("broker-c", True).starting == {}
    with pytest.raises(UsageError):  # the data source's and explain's windows take the per-topic shape only
        parse_window(starting='{"brokers": {"broker-a": {"T": {"1": 7}}}}')


def test_iceberg_ranges_continue_each_broker_by_its_store_a_bare_store_as_its_named_self(tmp_path):
    """publish_tables without Spark (empty parts): the ranges each night commits, read back per broker; broker-a,
    a bare --store named from its store one night and broker-a=URI the next, is one store (its identity)."""
    from jobs.output.writers import write_empty_tables
    from jobs.sinks.iceberg import lake
    from jobs.sinks.iceberg.tables import publish_tables
    from tests.jobs.lake_parts import parts, target

    a = lake.StoreRef("broker-a", "broker-a@10.10.0.1:10911", "0:1795585953574")
    b = lake.StoreRef("broker-b", "broker-b@10.10.0.2:10911", "0:1795585953600")
    nights = [("n1", (a,), parts([("G", "T")], [("T", 0, 0, 5)], "broker-a")),
              ("n2", (a, b), parts([("G", "T")], [("T", 0, 5, 9)], "broker-a")
               + parts([("G", "T")], [("T", 0, 0, 4)], "broker-b"))]
    for run, refs, run_parts in nights:
        out = tmp_path / run
        publish_tables(target(tmp_path, refs=refs), str(out), write_empty_tables(str(out), NORMALIZED, True, {}),
                       run, True, run_parts)
    held = lake.Held.of(target(tmp_path).catalog(), "lake")
    c = lake.StoreRef("broker-c", "broker-c@10.10.0.3:10911", "0:1")
    assert lake.starts(held, (a, b, c)) == {"broker-a": {"T": {0: 9}}, "broker-b": {"T": {0: 4}}}
    with pytest.raises(UsageError, match="G T/0 \\[3, 6\\) held \\[0, 4\\) by run n2 of broker broker-b"):
        lake.refuse_overlaps("lake", held, (a, b), [("broker-b", "G", "T", 0, 3, 6)])
    lake.refuse_overlaps("lake", held, (a, b), [("broker-b", "G", "T", 0, 4, 6)])
