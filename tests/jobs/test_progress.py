"""The progress line: what the tasks counted, against the totals the driver planned."""
import pytest

from jobs.progress import Progress

pytestmark = pytest.mark.spark


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def test_progress_line_counts_splits_units_and_bytes(spark, monkeypatch):
    import io

    from jobs import progress as module

    clock = _Clock()
    monkeypatch.setattr(module.time, "time", clock.time)
    p = Progress(spark, total_splits=4, total_bytes=400 << 20, stream=io.StringIO(), every=3600)
    with p:
        units, nbytes, splits = p.task_counters()
        units.add(1500)
        nbytes.add(100 << 20)
        splits.add(1)
        clock.now += 10
        line = p.line()
    assert line == ("mqreplay: 1/4 splits, 1,500 units, 100 of 400 MiB (10.0 MiB/s), elapsed 0:00:10, "
                    "remaining 0:00:30")


def test_progress_never_shows_more_than_planned(spark):
    import io

    p = Progress(spark, total_splits=2, total_bytes=1 << 20, stream=io.StringIO(), every=3600)
    with p:
        _, nbytes, splits = p.task_counters()
        splits.add(3)  # a retried task adds again
        nbytes.add(2 << 20)
        assert p.line().startswith("mqreplay: 2/2 splits") and "1 of 1 MiB" in p.line()
