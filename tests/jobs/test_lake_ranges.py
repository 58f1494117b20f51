"""Per group, per queue ranges in NS._mqreplay_ranges (issue 38), on a real SQLite catalog without Spark: nights
that continue every group from its own ranges, a group added later backfilled into the same tables once (its
repeat refused, exit 2), a night killed between two tables' commits repaired by the next, ranges committed last.
Expectations are the rows written by hand in each test."""
from types import SimpleNamespace

import pytest

from jobs.errors import UsageError
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg import tables as iceberg_sink
from tests.jobs.lake_parts import BROKER, REF, keys, night, offset, parts, target

T = "TopicTest"


def test_two_nights_record_each_groups_ranges_and_continue_from_them(tmp_path):
    tgt = target(tmp_path)
    subs = [("G1", T), ("G2", T)]
    night(tgt, tmp_path / "n1", "n1", subs, [(T, 0, 0, 3)], [("G1", T, 0, 0), ("G2", T, 0, 1), ("G1", T, 0, 2)])
    night(tgt, tmp_path / "n2", "n2", subs, [(T, 0, 3, 5)], [("G1", T, 0, 4)])
    held = lake.Held.of(tgt.catalog(), "lake")
    assert sorted((r["group"], r["first"], r["end"], r["run"]) for r in held.table.to_pylist()) == [
        ("G1", 0, 3, "n1"), ("G1", 3, 5, "n2"), ("G2", 0, 3, "n1"), ("G2", 3, 5, "n2")]
    assert lake.starts(held, (REF,)) == {BROKER: {T: {0: 5}}}
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 2), ("G1", T, 0, 4), ("G2", T, 0, 1)]


def test_a_run_over_offsets_a_group_holds_is_refused_naming_the_overlap(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 3)], [("G1", T, 0, 0)])
    held = lake.Held.of(tgt.catalog(), "lake")
    with pytest.raises(UsageError, match=r"G1 TopicTest/0 \[2, 4\) held \[0, 3\) by run n1"):
        lake.refuse_overlaps("lake", held, (REF,), [(BROKER, "G1", T, 0, 2, 4)])
    lake.refuse_overlaps("lake", held, (REF,), [(BROKER, "G1", T, 0, 3, 4), (BROKER, "G9", T, 0, 0, 4)])


def test_a_group_added_later_is_backfilled_once_and_its_messages_are_not_stored_twice(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 4)], [("G1", T, 0, 0), ("G1", T, 0, 1)])
    # the backfill of G2 covers the same offsets: its rows are new, the message at offset 1 is held already
    night(tgt, tmp_path / "b1", "b1", [("G2", T)], [(T, 0, 0, 4)], [("G2", T, 0, 1), ("G2", T, 0, 3)])
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 1), ("G2", T, 0, 1), ("G2", T, 0, 3)]
    assert keys(tgt, "messages") == [(T, offset(0, 0)), (T, offset(0, 1)), (T, offset(0, 3))]
    with pytest.raises(UsageError, match="G2 TopicTest/0"):  # the same backfill again
        night(tgt, tmp_path / "b2", "b2", [("G2", T)], [(T, 0, 0, 4)], [("G2", T, 0, 1), ("G2", T, 0, 3)])
    assert len(keys(tgt)) == 4


def _subscriptions(*pairs):
    """CompiledSubscription stand-ins of (group, topic) pairs: what LakeScope.held reads of them."""
    return tuple(SimpleNamespace(sub=SimpleNamespace(group=g, topic=t)) for g, t in pairs)


def test_continuing_groups_start_at_the_earliest_end_and_the_offsets_a_group_holds_leave_its_scope(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 4)], [("G1", T, 0, 0), ("G1", T, 0, 2)])
    night(tgt, tmp_path / "b1", "b1", [("G2", T)], [(T, 0, 0, 2)], [("G2", T, 0, 1)])
    held = lake.Held.of(tgt.catalog(), "lake", (REF,))
    pairs = {BROKER: {("G1", T), ("G2", T)}}
    assert lake.starts(held, (REF,), pairs) == {BROKER: {T: {0: 2}}}  # G2 ends first
    assert lake.starts(held, (REF,), {BROKER: {("G1", T), ("G3", T)}}) == {}  # G3 holds nothing: the earliest
    going = target(tmp_path, continuing=True)  # a night from offset 2: G1 holds 2 and 3 already
    lake_scope = iceberg_sink.LakeScope(going)  # what the plan asks, read once
    assert lake_scope.starts(BROKER, {("G1", T), ("G2", T)}) == {T: {0: 2}}
    scope = lake_scope.held(BROKER, _subscriptions(("G1", T), ("G2", T)), [(T, 0, 2, 6)])
    assert scope == (("G1", T, 0, 2, 4),)
    # the tasks write no row of G1 at 2 or 3 (its scope); G2's message at 2 is the table's already (G1's in n1)
    night(going, tmp_path / "n2", "n2", [("G1", T), ("G2", T)], [(T, 0, 2, 6)],
          [("G1", T, 0, 5), ("G2", T, 0, 2), ("G2", T, 0, 3)], held=scope)
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 2), ("G1", T, 0, 5), ("G2", T, 0, 1), ("G2", T, 0, 2),
                         ("G2", T, 0, 3)]
    assert keys(tgt, "messages") == [(T, offset(0, o)) for o in (0, 1, 2, 3, 5)]


def test_a_continuing_night_refuses_offsets_committed_after_it_was_planned(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    going = target(tmp_path, continuing=True)
    scope = iceberg_sink.LakeScope(going).held(BROKER, _subscriptions(("G1", T)), [(T, 0, 0, 4)])
    assert scope == (("G1", T, 0, 0, 2),)
    night(tgt, tmp_path / "n2", "n2", [("G1", T)], [(T, 0, 2, 3)], [("G1", T, 0, 2)])  # meanwhile
    with pytest.raises(UsageError, match=r"G1 TopicTest/0 \[2, 4\) held \[2, 3\) by run n2"):
        night(going, tmp_path / "n3", "n3", [("G1", T)], [(T, 0, 0, 4)], [("G1", T, 0, 2)], held=scope)
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 2)]


def test_held_ranges_are_read_for_the_runs_store_only_and_runs_of_every_store(tmp_path):
    tgt = target(tmp_path)
    other = lake.StoreRef(BROKER, "broker@127.0.0.2:10911", "0:1795237034764")
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    night(target(tmp_path, refs=(other,)), tmp_path / "o1", "o1", [("G1", T)], [(T, 0, 0, 5)], [])
    held = lake.Held.of(tgt.catalog(), "lake", (REF,))
    assert [(r["store"], r["first"], r["end"]) for r in held.table.to_pylist()] == [(REF.key, 0, 2)]
    assert held.runs == {"n1", "o1"}


def test_a_night_killed_between_two_commits_is_removed_by_the_next(tmp_path, monkeypatch):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])

    def killed(*args):
        raise KeyboardInterrupt("killed after matched, before the ranges")
    with monkeypatch.context() as m:
        m.setattr(iceberg_sink, "_append_ranges", killed)
        with pytest.raises(KeyboardInterrupt):
            night(tgt, tmp_path / "n2", "n2", [("G1", T)], [(T, 0, 2, 4)], [("G1", T, 0, 3)])
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 3)]  # counted, though its ranges are not
    warned = iceberg_sink.check_lake(target(tmp_path, continuing=True), ())
    assert warned and "run n2" in warned[0]
    night(tgt, tmp_path / "n3", "n3", [("G1", T)], [(T, 0, 2, 4)], [("G1", T, 0, 3)])  # the night run again
    assert keys(tgt) == [("G1", T, 0, 0), ("G1", T, 0, 3)]
    assert keys(tgt, "messages") == [(T, offset(0, 0)), (T, offset(0, 3))]
    assert lake.Held.of(tgt.catalog(), "lake").runs == {"n1", "n3"}


def test_a_night_reads_only_the_manifests_added_by_runs_the_lake_does_not_know(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    night(tgt, tmp_path / "n2", "n2", [("G1", T)], [(T, 0, 2, 4)], [("G1", T, 0, 3)])
    matched = tgt.catalog().load_table("lake.matched")
    assert lake.runs_of_files(matched) == {"n1", "n2"}
    assert lake.runs_of_files(matched, {"n1"}) == {"n2"}  # n1's manifest not opened
    assert lake.runs_of_files(matched, {"n1", "n2"}) == set()


def test_a_quiet_night_commits_its_marker_and_empty_snapshots(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "q1", "q1", [("G1", T)], [(T, 0, 5, 5)], [])
    held = lake.Held.of(tgt.catalog(), "lake")
    assert held.runs == {"q1"} and held.table.num_rows == 0
    for name in ("matched", "collisions", "messages"):
        table = tgt.catalog().load_table(f"lake.{name}")
        assert [s.summary.additional_properties["mqreplay.run"] for s in table.snapshots()] == ["q1"]


def test_a_lake_of_an_earlier_mqreplay_is_refused_with_a_clear_message(tmp_path):
    tgt = target(tmp_path)
    night(tgt, tmp_path / "n1", "n1", [("G1", T)], [(T, 0, 0, 2)], [("G1", T, 0, 0)])
    tgt.catalog().drop_table(f"lake.{lake.RANGES}")  # what a lake of the summaries looked like
    with pytest.raises(UsageError, match="earlier mqreplay.*mqreplay.offsets"):
        iceberg_sink.check_lake(tgt, ())


def row(group, queue, first, end, run):
    return {"store": REF.key, "head": REF.head, "broker": BROKER, "group": group, "topic": T, "queue_id": queue,
            "first": first, "end": end, "run": run}


def test_a_year_of_nights_of_a_group_is_one_held_span_and_an_overlap_names_the_run_holding_it():
    held = lake.Held([row("G1", 0, 10 * n, 10 * n + 10, f"n{n}") for n in range(365)] + [row("G1", 1, 0, 4, "n0")])
    assert held.intervals((REF,)) == {(BROKER, "G1", T, 0): [(0, 3650)], (BROKER, "G1", T, 1): [(0, 4)]}
    assert lake.overlapping(held, (REF,), [(BROKER, "G1", T, 0, 3645, 3700), (BROKER, "G1", T, 1, 4, 9)]) == [
        (BROKER, "G1", T, 0, 3645, 3700, 3640, 3650, "n364")]
    assert lake.starts(held, (REF,)) == {BROKER: {T: {0: 3650, 1: 4}}}


def test_a_queue_the_plan_has_no_range_of_gets_the_groups_held_offsets_whole():
    held = lake.Held([row("G1", 0, 0, 3, "n1"), row("G1", 0, 3, 6, "n2"), row("G1", 1, 0, 4, "n1"),
                      row("G1", 1, 4, 7, "n2"), row("G2", 1, 0, 9, "n1")])
    # queue 0 planned from offset 5; queue 1 rebuilt from the commit log (its range known once walked); G2 not run
    scope = lake.held_scope(held, (REF,), [(BROKER, "G1", T, 0, 5, 9)], {BROKER: {("G1", T)}})
    assert scope == {BROKER: (("G1", T, 0, 5, 6), ("G1", T, 1, 0, 7))}


REVIVE = "rmq_sys_REVIVE_LOG_C"


def test_the_pop_ledgers_topics_are_continued_by_their_own_ranges_and_never_refused():
    """The revive log and the wheel, which no group subscribes, get ranges of LEDGER_READS: a continuing night
    starts them where the last ended (as offsets.json does); a run reading them again (a backfill) is not refused
    for it."""
    planned = parts([("G1", T)], [(T, 0, 0, 4), (REVIVE, 0, 0, 6), ("rmq_sys_wheel_timer", 0, 0, 9)])
    ranges = lake.run_ranges([(BROKER, planned[0][1])])
    assert sorted(ranges) == sorted([(BROKER, "G1", T, 0, 0, 4), (BROKER, lake.LEDGER_READS, REVIVE, 0, 0, 6),
                                     (BROKER, lake.LEDGER_READS, "rmq_sys_wheel_timer", 0, 0, 9)])
    held = lake.Held([row("G1", 0, 0, 4, "n1"), dict(row(lake.LEDGER_READS, 0, 0, 6, "n1"), topic=REVIVE)])
    assert lake.starts(held, (REF,), {BROKER: {("G1", T)}}) == {BROKER: {T: {0: 4}, REVIVE: {0: 6}}}
    assert lake.overlapping(held, (REF,), [(BROKER, lake.LEDGER_READS, REVIVE, 0, 0, 6)]) == []
    assert lake.held_scope(held, (REF,), [(BROKER, lake.LEDGER_READS, REVIVE, 0, 0, 6)]) == {}
