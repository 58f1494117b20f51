"""`spark.read.format("rocketmq").load(STORE)`: a broker's store as a table, a row per consume-queue unit
whose message decodes, through the job's own planning (jobs/plan/build.py) and task code (jobs/datasource/read.py).

    from jobs.datasource import register
    register(spark)   # in local mode its workers run the driver's interpreter (the session's others: as before)
    spark.read.format("rocketmq").option("topics", "TopicTest").load("/data/broker-a/store")

Partitions are the job's commit-log splits. The options topics, since/until and startingOffsets/endingOffsets
narrow the queues probed, the splits planned and the units read; a query's filters are applied by Spark, never
pushed (jobs/datasource/filters.py says why: one DataFrame's questions must not leak into each other).
Every option is checked when the source is loaded (schema()), so a typo fails load() with one line that names
the option and what it accepts, instead of a read that quietly leaves groups or rows out."""
from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError:  # PySpark 3.5: the Python Data Source API is Spark 4.0's; one line, no stack
    from jobs.errors import refuse_spark_version

    refuse_spark_version("the rocketmq data source (jobs.datasource)", "4.0", "the Python Data Source API",
                         "run the job (spark-submit jobs/replay.py) and read its output")
from pyspark.sql.pandas.types import to_arrow_schema

from jobs.cli import commitlog_dirs
from jobs.datasource.filters import option_narrowing
from jobs.datasource.read import TIMER_EVENTS_SCHEMA, TRACE_ROWS_SCHEMA, SplitRead, read_split
from jobs.errors import UsageError
from jobs.ledgers.timer import pair
from jobs.plan.brokers import brokers_of, split_store
from jobs.plan.build import build_plan
from jobs.plan.units.choose import UNITS_FROM
from jobs.runtime.session import is_connect
from jobs.settings import CHOICES as SETTING_CHOICES
from jobs.settings import JobOptions, job_options, load_settings
from jobs.task.split_units import commitlog_splits, unwalked
from schemas.arrow_schemas import OUTPUT_MESSAGE_FIELDS, spark_schema
from schemas.errors import ConfigError, ReplayError
from schemas.index.key_lookup import find_key_units
from schemas.store.config import load_registrations
from schemas.store.store import check_store_root

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from jobs.plan.build import Planned

log = logging.getLogger("mqreplay")

WORKER_PYTHON_CONF = "spark.pyspark.python"
PLANNER_WORKER = "pyspark.sql.worker.create_data_source"  # the worker that runs schema() for load()
FLAGS = ("withBody", "verifyCrc", "retry", "filterSupportRetry", "timers", "traces")
CHOICES = {"rocketmqVersion": SETTING_CHOICES["rocketmq_version"], "onCorrupt": SETTING_CHOICES["on_corrupt"],
           "onSubscriptionError": ("fail", "skip"), "unitsFrom": UNITS_FROM}
SUBSCRIPTION_ERROR_DEFAULT = "fail"  # onSubscriptionError, the one option no settings key backs
NARROWING = ("topics", "key", "since", "until", "startingOffsets", "endingOffsets")
OPTIONS = ("path", "brokers", "subscriptions") + FLAGS + tuple(CHOICES) + NARROWING + ("commitlog",)
GROUP_COLUMNS = ("delivered_to", "collided_for")


def timer_ledger(events: DataFrame) -> DataFrame:
    """The timer ledger (the job's OUT/timers/ columns, docs/output.md) of a DataFrame read with option
    timers: the same pairing by (broker, UNIQ_KEY) the job runs after its stage, done by Spark."""
    return pair(events)


def register(spark: SparkSession) -> None:
    """Register the data source on a session, classic or Spark Connect; on a classic session its Python workers
    run an interpreter that can import it (worker_python), the session's own left as it is. A Connect client has
    no SparkContext: its server's workers are the server's to configure (docs/connect.md)."""
    if is_connect(spark):
        spark.dataSource.register(RocketMQDataSource)
        return
    sc = spark.sparkContext
    session_python = sc.pythonExec
    sc.pythonExec = worker_python(sc) or session_python
    try:  # the source's function takes sc.pythonExec as it is now, for its planning and its reads
        spark.dataSource.register(RocketMQDataSource)
    finally:
        sc.pythonExec = session_python  # the session's other Python code runs where it ran


def worker_python(sc: SparkContext) -> str | None:
    """The interpreter the data source's Python workers run: one that has this project and its dependencies
    (None: the session's own).

    PySpark starts every Python worker, the data source's planning on the driver included, with the
    `pythonExec` of the function it runs, which a registration takes from `sc.pythonExec`: PYSPARK_PYTHON when
    the SparkContext started, else "python3" from PATH, with which a plain `.venv/bin/python script.py` would
    plan and read with a python3 that lacks pyarrow. spark.pyspark.python reaches pythonExec only through
    spark-submit (which exports it as PYSPARK_PYTHON), so it is taken here when a session was built with it.
    With neither, a local master runs its workers on this machine: they get the driver's own interpreter
    (sys.executable). A cluster's nodes have their own paths, so nothing is guessed there: a warning says what
    to set. Only the data source's function gets it (register): the session's pythonExec is left as it was."""
    if os.environ.get("PYSPARK_PYTHON"):
        return None
    configured = sc.getConf().get(WORKER_PYTHON_CONF)
    if configured:
        return configured
    assert sc.master is not None  # a started SparkContext's
    if sc.master.startswith("local"):
        return sys.executable
    warnings.warn(
        f"rocketmq: neither PYSPARK_PYTHON nor {WORKER_PYTHON_CONF} is set, so the Python workers on master "
        f"{sc.master} run 'python3' from each node's PATH, which needs pyarrow, numpy and this project: set "
        f"{WORKER_PYTHON_CONF} (spark-submit --conf, or PYSPARK_PYTHON before the session starts) to such an "
        "interpreter on every node, e.g. ./environment/bin/python with spark.archives (README, \"Running on a "
        "cluster\")", stacklevel=3)
    return None


def arrow_schema(with_body: bool = True, with_groups: bool = False) -> pa.Schema:
    """The rows' Arrow schema: the columns of the job's messages/ output (broker and topic first), and the
    groups'."""
    fields = [("broker", pa.string()), ("topic", pa.string())]
    fields += [f for f in OUTPUT_MESSAGE_FIELDS if with_body or f[0] != "body"]
    fields += [(name, pa.list_(pa.string())) for name in GROUP_COLUMNS if with_groups]
    return pa.schema(fields)


class RocketMQDataSource(DataSource):
    """A RocketMQ broker's store (storePathRootDir) as a table; options in the README's "Reading a store
    from Spark SQL"."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        try:
            read = read_options(self.options)  # here, so that a bad option fails load(), not the first query
        except (UsageError, ReplayError):
            _untraced_in_the_planner()
            raise
        if read.timers:
            return spark_schema(TIMER_EVENTS_SCHEMA)
        if read.traces:
            return spark_schema(TRACE_ROWS_SCHEMA)
        return spark_schema(arrow_schema(read.job.with_body, bool(read.job.subscription_files)))

    def reader(self, schema: StructType) -> RocketMQReader:
        return RocketMQReader(read_options(self.options), schema)


def _untraced_in_the_planner():
    """In Spark's planner worker, which reports the error and ends (pyspark.sql.worker.utils.worker_run), the
    error goes to the user without its traceback (PySpark's own SPARK_HIDE_TRACEBACK, read when it formats the
    error): a bad option is one line in load()'s AnalysisException. Nothing changes anywhere else (no other
    process, and not this one when schema() is called outside that worker)."""
    if PLANNER_WORKER in sys.modules:
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


@dataclass(frozen=True)
class ReadOptions:
    """The data source's options, checked: the job's options of a plain read, the window, and what to do with a
    subscription that does not parse."""

    job: JobOptions
    narrowing: object  # jobs.datasource.filters.Narrowing of the topics and window options
    on_subscription_error: str
    brokers: tuple  # jobs/plan/brokers.Broker: one for a path, each of option brokers' NAME=STORE
    timers: bool = False  # option timers: a row per timer event (timer_ledger pairs them), not per message
    traces: bool = False  # option traces: a row per trace record (the job's OUT/traces/), not per message


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """ReadOptions of the data source's options (Spark's case-insensitive map) over the job settings
    (conf/replay.json); UsageError (a ValueError), one line naming the option and what it accepts, for the
    first wrong one."""
    known = {o.lower() for o in OPTIONS}
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise UsageError(f"rocketmq: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
    if not options.get("path") and not options.get("brokers"):
        raise UsageError('rocketmq: option path: no store given: load(STORE) or option("path", STORE), or a cluster: '
                         'option("brokers", "NAME=STORE,NAME=STORE")')
    if options.get("path") and options.get("brokers"):
        raise UsageError("rocketmq: option path: give one store (path) or a cluster (brokers), not both")
    stores = [_from_launch_dir(options["path"])] if options.get("path") else [
        _broker_from_launch_dir(b.strip()) for b in options["brokers"].split(",") if b.strip()]
    try:
        brokers = brokers_of(stores, None, tuple(_from_launch_dir(d) for d in commitlog_dirs(options.get("commitlog"))))
    except UsageError as exc:
        raise UsageError(f"rocketmq: option {'brokers' if options.get('brokers') else 'path'}: {exc}") from None
    for broker in brokers:  # a store that is not there fails load(), as every other option does
        try:
            assert broker.root is not None  # brokers_of resolved it
            check_store_root(broker.fs, broker.root, broker.uri)
        except ReplayError as exc:
            raise UsageError(f"rocketmq: option {'brokers' if options.get('brokers') else 'path'}: "
                             f"{str(exc).replace('--store ', '')}") from None
    value = {name: _choice(options, name) for name in CHOICES}
    value.update((name, _flag(options, name)) for name in FLAGS)
    try:
        narrowing = option_narrowing(*(options.get(name) for name in NARROWING))
    except UsageError as exc:
        raise UsageError(f"rocketmq: option {exc}") from None
    subscriptions = options.get("subscriptions")
    if subscriptions is not None:
        subscriptions = _from_launch_dir(subscriptions)
        try:
            load_registrations(subscriptions)
        except (ConfigError, OSError) as exc:
            raise UsageError('rocketmq: option subscriptions: expected a subscription file {"groups": [{"group", '
                             f'"topic", "expressionType", "expression"}}]}}: {exc}') from None
    job = job_options(  # an option not given is None: the settings' value (conf/replay.json), as for argv
        load_settings(), brokers[0].uri, subscription_files=(subscriptions,) if subscriptions is not None else (),
        commitlog=tuple(_from_launch_dir(d) for d in commitlog_dirs(options.get("commitlog"))),
        units_from=value["unitsFrom"],
        dialect=value["rocketmqVersion"], retry=value["retry"], support_retry=value["filterSupportRetry"],
        with_body=value["withBody"], on_corrupt=value["onCorrupt"], verify_crc=value["verifyCrc"], read_all=True)
    timers = bool(value["timers"])
    if timers and subscriptions is not None:
        raise UsageError("rocketmq: option timers reads timer events, which no group decides: leave out subscriptions")
    traces = bool(value["traces"])
    if traces and (subscriptions is not None or timers):
        raise UsageError("rocketmq: option traces reads trace records, which no group decides: leave out "
                         "subscriptions and timers")
    return ReadOptions(job, narrowing, value["onSubscriptionError"] or SUBSCRIPTION_ERROR_DEFAULT, brokers, timers,
                       traces)


def _from_launch_dir(path):
    """A relative local path as Spark takes one: from the directory the Spark process was started in. The
    Python worker that plans the read runs there in a classic session, but in a Spark Connect session it runs
    in the session's own artifact directory; PWD is the server's start-up directory in both."""
    if "://" in path or os.path.isabs(path):
        return path
    launch = os.environ.get("PWD")
    return os.path.join(launch if launch and os.path.isabs(launch) else os.getcwd(), path)


def _broker_from_launch_dir(value):
    """NAME=STORE with its store taken from the launch directory when relative (see _from_launch_dir)."""
    name, uri = split_store(value, "option brokers")
    return uri if name is None else f"{name}={_from_launch_dir(uri)}"


def _choice(options, name):
    """The option's value, checked; None when not given (the settings' or JobOptions' default holds)."""
    if options.get(name) is None:
        return None
    text = str(options.get(name))
    if text not in CHOICES[name]:
        raise UsageError(f"rocketmq: option {name} must be {' or '.join(CHOICES[name])}, got {options.get(name)!r}")
    return text


def _flag(options, name):
    """The option as a bool, checked; None when not given (the settings' or JobOptions' default holds)."""
    if options.get(name) is None:
        return None
    text = str(options.get(name)).lower()
    if text not in ("true", "false"):
        raise UsageError(f"rocketmq: option {name} must be true or false, got {options.get(name)!r}")
    return text == "true"


def check_subscriptions(planned: Planned, on_error: str) -> None:
    """Refuse a read whose subscriptions (the file's and the store's SQL92 registrations) do not all parse:
    a group left out would silently lose its rows from delivered_to. With onSubscriptionError=skip they are
    left out, as the job leaves them out, with a warning that names them."""
    failed = "; ".join(f"group {c.sub.group} topic {c.sub.topic}: {c.error}" for c in planned.subscriptions if c.error)
    if failed and on_error == "fail":
        raise UsageError(f"rocketmq: a subscription does not parse ({failed}); option onSubscriptionError=skip "
                         "reads without it")
    if failed:
        log.warning("rocketmq: left out of delivered_to and collided_for, their subscriptions do not parse "
                    "(onSubscriptionError=skip): %s", failed)


@dataclass
class SplitPartition(InputPartition):
    """One commit-log split of one broker: its partition number, its byte range, and what its read needs."""

    index: int
    start: int
    end: int
    job: SplitRead


class RocketMQReader(DataSourceReader):
    """Plans on the driver (in partitions(): the job's build_plan and commit-log splits, narrowed by the
    options) and reads a split per partition on the executors. It has no pushFilters: see filters.py."""

    def __init__(self, read: ReadOptions, schema: StructType) -> None:
        self.options = read.job
        self.on_subscription_error = read.on_subscription_error
        self.narrowing = read.narrowing
        self.brokers = read.brokers
        self.timers = read.timers
        self.traces = read.traces
        self.arrow = to_arrow_schema(schema, timezone="UTC")  # what Spark checks each batch against

    def partitions(self) -> list[SplitPartition]:
        """Every broker's splits, each broker planned with its own config (as the job plans a cluster)."""
        parts: list[SplitPartition] = []
        for broker in self.brokers:
            parts += self._broker_partitions(broker, replace(self.options, store=broker.uri), len(parts))
        return parts

    def _broker_partitions(self, broker, options, first):
        narrowing = self.narrowing
        topics = None if narrowing.topics is None else tuple(sorted(narrowing.topics))
        planned = build_plan(replace(options, read_topics=topics), broker=broker, several=len(self.brokers) > 1)
        if self.traces and topics is None:  # option traces: the trace topics alone are read
            traced = tuple(sorted(planned.plan.traces.topics)) if planned.plan.traces is not None else ()
            if not traced:
                return []
            planned = build_plan(replace(options, read_topics=traced), broker=broker, several=len(self.brokers) > 1)
        if options.subscription_files:
            check_subscriptions(planned, self.on_subscription_error)
        plan = planned.plan
        if narrowing.key is not None:
            narrowing = self._with_key_offsets(broker, plan, narrowing)
        parts = []
        ranges = commitlog_splits(plan)
        if plan.walks_records:  # units rebuilt from the records: each partition snaps its own bounds to records
            ranges = unwalked(plan, ranges)
        for start, end in ranges:
            if any(s.split_holds(start, end) for s in plan.units) and (narrowing.offsets is None or any(
                    start <= o < end for o in narrowing.offsets)):
                job = SplitRead(plan.for_split(start, end), narrowing, self.timers, self.traces)
                parts.append(SplitPartition(first + len(parts), start, end, job))
        return parts

    def _with_key_offsets(self, broker, plan, narrowing):
        """The narrowing with the commit-log offsets of the messages that carry its key, found through the
        store's index/ files (a scan of the commit log where there is none: schemas/index/key_lookup.py)."""
        window = (narrowing.since, narrowing.until) if narrowing.timed else None
        found = find_key_units(broker.fs, broker.root, plan.log, [narrowing.key], topics=narrowing.topics,
                               window=window)
        return replace(narrowing, offsets=frozenset(found.column("commitlog_offset").to_pylist()))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition):  # Spark's one empty partition when none is planned
            return iter(())
        return read_split(partition.job, partition.start, partition.end, self.arrow)
