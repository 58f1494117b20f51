"""What a run reports is true (in process, no Spark): audits against every stored registration, every
consume-queue unit accounted for on damaged copies of store_a, evaluation errors counted alike for stored
and ad hoc subscriptions, typos refused, nothing a store names is ever imported.

Expectations come from RocketMQ's own dumps of store_a (cq.jsonl.gz, messages.jsonl.gz, expected.json)
or are written out by hand."""
import base64
import gzip
import json
import re
import sys

import pytest

from jobs.errors import UsageError
from jobs.plan.build import build_plan
from jobs.report.summary import Counters, build_summary, exit_code, summary_notes, summary_table
from jobs.settings import CorruptPolicy, JobOptions
from schemas.errors import CorruptStoreError, StoreNotFound
from tests.jobs.conftest import writable_copy
from tests.local_replay import kind, replay_local

TOPIC_UNITS = {"TopicTest": 1929, "订单Topic": 1044}  # cq.jsonl.gz, counted by hand below as well


def _dump(store_a, name):
    with gzip.open(store_a / name, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def copy(store_a, tmp_path):
    return writable_copy(store_a, tmp_path)


def _run(store, store_a, **options):
    """(planned, result table, summary) of an in-process replay, counted as the Spark job counts."""
    regs = () if "ad_hoc" in options and "subscription_files" not in options else (
        str(store_a / "registrations.json"),)
    opts = JobOptions(store=str(store), **{"subscription_files": regs, **options})
    planned = build_plan(opts)
    result = replay_local(planned)
    groups = {}
    for r in kind(result, "stats").to_pylist():
        row = groups.setdefault((r["group"], r["topic"]), {})
        for k, v in r.items():
            if isinstance(v, int) and k not in ("queue_id", "queue_offset", "commitlog_offset", "offset"):
                row[k] = row.get(k, 0) + v
    topics = {}
    for r in kind(result, "topic_stats").to_pylist():
        row = topics.setdefault(r["topic"], {})
        for k in ("units", "bitmaps_compared", "bitmap_mismatches", "bitmap_mismatches_explained"):
            row[k] = row.get(k, 0) + r[k]
    examples = {(r["group"], r["topic"]): r["reason"] for r in kind(result, "example").to_pylist()}
    corrupt = kind(result, "corrupt").num_rows + len(planned.problems or [])
    return planned, result, build_summary(planned, Counters(groups, topics, examples, corrupt), opts)


def _rows(summary):
    return {(r["group"], r["topic"]): r for r in summary["subscriptions"]}


def test_fixture_unit_counts_are_what_the_tests_assume(store_a):
    counts = {}
    for u in _dump(store_a, "cq.jsonl.gz"):
        counts[u["topic"]] = counts.get(u["topic"], 0) + 1
    assert {t: counts[t] for t in TOPIC_UNITS} == TOPIC_UNITS


# ---------------------------------------------------------------- 1, 2: the bitmap audit
def test_narrow_run_audits_bitmaps_against_every_stored_registration(store_a):
    _, full, full_summary = _run(store_a / "store", store_a)
    _, narrow, narrow_summary = _run(store_a / "store", store_a, groups=("G_TAG_A",))
    key = lambda t: {(r["topic"], r["queue_id"], r["queue_offset"]) for r in kind(t, "bitmap").to_pylist()}  # noqa
    assert key(narrow) == key(full)
    # RocketMQ wrote this store: every difference is the late registration's (born after 1500 messages)
    reasons = {r["reason"] for r in kind(full, "bitmap").to_pylist()}
    assert reasons == {"registration born after the message"}
    for summary in (full_summary, narrow_summary):
        audit = {t["topic"]: t for t in summary["bitmap_audit"]["topics"]}
        assert audit["TopicTest"]["bitmap_mismatches"] == 0
        assert audit["TopicTest"]["bitmap_mismatches_explained"] == len(key(full))


def test_ad_hoc_subscription_does_not_make_stored_bitmaps_mismatch(store_a):
    _, result, summary = _run(store_a / "store", store_a, ad_hoc=(("G_NEW", "TopicTest", "TAG", "TagA"),),
                              groups=("G_NEW",))
    assert summary["bitmap_audit"]["totals"]["bitmap_mismatches"] == 0
    assert all(r["reason"] for r in kind(result, "bitmap").to_pylist())


def test_a_damaged_consumer_filter_json_leaves_the_bitmap_audit_undone_not_all_mismatched(copy, store_a):
    """Read as absent under skip, the file leaves no registration to recompute bitmaps from: compared with an
    empty bitmap, every stored one would count as a mismatch (2,973 of 2,973), which reads as a broker bug."""
    path = copy / "config" / "consumerFilter.json"
    path.write_text(path.read_text(encoding="utf-8")[:200], encoding="utf-8")
    _, result, summary = _run(copy, store_a, on_corrupt=CorruptPolicy.SKIP)
    assert kind(result, "bitmap").num_rows == 0
    totals = summary["bitmap_audit"]["totals"]
    assert (totals["bitmaps_compared"], totals["bitmap_mismatches"], totals["bitmap_mismatches_explained"]) == (0, 0, 0)
    why = ("bitmap audit not done: config/consumerFilter.json is damaged (audited, read as absent), so the store's "
           "SQL92 registrations, which its stored bitmaps are compared with, are unknown")
    assert why in summary["warnings"]
    table = summary_table(summary)
    assert f"warning: {why}" in summary_notes(summary) and "bitmap audit (" not in table
    assert exit_code(summary) == 4


def test_bitmap_counters_are_per_topic_not_copied_into_group_rows(store_a):
    _, result, summary = _run(store_a / "store", store_a)
    assert not any("bitmap_mismatches" in r for r in summary["subscriptions"])
    assert "bitmap_mismatches" not in summary["totals"]
    totals = summary["bitmap_audit"]["totals"]
    assert totals["bitmap_mismatches"] + totals["bitmap_mismatches_explained"] == kind(result, "bitmap").num_rows


# ---------------------------------------------------------------- 3: every unit accounted for
def _flip(path, at, data=b"\x00\x00\x00\x00"):
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _message_at(store_a, index):
    return _dump(store_a, "messages.jsonl.gz")[index]


def _damage(copy, store_a, what):
    """Damage a copy of store_a; the topic whose units it touches."""
    if what == "truncated commit log":
        (copy / "commitlog" / "00000000000004194304").write_bytes(b"")
        return None  # the last file held the newest messages of both topics
    if what == "truncated consume queue":
        with open(copy / "consumequeue" / "TopicTest" / "0" / "00000000000000000000", "r+b") as f:
            f.truncate(3001)
        return "TopicTest"
    m = _message_at(store_a, 1500)
    path = copy / "commitlog" / f"{m['commitLogOffset'] // 2**20 * 2**20:020d}"
    if what == "flipped header":
        _flip(path, m["commitLogOffset"] % 2**20 + 4)  # the magic code
        return m["topic"]
    if what == "flipped body":
        # v1 record, IPv4 hosts: the body starts 88 bytes into the record (see schemas/log/layout.py)
        assert m["sysFlag"] & 0x30 == 0 and base64.b64decode(m["body_base64"])
        _flip(path, m["commitLogOffset"] % 2**20 + 88, b"\xff")
        return m["topic"]
    if what == "missing ext file":
        (copy / "consumequeue_ext" / "TopicTest" / "0" / "00000000000000016384").unlink()
        return "TopicTest"
    raise AssertionError(what)


DAMAGES = ["truncated commit log", "truncated consume queue", "flipped header", "flipped body", "missing ext file"]


@pytest.mark.parametrize("what", DAMAGES)
def test_every_unit_is_accounted_for_on_a_damaged_copy(copy, store_a, what):
    topic = _damage(copy, store_a, what)
    crc = what == "flipped body"
    planned, result, summary = _run(copy, store_a, on_corrupt=CorruptPolicy.SKIP, verify_crc=crc)
    rows = _rows(summary)
    for (group, t), r in rows.items():
        if t in TOPIC_UNITS:
            assert r["units"] == TOPIC_UNITS[t], (group, t)
        assert r["units"] == r["skipped"] + r["filtered_out"] + r["broker_delivered"]
        assert r["broker_delivered"] == r["client_delivered"] + r["collisions"]
        assert r["filtered_out"] >= 0
    assert summary["corrupt_items"] > 0 and exit_code(summary) == 4
    if what == "missing ext file":  # kept, its tag code counted as missing, as the broker does
        assert sum(r["ext_unreadable"] for r in rows.values()) > 0
    else:
        touched = [r for (g, t), r in rows.items() if topic is None and t in TOPIC_UNITS or t == topic]
        assert touched and all(r["skipped"] > 0 for r in touched)
    audited = kind(result, "corrupt").to_pylist() + list(planned.problems)
    assert all(a["reason"] and a["file"] for a in audited)


@pytest.mark.parametrize("what", DAMAGES)
def test_damaged_copy_stops_the_run_by_default(copy, store_a, what):
    _damage(copy, store_a, what)
    with pytest.raises(CorruptStoreError):
        _run(copy, store_a, verify_crc=what == "flipped body")


def test_truncated_consume_queue_loses_exactly_the_units_up_to_the_next_file(copy, store_a):
    _damage(copy, store_a, "truncated consume queue")
    planned, _, summary = _run(copy, store_a, on_corrupt=CorruptPolicy.SKIP)
    # 3001 bytes keep 150 of the file's 300 units; the next file starts at unit 300: 150 lost
    assert [(x.topic, x.queue_id, x.first, x.count) for x in planned.lost_units] == [("TopicTest", 0, 150, 150)]
    assert _rows(summary)[("G_TAG_A", "TopicTest")]["skipped"] == 150
    assert any("consumequeue" in p["file"] and "truncated" in p["reason"] for p in planned.problems)


# ---------------------------------------------------------------- 4: evaluation errors, ad hoc and stored
def _not_a_java_int(value):
    return not (re.fullmatch(r"[+-]?\d+", value) and -2**31 <= int(value) < 2**31)


def test_ad_hoc_sql92_counts_every_message_whose_evaluation_throws(store_a):
    _, _, summary = _run(store_a / "store", store_a, ad_hoc=(("G_NEW", "订单Topic", "SQL92", "price > 100"),),
                         groups=("G_NEW",))
    # `price > 100`: Integer.valueOf(price) throws for every price that is not a Java int ("512.40")
    throws = sum(1 for m in _dump(store_a, "messages.jsonl.gz")
                 if m["topic"] == "订单Topic" and "price" in m["properties"]
                 and _not_a_java_int(m["properties"]["price"]))
    row = _rows(summary)[("G_NEW", "订单Topic")]
    assert throws > 0 and row["evaluation_errors"] == throws
    assert row["evaluated"] == TOPIC_UNITS["订单Topic"]
    warning = [w for w in summary["warnings"] if w.startswith("G_NEW/订单Topic")]
    assert len(warning) == 1 and "NumberFormatException" in warning[0] and "did you mean 100.0?" in warning[0]


def test_same_expression_counts_the_same_errors_stored_or_ad_hoc(store_a):
    expression = "a between 10 and 40"  # G_SQL_BETWEEN's stored registration
    _, _, summary = _run(store_a / "store", store_a, ad_hoc=(("G_COPY", "TopicTest", "SQL92", expression),),
                         subscription_files=(str(store_a / "registrations.json"),))
    rows = _rows(summary)
    stored, adhoc = rows[("G_SQL_BETWEEN", "TopicTest")], rows[("G_COPY", "TopicTest")]
    throws = sum(1 for m in _dump(store_a, "messages.jsonl.gz")
                 if m["topic"] == "TopicTest" and "a" in m["properties"] and _not_a_java_int(m["properties"]["a"]))
    assert stored["evaluation_errors"] == adhoc["evaluation_errors"] == throws
    assert not any(w.startswith("G_SQL_BETWEEN") for w in summary["warnings"])


# ---------------------------------------------------------------- 5: typos are usage errors
@pytest.mark.parametrize("options, word", [
    (dict(ad_hoc=(("GT", "TopicTset", "TAG", "TagA"),)), "TopicTset"),
    (dict(groups=("G_NOPE",)), "G_NOPE"),
    (dict(topics=("NoSuchTopic",)), "NoSuchTopic"),
    (dict(ad_hoc=(("GT", "TopicTest", "SQL", "a > 1"),)), "unknown expression type 'SQL'"),
])
def test_names_that_match_nothing_are_usage_errors(store_a, options, word):
    with pytest.raises(UsageError, match=re.escape(word)):
        build_plan(JobOptions(store=str(store_a / "store"),
                              subscription_files=(str(store_a / "registrations.json"),), **options))


@pytest.mark.parametrize("options, message", [
    (dict(groups=tuple(f"G_NOPE_{i}" for i in range(10))),
     "--groups G_NOPE_0, G_NOPE_1, G_NOPE_2, G_NOPE_3, G_NOPE_4 and 5 more: no subscription of these 10 groups "
     "(the subscriptions name 10 groups: G_SQL_BETWEEN, G_SQL_IN, G_SQL_LATE, G_SQL_MISSING, G_SQL_TAGS and 5 more) "
     "(--allow-missing runs anyway)"),
    (dict(topics=tuple(f"T_NOPE_{i}" for i in range(10))),
     "--topics T_NOPE_0, T_NOPE_1, T_NOPE_2, T_NOPE_3, T_NOPE_4 and 5 more: not in the store "
     "(--allow-missing runs anyway)"),
])
def test_ten_names_that_match_nothing_are_one_short_line(store_a, options, message):
    """One problem per kind, not per name: ten typos named one by one, each with the known groups, made a
    line of 1,858 characters. registrations.json names 10 groups, all with a subscription."""
    with pytest.raises(UsageError) as err:
        build_plan(JobOptions(store=str(store_a / "store"),
                              subscription_files=(str(store_a / "registrations.json"),), **options))
    assert str(err.value) == message


def test_allow_missing_turns_missing_names_into_warnings(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"), ad_hoc=(("GT", "TopicTset", "TAG", "TagA"),),
                                    allow_missing=True))
    assert any("TopicTset" in w for w in planned.warnings)


def test_group_without_a_retry_topic_is_not_a_typo(store_a):
    planned = build_plan(JobOptions(store=str(store_a / "store"), ad_hoc=(("G_FRESH", "TopicTest", "TAG", "*"),),
                                    groups=("G_FRESH",)))
    assert [c.key for c in planned.subscriptions] == [("G_FRESH", "TopicTest")] and not planned.warnings


# ---------------------------------------------------------------- 6: RocketMQ's ignored trailing text
def test_4x_selector_cut_short_is_a_warning_naming_the_ignored_text(store_a):
    _, _, summary = _run(store_a / "store", store_a, dialect="4", groups=("G_C",),
                         ad_hoc=(("G_C", "TopicTest", "SQL92", "TAGS CONTAINS 'Tag'"),))
    row = _rows(summary)[("G_C", "TopicTest")]
    assert row["status"] == "OK" and row["broker_delivered"] == 0  # `TAGS` alone: a String is never TRUE
    assert "CONTAINS 'Tag'" in row["warning"] and any("CONTAINS 'Tag'" in w for w in summary["warnings"])


# ---------------------------------------------------------------- 9: a store cannot make the job run code
def _store_names_python_filter(copy, module):
    path = copy / "config" / "consumerFilter.json"
    data = json.loads(re.sub(r"([{,]\s*)(\d+):", r'\1"\2":', path.read_text(encoding="utf-8")))
    data["filterDataByTopic"]["TopicTest"]["groupFilterData"]["G_EVIL"] = {
        "consumerGroup": "G_EVIL", "topic": "TopicTest", "expression": f"{module}:system",
        "expressionType": "PYTHON", "bornTime": 1, "deadTime": 0, "clientVersion": 1}
    path.write_text(json.dumps(data), encoding="utf-8")


def test_python_filter_named_by_a_store_is_refused(copy, store_a):
    _store_names_python_filter(copy, "tests.jobs.never_imported")
    with pytest.raises(CorruptStoreError, match="consumerFilter.json"):
        build_plan(JobOptions(store=str(copy)))
    assert "tests.jobs.never_imported" not in sys.modules


def test_python_filter_named_by_a_store_is_audited_and_ignored_when_skipping(copy, store_a):
    _store_names_python_filter(copy, "tests.jobs.never_imported")
    planned = build_plan(JobOptions(store=str(copy), on_corrupt=CorruptPolicy.SKIP))
    assert "G_EVIL" not in {c.sub.group for c in planned.subscriptions}
    assert any("G_EVIL" in p["reason"] and "PYTHON" in p["reason"] for p in planned.problems)
    assert "tests.jobs.never_imported" not in sys.modules


# ---------------------------------------------------------------- 10: smaller promises
def test_store_given_as_a_file_says_so(store_a):
    with pytest.raises(StoreNotFound, match="is a file"):
        build_plan(JobOptions(store=str(store_a / "registrations.json")))


def test_console_table_aligns_cjk_topics_by_display_width(store_a):
    _, _, summary = _run(store_a / "store", store_a, groups=("G_TAG_ORDER", "G_TAG_A"), retry=False)
    lines = summary_table(summary).splitlines()[:4]
    # the units column starts at the same terminal cell on both rows (a CJK character is 2 cells wide)
    width = lambda s: sum(2 if "\u4e00" <= ch <= "\u9fff" else 1 for ch in s)  # noqa: E731
    starts = [width(line[: line.index(str(TOPIC_UNITS[t]))]) for line, t in
              zip(lines[2:], ("TopicTest", "订单Topic"))]
    assert len(starts) == 2 and starts[0] == starts[1]


def test_stale_temporary_outputs_are_found_and_removed(tmp_path):
    from jobs.output.publish import remove_temporaries, stale_temporaries

    (tmp_path / "out.tmp-dead0001").mkdir()
    (tmp_path / "out.tmp-dead0001" / "_MQREPLAY_RUN").write_text('{"run": "dead0001"}')  # a run's own marker
    (tmp_path / "other.tmp-x").mkdir()
    found = stale_temporaries(str(tmp_path / "out"))
    assert found == [str(tmp_path / "out.tmp-dead0001")]
    remove_temporaries(str(tmp_path / "out"), found)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.tmp-x"]


def test_clean_stale_never_lists_what_no_run_of_the_job_left(tmp_path):
    from jobs.output.publish import stale_temporaries

    (tmp_path / "out.tmp-dead0002").mkdir()  # named alike, but no run's marker in it
    (tmp_path / "out.tmp-dead0002" / "data.csv").write_text("someone's")
    (tmp_path / "out.tmp-backup").mkdir()  # not a run id
    (tmp_path / "out.tmp-backup" / "_MQREPLAY_RUN").write_text("{}")
    (tmp_path / "out.tmp-dead0003").write_text("a file, not a run's directory")
    (tmp_path / "outer.tmp-dead0004").mkdir()  # another OUT's name
    (tmp_path / "outer.tmp-dead0004" / "_MQREPLAY_RUN").write_text("{}")
    assert stale_temporaries(str(tmp_path / "out")) == []


def test_damage_in_a_queue_the_run_does_not_read_does_not_stop_it(copy, store_a):
    with open(copy / "consumequeue" / "订单Topic" / "0" / "00000000000000000000", "r+b") as f:
        f.truncate(3001)
    with pytest.raises(CorruptStoreError):  # a run that reads 订单Topic stops
        build_plan(JobOptions(store=str(copy), subscription_files=(str(store_a / "registrations.json"),)))
    planned = build_plan(JobOptions(store=str(copy), subscription_files=(str(store_a / "registrations.json"),),
                                    groups=("G_TAG_A",)))
    assert not planned.problems and not planned.lost_units


def test_a_dead_runs_temporary_is_marked_and_clean_stale_removes_only_it(tmp_path):
    from jobs.output.publish import RUN_MARK, OutputRun

    dead = OutputRun(str(tmp_path / "out"))
    (tmp_path / f"out.tmp-{dead.claim.run}" / "matched").mkdir()  # parts it wrote before it died
    dead.claim.release()  # died: its claim gone with it (a flock), its temporary OUT left
    assert (tmp_path / f"out.tmp-{dead.claim.run}" / RUN_MARK).is_file()
    (tmp_path / "out.tmp-notes").mkdir()
    (tmp_path / "report.txt").write_text("the operator's")
    run = OutputRun(str(tmp_path / "out"), clean_stale=True)
    try:
        assert run.stale == [str(tmp_path / f"out.tmp-{dead.claim.run}")]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["out.claim", f"out.tmp-{run.claim.run}", "out.tmp-notes", "report.txt"])
    finally:
        run.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tmp-notes", "report.txt"]
