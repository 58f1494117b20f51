"""The replay as Spark DataFrame transforms: units in, result rows out, outputs split by kind.

Data flow: the driver lists files; `read_units` decodes consume-queue segments (with their ext units)
on executors through mapInArrow; `replay` groups units by commit-log split and runs one task per split
(applyInArrow), which reads that byte range of the commit log, decodes each message once and applies
every group's subscription; the outputs are selections of the one result DataFrame."""
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.plan import queue_units
from jobs.split_task import process_split
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, RESULT_SCHEMA, STAT_FIELDS, UNIT_SCHEMA, spark_schema


def work_units(spark, layout):
    """One row per consume-queue segment (queue index, segment index): the input of read_units."""
    rows = [(qi, si) for qi, q in enumerate(layout.queues) for si in range(len(q.cq))]
    slots = 2 * spark.sparkContext.defaultParallelism  # a few tasks per core: each costs ~0.1 s to start
    return spark.createDataFrame(rows, "queue int, segment int").repartition(max(1, min(len(rows), slots)))


def read_units(work: DataFrame, planned) -> DataFrame:
    """Decode the consume-queue segments named by `work` into units (UNIT_SCHEMA), on executors."""
    plan, queues = planned.plan, planned.layout.queues

    def decode(batches):
        for batch in batches:
            for qi, si in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                q = queues[qi]
                yield queue_units(plan, q, [q.cq[si]])

    return work.mapInArrow(decode, spark_schema(UNIT_SCHEMA))


def replay(units: DataFrame, plan) -> DataFrame:
    """All groups in one pass: one task per commit-log split, returning RESULT_SCHEMA rows."""
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        yield from process_split(plan, table).to_batches(max_chunksize=20000)

    return units.groupBy("split").applyInArrow(task, spark_schema(RESULT_SCHEMA))


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
        *[F.sum(name).alias(name) for name in STAT_FIELDS])


def write_partitioned(df: DataFrame, path: str, partitions=("group", "topic"), order=("queue_id", "queue_offset")):
    """Parquet, Hive-style partitions, rows sorted so that a rerun writes the same content."""
    (df.repartition(*partitions).sortWithinPartitions(*partitions, *order)
       .write.mode("errorifexists").partitionBy(*partitions).parquet(path))


def empty_like_schema():
    return pa.schema(RESULT_SCHEMA)
