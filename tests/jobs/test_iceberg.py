"""Nightly runs into Iceberg tables (issue 28), through the real spark-submit wrapper and an embedded SQL catalog
(SQLite in a temporary folder): two consecutive windows of store_a hold exactly RocketMQ's rows (expected.json;
collisions: expected_broker_raw.json less those), messages once with their bodies, one snapshot per table per
run; a rerun of committed offsets exits 2 and commits nothing; a killed run leaves the tables as they were;
parts no snapshot references are listed and removed."""
import base64
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from jobs.output.layouts import NORMALIZED
from jobs.output.writers import write_empty_tables
from jobs.sinks.iceberg.tables import IcebergTarget, publish_tables, remove_stale, stale_runs
from tests.jobs.conftest import expected_rows
from tests.jobs.lake_parts import REF, parts
from tests.jobs.test_exit_codes import ROOT, _submit
from tests.jobs.test_scheduler_runs import SUBMIT, _session_processes, _slow_filters, _wait_for

pytestmark = [pytest.mark.spark, pytest.mark.system]
UNTIL = 1795237035452  # store_a's messages were stored from ...034787 to ...035765: two nights of it


@pytest.fixture(scope="module")
def nights(store_a, tmp_path_factory):
    """Two windows committed to one catalog (the second from the tables' own offsets), then the first again."""
    base = tmp_path_factory.mktemp("iceberg")
    target = IcebergTarget("nightly", uri=f"sqlite:///{base}/catalog.db", warehouse=str(base / "wh"))
    common = ["--store", store_a / "store", "--subscriptions", store_a / "registrations.json", "--sink", "iceberg",
              "--catalog-uri", target.uri, "--warehouse", target.warehouse, "--namespace", "nightly"]
    first = _submit(*common, "--out", base / "n1", "--until", UNTIL)
    second = _submit(*common, "--out", base / "n2", "--starting-offsets", "iceberg")
    again = _submit(*common, "--out", base / "n3", "--until", UNTIL)
    return target, (first, second, again), base


def _keys(table):
    a = table.scan(selected_fields=("group", "topic", "queue_id", "queue_offset")).to_arrow()
    return Counter(zip(a.column("group").to_pylist(), a.column("topic").to_pylist(), a.column("queue_id").to_pylist(),
                       a.column("queue_offset").to_pylist()))


def test_two_nights_hold_exactly_rocketmqs_rows_once(nights, store_a, store_a_messages):
    target, (first, second, _), _ = nights
    assert (first.returncode, second.returncode) == (0, 0), first.console[-2000:] + second.console[-2000:]
    catalog = target.catalog()
    final = expected_rows(store_a / "expected.json")
    raw = expected_rows(store_a / "expected_broker_raw.json")
    for name, want in (("matched", set(final)), ("collisions", set(raw) - set(final))):
        got = _keys(catalog.load_table(f"nightly.{name}"))
        assert set(got) == want and max(got.values()) == 1
    messages = catalog.load_table("nightly.messages").scan(
        selected_fields=("topic", "queue_id", "queue_offset", "body")).to_arrow().to_pylist()
    bodies = {(m["topic"], m["queueId"], m["queueOffset"]): base64.b64decode(m["body_base64"] or "")
              for m in store_a_messages}
    got = Counter((m["topic"], m["queue_id"], m["queue_offset"]) for m in messages)
    assert set(got) == {k[1:] for k in raw} and max(got.values()) == 1
    assert all(m["body"] == bodies[(m["topic"], m["queue_id"], m["queue_offset"])] for m in messages)


def test_one_snapshot_per_table_per_run_recording_the_store_and_its_offsets(nights, store_a):
    target, _, _ = nights
    catalog = target.catalog()
    for name in ("matched", "collisions", "messages"):
        snapshots = catalog.load_table(f"nightly.{name}").snapshots()
        assert len(snapshots) == 2
        summaries = [s.summary.additional_properties for s in snapshots]
        # the store by what it is: its broker and the storeHost of its first record (messages.jsonl.gz)
        assert {s["mqreplay.store"] for s in summaries} == {"broker@127.0.0.1:10911"}
        assert len({s["mqreplay.run"] for s in summaries}) == 2
    first, second = (s.summary.additional_properties for s in catalog.load_table("nightly.matched").snapshots())
    assert '"TopicTest":{"0":[0,' in first["mqreplay.brokers"]  # the first night starts at the queues' start
    ranges = catalog.load_table("nightly._mqreplay_ranges").scan().to_arrow()
    assert set(ranges.column("run").to_pylist()) == {first["mqreplay.run"], second["mqreplay.run"]}


def test_a_rerun_of_committed_offsets_exits_2_and_commits_nothing(nights):
    _, (_, _, again), base = nights
    assert again.returncode == 2, again.console[-2000:]
    assert "nightly.matched already holds these offsets" in again.console
    assert "TopicTest/0 [0, " in again.console
    assert not (base / "n3").exists()


def test_a_killed_run_leaves_the_tables_as_they_were(store_a, tmp_path):
    target = IcebergTarget("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"))
    out = tmp_path / "out"
    cmd = [str(SUBMIT), "--master", "local[2]", "--py-files", str(_slow_filters(tmp_path)),
           str(ROOT / "jobs" / "replay.py"), "--store", str(store_a / "store"), "--out", str(out),
           "--subscription", "G_SLOW", "TopicTest", "PYTHON", "tests.jobs.slow_filters:slow_keep_all",
           "--sink", "iceberg", "--catalog-uri", target.uri, "--warehouse", target.warehouse, "--namespace", "t"]
    run = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                           env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        assert _wait_for(lambda: any(p.name.startswith("out.tmp-") and (p / "_attempts").exists()
                                     for p in tmp_path.iterdir()))
        os.kill(run.pid, signal.SIGTERM)
        assert _wait_for(lambda: not _session_processes(run.pid), timeout=30)
    finally:
        if _session_processes(run.pid):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    with pytest.raises((NoSuchTableError, NoSuchNamespaceError)):
        target.catalog().load_table("t.matched")
    assert not (tmp_path / "wh").exists() or not any((tmp_path / "wh").rglob("*.parquet"))


def test_parts_no_snapshot_references_are_listed_and_removed(nights):
    target, _, _ = nights
    table = target.catalog().load_table("nightly.matched")
    dead = os.path.join(table.location().removeprefix("file://"), "data", "run-deadbeef")
    os.makedirs(dead)
    open(os.path.join(dead, "part-00000.parquet"), "wb").close()
    stale = stale_runs(target)
    assert [(name, path.rstrip("/").rsplit("/", 1)[1]) for name, path, _ in stale] == [("matched", "run-deadbeef")]
    remove_stale(stale)
    assert not os.path.exists(dead) and stale_runs(target) == []


def test_two_quiet_nights_commit_an_empty_snapshot_each(tmp_path):
    """No rows and no offsets covered: each run still adds its one snapshot to every answer table."""
    target = IcebergTarget("quiet", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                           refs=(REF,))
    for run in ("night1", "night2"):
        out = tmp_path / run
        written = write_empty_tables(str(out), NORMALIZED, True, {})
        publish_tables(target, str(out), written, run, True, parts([("G", "TopicTest")], [("TopicTest", 0, 490, 490)]))
    for name in ("matched", "collisions", "messages"):
        table = target.catalog().load_table(f"quiet.{name}")
        assert [s.summary.additional_properties["mqreplay.run"] for s in table.snapshots()] == ["night1", "night2"]
        assert table.scan().to_arrow().num_rows == 0


def test_deliveries_are_partitioned_by_group_and_messages_by_topic(nights):
    target, _, _ = nights
    catalog = target.catalog()
    for name, column in (("matched", "group"), ("collisions", "group"), ("messages", "topic")):
        table = catalog.load_table(f"nightly.{name}")
        assert [table.schema().find_field(f.source_id).name for f in table.spec().fields] == [column]
        files = table.inspect.files().to_pylist()
        assert files and all(f["partition"][column] is not None for f in files)
    matched = catalog.load_table("nightly.matched")
    one_group = list(matched.scan(row_filter="group == 'G_TAG_A'").plan_files())
    assert 0 < len(one_group) < len(matched.inspect.files())
