"""The replay as one Spark stage: a task per commit-log split, each writing its own Parquet parts.

Data flow: the driver lists files, probes the needed consume-queue segments and cuts the commit log into
splits; `replay` runs one task per split, which finds its units in the segments that point into it,
reads its byte range of the commit log, decodes each message once, applies every group's subscription
and writes the answer with pyarrow (jobs/run/sink.py). Spark carries back only the small reports (a row per
file, the counters): no result row goes through the JVM.

The stage is a plain RDD of split numbers, not a DataFrame: the tasks return some tens of report rows,
and a SQL query (spark.range, mapInArrow, toArrow) cost the driver 1.1-1.4 s of planning before its
first task started, which the RDD job does not (measured on the bench store)."""
import gc

import pyarrow as pa

from jobs.errors import TaskFailed
from jobs.pipeline.split_task import iter_split
from jobs.pipeline.split_units import commitlog_splits, snap_to_records, split_units
from jobs.run.sink import SplitWriter
from schemas.arrow_schemas import CORRUPT_SCHEMA
from schemas.errors import ReplayError


def split_bytes(plan, start, end):
    """Bytes of the commit log's files a split covers, up to the end of the data: what its task reads. The
    ranges no file holds (below the first file, holes, the catch-all split past the last: 2**62 bytes wide
    when units are rebuilt and no data end is known) count none, so the progress line's sizes are true."""
    end = min(end, plan.data_end) if plan.data_end is not None else end
    return sum(max(0, min(end, f.start + f.length) - max(start, f.start)) for f in plan.log.files)


def attempt_name():
    """Unique per task attempt (retries and speculative copies included): stage, partition, attempt id."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # outside Spark (tests): one attempt
        return "local"
    return f"{tc.stageId()}-{tc.partitionId()}-{tc.taskAttemptId()}"


def splits(sc, plan):
    """The commit-log splits of a run, one task each (split_units.commitlog_splits); their bounds moved to
    record starts when units are rebuilt from the commit log, by one Spark task per file."""
    ranges = commitlog_splits(plan)
    if not plan.walks_records:
        return ranges
    return snap_to_records(plan, ranges, lambda fn, items: sc.parallelize(items, max(len(items), 1)).map(fn).collect()
                           if items else [])


def replay(sc, planned, spec, ranges, progress=None):
    """All groups in one pass, one task per commit-log split: the report rows (jobs/run/sink.py) of every split.

    A task finds the units pointing into its split in the consume-queue segments that can hold them (the
    plan's SegmentIndex: units are in commit-log order), reads that byte range of the commit log, decodes
    each message once, applies every subscription of its topic and writes its parts
    (jobs.run.sink.SplitWriter): no shuffle, and memory bounded by the split. `progress`: the
    accumulators (units, bytes, splits) of jobs.run.progress.Progress, added to as each split is done."""
    plan, segments = planned.plan, planned.segments

    def task(indices):
        for index in indices:
            try:
                report, n_units = run_split(plan, segments, spec, index, ranges[index], attempt_name())
            except TaskFailed:
                raise
            except ReplayError as exc:  # to the driver as a record it reads (jobs/errors.py), not as text
                raise TaskFailed.of(exc) from None
            yield from report
            if progress is not None:
                start, end = ranges[index]
                for counter, value in zip(progress, (n_units, split_bytes(plan, start, end), 1)):
                    counter.add(value)
        # PySpark's daemon runs a full garbage collection after every task, which walks every object of the
        # worker (numba's typing tables, PyArrow, PySpark: some 140,000). Collect this task's garbage now,
        # then freeze what is left, long-lived all of it, so that no later collection walks it again.
        gc.collect()
        gc.freeze()

    n = len(ranges)
    return sc.parallelize(range(n), n).mapPartitions(task).collect() if n else []


def run_split(plan, segments, spec, index, split_range, attempt):
    """One split, decided and written: (its report rows, the units it read)."""
    start, end = split_range
    writer = SplitWriter(spec, index, attempt)
    try:
        found = split_units(plan, segments, start, end)
        if found.damaged:
            writer.write("corrupt", pa.Table.from_pylist(found.damaged, schema=CORRUPT_SCHEMA))
        if found.marks is not None:
            writer.write("queue_marks", found.marks)
        if found.audit is not None and found.audit.num_rows:
            writer.write("cq_audit", found.audit)
        for kind, piece in iter_split(plan, found.units, found.left_out):
            writer.write(kind, piece)
        return writer.close(), found.units.num_rows
    except BaseException:
        writer.abort()
        raise
