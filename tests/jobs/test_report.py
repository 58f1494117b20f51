"""OUT/report.html: its numbers are RocketMQ's (expected.json), it is self-contained, headless Chromium renders
it with charts and no script error, and names from the data stay text."""
import json
import re
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest

from filtering.topic_replay import _slot_counter
from jobs.output.layouts import NORMALIZED
from jobs.output.writers import CountingSplitWriter, SinkSpec
from jobs.plan.build import build_plan
from jobs.report import html as report
from jobs.report.summary import Counters, build_summary
from jobs.report.timeline import Timeline
from jobs.settings import JobOptions
from jobs.task import stage as T

EVIL = '</script><img src=x onerror="document.title=1337">'


@pytest.fixture(scope="module")
def store_a_page(store_a, tmp_path_factory):
    """(summary, html) of store_a replayed in one process, as the job's driver renders it."""
    options = JobOptions(store=str(store_a / "store"), subscription_files=(str(store_a / "registrations.json"),))
    planned = build_plan(options)
    out = tmp_path_factory.mktemp("report")
    spec = SinkSpec(str(out), NORMALIZED, True, CountingSplitWriter)
    plans = [planned.plan]
    reports = T.replay(T.in_process, plans, spec, T.broker_splits(T.in_process, plans))
    counters = Counters.of(reports)
    summary = build_summary(planned, counters, options)
    return summary, report.render(summary, counters.timelines, 0)


def _data(page):
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def _sums(page, series):
    """{(group, topic): the sum of a timeline series} of the groups where it is not 0."""
    sums = {(s["group"], s["topic"]): sum(n for _, n in s[series]) for s in _data(page)["subscriptions"]}
    return {k: v for k, v in sums.items() if v}


def _per_subscription(rows):
    """{(group, topic): rows} of RocketMQ's rows keyed (group, topic, queue id, queue offset)."""
    return dict(Counter((group, topic) for group, topic, _, _ in rows))


def test_each_timeline_sums_to_what_rocketmqs_consumer_received(store_a_page, store_a_expected):
    assert _sums(store_a_page[1], "timeline") == _per_subscription(store_a_expected[0])
    subs = _data(store_a_page[1])["subscriptions"]
    assert all(s["client_delivered"] == sum(n for _, n in s["timeline"]) for s in subs)
    axes = {tuple(b for b, _ in s["timeline"]) for s in subs}
    assert len(axes) == 1  # one time axis for every group


def test_collided_buckets_sum_to_the_brokers_extra_returns(store_a_page, store_a_expected):
    assert _sums(store_a_page[1], "collided_timeline") == _per_subscription(store_a_expected[1])


def test_the_page_fetches_nothing(store_a_page):
    page = store_a_page[1]
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(""", page, re.I)


def test_timelines_rebucket_exactly_into_a_wider_width():
    t = Timeline()
    t.add(1000, [5000, 6000, 61000], [(1, 0, 2), (3, 1, 0), (4, 0, 0)])
    t.add(60000, [60000], [(10, 0, 0)])
    assert t.report() == {"width": 60000, "buckets": [0, 60000], "counts": [[4, 1, 2], [14, 0, 0]]}


def _evil_page():
    row = {"group": EVIL, "topic": "T<b>", "expression_type": "SQL92", "expression": "a > '<i>'", "status": "OK",
           "units": 3, "skipped": 0, "stage1_passed": 3, "broker_delivered": 1, "client_delivered": 1,
           "collisions": 0, "bloom_false_positives": 0, "evaluated": 3, "evaluation_errors": 1, "filtered_out": 2}
    summary = {"store": "s", "from": "earliest", "rocketmq_version": "5", "subscriptions": [row],
               "warnings": [f"{EVIL}/T<b>: 1 of 3 messages threw for property a = '<script>alert(1)</script>'"],
               "store_problems": [], "bitmap_audit": {"topics": []}, "job_seconds": 1.0}
    timeline = Timeline()
    timeline.add(1000, [1795237035000], [(1, 0, 2)])
    return report.render(summary, {(EVIL, "T<b>"): timeline}, 0)


def test_names_and_values_from_the_data_are_escaped_everywhere():
    page = _evil_page()
    assert "<img" not in page and "<script>alert" not in page and "<b>" not in page and "<i>" not in page
    assert page.count("</script>") == 1  # the data element's own end, nothing inside it ends it early
    assert _data(page)["subscriptions"][0]["group"] == EVIL


def _chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("no chromium: `make test` installs Debian's chromium package (see the Makefile's browser target)")
    return browser


def _render(tmp_path, page, *args):
    """Headless Chromium on the page (a process of its own, ended by its timeout at the latest)."""
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}/profile",
             "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0", *args, f"file://{path}"]
    return subprocess.run(flags, capture_output=True, text=True, timeout=120)


def test_chromium_renders_every_group_with_charts_and_no_script_error(store_a_page, tmp_path):
    summary, page = store_a_page
    dom = _render(tmp_path, page, "--dump-dom")
    assert not [line for line in dom.stderr.splitlines() if "Uncaught" in line]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    assert {r["group"] for r in summary["subscriptions"]} <= set(re.findall(r"G_\w+", text))
    assert len(re.findall(r"<svg\b", dom.stdout)) >= len(summary["subscriptions"])
    shot = tmp_path / "shot.png"
    _render(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,1600")
    assert shot.stat().st_size > 15000  # a blank page's screenshot is a few KB


def test_chromium_shows_markup_named_groups_as_text(tmp_path):
    dom = _render(tmp_path, _evil_page(), "--dump-dom")
    assert "<title>mqreplay report</title>" in dom.stdout
    assert not re.search(r"<img\b[^>]*onerror", dom.stdout, re.I)
    assert "&lt;/script&gt;&lt;img src=x onerror=" in dom.stdout


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [1, 4, 3, 0, 2]])  # as given; sorted by slot
def test_per_bucket_counts_are_the_same_in_any_message_order(order):
    slot = np.array([2, 0, 2, 1, 0])[order]
    matrix = np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=bool)[:, order]
    count = _slot_counter(slot, 2)
    assert count(matrix).tolist() == [[1, 1, 1], [2, 1, 1]]  # counted by hand per slot 0, 1, 2
    assert count(np.zeros((2, 5), dtype=bool)).tolist() == [[0, 0, 0], [0, 0, 0]]


def _row(group, topic, **counts):
    row = {"group": group, "topic": topic, "expression_type": "SQL92", "expression": "a > 1", "status": "OK",
           "units": 10, "skipped": 0, "stage1_passed": 10, "broker_delivered": 10, "client_delivered": 10,
           "collisions": 0, "bloom_false_positives": 0, "evaluated": 10, "evaluation_errors": 0, "filtered_out": 0}
    return {**row, **counts}


def _trouble_page(status=0):
    rows = [_row("G_FINE", "T"),
            _row("G_THROWS", "T", evaluation_errors=2765, evaluated=3252, client_delivered=487),
            _row("G_BAD", "T", status="FAILED", error="the SQL92 expression does not compile: a >>> 1"),
            _row("G_NOTHING", "T", client_delivered=0, broker_delivered=0, filtered_out=10),
            _row("G_QUIET", "%RETRY%G_QUIET", units=0, client_delivered=0, stage1_passed=0, broker_delivered=0)]
    summary = {"store": "s", "from": "earliest", "rocketmq_version": "5", "subscriptions": rows, "warnings": [],
               "store_problems": [], "bitmap_audit": {"topics": []}, "job_seconds": 1.0}
    return report.render(summary, {}, status)


def test_the_headline_never_says_clean_when_a_group_has_errors():
    page = _trouble_page(status=0)
    headline = re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert "clean" not in headline and "2 subscription(s) need attention" in headline
    assert _data(page)["status_text"] == "finished, 2 subscription(s) need attention"
    summary = {"store": "s", "from": "earliest", "rocketmq_version": "5", "subscriptions": [_row("G_FINE", "T")],
               "warnings": [], "store_problems": [], "bitmap_audit": {"topics": []}, "job_seconds": 1.0}
    assert "clean" in re.search(r"<h1>(.*?)</h1>", report.render(summary, {}, 0)).group(1)  # no trouble: clean


def test_every_troubled_group_is_named_before_any_chart_and_the_overview_table_comes_first():
    page = _trouble_page(status=3)
    first_chart = page.index("<svg")
    attention = page[:page.index("<h2>Subscriptions")]
    for group, why in (("G_BAD", "does not compile"), ("G_NOTHING", "delivered nothing of 10 unit(s)")):
        assert re.search(rf"<li><strong>{group} / T</strong>: [^<]*{re.escape(why)}", attention), group
    assert "G_FINE" not in attention and "G_QUIET" not in attention and "G_THROWS" not in attention
    overview = page[page.index("<h2>Subscriptions"):first_chart]
    assert all(f"<td>{g}</td>" in overview for g in ("G_FINE", "G_THROWS", "G_BAD", "G_NOTHING", "G_QUIET"))
    assert "<th>delivered</th><th>filtered out</th><th>collided</th><th>errors</th><th>skipped</th>" in overview
    assert page.index("Needs attention") < page.index("<h2>Subscriptions") < page.index("<h2>The run")


def test_a_night_in_which_a_topic_got_no_new_message_is_quiet_not_attention():
    rows = [_row("G_FINE", "T"), _row("G_IDLE", "TopicIdle", units=0, client_delivered=0, stage1_passed=0,
                                      broker_delivered=0)]  # an incremental night: nothing new in TopicIdle
    summary = {"store": "s", "from": "earliest", "rocketmq_version": "5", "subscriptions": rows, "warnings": [],
               "store_problems": [], "bitmap_audit": {"topics": []}, "job_seconds": 1.0}
    page = report.render(summary, {}, 0)
    assert _data(page)["attention"] == [] and _data(page)["status_text"] == report.STATUS[0]
    assert "G_IDLE" not in page[:page.index("<h2>Subscriptions")]


def test_an_expression_that_throws_on_some_messages_is_a_note_under_the_table_not_an_alarm():
    page = _trouble_page(status=0)
    notes = page[page.index("<h2>Subscriptions"):page.index("<svg")]
    assert "Note: an SQL92 expression that throws on a message" in notes
    assert "<li>G_THROWS / T: expression threw on 2,765 of 3,252 messages</li>" in notes
    data = _data(page)
    assert [a["group"] for a in data["attention"]] == ["G_BAD", "G_NOTHING"]
    assert data["notes"] == [{"broker": None, "group": "G_THROWS", "topic": "T",
                              "why": "expression threw on 2,765 of 3,252 messages"}]


def test_skipped_units_are_counted_and_called_for_attention_and_the_damage_comes_before_any_chart():
    rows = [_row("G_OK", "T"), _row("G_HURT", "T", skipped=3, units=10, client_delivered=7, broker_delivered=7)]
    summary = {"store": "s", "from": "earliest", "rocketmq_version": "5", "subscriptions": rows, "warnings": [],
               "store_problems": [{"file": "commitlog/00000000000000000000", "offset": 4096, "reason": "bad magic"}],
               "bitmap_audit": {"topics": []}, "job_seconds": 1.0, "corrupt_items": 1, "skipped_units": 3}
    page = report.render(summary, {("G_OK", "T"): _one_bucket(10), ("G_HURT", "T"): _one_bucket(7)}, 4)
    before_charts = page[:page.index("<svg")]
    assert "<li><strong>G_HURT / T</strong>: 3 unit(s) skipped as damaged (audit/corrupt/)</li>" in before_charts
    assert "<h2>Damaged and skipped units</h2>" in before_charts and "bad magic" in before_charts
    assert "<td>G_HURT</td><td class=\"t\">T</td><td class=\"t\">SQL92</td><td>7</td><td>7</td><td>0</td>" \
           "<td>0</td><td>0</td><td>3</td><td class=\"t\">OK</td>" in before_charts


def _one_bucket(delivered):
    line = Timeline()
    line.add(1000, [1795237035000], [[delivered, 0, 0]])
    return line


def test_a_cluster_page_names_the_broker_of_every_row_attention_item_and_audited_topic():
    nothing = _row("G", "T", client_delivered=0, broker_delivered=0, filtered_out=10)
    rows = [dict(_row("G", "T"), broker="broker-a"), dict(nothing, broker="broker-b")]
    audit = [{"broker": "broker-a", "topic": "T", "bitmaps_compared": 5, "bitmap_mismatches": 0,
              "bitmap_mismatches_explained": 0},
             {"broker": "broker-b", "topic": "T", "bitmaps_compared": 4, "bitmap_mismatches": 1,
              "bitmap_mismatches_explained": 1}]
    summary = {"store": "broker-a=a, broker-b=b", "from": "earliest", "rocketmq_version": "5", "subscriptions": rows,
               "warnings": [], "store_problems": [], "bitmap_audit": {"topics": audit}, "job_seconds": 1.0,
               "brokers": {"broker-a": {"store": "a", "totals": {}}, "broker-b": {"store": "b", "totals": {}}}}
    page = report.render(summary, {}, 0)
    assert "<li><strong>broker-b: G / T</strong>: delivered nothing of 10 unit(s) in scope</li>" in page
    assert "broker-a: G / T" not in page[:page.index("<h2>Subscriptions")]
    assert "<tr><th>broker</th><th>group</th>" in page
    assert "<tr><td>broker-a</td><td class=\"t\">G</td>" in page
    assert "<tr class=\"bad\"><td>broker-b</td><td class=\"t\">G</td>" in page
    assert "<tr><td>broker-b: T</td><td>4</td><td>1</td><td>1</td></tr>" in page


def test_the_window_is_said_in_words_not_as_json():
    from jobs.report.html import window_text
    one = {"since": 1795237035000, "until": 1795237035400, "starting_offsets": None, "ending_offsets": None,
           "offsets": {"TopicTest": {"0": [3, 9], "1": [0, 4]}}, "units": 10}
    assert window_text(one) == "since 1795237035000, until 1795237035400: 10 unit(s) of 2 queue(s)"
    assert window_text({"broker-a": one, "broker-b": None}) == \
        "broker broker-a: since 1795237035000, until 1795237035400: 10 unit(s) of 2 queue(s)"


def _ledger_summary():
    """A summary with each ledger's counts, written out by hand (two POP groups, one timer topic, one
    transactional topic)."""
    pop_group = dict(broker=None, redeliveries=0, ack_ms_median=10.0, ack_ms_max=20)
    night = [dict(pop_group, group="G_ONE", popped=7, acked=4, revived=0, inflight=3, lost=0),
             dict(pop_group, group="G_TWO", popped=2, acked=2, revived=0, inflight=0, lost=0)]
    carried = [dict(pop_group, group="G_ONE", popped=12, acked=6, revived=5, inflight=1, lost=0),
               dict(pop_group, group="G_TWO", popped=2, acked=2, revived=0, inflight=0, lost=0)]
    totals = ("popped", "acked", "revived", "inflight", "lost", "redeliveries")
    timer = {"broker": None, "real_topic": "T_DELAY", "delivered": 8, "pending": 3, "cancelled": 1, "overdue": 0,
             "overdue_by_wheel": 0, "lag_ms_median": 5, "lag_ms_max": 9}
    return {"subscriptions": [], "warnings": [],
            "pop": {"groups": night, "totals": {k: sum(g[k] for g in night) for k in totals},
                    "carried": {"groups": carried, "totals": {k: sum(g[k] for g in carried) for k in totals}}},
            "timers": {"topics": [timer], "totals": {"delivered": 8, "pending": 3, "cancelled": 1, "overdue": 0,
                                                     "overdue_by_wheel": 0, "lag_ms_max": 9}},
            "transactions": {"topics": [{"broker": None, "topic": "T_TX", "fate": "committed", "transactions": 4,
                                         "stuck": 0, "committed_twice": 0}],
                             "totals": {"committed": 4, "rolled_back": 0, "discarded": 0, "pending": 0}}}


def test_each_ledger_says_what_its_states_mean_and_draws_a_bar_per_row():
    page = report.render(_ledger_summary(), {}, 0)
    for words in ("8 delivered: the wheel put the message into its real topic", "3 pending: still in the wheel",
                  "1 cancelled: a delete marker", "8 acked: a consumer acked it", "5 revived: not acked within",
                  "1 in flight: popped, not acked", "0 lost: never acked", "4 committed: the producer"):
        assert words in page, words
    for bar in ("<title> T_DELAY delivered: 8</title>", "<title> T_DELAY pending: 3</title>",
                "<title> T_DELAY cancelled: 1</title>", "<title> G_ONE acked: 6</title>",
                "<title> G_ONE revived: 5</title>", "<title> G_ONE inflight: 1</title>",
                "<title> G_TWO acked: 2</title>", "<title> T_TX committed: 4</title>"):
        assert bar in page, bar


def test_the_pop_section_shows_the_ledger_across_nights_when_the_night_carried_one():
    """A Parquet night chained by offsets.json (summary.json's pop.carried): the section is that ledger's, said so;
    the night's own counts (7 popped by G_ONE, none revived) are not its rows."""
    page = report.render(_ledger_summary(), {}, 0)
    section = page.split("<h2>POP consumption (OUT/pop/) (across nights)</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td class=\"t\">G_ONE</td><td>12</td><td>6</td><td>5</td><td>1</td><td>0</td>" in section
    assert "<td>7</td>" not in section
