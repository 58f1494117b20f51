"""The timer ledger (OUT/timers/) of store_5x's timer messages, against RocketMQ 5.3.3's own record of them
(expected/timer_ledger.json): every message that went through the wheel once, with its fate; across two
nights; and the wheel records the wheel itself could not read, under the corruption policy."""
import json
import shutil
import subprocess
import sys
import tarfile
from collections import Counter

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from jobs.datasource import register, timer_ledger
from jobs.ledgers.timer import LEDGER_SCHEMA, Reads, count_rows, overdue_warnings, timer_events
from jobs.report import html as report
from jobs.settings import CorruptPolicy
from jobs.sinks.iceberg.tables import IcebergTarget
from schemas.errors import CorruptStoreError
from tests.conftest import DATA
from tests.jobs.conftest import submit_job
from tests.jobs.test_replay_spark import ROOT
from tests.test_fixture_copies import SHARED, needs_shared

pytestmark = pytest.mark.spark
SUBSCRIPTIONS = ("--subscription", "G_T", "TopicTimer", "TAG", "*", "--subscription", "G_O", "TopicOrder", "TAG", "*",
                 "--no-retry")
MIDDLE = 1795778665420  # a delivered copy's store time: about half of the deliveries come before it


def _ledger(fixture):
    return json.loads((fixture / "expected" / "timer_ledger.json").read_text(encoding="utf-8"))["ledger"]


def _through_wheel(fixture):
    return {k: e for k, e in _ledger(fixture).items() if not e["direct"]}


def _rows(out):
    table = ds.dataset(out / "timers", format="parquet").to_table()
    return table, {r["uniq_key"]: r for r in table.to_pylist()}


def _expected_row(e, since=None, until=None):
    """The ledger row RocketMQ's record gives of a message in the window [since, until): what the records stored
    in it tell."""
    def seen(ts):
        return ts is not None and (since is None or ts >= since) and (until is None or ts < until)
    scheduled, delivered, marker = seen(e["scheduledStoreTs"]), seen(e["deliveredStoreTs"]), \
        seen(e["cancelMarkerStoreTs"])
    if not (scheduled or delivered or marker):
        return None
    state = "delivered" if delivered else "cancelled" if marker else "pending"
    return {
        "real_topic": e["realTopic"], "real_queue_id": e["realQueueId"], "deliver_ms": e["deliverMs"], "state": state,
        "scheduled_store_timestamp": e["scheduledStoreTs"] if scheduled else None,
        "scheduled_commitlog_offset": e["scheduledCommitLogOffset"] if scheduled else None,
        "delivered_store_timestamp": e["deliveredStoreTs"] if delivered else None,
        "delivered_queue_offset": e["deliveredQueueOffset"] if delivered else None,
        "delivered_commitlog_offset": e["deliveredCommitLogOffset"] if delivered else None,
        "cancelled_store_timestamp": e["cancelMarkerStoreTs"] if state == "cancelled" else None,
        "lag_ms": e["deliveredStoreTs"] - e["deliverMs"] if delivered else None,
        "broker": "broker"}


def _assert_ledger(rows, want):
    got = {k: {f: r[f] for f in want[next(iter(want))]} for k, r in rows.items()}
    assert sorted(set(want) - set(got))[:3] == [] and sorted(set(got) - set(want))[:3] == []
    wrong = [(k, f, got[k][f], v) for k, w in want.items() for f, v in w.items() if got[k][f] != v]
    assert wrong[:3] == []


@pytest.fixture(scope="module")
def whole(store_5x, tmp_path_factory):
    out = tmp_path_factory.mktemp("timers") / "out"
    proc = submit_job("--store", store_5x / "store", "--out", out, *SUBSCRIPTIONS)
    assert proc.returncode == 0, proc.console[-3000:]
    return out


@pytest.fixture(scope="module")
def nights(store_5x, tmp_path_factory):
    root = tmp_path_factory.mktemp("nights")
    first = submit_job("--store", store_5x / "store", "--out", root / "n1", *SUBSCRIPTIONS, "--until", MIDDLE)
    assert first.returncode == 0, first.console[-3000:]
    second = submit_job("--store", store_5x / "store", "--out", root / "n2", *SUBSCRIPTIONS,
                        "--starting-offsets", root / "n1" / "offsets.json")
    assert second.returncode == 0, second.console[-3000:]
    return root / "n1", root / "n2"


def test_every_message_through_the_wheel_is_one_row_with_the_fate_rocketmq_recorded(whole, store_5x):
    table, rows = _rows(whole)
    assert table.num_rows == len(rows) == 293  # 225 delivered, 33 cancelled, 35 pending (run.json's counts)
    _assert_ledger(rows, {k: _expected_row(e) for k, e in _through_wheel(store_5x).items()})


def test_a_message_stored_straight_into_its_topic_is_no_ledger_row(whole, store_5x):
    direct = [k for k, e in _ledger(store_5x).items() if e["direct"]]
    assert len(direct) == 10
    assert not set(direct) & set(_rows(whole)[1])


def test_the_ledger_has_the_documented_columns(whole):
    table = ds.dataset(whole / "timers", format="parquet").to_table()
    assert table.schema.names == LEDGER_SCHEMA.names


def test_the_summary_counts_each_real_topic_s_fates(whole, store_5x):
    summary = json.loads((whole / "summary.json").read_text(encoding="utf-8"))
    want = Counter((e["realTopic"], e["state"]) for e in _through_wheel(store_5x).values())
    got = {(t["real_topic"], s): t[s] for t in summary["timers"]["topics"]
           for s in ("delivered", "pending", "cancelled")}
    assert {k: v for k, v in got.items() if v} == dict(want)
    lags = sorted(e["deliveredStoreTs"] - e["deliverMs"] for e in _through_wheel(store_5x).values()
                  if e["realTopic"] == "TopicOrder" and e["state"] == "delivered")
    order = next(t for t in summary["timers"]["topics"] if t["real_topic"] == "TopicOrder")
    half = len(lags) // 2
    median = (lags[half - 1] + lags[half]) / 2 if len(lags) % 2 == 0 else float(lags[half])
    assert (order["lag_ms_max"], order["lag_ms_median"]) == (lags[-1], median)
    assert summary["timers"]["totals"]["overdue"] == 0  # stopped 4 s after the last short deliver time
    assert all(t["copies_looked_for"] for t in summary["timers"]["topics"])  # both real topics were read
    assert summary["outputs"]["timers"]["rows"] == 293


@pytest.mark.system  # two spark-submit runs, as users run the job: make test-system
def test_copies_are_looked_for_in_the_real_topics_of_units_rebuilt_from_the_commit_log(store_5x, tmp_path):
    out = tmp_path / "out"
    proc = submit_job("--store", store_5x / "store", "--out", out, *SUBSCRIPTIONS, "--units-from", "commitlog")
    assert proc.returncode == 0, proc.console[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert {t["real_topic"]: t["copies_looked_for"] for t in summary["timers"]["topics"]} == \
        {"TopicOrder": True, "TopicTimer": True}
    assert not [w for w in summary["warnings"] if "not looked for" in w]
    assert sum(t["delivered"] for t in summary["timers"]["topics"]) == 225  # run.json: every short timer delivered


def test_a_message_scheduled_in_one_night_and_delivered_in_the_next_is_pending_then_delivered(nights, store_5x):
    n1, n2 = nights
    ledger = _through_wheel(store_5x)
    first = {k: w for k, w in ((k, _expected_row(e, until=MIDDLE)) for k, e in ledger.items()) if w}
    second = {k: w for k, w in ((k, _expected_row(e, since=MIDDLE)) for k, e in ledger.items()) if w}
    assert Counter(w["state"] for w in first.values()) == {"pending": 150, "delivered": 110, "cancelled": 33}
    assert Counter(w["state"] for w in second.values()) == {"delivered": 115}
    _assert_ledger(_rows(n1)[1], first)
    _assert_ledger(_rows(n2)[1], second)  # copies whose scheduled record is in the first night: what they tell


def test_a_store_without_timer_messages_writes_an_empty_ledger(store_a, tmp_path):
    out = tmp_path / "out"
    proc = submit_job("--store", store_a / "store", "--out", out, "--subscriptions", store_a / "registrations.json",
                      "--groups", "G_TAG_A")
    assert proc.returncode == 0, proc.console[-3000:]
    table = ds.dataset(out / "timers", format="parquet").to_table()
    assert (table.num_rows, table.schema) == (0, LEDGER_SCHEMA)


class _Plan:
    """What timer_events asks of a plan: the corruption policy and the commit log's file of an offset."""

    def __init__(self, on_corrupt):
        self.skips_damage = on_corrupt.skips
        self.log = self

    def file_at(self, offset):
        return type("File", (), {"path": "commitlog/00000000000000000000"})


class _Out:
    def __init__(self):
        self.pieces = []

    def add(self, kind, piece):
        self.pieces.append((kind, piece))


def _wheel_batch(*properties):
    n = len(properties)
    return pa.table({
        "topic": ["rmq_sys_wheel_timer"] * n, "queue_id": pa.array([0] * n, pa.int32()),
        "queue_offset": pa.array(range(n), pa.int64()),
        "commitlog_offset": pa.array([100 * i for i in range(n)], pa.int64()),
        "store_timestamp": pa.array([1000 + i for i in range(n)], pa.int64()),
        "msg_id": [f"OFFSET{i}" for i in range(n)],
        "properties": pa.array([list(p.items()) for p in properties], pa.map_(pa.string(), pa.string()))})


GOOD = {"UNIQ_KEY": "K1", "REAL_TOPIC": "TopicTimer", "REAL_QID": "2", "TIMER_OUT_MS": "5000"}
NO_TOPIC = {"UNIQ_KEY": "K2", "REAL_QID": "1", "TIMER_OUT_MS": "5000"}
BAD_DUE = {"UNIQ_KEY": "K3", "REAL_TOPIC": "TopicTimer", "REAL_QID": "1", "TIMER_OUT_MS": "soon"}


def test_a_wheel_record_without_real_topic_or_with_a_non_numeric_due_time_is_audited_under_skip():
    out = _Out()
    events = timer_events(_Plan(CorruptPolicy.SKIP), "rmq_sys_wheel_timer", _wheel_batch(GOOD, NO_TOPIC, BAD_DUE), out)
    assert events.to_pylist() == [{"uniq_key": "K1", "kind": "scheduled", "real_topic": "TopicTimer",
                                   "real_queue_id": 2, "deliver_ms": 5000, "store_timestamp": 1000,
                                   "commitlog_offset": 0, "queue_id": 0, "queue_offset": 0}]
    assert {kind for kind, _ in out.pieces} == {"corrupt"}
    audited = [r for _, piece in out.pieces for r in piece.to_pylist()]
    assert [(r["commitlog_offset"], r["reason"]) for r in sorted(audited, key=lambda r: r["commitlog_offset"])] == [
        (100, "timer record without REAL_TOPIC: left out of the timer ledger"),
        (200, "timer record whose TIMER_OUT_MS is not a number: left out of the timer ledger")]


def test_a_wheel_record_the_wheel_cannot_read_stops_a_run_that_does_not_skip():
    with pytest.raises(CorruptStoreError, match="TIMER_OUT_MS is not a number"):
        timer_events(_Plan(CorruptPolicy.FAIL), "rmq_sys_wheel_timer", _wheel_batch(GOOD, BAD_DUE), _Out())


def test_a_cancel_marker_is_an_event_of_the_original_s_key():
    marker = dict(GOOD, TIMER_DEL_UNIQKEY="TopicTimerK1", TAGS="_RECALL_TAG_")
    events = timer_events(_Plan(CorruptPolicy.FAIL), "rmq_sys_wheel_timer", _wheel_batch(marker), _Out())
    assert [(r["uniq_key"], r["kind"]) for r in events.to_pylist()] == [("K1", "cancel")]


def test_only_copies_the_wheel_delivered_are_events_of_a_real_topic():
    delivered = dict(GOOD, TIMER_ENQUEUE_MS="4000", TIMER_DEQUEUE_MS="5001")
    direct = {"UNIQ_KEY": "K9", "TIMER_DELIVER_MS": "10"}  # deliver time past at send: stored straight
    batch = _wheel_batch(delivered, direct).set_column(0, "topic", pa.array(["TopicTimer"] * 2))
    events = timer_events(_Plan(CorruptPolicy.FAIL), "TopicTimer", batch, _Out())
    assert [(r["uniq_key"], r["kind"], r["deliver_ms"]) for r in events.to_pylist()] == [("K1", "delivered", 5000)]


@needs_shared
def test_the_fixture_copy_equals_store_5x():
    with tarfile.open(DATA / "stores" / "store_5x.tar.gz") as tar:
        for member in tar.getmembers():
            rel = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and rel != "README.md":
                assert tar.extractfile(member).read() == (SHARED / "stores" / "store_5x" / rel).read_bytes(), rel


def test_the_report_shows_the_ledger_per_real_topic(whole):
    summary = json.loads((whole / "summary.json").read_text(encoding="utf-8"))
    page = (whole / "report.html").read_text(encoding="utf-8")
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    assert data["timers"] == summary["timers"]
    assert "Timer messages per real topic" in page and "Timer wheel: messages overdue" not in page


def test_overdue_timers_are_the_report_s_first_alarm(whole):
    summary = json.loads((whole / "summary.json").read_text(encoding="utf-8"))
    summary["timers"]["topics"][0]["overdue"] = 3
    summary["timers"]["totals"]["overdue"] = 3
    page = report.render(summary, {}, 0)
    headline = page.split("<h1>", 1)[1].split("</h1>", 1)[0]
    assert "3 timer message(s) overdue" in headline
    body = page.split("</h1>", 1)[1]
    assert body.index("<h2") == body.index("<h2 class=\"bad\">Timer wheel: messages overdue")
    assert body.index("Timer wheel: messages overdue") < body.index("Subscriptions")


def test_a_pending_timer_due_well_before_the_latest_record_read_is_overdue(spark):
    rows = [  # (uniq_key, real_topic, deliver_ms, state, lag_ms, broker)
        ("a", "T", 1_000, "pending", None, "b1"),  # due 9 s before b1's clock: overdue
        ("b", "T", 8_000, "pending", None, "b1"),  # due 2 s before: within the 5 s allowed
        ("c", "T", 1_000, "delivered", 40, "b1"),
        ("d", "T", 3_000, "delivered", 60, "b1"),
        ("e", "T", 1_000, "cancelled", None, "b1"),
        ("f", "T", 1_000, "pending", None, "b2"),  # b2's clock is 3 s: not overdue
    ]
    frame = spark.createDataFrame(rows, "uniq_key string, real_topic string, deliver_ms long, "
                                  "state string, lag_ms long, broker string")
    got = count_rows(frame, Reads({"b1": 10_000, "b2": 3_000}, {"b1": {"T"}, "b2": {"T"}}), 5_000)
    assert got == [
        {"broker": "b1", "real_topic": "T", "delivered": 2, "pending": 2, "cancelled": 1, "overdue": 1,
         "overdue_by_wheel": 0, "lag_ms_median": 50.0, "lag_ms_max": 60, "copies_looked_for": True},
        {"broker": "b2", "real_topic": "T", "delivered": 0, "pending": 1, "cancelled": 0, "overdue": 0,
         "overdue_by_wheel": 0, "lag_ms_median": None, "lag_ms_max": None, "copies_looked_for": True}]


def test_a_pending_timer_of_a_topic_the_run_did_not_read_is_not_overdue_and_is_said(spark):
    frame = spark.createDataFrame([("a", "U", 1_000, "pending", None, "b1")], "uniq_key string, real_topic string, "
                                  "deliver_ms long, state string, lag_ms long, broker string")
    got = count_rows(frame, Reads({"b1": 10_000}, {"b1": {"T"}}), 5_000)
    assert (got[0]["overdue"], got[0]["copies_looked_for"]) == (0, False)
    [warning] = overdue_warnings(got, 5_000)
    assert warning.startswith("timer ledger: the run did not read U, real topics of pending timer messages")


@pytest.mark.system
def test_the_lake_holds_one_row_per_timer_message_with_its_latest_state(store_5x, tmp_path):
    target = IcebergTarget("nightly", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"))
    common = ["--store", store_5x / "store", *SUBSCRIPTIONS, "--sink", "iceberg", "--catalog-uri", target.uri,
              "--warehouse", target.warehouse, "--namespace", "nightly"]
    ledger = _through_wheel(store_5x)

    def table_rows():
        table = target.catalog().load_table("nightly.timers").scan().to_arrow()
        rows = {r["uniq_key"]: r for r in table.to_pylist()}
        assert len(rows) == table.num_rows  # one row per message
        return rows

    first = submit_job(*common, "--out", tmp_path / "n1", "--until", MIDDLE)
    assert first.returncode == 0, first.console[-3000:]
    _assert_ledger(table_rows(), {k: w for k, w in ((k, _expected_row(e, until=MIDDLE)) for k, e in ledger.items())
                                  if w})
    second = submit_job(*common, "--out", tmp_path / "n2", "--starting-offsets", "iceberg")
    assert second.returncode == 0, second.console[-3000:]
    _assert_ledger(table_rows(), {k: _expected_row(e) for k, e in ledger.items()})
    summary = json.loads((tmp_path / "n2" / "summary.json").read_text(encoding="utf-8"))
    assert summary["timers"]["totals"]["pending"] == 35  # the table's, after the night: what is still pending


def _one_of_each_state(store_5x):
    chosen = {}
    for k, e in sorted(_through_wheel(store_5x).items()):
        chosen.setdefault(e["state"], (k, e))
    return chosen


def test_explain_key_tells_a_timer_message_s_fate(store_5x):
    subs = ("--subscription", "G_T", "TopicTimer", "TAG", "*", "--subscription", "G_W", "rmq_sys_wheel_timer", "TAG",
            "*")
    for state, (key, e) in _one_of_each_state(store_5x).items():
        proc = subprocess.run([sys.executable, "-m", "jobs.explain", "--store", str(store_5x / "store"), *subs,
                               "--key", key, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = json.loads(proc.stdout)
        want = dict(_expected_row(e), uniq_key=key)
        del want["broker"]
        ledger = [{k: v for k, v in r["timer"].items() if not k.endswith("_iso")} for r in rows]  # ISO forms beside
        assert {json.dumps(t, sort_keys=True) for t in ledger} == {json.dumps(want, sort_keys=True)}, state
        text = subprocess.run([sys.executable, "-m", "jobs.explain", "--store", str(store_5x / "store"), *subs,
                               "--key", key], capture_output=True, text=True, cwd=ROOT, timeout=300).stdout
        assert {"delivered": f"delivered at {e['deliveredStoreTs']}", "pending": "pending",
                "cancelled": f"cancelled at {e['cancelMarkerStoreTs']}"}[state] in text
        assert f"due at {e['deliverMs']}" in text


def test_the_data_source_pairs_timer_events_into_the_same_ledger(spark, store_5x):
    register(spark)
    events = spark.read.format("rocketmq").option("timers", "true") \
        .option("topics", "rmq_sys_wheel_timer,TopicTimer,TopicOrder").load(str(store_5x / "store"))
    rows = {r["uniq_key"]: r.asDict() for r in timer_ledger(events).collect()}
    _assert_ledger(rows, {k: _expected_row(e) for k, e in _through_wheel(store_5x).items()})


def test_a_4x_delay_level_record_is_scheduled_for_its_unit_s_deliver_time():
    record = {"UNIQ_KEY": "K4", "REAL_TOPIC": "TopicDL", "REAL_QID": "2", "DELAY": "6"}
    batch = _wheel_batch(record).set_column(0, "topic", pa.array(["SCHEDULE_TOPIC_XXXX"]))
    units = pa.table({"tags_code": pa.array([1000 + 120_000], pa.int64())})  # store time + level 6 (2 min)
    events = timer_events(_Plan(CorruptPolicy.FAIL), "SCHEDULE_TOPIC_XXXX", batch, _Out(), units)
    assert [(r["uniq_key"], r["kind"], r["real_topic"], r["real_queue_id"], r["deliver_ms"])
            for r in events.to_pylist()] == [("K4", "scheduled", "TopicDL", 2, 121_000)]


def test_a_4x_delivered_copy_keeps_delay_and_real_topic_and_is_delivered():
    copy = {"UNIQ_KEY": "K4", "REAL_TOPIC": "TopicDL", "REAL_QID": "2", "DELAY": "6"}  # messageTimeup's properties
    batch = _wheel_batch(copy).set_column(0, "topic", pa.array(["TopicDL"]))
    events = timer_events(_Plan(CorruptPolicy.FAIL), "TopicDL", batch, _Out())
    assert [(r["uniq_key"], r["kind"], r["deliver_ms"]) for r in events.to_pylist()] == [("K4", "delivered", None)]


def test_pop_checkpoints_and_retries_through_the_wheel_are_no_ledger_events():
    pop = dict(GOOD, UNIQ_KEY="PopTopicA@2@0@G@1@broker-g@ck", REAL_TOPIC="rmq_sys_REVIVE_LOG_OracleCluster5")
    retry = dict(GOOD, UNIQ_KEY="K5", REAL_TOPIC="%RETRY%G_T")
    events = timer_events(_Plan(CorruptPolicy.FAIL), "rmq_sys_wheel_timer", _wheel_batch(pop, retry, GOOD), _Out())
    assert [r["uniq_key"] for r in events.to_pylist()] == ["K1"]


def _damaged_copy(store_5x, tmp_path):
    """A copy of the store whose first wheel record (a delivered message's) names no REAL_TOPIC: the property's
    name changed in place (same length: sizes hold; RocketMQ keeps no CRC of properties). Its UNIQ_KEY."""
    key, e = next((k, e) for k, e in sorted(_through_wheel(store_5x).items()) if e["state"] == "delivered")
    store = tmp_path / "store"
    shutil.copytree(store_5x / "store", store)
    log = store / "commitlog" / "00000000000000000000"
    data = bytearray(log.read_bytes())
    start = e["scheduledCommitLogOffset"]
    at = data.index(b"REAL_TOPIC\x01", start)
    assert at < start + int.from_bytes(data[start:start + 4], "big")  # within the record (its totalSize)
    data[at:at + 10] = b"REAL_TOPIX"
    log.write_bytes(bytes(data))
    return store, key, e


@pytest.mark.system  # two spark-submit runs, as users run the job: make test-system
def test_a_wheel_record_without_real_topic_stops_a_run_or_is_audited_and_its_copy_is_a_row(store_5x, tmp_path):
    store, key, e = _damaged_copy(store_5x, tmp_path)
    failed = submit_job("--store", store, "--out", tmp_path / "fail", *SUBSCRIPTIONS)
    assert failed.returncode == 1 and "timer record without REAL_TOPIC" in failed.console
    assert not (tmp_path / "fail").exists()
    skipped = submit_job("--store", store, "--out", tmp_path / "skip", *SUBSCRIPTIONS, "--on-corrupt", "skip")
    assert skipped.returncode == 4, skipped.console[-3000:]
    audit = ds.dataset(tmp_path / "skip" / "audit" / "corrupt", format="parquet").to_table().to_pylist()
    assert [(r["commitlog_offset"], r["reason"]) for r in audit] == [
        (e["scheduledCommitLogOffset"], "timer record without REAL_TOPIC: left out of the timer ledger")]
    rows = _rows(tmp_path / "skip")[1]
    assert len(rows) == 293  # the message is still a row: its delivered copy's
    assert (rows[key]["state"], rows[key]["scheduled_store_timestamp"], rows[key]["delivered_queue_offset"]) == \
        ("delivered", None, e["deliveredQueueOffset"])
