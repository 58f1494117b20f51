"""The progress line: what the tasks counted, against the totals the driver planned; the phase before the
stage; the --progress modes."""
import io

import pytest

from jobs.plan.units.choose import UnitsFrom
from jobs.runtime import progress as module
from jobs.runtime.progress import Progress, open_progress

pytestmark = pytest.mark.spark


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def test_progress_line_counts_splits_units_and_bytes(spark, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(module.time, "time", clock.time)
    p = Progress("off", io.StringIO())
    clock.now += 5  # planning and Spark's start
    with p.stage(spark, total_splits=4, total_bytes=400 << 20) as (units, nbytes, splits):
        units.add(1500)
        nbytes.add(100 << 20)
        splits.add(1)
        clock.now += 10
        line = p.line()
    assert line == ("mqreplay: 1/4 splits, 1,500 units, 100 of 400 MiB (10.0 MiB/s), elapsed 0:00:15, "
                    "remaining 0:00:30")


def test_progress_never_shows_more_than_planned(spark):
    p = Progress("off", io.StringIO())
    with p.stage(spark, total_splits=2, total_bytes=1 << 20) as (_, nbytes, splits):
        splits.add(3)  # a retried task adds again
        nbytes.add(2 << 20)
        assert p.line().startswith("mqreplay: 2/2 splits") and "1 of 1 MiB" in p.line()


def test_before_the_stage_the_line_names_the_phase(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(module.time, "time", clock.time)
    p = Progress("off", io.StringIO())
    p.set_phase("planning: listing the store")
    clock.now += 3
    assert p.line() == "mqreplay: planning: listing the store, elapsed 0:00:03"


def test_log_mode_writes_a_line_when_the_stage_starts_and_none_redrawn(spark):
    stream = io.StringIO()
    p = Progress("log", stream)
    with p.stage(spark, total_splits=1, total_bytes=1 << 20):
        pass
    assert stream.getvalue().startswith("mqreplay: 0/1 splits") and "\r" not in stream.getvalue()
    assert stream.getvalue().count("\n") == 1


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_auto_is_tty_on_a_terminal_or_when_the_wrapper_names_one_and_log_otherwise(tmp_path):
    assert open_progress("auto", stream=_Terminal(), env={}).mode == "tty"
    assert open_progress("auto", stream=io.StringIO(), env={}).mode == "log"
    # the wrapper's MQREPLAY_TTY must be a terminal: a plain file is not one
    (tmp_path / "not-a-tty").write_text("")
    assert open_progress("auto", stream=io.StringIO(), env={"MQREPLAY_TTY": str(tmp_path / "not-a-tty")}).mode == "log"
    assert open_progress("off", stream=_Terminal(), env={}).mode == "off"


@pytest.mark.parametrize("units_from", [UnitsFrom.CONSUME_QUEUE, UnitsFrom.COMMIT_LOG])
def test_the_planned_bytes_are_the_commit_logs_own_for_every_units_source(store_a, units_from):
    from jobs.plan.build import build_plan
    from jobs.settings import JobOptions
    from jobs.task.split_units import commitlog_splits
    from jobs.task.stage import split_bytes

    planned = build_plan(JobOptions(store=str(store_a / "store"), units_from=units_from,
                                    subscription_files=(str(store_a / "registrations.json"),)))
    total = sum(split_bytes(planned.plan, a, b) for a, b in commitlog_splits(planned.plan))
    on_disk = sum(f.stat().st_size for f in (store_a / "store" / "commitlog").iterdir())
    # rebuilt units walk every byte of the log's files (no "0 of 4,398,046,511,104 MiB"); consume-queue units
    # end at the last record a unit points at, within the files
    assert total == on_disk if units_from is UnitsFrom.COMMIT_LOG else 0 < total <= on_disk
