"""The POP ledger (issue 51) of store_pop, a RocketMQ 5.3.3 store two POP groups consumed: the tasks' events (run in
process) paired by the Spark step into OUT/pop/, row for row RocketMQ's answer (expected/pop_ledger.json: every
popped message, its handles, how it ended); a lost message made by taking a POP retry topic away; damaged
checkpoint bodies audited, never a crash; the ledger of two nights (a night alone, the lake's merge) against one
run's.

Expectations come from the fixture's pop_ledger.json, or are written out by hand from it."""
import json
import os
import shutil
import tempfile
from collections import Counter

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from jobs import explain
from jobs.ledgers.pop import carried_ledger, lost_warnings, pop_summary, write_pop_ledger
from jobs.output.layouts import NORMALIZED
from jobs.output.place import Place
from jobs.output.writers import SinkSpec, TableSplitWriter, commit, write_empty_tables
from jobs.plan.build import build_plan
from jobs.plan.window import Window
from jobs.report import html as report
from jobs.settings import CorruptPolicy, JobOptions
from jobs.sinks.iceberg.ledger_tables import commit_pop, merge_pop
from jobs.sinks.iceberg.tables import IcebergTarget, publish_tables
from jobs.task import stage as T
from schemas.errors import CorruptStoreError
from tests.jobs.conftest import submit_job
from tests.jobs.lake_parts import REF, parts

RETRY_TAG_A = "%RETRY%G_POP_TAG_PopTopicA"
# a night's end between two rounds of the revive service (every pop and ack is before it, 91 of the 133 revived
# copies after it: pop_ledger.json's storeTs)
CUT = 1795780041500
POPS_CUT = 1795780034050  # amid the pops (popTime 1795780033858 to 1795780034185)


@pytest.fixture(scope="module")
def expected(store_pop):
    return json.loads((store_pop / "expected" / "pop_ledger.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def subscriptions(expected, tmp_path_factory):
    path = tmp_path_factory.mktemp("subs") / "subs_pop.json"
    path.write_text(json.dumps({"groups": [{"group": g, "topic": t, "expressionType": x, "expression": e}
                                           for g, x, e in expected["groups"] for t in ("PopTopicA", "PopTopicB")]}),
                    encoding="utf-8")
    return path


def pop_ledger(spark, store, subscriptions, keep=None, held=None, **options):
    """(OUT/pop/ rows by (group, topic, queue_id, queue_offset), its counts per group, what was written) of a run
    of `store`: its tasks in process, then the driver's Spark step; OUT kept in `keep` when given; `held`: an
    earlier night's OUT, whose pop/ rows the night's evidence joins and whose messages/ give the keys of the places
    it pops first (carried_ledger: a Parquet night chained by that OUT's offsets.json)."""
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), **options))
    out = str(keep) if keep else tempfile.mkdtemp(prefix="mqreplay-pop-")
    os.makedirs(out, exist_ok=True)  # the temporary OUT, made by the run's claim
    try:
        plans = [planned.plan]
        reports = T.replay(T.in_process, plans, SinkSpec(out, NORMALIZED, True), T.broker_splits(T.in_process, plans))
        written = commit(out, reports)
        rows, stored_keys = (None, None) if held is None else carried_ledger(spark, str(held))
        made, counts, table = write_pop_ledger(spark, out, (pafs.LocalFileSystem(), out), written, [planned.plan],
                                               held=rows, stored_keys=stored_keys)
        rows = ds.dataset(f"{out}/pop", format="parquet").to_table().to_pylist()
        return {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r for r in rows}, \
            counts if table is None else table, dict(written, **made)
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def whole(spark, store_pop, subscriptions):
    return pop_ledger(spark, store_pop / "store", subscriptions)


def expected_rows(expected):
    return {(g, e["topic"], e["queueId"], e["queueOffset"]): e for g, rows in expected["ledger"].items() for e in rows}


def test_every_popped_message_is_one_row_as_rocketmq_answers(whole, expected):
    assert_rocketmqs_ledger(whole[0], expected)


def assert_rocketmqs_ledger(rows, expected):
    """`rows` (OUT/pop/ rows by place) are pop_ledger.json's, every field RocketMQ records."""
    want = expected_rows(expected)
    assert set(rows) == set(want)
    for key, e in want.items():
        r = rows[key]
        last = e["pops"][-1]
        revived = e["revived"] or {}
        acked = e["acked"] or {}
        assert (r["uniq_key"], r["state"], r["pops"], r["first_pop_time"], r["last_pop_time"], r["invisible_time"],
                r["acked_time"], r["acked_by"], r["retry_topic"], r["retry_queue_offset"],
                r["revived_store_timestamp"], r["cut_off"]) == \
            (e["uniqKey"], e["state"], len(e["pops"]), e["pops"][0]["popTime"], last["popTime"],
             last["invisibleTime"], acked.get("ackTime"), acked.get("how"), revived.get("retryTopic"),
             revived.get("retryQueueOffset"), revived.get("storeTs"), None), key


def test_changed_invisible_time_is_a_second_handle(whole, expected):
    rows, _, _ = whole
    twice = {k for k, e in expected_rows(expected).items() if len(e["pops"]) == 2}
    assert len(twice) == 89  # counts.ckChangeInvisible: one new checkpoint per change
    assert {k for k, r in rows.items() if r["pops"] == 2} == twice


def test_counts_per_group_are_the_ledgers(whole, expected):
    _, counts, _ = whole
    states = Counter({tuple(k.split(":")): n for k, n in expected["states"].items()})
    for c in counts:
        assert (c["popped"], c["acked"], c["revived"], c["inflight"], c["lost"], c["redeliveries"]) == \
            (sum(n for (g, _), n in states.items() if g == c["group"]), states[(c["group"], "acked")],
             states[(c["group"], "revived")], states[(c["group"], "inflight")], 0, 0)
    assert sorted(c["group"] for c in counts) == ["G_POP_SQL", "G_POP_TAG"]


def _without_retry_topic(store_pop, tmp_path):
    """A copy of store_pop without %RETRY%G_POP_TAG_PopTopicA (its consume queue and its topics.json entry)."""
    store = tmp_path / "store"
    shutil.copytree(store_pop / "store", store)
    shutil.rmtree(store / "consumequeue" / RETRY_TAG_A)
    topics = json.loads((store / "config" / "topics.json").read_text(encoding="utf-8"))
    del topics["topicConfigTable"][RETRY_TAG_A]
    (store / "config" / "topics.json").write_text(json.dumps(topics), encoding="utf-8")
    return store


def test_a_revived_message_missing_from_its_retry_topic_is_lost(spark, store_pop, subscriptions, expected, tmp_path):
    """Take %RETRY%G_POP_TAG_PopTopicA away (its consume queue and its topics.json entry): the revive service
    passed those checkpoints (its committed offsets) and nothing acked them, so each message it revived there
    is lost; every other row is as before."""
    store = _without_retry_topic(store_pop, tmp_path)
    rows, counts, _ = pop_ledger(spark, store, subscriptions)
    want = expected_rows(expected)
    lost = {k for k, e in want.items() if (e["revived"] or {}).get("retryTopic") == RETRY_TAG_A}
    assert len(lost) == 34
    assert {k for k, r in rows.items() if r["state"] == "lost"} == lost
    assert all(rows[k]["state"] == e["state"] for k, e in want.items() if k not in lost)
    tag = next(c for c in counts if c["group"] == "G_POP_TAG")
    assert (tag["lost"], tag["revived"]) == (34, 57 - 34)


def test_a_window_that_reads_the_retry_topics_to_their_end_still_finds_the_lost(
        spark, store_pop, subscriptions, expected, tmp_path):
    """--until after the store's last record: every POP retry topic is read to its latest offset, so the 34
    messages whose copies were taken away are lost as without a window; a cut before the copies calls none lost."""
    store = _without_retry_topic(store_pop, tmp_path)
    _, counts, _ = pop_ledger(spark, store, subscriptions, window=Window(until=expected["stopTs"] + 60_000))
    assert sum(c["lost"] for c in counts) == 34
    _, counts, _ = pop_ledger(spark, store_pop / "store", subscriptions, window=Window(until=CUT))
    assert sum(c["lost"] for c in counts) == 0


def _damaged_copy(store_pop, tmp_path):
    """A copy whose first checkpoint (G_POP_TAG, PopTopicA queue 2 from 0: offsets 5, 8, 12, 17, 22, 24) has a
    body that is no JSON object, in the wheel and in the revive log (its `{` made `[`, the length kept)."""
    store = tmp_path / "store"
    shutil.copytree(store_pop / "store", store)
    body = b'{"bm":0,"bn":"broker-g","c":"G_POP_TAG","d":[5,8,12,17,22,24]'
    for path in (store / "commitlog").iterdir():
        data = path.read_bytes()
        if body in data:
            path.write_bytes(data.replace(body, b"[" + body[1:]))
    return store


def test_a_damaged_checkpoint_stops_the_run_by_default(spark, store_pop, subscriptions, tmp_path):
    with pytest.raises(CorruptStoreError, match="POP checkpoint or ack"):
        pop_ledger(spark, _damaged_copy(store_pop, tmp_path), subscriptions)


def test_a_damaged_checkpoint_is_audited_and_what_is_known_stays(spark, store_pop, subscriptions, expected, tmp_path):
    """--on-corrupt skip: both records of the checkpoint audited; its acked messages keep a row (the acks tell
    them), no handle and marked; its un-acked one (offset 5, revived) has nothing left that names it."""
    rows, _, written = pop_ledger(spark, _damaged_copy(store_pop, tmp_path), subscriptions,
                                  on_corrupt=CorruptPolicy.SKIP)
    assert written["audit/corrupt"][1] == 2
    cut = {k: r for k, r in rows.items() if r["cut_off"]}
    assert set(cut) == {("G_POP_TAG", "PopTopicA", 2, o) for o in (8, 12, 17, 22, 24)}
    assert all(r["pops"] == 0 and r["state"] == "acked" and r["cut_off"] == "checkpoint not read"
               for r in cut.values())
    assert ("G_POP_TAG", "PopTopicA", 2, 5) not in rows
    assert len(rows) == sum(len(v) for v in expected["ledger"].values()) - 1


def test_a_store_without_pop_has_an_empty_ledger(spark, store_a, tmp_path):
    subs = tmp_path / "subs.json"
    subs.write_text(json.dumps({"groups": [{"group": "G", "topic": "TopicTest", "expressionType": "TAG",
                                            "expression": "*"}]}), encoding="utf-8")
    rows, counts, written = pop_ledger(spark, store_a / "store", subs)
    assert (rows, counts, written["pop"][1]) == ({}, [], 0)


def test_lost_messages_are_the_reports_first_alarm(spark, store_pop, subscriptions, tmp_path):
    """The report's headline says it and, before anything else, names the group; the POP table marks it."""
    store = _without_retry_topic(store_pop, tmp_path)
    _, counts, _ = pop_ledger(spark, store, subscriptions)
    page = report.render({"subscriptions": [], "pop": pop_summary(counts), "warnings": lost_warnings(counts)}, {}, 0)
    assert "mqreplay report: <span class=\"bad\">finished, 34 POP message(s) lost</span>" in page
    alarm = page.index("<h2 class=\"bad\">POP messages lost</h2>")
    assert alarm < page.index("<h2>Subscriptions</h2>") < page.index("<h2>POP consumption (OUT/pop/)</h2>")
    assert "<strong>G_POP_TAG</strong>: 34 message(s) never acked" in page
    assert "G_POP_SQL</strong>" not in page


@pytest.mark.parametrize("state", ["acked", "revived", "inflight"])
def test_explain_key_tells_a_messages_pop_history(store_pop, subscriptions, expected, state, capsys):
    """explain --key K --json: the popped message's row of its POP group carries its handles (pop times,
    invisible times, the changed invisible time's ack), its state and where it was revived, as pop_ledger.json;
    the first message of each state with two handles where there is one."""
    group, e = next((g, e) for g, rows in expected["ledger"].items() for e in rows
                    if e["state"] == state and len(e["pops"]) == (1 if state == "revived" else 2))
    code = explain.main(["--store", str(store_pop / "store"), "--subscriptions", str(subscriptions),
                         "--key", e["uniqKey"], "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    pop = next(r["pop"] for r in rows if r["group"] == group and r["topic"] == e["topic"]
               and r["queue_offset"] == e["queueOffset"])
    assert pop["state"] == state
    assert [(h["pop_time"], h["invisible_time"], h["acked_by"]) for h in pop["handles"]] == \
        [(p["popTime"], p["invisibleTime"], (p["acked"] or {}).get("how")) for p in e["pops"]]
    revived = e["revived"] or {}
    assert (pop["revived"] or {}).get("retry_queue_offset") == revived.get("retryQueueOffset")


def _lake_night(spark, store, subscriptions, target, run, out, window):
    """One night into the lake, as --sink iceberg commits it: the tasks in process, NS.pop's rows merged with the
    night's events, the answer tables, NS.pop replaced, the ranges. Returns (the night's counts, the table's)."""
    planned = build_plan(JobOptions(store=str(store), subscription_files=(str(subscriptions),), window=window))
    os.makedirs(out)
    plans = [planned.plan]
    spec = SinkSpec(str(out), NORMALIZED, True, TableSplitWriter)  # the Iceberg sink's parts: a topic column
    written = commit(str(out), T.replay(T.in_process, plans, spec, T.broker_splits(T.in_process, plans)))
    where = Place(pafs.LocalFileSystem(), str(out), str(out))
    (made, counts, table), held = merge_pop(spark, target, str(out), (where.fs, where.root), written, plans)
    written.update(made)
    written.update(write_empty_tables(str(out), NORMALIZED, True, written))
    publish_tables(target, str(out), written, run, True, parts([("G_POP_TAG", "PopTopicA")], [("PopTopicA", 0, 0, 0)]),
                   before_ranges=[lambda: commit_pop(target, where, run, held)])
    return counts, table


def test_the_lake_holds_one_row_per_popped_message_with_its_latest_fate(
        spark, store_pop, subscriptions, whole, tmp_path):
    """--sink iceberg, two nights cut between two revive rounds: after the first NS.pop holds every popped message,
    42 revived, 91 in flight whose copy comes later; after the second, the rows one run makes, each once, none lost; the
    second night's own counts (its records: no popped message's key) are apart from the table's."""
    target = IcebergTarget("pops", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                           refs=(REF,))

    def table_rows():
        rows = target.catalog().load_table("pops.pop").scan().to_arrow().to_pylist()
        return {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r for r in rows}, len(rows)

    _lake_night(spark, store_pop / "store", subscriptions, target, "night1", tmp_path / "n1", Window(until=CUT))
    rows, n = table_rows()
    states = Counter(r["state"] for r in rows.values())
    assert (n, states) == (952, {"acked": 786, "revived": 133 - 91, "inflight": 33 + 91})
    counts, table = _lake_night(spark, store_pop / "store", subscriptions, target, "night2", tmp_path / "n2",
                                Window(since=CUT))
    assert table_rows() == (whole[0], 952)
    assert table == whole[1]
    assert sum(c["revived"] for c in counts) == 0 and sum(c["lost"] for c in counts) == 0


def test_a_run_without_bodies_reads_the_checkpoints_bodies_all_the_same(spark, store_pop, subscriptions, whole):
    rows, _, _ = pop_ledger(spark, store_pop / "store", subscriptions, with_body=False)
    assert rows == whole[0]


def _revived_after(expected, cut):
    """The rows RocketMQ revived into a POP retry topic at or after `cut` (store time of the copy)."""
    return {k for k, e in expected_rows(expected).items() if e["state"] == "revived" and e["revived"]["storeTs"] >= cut}


@pytest.fixture(scope="module")
def first_night(spark, store_pop, subscriptions, tmp_path_factory):
    out = tmp_path_factory.mktemp("night1") / "out"
    return out, pop_ledger(spark, store_pop / "store", subscriptions, keep=out, window=Window(until=CUT))


def test_a_night_that_ends_before_the_store_calls_nothing_lost(first_night, expected):
    """Every pop and ack is before the cut, 91 revived copies are stored after it: those messages are in flight in
    the first night (a later night finds their copy), never lost, though the revive service's committed offsets
    (the store's, at its end) are past their checkpoints; the counts and the alarm say none lost."""
    _, (rows, counts, _) = first_night
    later = _revived_after(expected, CUT)
    assert len(later) == 91
    assert set(rows) == set(expected_rows(expected))
    assert {k for k, r in rows.items() if r["state"] == "inflight"} == \
        later | {k for k, e in expected_rows(expected).items() if e["state"] == "inflight"}
    assert sum(c["lost"] for c in counts) == 0
    assert lost_warnings(counts) == []


def test_the_second_night_alone_calls_nothing_lost_whose_message_it_did_not_read(
        spark, store_pop, subscriptions, expected):
    """From the cut on, the checkpoints' revive-log records and the copies are read, the popped messages are not:
    without their keys their copies cannot be looked for, so those rows are marked and never lost. A message
    revived after a changed invisible time may show only its first handle's ack (the change's, due when that
    handle was): acked by what the night read, its later handle (an earlier night's) deciding once joined."""
    rows, counts, _ = pop_ledger(spark, store_pop / "store", subscriptions, window=Window(since=CUT))
    want = expected_rows(expected)
    assert rows and set(rows) <= set(want)
    assert all("message not read" in r["cut_off"] and r["uniq_key"] is None for r in rows.values())
    revived = {k: r for k, r in rows.items() if want[k]["state"] == "revived"}
    assert {r["state"] for r in revived.values()} == {"inflight", "acked"}
    assert all(r["last_pop_time"] < want[k]["pops"][-1]["popTime"] and want[k]["pops"][0]["acked"]["how"] ==
               "changeInvisible" for k, r in revived.items() if r["state"] == "acked")
    assert sum(c["lost"] for c in counts) == 0


def test_two_nights_joined_are_one_run(spark, store_pop, subscriptions, expected, first_night, whole):
    """The second night's evidence joined with the rows the first wrote (what the lake does with NS.pop): every
    popped message one row, each as one run over both nights has it, its handles included."""
    out, _ = first_night
    rows, counts, _ = pop_ledger(spark, store_pop / "store", subscriptions, held=out, window=Window(since=CUT))
    assert rows == whole[0]
    assert Counter(r["state"] for r in rows.values()) == {"acked": 786, "revived": 133, "inflight": 33}
    assert counts == whole[1]


def test_a_message_read_in_one_night_and_popped_first_in_the_next_is_one_row_with_its_key(
        spark, store_pop, subscriptions, whole, expected, tmp_path):
    """Nights cut amid the pops (270 of the 952 messages first popped before it, every message stored before it):
    the second night's checkpoints name messages only the first night read, and have no ledger row of it; their
    keys come from NS.messages, so their copies are found: the table is one run's."""
    assert sum(e["pops"][0]["popTime"] < POPS_CUT for e in expected_rows(expected).values()) == 270
    target = IcebergTarget("pops", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                           refs=(REF,))
    _lake_night(spark, store_pop / "store", subscriptions, target, "night1", tmp_path / "n1", Window(until=POPS_CUT))
    _, table = _lake_night(spark, store_pop / "store", subscriptions, target, "night2", tmp_path / "n2",
                           Window(since=POPS_CUT))
    rows = target.catalog().load_table("pops.pop").scan().to_arrow().to_pylist()
    assert {(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r for r in rows} == whole[0]
    assert len(rows) == 952 and table == whole[1]


def test_a_parquet_night_finds_the_keys_of_what_it_pops_first_in_the_earlier_nights_messages(
        spark, store_pop, subscriptions, whole, expected, tmp_path):
    """The same nights cut amid the pops, chained by offsets.json: the second night carries the first's pop/ on,
    and the keys of the messages it pops first come from the first night's messages/: its pop/ is one run's."""
    first = tmp_path / "n1"
    pop_ledger(spark, store_pop / "store", subscriptions, keep=first, window=Window(until=POPS_CUT))
    rows, counts, _ = pop_ledger(spark, store_pop / "store", subscriptions, held=first, window=Window(since=POPS_CUT))
    assert_rocketmqs_ledger(rows, expected)
    assert rows == whole[0]  # the handles too
    assert counts == whole[1]


@pytest.mark.system  # three spark-submit runs, as users chain nights: make test-system
def test_parquet_nights_chained_by_offsets_json_end_with_one_runs_ledger(store_pop, subscriptions, expected, tmp_path):
    """Night 1 to CUT (91 revived copies after it), night 2 from its offsets.json: night 2's pop/ is every popped
    message once with its latest fate, one run's; its summary counts what its own records tell (none lost, none
    revived: it read none of the popped messages) and, as `carried`, that ledger; an offsets.json copied away from
    its OUT carries nothing and says so."""
    common = ("--store", store_pop / "store", "--subscriptions", subscriptions)
    first = submit_job(*common, "--out", tmp_path / "n1", "--until", CUT)
    assert first.returncode == 0, first.console[-3000:]
    second = submit_job(*common, "--out", tmp_path / "n2", "--starting-offsets", tmp_path / "n1" / "offsets.json")
    assert second.returncode == 0, second.console[-3000:]
    rows = ds.dataset(tmp_path / "n2" / "pop", format="parquet").to_table().to_pylist()
    assert len(rows) == 952
    assert_rocketmqs_ledger({(r["group"], r["topic"], r["queue_id"], r["queue_offset"]): r for r in rows}, expected)
    pop = json.loads((tmp_path / "n2" / "summary.json").read_text(encoding="utf-8"))["pop"]
    assert (pop["totals"]["lost"], pop["totals"]["revived"]) == (0, 0)
    assert pop["carried"]["totals"] == {"popped": 952, "acked": 786, "revived": 133, "inflight": 33, "lost": 0,
                                        "redeliveries": 0}
    alone = tmp_path / "elsewhere" / "offsets.json"
    alone.parent.mkdir()
    shutil.copy(tmp_path / "n1" / "offsets.json", alone)
    third = submit_job(*common, "--out", tmp_path / "n3", "--starting-offsets", alone)
    assert third.returncode == 0, third.console[-3000:]
    summary = json.loads((tmp_path / "n3" / "summary.json").read_text(encoding="utf-8"))
    assert "carried" not in summary["pop"]
    assert any(w.startswith(f"--starting-offsets {alone}: no pop/ beside it") for w in summary["warnings"])


def test_a_rows_handles_are_its_checkpoints_in_pop_order(whole, expected):
    """`handles`: each checkpoint's pop time, invisible time and ack, as pop_ledger.json's `pops`."""
    rows, _, _ = whole
    for key, e in expected_rows(expected).items():
        assert [(h["pop_time"], h["invisible_time"], h["checkpoint"], h["acked_time"]) for h in rows[key]["handles"]] \
            == [(p["popTime"], p["invisibleTime"], True, (p["acked"] or {}).get("ackTime")) for p in e["pops"]], key
