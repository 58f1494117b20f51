"""`spark.read.format("rocketmq").load(STORE)`: a broker's store as a table, a row per consume-queue unit
whose message decodes, through the job's own planning (jobs/plan.py) and task code (jobs/datasource_read.py).

    from jobs.datasource import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)   # with spark.sql.python.filterPushdown.enabled=true
    spark.read.format("rocketmq").load("/data/broker-a/store").where("topic = 'TopicTest'")

Partitions are the job's commit-log splits; filters on topic, queue_id, queue_offset, commitlog_offset and
store_timestamp narrow the queues probed, the splits planned and the units read (jobs/datasource_filters.py)."""
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from jobs.datasource_filters import push_filters, window_narrowing
from jobs.datasource_read import SplitRead, read_split
from jobs.plan import JobOptions, build_plan
from jobs.settings import load_settings
from jobs.split_units import commitlog_splits
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, spark_schema

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
OPTIONS = ("path", "withBody", "since", "until", "startingOffsets", "endingOffsets", "onCorrupt", "verifyCrc",
           "subscriptions", "rocketmqVersion", "retry", "filterSupportRetry")
GROUP_COLUMNS = ("delivered_to", "collided_for")


def register(spark):
    """Register the data source on a session, with the filter pushdown it implements turned on (Spark
    refuses a reader with pushFilters while spark.sql.python.filterPushdown.enabled is false)."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(RocketMQDataSource)


def arrow_schema(with_body=True, with_groups=False):
    """The rows' Arrow schema: the columns of the job's messages/ output (topic first), and the groups'."""
    fields = [("topic", pa.string())] + [f for f in OUTPUT_MESSAGE_FIELDS if with_body or f[0] != "body"]
    fields += [(name, pa.list_(pa.string())) for name in GROUP_COLUMNS if with_groups]
    return pa.schema(fields)


class RocketMQDataSource(DataSource):
    """A RocketMQ broker's store (storePathRootDir) as a table; options in the README's "Reading a store
    from Spark SQL"."""

    @classmethod
    def name(cls):
        return "rocketmq"

    def schema(self):
        with_groups = bool(self.options.get("subscriptions"))
        return spark_schema(arrow_schema(_flag(self.options, "withBody", True), with_groups))

    def reader(self, schema):
        return RocketMQReader(job_options(self.options), self.options, schema)


def job_options(options):
    """JobOptions of a plain read from the data source's options, over the job settings (conf/replay.json)."""
    unknown = sorted(set(options) - {o.lower() for o in OPTIONS})
    if unknown:
        raise ValueError(f"rocketmq: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
    if not options.get("path"):
        raise ValueError('rocketmq: no store: load(STORE) or option("path", STORE)')
    settings = load_settings()
    on_corrupt = options.get("onCorrupt", settings["on_corrupt"])
    if on_corrupt not in ("fail", "skip"):
        raise ValueError(f"rocketmq: onCorrupt must be fail or skip, got {on_corrupt!r}")
    return JobOptions(
        store=options["path"], subscription_files=(options["subscriptions"],) if options.get("subscriptions") else (),
        dialect=str(options.get("rocketmqVersion", settings["rocketmq_version"])),
        retry=_flag(options, "retry", settings["retry_subscriptions"]),
        support_retry=_flag(options, "filterSupportRetry", settings["filter_support_retry"]),
        with_body=_flag(options, "withBody", settings["with_body"]), on_corrupt=on_corrupt,
        verify_crc=_flag(options, "verifyCrc", settings["verify_crc"]),
        bloom_f=int(settings["bloom_f"]), bloom_n=int(settings["bloom_n"]),
        split_size=int(settings["split_size_mb"]) << 20, read_all=True)


def _flag(options, name, default):
    text = str(options.get(name, default)).lower()
    if text not in ("true", "false"):
        raise ValueError(f"rocketmq: option {name} must be true or false, got {options.get(name)!r}")
    return text == "true"


@dataclass
class SplitPartition(InputPartition):
    """One commit-log split: its index in commitlog_splits(plan), its byte range, and what its read needs."""

    index: int
    start: int
    end: int
    job: SplitRead


class RocketMQReader(DataSourceReader):
    """Plans on the driver (in partitions(): the job's build_plan and commit-log splits, narrowed by the
    pushed filters) and reads a split per partition on the executors."""

    def __init__(self, options, source_options, schema):
        self.options = options
        self.base = self.narrowing = window_narrowing(*(source_options.get(o) for o in (
            "since", "until", "startingOffsets", "endingOffsets")))
        self.arrow = to_arrow_schema(schema, timezone="UTC")  # what Spark checks each batch against

    def pushFilters(self, filters):
        # from the options' narrowing every time: Spark 4.3 may hand this reader another query's filters
        self.narrowing, left = push_filters(self.base, filters)
        return left

    def partitions(self):
        narrowing = self.narrowing
        topics = None if narrowing.topics is None else tuple(sorted(narrowing.topics))
        planned = build_plan(replace(self.options, read_topics=topics))
        plan, segments = planned.plan, planned.segments
        queue_ids = np.array([q.queue_id for q in segments.queues], dtype=np.int64)
        wanted = narrowing.column("queue_id").mask(queue_ids[segments.queue])
        offsets = narrowing.column("commitlog_offset")
        parts = []
        for index, (start, end) in enumerate(commitlog_splits(plan)):
            rows = segments.overlapping(start, end)
            rows = rows[wanted[rows]]
            if len(rows) and offsets.overlaps(start, end):
                job = SplitRead(plan, segments.take(rows), narrowing)
                parts.append(SplitPartition(index, start, end, job))
        return parts

    def read(self, partition):
        if not isinstance(partition, SplitPartition):  # Spark's one empty partition when none is planned
            return iter(())
        return read_split(partition.job, partition.start, partition.end, self.arrow)
