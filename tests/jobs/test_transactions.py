"""The transaction ledger (issue 62) of store_trans, a RocketMQ 5.3.3 store with every fate of a transaction: the
tasks' events (run in process) folded by the Spark step into OUT/transactions/, row for row RocketMQ's answer
(expected/transactions.json); the counts, the committed-twice and stuck alarms, the report; rebuilt units; a window
and two nights (joined, and in the lake); damaged op bodies and halves without REAL_TOPIC; a 4.x op (one offset a
decision, no comma, as 4.9.8's TransactionalMessageBridge writes it).

Expectations come from the fixture's expected files, or are written out by hand."""
import json
import os
import shutil
import tempfile
from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from jobs import explain
from jobs.ledgers.timer import Reads
from jobs.ledgers.transactions import (
    LEDGER_SCHEMA,
    TRANS_EVENT_SCHEMA,
    broker_conf,
    check_window,
    evidence,
    transaction_events,
    transaction_warnings,
    transactions_summary,
    write_transactions,
)
from jobs.output.layouts import NORMALIZED
from jobs.output.place import Place
from jobs.output.writers import SinkSpec, TableSplitWriter, commit, write_empty_tables
from jobs.plan.build import build_plan
from jobs.plan.units.choose import UnitsFrom
from jobs.plan.window import Window
from jobs.report import html as report
from jobs.settings import CorruptPolicy, JobOptions, load_settings
from jobs.sinks.iceberg.ledger_tables import commit_transactions, merge_transactions
from jobs.sinks.iceberg.tables import IcebergTarget, publish_tables
from jobs.task import stage as T
from schemas.arrow_schemas import spark_schema
from schemas.errors import ConfigError, CorruptStoreError
from tests.jobs.lake_parts import REF, parts

CHECKED = ("topic", "queue_id", "uniq_key", "producer_group", "half_commitlog_offset", "half_queue_offset", "checks",
           "fate", "decided_timestamp", "committed_commitlog_offset", "committed_queue_offset", "immunity_seconds")
# between the first op (store time 1795859497418: 67 commits and 13 rollbacks) and the second (1795859500411)
CUT = 1795859500000
LAST_RECORD = 1795859538042  # the store's latest store time (expected/messages.jsonl.gz)
FIXTURE_WINDOW = {"transactionTimeOut": 6000, "transactionCheckMax": 3, "transactionCheckInterval": 2000}  # run.json


@pytest.fixture(scope="module")
def expected(store_trans):
    return json.loads((store_trans / "expected" / "transactions.json").read_text(encoding="utf-8"))


def want(expected):
    """{(topic, UNIQ_KEY): the expected row's CHECKED columns, half_copies and commits as counts}."""
    return {(e["topic"], e["uniq_key"]): dict({c: e[c] for c in CHECKED}, half_copies=len(e["half_copies"]),
                                              commits=len(e["commits"])) for e in expected["transactions"]}


def got(rows):
    return {k: dict({c: r[c] for c in CHECKED}, half_copies=r["half_copies"], commits=r["commits"])
            for k, r in rows.items()}


def ledger(spark, store, subscriptions, keep=None, held=None, window_ms=None, **options):
    """(OUT/transactions/ rows by (topic, UNIQ_KEY), its counts per (broker, topic, fate), what was written) of a
    run of `store`: its tasks in process, then the driver's Spark step; OUT kept in `keep`; `held`: an earlier
    night's OUT, whose rows the night's events fold into (as the lake merges NS.transactions')."""
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), **options))
    out = str(keep) if keep else tempfile.mkdtemp(prefix="mqreplay-tx-")
    os.makedirs(out, exist_ok=True)
    try:
        plans = [planned.plan]
        reports = T.replay(T.in_process, plans, SinkSpec(out, NORMALIZED, True), T.broker_splits(T.in_process, plans))
        written = commit(out, reports)
        rows = None if held is None else \
            spark.read.schema(spark_schema(LEDGER_SCHEMA)).parquet(f"{held}/transactions")
        clock = max(r["last"] for r in reports if r["kind"] == "timer_clock")
        reads = Reads({None: clock}, {None: frozenset(t for t, *_ in planned.ranges)})
        made, counts = write_transactions(spark, out, (pafs.LocalFileSystem(), out), written, reads,
                                          {None: window_ms if window_ms is not None else check_window({})}, held=rows)
        table = ds.dataset(f"{out}/transactions", format="parquet").to_table().to_pylist()
        return {(r["topic"], r["uniq_key"]): r for r in table}, counts, dict(written, **made)
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def subscriptions(store_trans):
    return store_trans / "subscriptions.json"


@pytest.fixture(scope="module")
def whole(spark, store_trans, subscriptions):
    return ledger(spark, store_trans / "store", subscriptions, window_ms=check_window(FIXTURE_WINDOW))


def test_every_transaction_is_one_row_with_the_fate_rocketmq_gave_it(whole, expected):
    rows, _, _ = whole
    assert len(rows) == 1071
    assert got(rows) == want(expected)
    assert not any(r["cut_off"] for r in rows.values())


def test_the_fates_are_counted_per_topic_and_the_twice_committed_are_the_alarm(whole, expected):
    """722 committed (15 of them twice: consumers got those twice), 223 rolled back, 38 discarded, 88 pending."""
    _, counts, _ = whole
    summary = transactions_summary(counts)
    assert summary["totals"] == {"committed": 722, "rolled_back": 223, "discarded": 38, "pending": 88,
                                 "committed_twice": 15, "stuck": summary["totals"]["stuck"]}
    per = Counter((e["topic"], e["fate"]) for e in expected["transactions"])
    assert {(c["topic"], c["fate"]): c["transactions"] for c in counts} == dict(per)
    twice = Counter(e["topic"] for e in expected["transactions"] if len(e["commits"]) == 2)
    warnings = transaction_warnings(counts, {None: 0})
    for topic, n in twice.items():
        assert f"transactions: {n} transaction(s) of {topic} (broker None) committed more than once: their " \
               "consumers got them twice (OUT/transactions/, commits > 1)" in warnings


def test_a_pending_transaction_older_than_the_check_window_is_stuck(whole, expected):
    """The fixture broker's window: 6000 + 3 x 2000 ms; a pending transaction born more than that before the
    store's latest record is stuck; with RocketMQ's defaults (6 s + 15 x 30 s) none of this 47 s store is."""
    _, counts, _ = whole
    stuck = [e for e in expected["transactions"]
             if e["fate"] == "pending" and e["born_timestamp"] < LAST_RECORD - 12000]
    assert check_window(FIXTURE_WINDOW) == 12000 and check_window({}) == 6000 + 15 * 30000
    assert len(stuck) > 0
    assert sum(c["stuck"] for c in counts) == len(stuck)
    assert check_window({}, {"transactionCheckMax": "3"}) == 6000 + 3 * 30000  # broker.conf under the settings
    assert check_window({"transactionCheckMax": 1}, {"transactionCheckMax": "3"}) == 6000 + 30000


def test_rebuilt_units_give_the_same_ledger(spark, store_trans, subscriptions, whole):
    """--units-from commitlog: the half, op and discard topics rebuilt by the dispatch rules."""
    rows, _, _ = ledger(spark, store_trans / "store", subscriptions, units_from=UnitsFrom.COMMIT_LOG)
    assert got(rows) == got(whole[0])


def test_a_run_without_bodies_reads_the_ops_bodies_all_the_same(spark, store_trans, subscriptions, whole):
    rows, _, _ = ledger(spark, store_trans / "store", subscriptions, with_body=False)
    assert got(rows) == got(whole[0])


def test_the_report_says_each_fate_and_the_alarm(whole):
    _, counts, _ = whole
    page = report.render({"subscriptions": [], "transactions": transactions_summary(counts)}, {}, 0)
    section = page[page.index("<h2>Transactions (OUT/transactions/)</h2>"):]
    assert "5 transaction(s) of <strong>TxStock</strong> committed more than once" in section
    for words in ("722 committed", "223 rolled back", "38 discarded", "88 pending", "<svg"):
        assert words in section


@pytest.fixture(scope="module")
def first_night(spark, store_trans, subscriptions, tmp_path_factory):
    out = tmp_path_factory.mktemp("night1") / "out"
    return out, ledger(spark, store_trans / "store", subscriptions, keep=out, window=Window(until=CUT))


def test_a_half_decided_after_the_window_is_pending_there(first_night, expected):
    """Until CUT: the 13 rollbacks of the first op are rolled back; every other transaction whose half is in the
    window and that no commit before CUT decided is pending; nothing decided after CUT is rolled back."""
    _, (rows, _, _) = first_night
    early = {(e["topic"], e["uniq_key"]) for e in expected["transactions"] if e["half_commitlog_offset"] is not None
             and e["fate"] == "rolled_back" and e["decided_timestamp"] < CUT}
    assert len(early) == 13
    assert {k for k, r in rows.items() if r["fate"] == "rolled_back"} == early
    assert {r["fate"] for k, r in rows.items() if want(expected)[k]["fate"] in ("discarded", "pending")} == \
        {"pending"}


def test_a_commit_whose_half_is_before_the_window_is_a_cut_off_row(spark, store_trans, subscriptions, expected):
    """Since CUT: a committed copy stored after CUT whose half is before it is a committed row, marked cut off,
    with its commit's offsets; no ledger row without its topic and key."""
    rows, _, _ = ledger(spark, store_trans / "store", subscriptions, window=Window(since=CUT))
    cut = {k: r for k, r in rows.items() if r["cut_off"]}
    assert cut and all(r["fate"] == "committed" and r["half_commitlog_offset"] is None for r in cut.values())
    whole = want(expected)
    assert all(r["committed_commitlog_offset"] in [c for e in expected["transactions"] if (e["topic"], e["uniq_key"])
                                                   == k for c in e["commits"]] for k, r in cut.items())
    assert all(k in whole for k in rows)


def test_two_nights_joined_are_one_run(spark, store_trans, subscriptions, first_night, expected):
    out, _ = first_night
    rows, _, _ = ledger(spark, store_trans / "store", subscriptions, held=out, window=Window(since=CUT))
    assert got(rows) == want(expected)
    assert not any(r["cut_off"] for r in rows.values())


def _lake_night(spark, store, subscriptions, target, run, out, window):
    """One night into the lake, as --sink iceberg commits it: the tasks in process, NS.transactions' rows folded
    with the night's events, the answer tables, NS.transactions replaced."""
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), window=window))
    os.makedirs(out)
    plans = [planned.plan]
    spec = SinkSpec(str(out), NORMALIZED, True, TableSplitWriter)
    reports = T.replay(T.in_process, plans, spec, T.broker_splits(T.in_process, plans))
    written = commit(str(out), reports)
    where = Place(pafs.LocalFileSystem(), str(out), str(out))
    reads = Reads({}, {})
    (made, _), held = merge_transactions(spark, target, str(out), (where.fs, where.root), written, reads, {})
    written.update(made)
    written.update(write_empty_tables(str(out), NORMALIZED, True, written))
    publish_tables(target, str(out), written, run, True, parts([("G_TX_ORDER_ALL", "TxOrder")], [("TxOrder", 0, 0, 0)]),
                   before_ranges=[lambda: commit_transactions(target, where, run, held)])


def test_the_lake_holds_one_row_per_transaction_with_its_latest_fate(
        spark, store_trans, subscriptions, expected, tmp_path):
    """--sink iceberg, two nights cut at CUT: after the second NS.transactions is transactions.json, one row each."""
    target = IcebergTarget("txs", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                           refs=(REF,))

    def table_rows():
        rows = target.catalog().load_table("txs.transactions").scan().to_arrow().to_pylist()
        return {(r["topic"], r["uniq_key"]): r for r in rows}, len(rows)
    _lake_night(spark, store_trans / "store", subscriptions, target, "night1", tmp_path / "n1", Window(until=CUT))
    rows, n = table_rows()
    assert Counter(r["fate"] for r in rows.values())["rolled_back"] == 13
    _lake_night(spark, store_trans / "store", subscriptions, target, "night2", tmp_path / "n2", Window(since=CUT))
    rows, n = table_rows()
    assert n == 1071
    assert got(rows) == want(expected)


def _damaged_copy(store_trans, tmp_path, old, new):
    """A copy of the store whose commit log has `old`'s first occurrence made `new` (the same length)."""
    assert len(old) == len(new)
    store = tmp_path / "store"
    shutil.copytree(store_trans / "store", store)
    for path in sorted((store / "commitlog").iterdir()):
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new, 1))
            return store
    raise AssertionError("not found")


FIRST_OP = b"0,1,3,4,5,6,8,10,"  # the first op record's body begins so (expected/messages.jsonl.gz)


def test_an_op_body_that_is_not_offsets_stops_the_run(spark, store_trans, subscriptions, tmp_path):
    store = _damaged_copy(store_trans, tmp_path, FIRST_OP, b"x" + FIRST_OP[1:])
    with pytest.raises(CorruptStoreError, match="op record whose body is not half queue offsets"):
        ledger(spark, store, subscriptions)


def test_an_op_body_that_is_not_offsets_is_audited_and_its_decisions_unknown(
        spark, store_trans, subscriptions, expected, tmp_path):
    """--on-corrupt skip: the op audited; the 80 transactions it decided are, without it: committed by their
    copies (its time unknown: the commit's), or pending (its 13 rollbacks)."""
    store = _damaged_copy(store_trans, tmp_path, FIRST_OP, b"x" + FIRST_OP[1:])
    rows, _, written = ledger(spark, store, subscriptions, on_corrupt=CorruptPolicy.SKIP)
    assert written["audit/corrupt"][1] == 1
    lost = {k for k, e in want(expected).items() if e["fate"] == "rolled_back" and e["decided_timestamp"] < CUT}
    assert len(lost) == 13 and all(rows[k]["fate"] == "pending" for k in lost)


def test_a_half_without_real_topic_is_damaged(spark, store_trans, subscriptions, expected, tmp_path):
    """The first half record (TxStock, its only copy) has REAL_TOPIC renamed: the run stops; under skip it is
    audited and its transaction is known by its commit alone (cut off)."""
    store = _damaged_copy(store_trans, tmp_path, b"REAL_TOPIC\x01TxStock", b"REAL_TOPIX\x01TxStock")
    with pytest.raises(CorruptStoreError, match="half record without REAL_TOPIC"):
        ledger(spark, store, subscriptions)
    rows, _, written = ledger(spark, store, subscriptions, on_corrupt=CorruptPolicy.SKIP)
    assert written["audit/corrupt"][1] == 1
    key = ("TxStock", "FD000000000000000000000000000002466A5FFD2B278D2942580000")
    assert (rows[key]["fate"], rows[key]["cut_off"], rows[key]["committed_commitlog_offset"]) == \
        ("committed", True, 1077)
    assert len(rows) == 1071


def _records(rows):
    """A decoded batch as split_decode gives it (the columns transaction_events reads) of hand-written records."""
    names = ("topic", "queue_id", "queue_offset", "commitlog_offset", "sys_flag", "born_timestamp", "store_timestamp",
             "msg_id", "properties", "body")
    types = (pa.string(), pa.int32(), pa.int64(), pa.int64(), pa.int32(), pa.int64(), pa.int64(), pa.string(),
             pa.map_(pa.string(), pa.string()), pa.binary())
    return pa.table([pa.array([r[i] for r in rows], t) for i, t in enumerate(types)], names=names)


def test_a_4x_op_names_one_half_offset_without_a_comma(spark):
    """RocketMQ 4.9.8 (TransactionalMessageBridge.addRemoveTagInTransactionOp): an op per decision, its body the
    half's queue offset as a bare number; TRANS_CHECK_MAX_TIME_TOPIC for a discarded half (4.4+). Two halves,
    a rollback of the first (op body "0"), a check re-put and a discard of the second, no commit."""
    half = {"REAL_TOPIC": "T", "REAL_QID": "1", "UNIQ_KEY": "K1", "PGROUP": "P", "TRAN_MSG": "true"}
    second = dict(half, UNIQ_KEY="K2")
    batches = {
        "RMQ_SYS_TRANS_HALF_TOPIC": _records([
            ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 100, 0, 10, 11, "m1", list(half.items()), b"x"),
            ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 1, 200, 0, 12, 13, "m2", list(second.items()), b"y"),
            ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 2, 400, 0, 12, 60, "m2",
             list(dict(second, TRANSACTION_CHECK_TIMES="1").items()), b"y")]),
        "RMQ_SYS_TRANS_OP_HALF_TOPIC": _records([
            ("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, 0, 300, 0, 20, 21, "o1", [("TAGS", "d")], b"0")]),
        "TRANS_CHECK_MAX_TIME_TOPIC": _records([
            ("TRANS_CHECK_MAX_TIME_TOPIC", 0, 0, 500, 0, 12, 90, "m2",
             list(dict(second, TRANSACTION_CHECK_TIMES="2").items()), b"y")]),
    }
    plan = SimpleNamespace(with_body=True)
    events = pa.concat_tables([transaction_events(plan, topic, batch, None) for topic, batch in batches.items()])
    assert events.column("kind").to_pylist() == ["half", "half", "half", "op", "discard"]
    assert events.column("named_offset").to_pylist()[3] == 0
    frame = spark.createDataFrame(events.append_column("broker", pa.array(["b"] * events.num_rows)).to_pandas(),
                                  schema=spark_schema(TRANS_EVENT_SCHEMA.append(pa.field("broker", pa.string()))))
    rows = {r["uniq_key"]: r.asDict() for r in evidence(frame).collect()}
    assert (rows["K1"]["fate"], rows["K1"]["decided_timestamp"], rows["K1"]["half_copies"]) == ("rolled_back", 21, 1)
    assert (rows["K2"]["fate"], rows["K2"]["decided_timestamp"], rows["K2"]["half_copies"], rows["K2"]["checks"]) == \
        ("discarded", 90, 2, 1)


def test_explain_key_tells_a_transactions_halves_decision_and_commits(store_trans, subscriptions, expected, capsys):
    """explain --key K --json of a transaction committed twice: every row of its key carries the transaction, its
    half copies, the ops that decided them and both committed copies as transactions.json has them; each
    committed copy is delivered to every group of TxPay, no half to anyone."""
    e = next(e for e in expected["transactions"] if len(e["commits"]) == 2 and len(e["half_copies"]) == 3)
    code = explain.main(["--store", str(store_trans / "store"), "--subscriptions", str(subscriptions),
                         "--key", e["uniq_key"], "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    tx = rows[0]["transaction"]
    assert all(r["transaction"] == tx for r in rows)
    assert (tx["fate"], tx["commits"], tx["decided_timestamp"], tx["checks"]) == \
        ("committed", 2, e["decided_timestamp"], e["checks"])
    assert [h["queue_offset"] for h in tx["halves"]] == e["half_queue_offsets"]
    assert sorted({o["commitlog_offset"] for o in tx["ops"]}) == e["op_commitlog_offsets"]
    assert [c["commitlog_offset"] for c in tx["committed"]] == e["commits"]
    committed = [r for r in rows if r["copy"] == "transaction_commit"]
    assert sorted({r["commit_log_offset"] for r in committed}) == e["commits"]
    assert all(r["delivered"] for r in committed)
    assert {r["copy"] for r in rows if r["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"} == {"transaction_half"}


def test_a_retry_copy_of_a_committed_message_is_no_commit():
    """A consumer's send-back keeps the message's sysFlag (4.9.8 SendMessageProcessor.consumerSendMsgBack): a
    record of %RETRY%G or %DLQ%G with COMMIT set is a redelivery, not a second commit of the transaction."""
    record = [("TAGS", "TagA"), ("UNIQ_KEY", "K1"), ("TRAN_MSG", "true"), ("PGROUP", "P")]
    for topic in ("%RETRY%G", "%DLQ%G", "SCHEDULE_TOPIC_XXXX"):
        batch = _records([(topic, 0, 0, 100, 8, 10, 11, "m1", record, b"x")])
        assert transaction_events(None, topic, batch, None) is None
    batch = _records([("T", 0, 0, 100, 8, 10, 11, "m1", record, b"x")])
    assert transaction_events(None, "T", batch, None).column("kind").to_pylist() == ["commit"]


@pytest.mark.parametrize("text", ['{"transaction_check": {"transactionCheckMax": "3"}}',
                                  '{"transaction_check": {"transactionTimeout": 3}}'])
def test_a_transaction_check_setting_that_is_not_the_brokers_is_refused(text, tmp_path):
    path = tmp_path / "replay.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="transaction_check"):
        load_settings(str(path))


def test_the_check_window_comes_from_the_stores_broker_conf(tmp_path):
    """broker.conf beside the store (its config/ folder): its transaction settings, Java properties, are the
    window's; what it does not say is RocketMQ's default; comments and other keys are left alone."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "broker.conf").write_text(
        "# broker-t\nbrokerName=broker-t\ntransactionTimeOut = 6000\ntransactionCheckMax=3\n", encoding="utf-8")
    stored = broker_conf(pafs.LocalFileSystem(), str(tmp_path))
    assert stored == {"transactionTimeOut": "6000", "transactionCheckMax": "3"}
    assert check_window({}, stored) == 6000 + 3 * 30000
    assert broker_conf(pafs.LocalFileSystem(), str(tmp_path / "none")) == {}
