"""The replay as Spark DataFrame transforms: units in, result rows out, outputs split by kind.

Data flow: the driver lists files, probes the needed consume-queue segments and cuts the commit log into
splits; `replay` runs one mapInArrow task per split, which finds its units in the segments that point
into it, reads its byte range of the commit log, decodes each message once and applies every group's
subscription; the outputs are selections of the one result DataFrame, fanned out per group by Spark when
written."""
import gc
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.plan import commitlog_splits, split_units
from jobs.split_task import iter_split
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, RESULT_SCHEMA, STAT_FIELDS, spark_schema

# rows per Arrow batch a task hands to the JVM (measured: 2,048 and 64 k rows were no faster)
RESULT_BATCH_ROWS = 20000


def splits(spark, plan) -> DataFrame:
    """One row per commit-log split, its index, in a partition of its own: `spark.range` makes them in the
    JVM (no Python source, no shuffle); a task looks its byte range up in `commitlog_splits(plan)`."""
    n = len(commitlog_splits(plan))
    return spark.range(0, n, 1, numPartitions=n)


def replay(split_rows: DataFrame, planned) -> DataFrame:
    """All groups in one pass, one task per commit-log split, returning RESULT_SCHEMA rows.

    A task finds the units pointing into its split in the consume-queue segments that can hold them (the
    plan's SegmentIndex: units are in commit-log order), reads that byte range of the commit log, decodes
    each message once and applies every subscription of its topic: no shuffle, and memory bounded by the
    split."""
    plan, segments = planned.plan, planned.segments

    ranges = commitlog_splits(plan)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                start, end = ranges[index]
                units = split_units(plan, segments, start, end)
                for table in iter_split(plan, units):
                    yield from table.to_batches(max_chunksize=RESULT_BATCH_ROWS)
        # PySpark's daemon runs a full garbage collection after every task, which walks every object of the
        # worker (numba's typing tables, PyArrow, PySpark: some 140,000). Collect this task's garbage now,
        # then freeze what is left, long-lived all of it, so that no later collection walks it again.
        gc.collect()
        gc.freeze()

    return split_rows.mapInArrow(task, spark_schema(RESULT_SCHEMA))


def message_rows(result: DataFrame, kind: str, with_body=True) -> DataFrame:
    """matched / collision rows: one per (group, message), the message columns fanned out per group."""
    lists = "delivered" if kind == "matched" else "collided"
    cols = [name for name, _ in OUTPUT_MESSAGE_FIELDS if with_body or name != "body"]
    return (result.filter((F.col("kind") == "message") & (F.size(lists) > 0))
            .select(F.explode(lists).alias("group"), "topic", *cols))


def bitmap_rows(result: DataFrame) -> DataFrame:
    return result.filter(F.col("kind") == "bitmap").select(
        "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_timestamp",
        F.hex("stored_bitmap").alias("stored_bitmap"), F.hex("recomputed_bitmap").alias("recomputed_bitmap"),
        "reason", F.col("detail").alias("groups_missing"))


def corrupt_rows(result: DataFrame) -> DataFrame:
    return result.filter(F.col("kind") == "corrupt").select(
        "file", "offset", "topic", "queue_id", "queue_offset", "reason")


def problem_rows(spark, problems):
    """Listing and config problems found by the driver, in the shape of corrupt_rows."""
    schema = "file string, offset long, topic string, queue_id int, queue_offset long, reason string"
    return spark.createDataFrame([(p["file"], p["offset"], p["topic"], p["queue_id"], None, p["reason"])
                                  for p in problems], schema)


def stats(result: DataFrame) -> DataFrame:
    """Counters per (group, topic), summed over tasks (a small aggregate, not a collect of rows)."""
    return result.filter(F.col("kind") == "stats").groupBy("group", "topic").agg(
        *[F.sum(F.col("stats")[i]).alias(name) for i, name in enumerate(STAT_FIELDS)])


def write_partitioned(df: DataFrame, path: str, partitions=("group", "topic")):
    """Parquet, Hive-style partitions; each task writes its own files (no shuffle of message rows).

    Row order within a file follows the commit log of the task's split, so a rerun writes the same rows
    in the same order (file names are Spark's own)."""
    df.write.mode("errorifexists").partitionBy(*partitions).parquet(path)
