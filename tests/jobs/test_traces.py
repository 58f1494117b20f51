"""Message traces (issue 63) of store_trace, a RocketMQ 5.3.3 store whose clients wrote trace records: the bodies
decoded as the client's TraceDataEncoder reads them (hand-written bodies), every record of the store as
expected/traces.jsonl.gz lists it, the consumption reconciled as expected/consumption.json says, damaged bodies
under the corruption policy, and two nights merged as one run.

Expectations come from the fixture's expected files, or are written out by hand."""
import gzip
import json
import os
import shutil
import tempfile
from collections import Counter

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from jobs import explain
from jobs.datasource import register
from jobs.ledgers.traces import CONSUMPTION_SCHEMA, trace_summary, write_trace_ledgers
from jobs.output.layouts import NORMALIZED
from jobs.output.writers import SinkSpec, commit
from jobs.plan.build import build_plan
from jobs.plan.window import Window
from jobs.report import html as report
from jobs.settings import CorruptPolicy, JobOptions
from jobs.task import stage as T
from schemas.arrow_schemas import spark_schema
from schemas.errors import CorruptStoreError
from schemas.trace_body import decode_bodies

A, B = "\x01", "\x02"
# a night's end amid the trace messages (the median trace message's store time)
CUT = 1795860884461


def body(*contexts):
    return "".join(A.join(c) + B for c in contexts).encode()


PUB = ["Pub", "1795860879127", "DefaultRegion", "PID_TR_PAY", "TrOrder", "MSG1", "Aa", "k6 k46", "127.0.0.1:10911",
       "35", "10", "0", "7F00000100002A9F0000000000000AAC", "true"]
BEFORE = ["SubBefore", "1795860879320", "DefaultRegion", "G_ORDER_ALL", "REQ1", "MSG1", "0", "null"]
AFTER = ["SubAfter", "REQ1", "MSG1", "3", "false", "null", "2", "1795860879323", "G_ORDER_ALL"]


def test_a_body_holds_contexts_each_decoded_by_its_type():
    records, bad = decode_bodies(pa.array([body(PUB, BEFORE, AFTER)]))
    assert not bad.any()
    rows = records.to_pylist()
    assert [(r["trace_type"], r["record_index"], r["field_count"]) for r in rows] == \
        [("Pub", 0, 14), ("SubBefore", 1, 8), ("SubAfter", 2, 9)]
    pub, before, after = rows
    assert (pub["timestamp"], pub["group"], pub["topic"], pub["msg_id"], pub["tags"], pub["keys"], pub["store_host"],
            pub["body_length"], pub["cost_time"], pub["msg_type"], pub["offset_msg_id"], pub["success"],
            pub["client_host"]) == (1795860879127, "PID_TR_PAY", "TrOrder", "MSG1", "Aa", "k6 k46",
                                    "127.0.0.1:10911", 35, 10, 0, "7F00000100002A9F0000000000000AAC", True, None)
    assert (before["timestamp"], before["group"], before["request_id"], before["msg_id"], before["retry_times"],
            before["keys"], before["success"], before["topic"]) == \
        (1795860879320, "G_ORDER_ALL", "REQ1", "MSG1", 0, "null", None, None)
    assert (after["request_id"], after["msg_id"], after["cost_time"], after["success"], after["keys"],
            after["context_code"], after["timestamp"], after["group"], after["region_id"]) == \
        ("REQ1", "MSG1", 3, False, "null", 2, 1795860879323, "G_ORDER_ALL", None)


def test_old_and_cloud_clients_fields_are_read_as_the_decoder_reads_them():
    """Pub of 13 fields has no offsetMsgId; of 15 a clientHost; a cloud SubAfter (7 fields, its trailing empty
    field dropped as String.split drops it) has no timestamp nor groupName."""
    old = PUB[:12] + ["false"]
    host = PUB + ["10.2.0.12"]
    cloud = AFTER[:7] + [""]
    rows = decode_bodies(pa.array([body(old, host, cloud)]))[0].to_pylist()
    assert [(r["field_count"], r["offset_msg_id"], r["success"], r["client_host"]) for r in rows[:2]] == \
        [(13, None, False, None), (15, "7F00000100002A9F0000000000000AAC", True, "10.2.0.12")]
    assert (rows[2]["field_count"], rows[2]["timestamp"], rows[2]["group"], rows[2]["context_code"]) == \
        (7, None, None, 2)


@pytest.mark.parametrize("damaged", [
    b"not a trace body",  # no known type
    body(PUB[:1] + ["when"] + PUB[2:]),  # a timestamp that is no number
    body(BEFORE[:6]),  # too few fields
    body(PUB[:11] + ["9"] + PUB[12:]),  # no such MessageType
    b"Pub\x01\xff\xfe\x02",  # not UTF-8
])
def test_a_body_the_decoder_would_throw_on_is_bad_whole(damaged):
    records, bad = decode_bodies(pa.array([damaged, body(BEFORE)]))
    assert bad.tolist() == [True, False]
    assert records.column("body_index").to_pylist() == [1]


@pytest.fixture(scope="module")
def subscriptions(store_trace):
    return store_trace / "subscriptions.json"


def traced(spark, store, subscriptions, held=None, **options):
    """(OUT/traces/ rows, OUT/consumption/ rows, the counts per (group, final), what was written) of a run of
    `store`: its tasks in process, then the driver's Spark step; `held`: an earlier night's OUT, whose
    consumption/ rows the night's events join (as the lake merges NS.consumption's)."""
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), **options))
    out = tempfile.mkdtemp(prefix="mqreplay-traces-")
    try:
        plans = [planned.plan]
        reports = T.replay(T.in_process, plans, SinkSpec(out, NORMALIZED, True), T.broker_splits(T.in_process, plans))
        written = commit(out, reports)
        rows = None if held is None else \
            spark.read.schema(spark_schema(CONSUMPTION_SCHEMA)).parquet(f"{held}/consumption")
        made, counts, table = write_trace_ledgers(spark, out, (pafs.LocalFileSystem(), out), written, plans,
                                                  held=rows)
        read = lambda name: ds.dataset(f"{out}/{name}", format="parquet").to_table().to_pylist()  # noqa: E731
        if held is not None:
            shutil.rmtree(held)
            shutil.copytree(out, held)
        return read("traces"), read("consumption"), counts if table is None else table, dict(written, **made)
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def whole(spark, store_trace, subscriptions):
    return traced(spark, store_trace / "store", subscriptions)


def expected_traces(store_trace):
    with gzip.open(store_trace / "expected" / "traces.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_every_trace_record_is_one_row_as_the_client_wrote_it(whole, store_trace):
    rows, _, _, _ = whole
    fields = {"trace_type": "traceType", "timestamp": "timestamp", "group": "groupName", "topic": "topic",
              "msg_id": "msgId", "offset_msg_id": "offsetMsgId", "tags": "tags", "keys": "keys",
              "success": "success", "cost_time": "costTime", "context_code": "contextCode",
              "retry_times": "retryTimes", "request_id": "requestId", "client_host": "clientHost",
              "store_host": "storeHost", "body_length": "bodyLength", "record_index": "recordIndex",
              "trace_commitlog_offset": "traceCommitLogOffset", "trace_queue_offset": "traceQueueOffset",
              "trace_msg_id": "traceMsgId"}
    want = Counter(tuple(e[f] for f in fields.values()) for e in expected_traces(store_trace))
    got = Counter(tuple(r[c] for c in fields) for r in rows)
    assert got == want
    assert Counter(r["trace_type"] for r in rows) == {"Pub": 814, "SubBefore": 1072, "SubAfter": 1072}
    assert len({r["trace_commitlog_offset"] for r in rows}) == 377


def test_each_delivery_and_consume_trace_is_reconciled_as_expected(whole, store_trace):
    _, rows, _, _ = whole
    d = json.loads((store_trace / "expected" / "consumption.json").read_text(encoding="utf-8"))
    want = {(e["group"], e["topic"], e["msgId"]): (e["queueId"], e["queueOffset"], e["delivered_by_filter"],
                                                   len(e["traced"]), e["final"], e["below_committed_offset"])
            for e in d["entries"]}
    untraced = {g for g, v in d["groups"].items() if not v["traceEnabled"]}
    got = {(r["group"], r["topic"], r["uniq_key"]): (r["queue_id"], r["queue_offset"], r["delivered"], r["attempts"],
                                                     "not_consumed" if r["final"] == "untraced" else r["final"],
                                                     r["below_committed"]) for r in rows}
    assert got == want
    assert {r["group"] for r in rows if r["final"] == "untraced"} == untraced == {"G_NOTICE_NOTRACE"}


def test_attempt_times_are_the_first_and_last_subbefore(whole, store_trace):
    _, rows, _, _ = whole
    d = json.loads((store_trace / "expected" / "consumption.json").read_text(encoding="utf-8"))
    want = {(e["group"], e["msgId"]): (min(t["timestamp"] for t in e["traced"]),
                                       max(t["timestamp"] for t in e["traced"]))
            for e in d["entries"] if e["traced"]}
    got = {(r["group"], r["uniq_key"]): (r["first_attempt_time"], r["last_attempt_time"]) for r in rows
           if r["attempts"]}
    assert set(got) == set(want)
    # SubAfter's timestamp (what consumption.json keeps) is the attempt's end: never before its SubBefore
    assert all(got[k][0] <= want[k][0] and got[k][1] <= want[k][1] for k in want)


def test_counts_per_group_and_final_are_the_readmes_table(whole):
    _, _, counts, _ = whole
    summary = trace_summary(counts)
    got = {g["group"]: (g["consumed"], g["failed_then_consumed"], g["failed"], g["not_consumed"] + g["untraced"],
                        g["consumed_without_delivery"]) for g in summary["groups"]}
    assert got == {"G_ORDER_ALL": (378, 54, 12, 0, 0), "G_ORDER_AB": (109, 18, 6, 0, 0),
                   "G_PAY_SQL": (104, 14, 4, 0, 0), "G_PAY_AUDIT": (167, 6, 28, 177, 0),
                   "G_NOTICE_NOTRACE": (0, 0, 0, 178, 0)}


def test_a_consumer_that_saw_an_undelivered_message_is_consumed_without_delivery(spark, store_trace, tmp_path):
    """G_ORDER_AB subscribed to TagA only (by hand): its consume traces of TagB messages name messages its filter
    no longer delivers."""
    subs = tmp_path / "subs.json"
    subs.write_text(json.dumps({"groups": [{"group": "G_ORDER_AB", "topic": "TrOrder", "expressionType": "TAG",
                                            "expression": "TagA"}]}), encoding="utf-8")
    _, rows, _, _ = traced(spark, store_trace / "store", subs, groups=("G_ORDER_AB",))
    d = json.loads((store_trace / "expected" / "consumption.json").read_text(encoding="utf-8"))
    tag_b = {m for m, v in d["messages"].items() if (v.get("pub") or {}).get("tags") == "TagB"}
    ab = {e["msgId"] for e in d["entries"] if e["group"] == "G_ORDER_AB"}
    without = {r["uniq_key"] for r in rows if r["final"] == "consumed_without_delivery"}
    assert without and without <= ab and not any(r["delivered"] for r in rows if r["uniq_key"] in without)
    assert without >= (tag_b & ab)


def _damaged_copy(store_trace, tmp_path):
    """A copy whose first trace message (commit-log offset 22700) has a Pub timestamp that is no number."""
    store = tmp_path / "store"
    shutil.copytree(store_trace / "store", store)
    path = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(path.read_bytes())
    at = data.index(b"Pub\x011795860879127", 22700)
    data[at + 4] = ord("x")
    path.write_bytes(bytes(data))
    return store


def test_a_trace_body_that_does_not_decode_stops_the_run_by_default(spark, store_trace, subscriptions, tmp_path):
    name = "trace message FD00000000000000000000000000000235BE5FFD2B278D3E6F700045"
    with pytest.raises(CorruptStoreError, match=name):
        traced(spark, _damaged_copy(store_trace, tmp_path), subscriptions)


def test_a_damaged_trace_body_is_audited_and_the_others_stay(spark, store_trace, subscriptions, whole, tmp_path):
    rows, _, _, written = traced(spark, _damaged_copy(store_trace, tmp_path), subscriptions,
                                 on_corrupt=CorruptPolicy.SKIP)
    assert written["audit/corrupt"][1] == 1
    lost = [r for r in whole[0] if r["trace_commitlog_offset"] == 22700]
    assert len(lost) == 3
    assert len(rows) == len(whole[0]) - 3 and all(r["trace_commitlog_offset"] != 22700 for r in rows)


def test_two_nights_merged_are_one_run(spark, store_trace, subscriptions, whole, tmp_path):
    """Night one ends amid the trace messages; night two's consume records of messages night one delivered join
    its rows: the merged rows are one run's."""
    held = tmp_path / "night"
    first = traced(spark, store_trace / "store", subscriptions, window=Window(until=CUT))
    os.makedirs(held / "consumption")
    pq.write_table(pa.Table.from_pylist(first[1], schema=CONSUMPTION_SCHEMA), held / "consumption" / "part-0.parquet")
    _, merged, _, _ = traced(spark, store_trace / "store", subscriptions, held=held, window=Window(since=CUT))
    key = lambda r: (r["group"], r["topic"], r["uniq_key"])  # noqa: E731
    columns = [f.name for f in CONSUMPTION_SCHEMA]
    assert {key(r): {c: r[c] for c in columns} for r in merged} == \
        {key(r): {c: r[c] for c in columns} for r in whole[1]}
    before = {key(r): r["final"] for r in first[1]}
    after = {key(r): r["final"] for r in merged}
    assert any(f == "not_consumed" and after[k] == "consumed" for k, f in before.items())


def test_a_night_that_reads_the_trace_topic_again_counts_each_record_once(
        spark, store_trace, subscriptions, whole, tmp_path):
    """A later Iceberg night reads the trace topic from its start again: merged with the rows it already holds,
    each consume record counts once, and the rows are one run's."""
    held = tmp_path / "night"
    os.makedirs(held / "consumption")
    pq.write_table(pa.Table.from_pylist(whole[1], schema=CONSUMPTION_SCHEMA), held / "consumption" / "part-0.parquet")
    _, merged, _, _ = traced(spark, store_trace / "store", subscriptions, held=held)
    key = lambda r: (r["group"], r["topic"], r["uniq_key"])  # noqa: E731
    assert sorted(merged, key=key) == sorted(whole[1], key=key)


@pytest.mark.parametrize("final", ["failed_then_consumed", "failed", "not_consumed"])
def test_explain_key_tells_a_messages_trace_timeline(store_trace, subscriptions, final, capsys):
    """explain --key K: the message's Pub record (when, by which producer group), then under its group's verdict
    each consume attempt with its status, as consumption.json lists them."""
    d = json.loads((store_trace / "expected" / "consumption.json").read_text(encoding="utf-8"))
    e = next(e for e in d["entries"] if e["final"] == final and d["messages"][e["msgId"]]["pub"])
    code = explain.main(["--store", str(store_trace / "store"), "--subscriptions", str(subscriptions),
                         "--key", e["msgId"]])
    assert code == 0
    text = capsys.readouterr().out
    pub = d["messages"][e["msgId"]]["pub"]
    assert f"published at {pub['timestamp']} " in text and f"by producer group {pub['groupName']} " in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"  {e['group']}: DELIVERED"))
    attempts = [line for line in lines[at + 1:] if line.startswith("    consume attempt")]
    attempts = attempts[:len(e["traced"])] if e["traced"] else []
    assert [("CONSUMED" if t["success"] else "FAILED") for t in e["traced"]] == \
        [("CONSUMED" if "CONSUMED" in line else "FAILED") for line in attempts]
    if not e["traced"]:
        assert lines[at + 1] == "    no consume trace record of this group"
    assert "RMQ_SYS_TRACE_TOPIC" not in text  # the trace messages are the timeline, not copies


def test_the_report_says_what_was_never_consumed_failed_or_consumed_without_delivery(whole):
    """The report's consumption section: in words per group, then a bar per group."""
    page = report.render({"subscriptions": [], "consumption": trace_summary(whole[2])}, {}, 0)
    assert "G_PAY_AUDIT: 177 delivered but never consumed (a backlog, or lost); 28 failed every attempt" in page
    assert "G_NOTICE_NOTRACE: 178 delivered to a group that left no trace record (trace off)" in page


def test_the_data_source_reads_every_trace_record(spark, store_trace):
    """option traces: a row per trace record, the job's OUT/traces/ columns."""
    register(spark)
    rows = spark.read.format("rocketmq").option("traces", "true").load(str(store_trace / "store")).collect()
    want = Counter((e["traceCommitLogOffset"], e["recordIndex"], e["traceType"], e["msgId"], e["groupName"],
                    e["timestamp"], e["success"]) for e in expected_traces(store_trace))
    assert Counter((r["trace_commitlog_offset"], r["record_index"], r["trace_type"], r["msg_id"], r["group"],
                    r["timestamp"], r["success"]) for r in rows) == want
