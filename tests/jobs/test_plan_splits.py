"""Commit-log splits: they tile the offset space, stay within split_size and their file, come out even,
and a replay cut into many splits gives what one split gives."""
import dataclasses

import pytest

from jobs.plan.build import build_plan
from jobs.plan.replay_plan import replay_plan
from jobs.settings import JobOptions
from jobs.task.split_units import commitlog_splits
from schemas.log.files import CommitLog, LogFile
from tests.jobs.conftest import assert_rows_equal
from tests.local_replay import kind, replay_local

GIB = 1 << 30


def _plan(files, split_size, data_end):
    log = CommitLog(tuple(LogFile(s, f"commitlog/{s:020d}", GIB, size=GIB) for s in files))
    return replay_plan(JobOptions(store="mem://", split_size=split_size), log, fs=None, subscriptions=(),
                       data_end=data_end)


@pytest.mark.parametrize("files,data_end", [
    ((0, GIB), GIB + 557 * 1000 * 1000 + 13),  # the data ends inside the second file
    ((0,), GIB),  # exactly at a file's end
    ((2 * GIB, 3 * GIB), 2 * GIB + 5),  # older files deleted; a few bytes of data
    ((0, 2 * GIB), GIB // 3),  # a hole after the data
    ((0, GIB), None),  # data end unknown: whole files
])
@pytest.mark.parametrize("split_size", [128 << 20, 100 << 20, 1 << 30])
def test_splits_tile_the_log_evenly_within_files_and_split_size(files, data_end, split_size):
    splits = commitlog_splits(_plan(files, split_size, data_end))
    assert splits[0][0] == 0 and splits[-1][1] == 1 << 62
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:]))  # no gap, no overlap
    data = splits[:-1]
    assert all(0 < e - s for s, e in data)
    in_files = [(s, e) for s, e in data if any(f <= s < f + GIB for f in files)]
    assert all(e - s <= split_size and e <= (s // GIB + 1) * GIB for s, e in in_files)
    for f in files:  # within a file, the pieces holding data differ by a byte at most
        sizes = [e - s for s, e in in_files if f <= s < f + GIB and (data_end is None or s < data_end)]
        assert not sizes or max(sizes) - min(sizes) <= 1
    if data_end is not None:
        assert all(s < data_end for s, _ in data) and splits[-1][0] <= max(data_end, 0) + GIB


def test_replay_cut_into_many_splits_equals_one_split(store_a, store_a_expected):
    options = JobOptions(store=str(store_a / "store"), subscription_files=(str(store_a / "registrations.json"),))
    planned = build_plan(options)
    small = dataclasses.replace(planned, plan=dataclasses.replace(planned.plan, split_size=64 << 10))
    assert len(commitlog_splits(small.plan)) > 4
    result = replay_local(small)
    assert_rows_equal(kind(result, "matched").to_pylist(), store_a_expected[0])
    assert_rows_equal(kind(result, "collision").to_pylist(), store_a_expected[1])
    assert _counters(result) == _counters(replay_local(planned))


def _counters(result):
    """Every counter summed per (group, topic) over the tasks' stats rows."""
    totals = {}
    for r in kind(result, "stats").to_pylist():
        key = (r.pop("group"), r.pop("topic"))
        totals[key] = {k: totals.get(key, {}).get(k, 0) + v for k, v in r.items() if isinstance(v, int)}
    return totals


def test_a_window_is_cut_evenly_over_the_bytes_its_units_point_into():
    """A window whose units point into [720 MB, 880 MB) of a file: two even splits over that range, not
    the file's 128 MiB grid, and none in the file it misses."""
    plan = dataclasses.replace(_plan((0, GIB), 128 << 20, 2 * GIB),
                               spans=((720_000_000, 800_000_000), (750_000_000, 880_000_000)))
    assert commitlog_splits(plan) == [(720_000_000, 800_000_000), (800_000_000, 880_000_000)]


def test_a_window_spanning_two_files_is_cut_within_each():
    plan = dataclasses.replace(_plan((0, GIB), 128 << 20, 2 * GIB), spans=((GIB - 1000, GIB + 3000),))
    assert commitlog_splits(plan) == [(GIB - 1000, GIB), (GIB, GIB + 3000)]
