"""The replay as one Spark stage: a task per commit-log split, each writing its own Parquet parts.

Data flow: the driver lists files, probes the needed consume-queue segments and cuts the commit log into
splits; `replay` runs one task per split, which finds its units in the segments that point into it,
reads its byte range of the commit log, decodes each message once, applies every group's subscription
and writes the answer with pyarrow (jobs/output/writers.py). Spark carries back only the small reports (a row per
file, the counters): no result row goes through the JVM.

The stage is an RDD of the split numbers, one per partition, mapped by the task and collected: no SQL query to
plan, which on a cold JVM cost every run about a second. Spark Connect offers no RDD and no SparkContext: there
the same tasks run as DataFrame operations (`spark.range`, `mapInArrow`, `collect`, the report rows in a binary
column). Either way a task's report rows travel pickled.

Who runs the tasks is a mapper, `tasks(items, fn)` -> [fn(item) as a list, ...] in item order: `SparkTasks`
(a Spark task per item) for a run, `in_process` (one after another, the rows pickled as Spark's are) for the tests
and tools that drive the same stage code without Spark."""
from __future__ import annotations

import gc
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.errors import TaskFailed
from jobs.runtime.session import is_connect
from jobs.runtime.worker_daemon import JOB_DAEMON
from jobs.task.split_task import iter_split
from jobs.task.split_units import commitlog_splits, snap_to_records, split_units
from schemas import no_pandas
from schemas.arrow_schemas import CORRUPT_SCHEMA
from schemas.errors import ReplayError
from schemas.queues import rocksdb_store

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

    from jobs.plan.replay_plan import ReplayPlan

    # who runs the tasks: tasks(items, fn) -> [fn(item) as a list, ...] in item order (SparkTasks, in_process)
    Mapper = Callable[[Iterable[Any], Callable[[Any], Iterable[Any]]], list[list[Any]]]


def split_bytes(plan: ReplayPlan, start: int, end: int) -> int:
    """Bytes of the commit log's files a split covers, up to the end of the data: what its task reads. The
    ranges no file holds (below the first file, holes, the catch-all split past the last: 2**62 bytes wide
    when units are rebuilt and no data end is known) count none, so the progress line's sizes are true."""
    end = min(end, plan.data_end) if plan.data_end is not None else end
    return sum(max(0, min(end, f.start + f.length) - max(start, f.start)) for f in plan.log.files)


def attempt_name() -> str:
    """Unique per task attempt (retries and speculative copies included): stage, partition, attempt id."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # outside Spark (tests): one attempt
        return "local"
    return f"{tc.stageId()}-{tc.partitionId()}-{tc.taskAttemptId()}"


class SparkTasks:
    """The mapper of a run: one Spark task per item (map_tasks)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def __call__(self, items: Iterable[Any], fn: Callable[[Any], Iterable[Any]]) -> list[list[Any]]:
        return map_tasks(self.spark, items, fn)


def in_process(items: Iterable[Any], fn: Callable[[Any], Iterable[Any]]) -> list[list[Any]]:
    """The mapper without Spark: each item's rows in this process, one item after another, pickled and read back
    as a Spark task's are (a row Spark could not carry fails here too). A task's error is raised as the task
    raised it (no process boundary to carry it across: the TaskFailed record's own error)."""
    out = []
    for item in items:
        try:
            out.append(pickle.loads(pickle.dumps(list(fn(item)))))
        except TaskFailed as exc:
            raise exc.__context__ if isinstance(exc.__context__, ReplayError) else exc
    return out


def broker_splits(tasks: Mapper, plans: Sequence[ReplayPlan]) -> list[tuple[int, int, int]]:
    """The splits of every broker of a run pooled, one task each: (part, start, end), `part` the index of the
    broker's plan in `plans`: a task knows its broker's plan."""
    return [(k, start, end) for k, plan in enumerate(plans) for start, end in splits(tasks, plan)]


def splits(tasks: Mapper, plan: ReplayPlan) -> list[tuple[int, int]]:
    """The commit-log splits of a run, one task each (split_units.commitlog_splits); their bounds moved to
    record starts when units are rebuilt from the commit log, by one task per file (`tasks`: the mapper)."""
    ranges = commitlog_splits(plan)
    if not plan.walks_records:
        return ranges
    return snap_to_records(plan, ranges, lambda fn, items: [row for rows in tasks(
        items, lambda item: [fn(item)]) for row in rows])


def replay(tasks: Mapper, plans: Sequence[ReplayPlan], spec: Any, ranges: Sequence[tuple[int, int, int]],
           progress: Sequence[Accumulator[int]] | None = None) -> list[Any]:
    """All groups in one pass, one task per commit-log split: the report rows (jobs/output/writers.py) of every split.
    `plans`: each broker's ReplayPlan; `ranges`: broker_splits' (part, start, end) of every broker.

    A task finds the units pointing into its split in the consume-queue segments that can hold them (the
    plan's SegmentIndex: units are in commit-log order), reads that byte range of the commit log, decodes
    each message once, applies every subscription of its topic and writes its parts
    (the sink's writer, jobs/output/writers.py): no shuffle, and memory bounded by the split. `progress`: the
    accumulators (units, bytes, splits) of jobs.runtime.progress.Progress, added to as each split is done (None
    over Spark Connect, which has no accumulators). Each broker's plan ships pickled on its own, and a task
    unpickles only its broker's. `tasks`: the mapper that runs them (SparkTasks, in_process)."""
    from pyspark import cloudpickle  # as Spark pickles a closure (a custom filter's code); loaded by Spark runs only

    shipped = [cloudpickle.dumps(plan) for plan in plans]

    def task(index: int) -> Any:
        part, start, end = ranges[index]
        plan = pickle.loads(shipped[part])
        try:
            report, n_units = run_split(plan, spec, index, (start, end), attempt_name())
        except TaskFailed:
            raise
        except ReplayError as exc:  # to the driver as a record it reads (jobs/errors.py), not as text
            raise TaskFailed.of(exc) from None
        if progress is not None:
            for counter, value in zip(progress, (n_units, split_bytes(plan, start, end), 1)):
                counter.add(value)
        return report

    return [row for rows in tasks(range(len(ranges)), task) for row in rows]


def map_tasks(spark: SparkSession, items: Iterable[Any], fn: Callable[[Any], Iterable[Any]]) -> list[list[Any]]:
    """[fn(item) for item in items], one Spark task per item, the results (lists of picklable rows, small:
    reports, not data) pickled in the task and collected in item order. A classic session runs them as an RDD
    of the items' numbers, a partition each: no query to plan, where a DataFrame's first plan on a cold JVM
    (Catalyst, whole-stage code generation) cost every run about a second (docs/performance.md). Over Spark
    Connect, which has no RDDs, as DataFrame operations: `spark.range` of the numbers, a partition each,
    `mapInArrow` calling `fn`, the rows in a binary column."""
    items = list(items)
    if not items:
        return []

    def rows_of(i: int) -> bytes:
        with no_pandas.left_out():  # the task's work only: PySpark's own code runs as it would
            return pickle.dumps(list(fn(items[i])))

    def partition(numbers: Iterable[int]) -> Iterator[bytes]:
        yield from map(rows_of, numbers)
        settle_garbage()

    def batches(numbered: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in numbered:
            for rows in map(rows_of, batch.column(0).to_pylist()):
                yield pa.RecordBatch.from_arrays([pa.array([rows], pa.binary())], names=["rows"])
        settle_garbage()

    n = len(items)
    if is_connect(spark):
        pickled = [row.rows for row in spark.range(0, n, 1, n).mapInArrow(batches, "rows binary").collect()]
    else:
        pickled = spark.sparkContext.parallelize(range(n), n).mapPartitions(partition).collect()
    return [pickle.loads(rows) for rows in pickled]


def settle_garbage(env: Mapping[str, str] | None = None) -> None:
    """In the job's own worker daemon (jobs/runtime/worker_daemon.py), after a task: PySpark's daemon runs a full
    garbage collection after every task, which walks every object of the worker (numba's typing tables, PyArrow,
    PySpark: some 140,000); this task's garbage collected now, what is left is frozen, long-lived all of it, so
    that no later collection walks it again. In any other worker (PySpark's daemon: the data source's, a user's
    session) nothing: the objects of the other code it runs are not the job's to freeze."""
    if (os.environ if env is None else env).get(JOB_DAEMON):
        gc.collect()
        gc.freeze()


def unseen_paths(spark: SparkSession, paths: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (argument, path) pairs of `paths` whose local directory Spark's executors cannot see, found by one
    task: over Spark Connect the client plans from its own filesystem and the server's tasks read and write
    theirs. URIs (s3://, hdfs://...) are each side's to reach, and not checked here."""
    local = [(name, path) for name, path in paths if "://" not in path or path.startswith("file://")]
    if not local:
        return []
    seen = map_tasks(spark, [local], lambda pairs: [os.path.isdir(p.removeprefix("file://")) for _, p in pairs])
    return [pair for pair, ok in zip(local, seen[0]) if not ok]


def run_split(plan: ReplayPlan, spec: Any, index: int, split_range: tuple[int, int],
              attempt: str) -> tuple[Any, int]:
    """One split, decided and written: (its report rows, the units it read)."""
    start, end = split_range
    writer = spec.open(index, attempt, plan.broker)
    try:
        with rocksdb_store.held():  # a RocksDB consume queue read by the task: closed when it ends
            return _write_split(plan, writer, start, end)
    except BaseException:
        writer.abort()
        raise


def _write_split(plan, writer, start, end):
    found = split_units(plan, start, end)
    if found.damaged:
        writer.write("corrupt", pa.Table.from_pylist(found.damaged, schema=CORRUPT_SCHEMA))
    if found.marks is not None:
        writer.write("queue_marks", found.marks)
    if found.audit is not None and found.audit.num_rows:
        writer.write("cq_audit", found.audit)
    for kind, piece in iter_split(plan, found.units, found.left_out):
        writer.write(kind, piece)
    return writer.close(), found.units.num_rows
