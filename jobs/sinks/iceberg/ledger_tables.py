"""The ledgers kept as one Iceberg table each across nights (docs/iceberg.md): NS.timers (jobs/ledgers/timer.py:
a message pending last night and delivered tonight becomes one delivered row) and NS.pop (jobs/ledgers/pop.py:
the rows' evidence, their handles, keys and copies, joins the night's; a message in flight last night whose copy
is revived tonight becomes one revived row), one row per message with its latest fate. A night reads the rows
the table holds (`read_held`), its ledger step merges them with the night's events and writes the merged rows
under the temporary OUT, and `commit_replacing` commits one snapshot that replaces the table's files with the
merged ones (copy on write: pyiceberg writes no delete files). Merging a night again gives the same rows, so a
run killed after this commit and before its ranges' (the lake's own record that a night counts) is simply run
again."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.ledgers.pop import LEDGER_SCHEMA as POP_SCHEMA
from jobs.ledgers.pop import POP, write_pop_ledger
from jobs.ledgers.spark_io import spark_path
from jobs.ledgers.timer import LEDGER_SCHEMA as TIMERS_SCHEMA
from jobs.ledgers.timer import TIMERS, write_ledger
from jobs.ledgers.traces import CONSUMPTION, CONSUMPTION_SCHEMA, TRACES, TRACES_SCHEMA, write_trace_ledgers
from jobs.ledgers.transactions import LEDGER_SCHEMA as TRANSACTIONS_SCHEMA
from jobs.ledgers.transactions import TRANSACTIONS, write_transactions
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg.tables import RUN, move_parts, table_and_place
from schemas.arrow_schemas import spark_schema

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyspark.sql import DataFrame, SparkSession

    from jobs.ledgers.pop import Bounds
    from jobs.ledgers.timer import Reads
    from jobs.output.place import Place
    from jobs.sinks.iceberg.tables import IcebergTarget

    Written = dict[str, tuple[int, int, int]]  # {output: (files, rows, bytes)}
    Counts = list[dict[str, Any]]  # a ledger's count rows
    Where = tuple[pafs.FileSystem, str]  # the temporary OUT's (filesystem, path)

# `plans` below are jobs.plan.replay_plan.ReplayPlans: of a layer above the ledgers this calls, typed Any as theirs

MESSAGE_KEYS = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
                          ("queue_offset", pa.int64()), ("msg_id", pa.string()),
                          ("properties", pa.map_(pa.string(), pa.string()))])  # NS.messages' columns a key needs
# the tables every night rewrites whole: never compacted (jobs/sinks/iceberg/upkeep.py)
MERGED = (TIMERS, POP, TRANSACTIONS, CONSUMPTION)


def merge_timers(spark: SparkSession, target: IcebergTarget, out_uri: str, where: Where, written: Written, reads: Reads,
                 overdue_ms: int, event_files: Sequence[str] = ()) -> tuple[tuple[Written, Counts], HeldTable]:
    """OUT.tmp/timers/: the night's timer ledger merged with NS.timers' rows. Returns (write_ledger's answer, the
    HeldTable its commit replaces)."""
    held, rows = read_held(spark, target, TIMERS, TIMERS_SCHEMA)
    return write_ledger(spark, out_uri, where, written, reads, overdue_ms, held=rows, event_files=event_files), held


def commit_timers(target: IcebergTarget, where: Place, run: str, held: HeldTable) -> dict[str, int]:
    """{table: files added}: NS.timers' files replaced by the merged ones of OUT.tmp/timers/."""
    return commit_replacing(target, where, run, held, TIMERS, TIMERS_SCHEMA)


def merge_pop(spark: SparkSession, target: IcebergTarget, out_uri: str, where: Where, written: Written,
              plans: Sequence[Any], event_files: Sequence[str] = ()
              ) -> tuple[tuple[Written, Counts, Counts | None], HeldTable]:
    """OUT.tmp/pop/: the night's POP ledger merged with NS.pop's rows, the keys of messages an earlier night read
    and tonight's pops name taken from NS.messages. Returns (write_pop_ledger's answer, the HeldTable its commit
    replaces)."""
    held, rows = read_held(spark, target, POP, POP_SCHEMA)
    return write_pop_ledger(spark, out_uri, where, written, plans, held=rows,
                            stored_keys=lambda bounds: stored_keys(spark, target, bounds),
                            event_files=event_files), held


def stored_keys(spark: SparkSession, target: IcebergTarget, bounds: Bounds) -> DataFrame | None:
    """A DataFrame of (broker, topic, queue_id, queue_offset, uniq_key) of the messages NS.messages holds within
    `bounds` ({(broker, topic, queue_id): (lowest, highest queue offset)}: pop_ledger.keyless_bounds), read from
    the data files whose statistics can hold them (pyiceberg plans them, Spark reads them); None when none can.
    A message's key is its UNIQ_KEY, else its msg_id, as the tasks take it (pipeline/pop_events.message_keys)."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual
    from pyspark.sql import functions as F

    identifier = f"{target.namespace}.messages"
    table = target.waiting(lambda c: lake.load(c, identifier), f"--sink iceberg ({identifier})")
    if table is None or table.current_snapshot() is None:
        return None
    files: set[str] = set()
    for (_, topic, queue), (lo, hi) in sorted(bounds.items()):
        within = And(And(EqualTo("topic", topic), EqualTo("queue_id", queue)),  # type: ignore[call-arg, arg-type]
                     And(GreaterThanOrEqual("queue_offset", lo),  # type: ignore[call-arg, arg-type]
                         LessThanOrEqual("queue_offset", hi)))  # type: ignore[call-arg, arg-type]
        files.update(task.file.file_path for task in table.scan(row_filter=within).plan_files())
    if not files:
        return None
    rows = spark.read.schema(spark_schema(MESSAGE_KEYS)).parquet(*(spark_path(f) for f in sorted(files)))
    return rows.select(F.coalesce(F.col("broker"), F.lit("")).alias("broker"), "topic", "queue_id", "queue_offset",
                       F.coalesce(F.col("properties").getItem("UNIQ_KEY"), F.col("msg_id")).alias("uniq_key"))


def commit_pop(target: IcebergTarget, where: Place, run: str, held: HeldTable) -> dict[str, int]:
    """{table: files added}: NS.pop's files replaced by the merged ones of OUT.tmp/pop/."""
    return commit_replacing(target, where, run, held, POP, POP_SCHEMA)


class HeldTable:
    """What a ledger's table held when the run read it: its snapshot and data files (None, (): no table yet)."""

    def __init__(self, snapshot_id: int | None = None, files: Iterable[DataFile] = ()) -> None:
        self.snapshot_id, self.files = snapshot_id, tuple(files)


def read_held(spark: SparkSession, target: IcebergTarget, name: str, schema: pa.Schema
              ) -> tuple[HeldTable, DataFrame | None]:
    """(HeldTable of NS.<name>, a DataFrame of its rows (Arrow `schema`), None when it holds no file)."""
    identifier = f"{target.namespace}.{name}"
    table = target.waiting(lambda c: lake.load(c, identifier), f"--sink iceberg ({identifier})")
    snapshot = table.current_snapshot() if table is not None else None
    files = [task.file for task in table.scan().plan_files()] if table is not None and snapshot is not None else []
    held = HeldTable(snapshot.snapshot_id if snapshot is not None else None, files)
    if not files:
        return held, None
    return held, spark.read.schema(spark_schema(schema)).parquet(*(spark_path(f.file_path) for f in files))


def commit_replacing(target: IcebergTarget, where: Place, run: str, held: HeldTable, name: str,
                     schema: pa.Schema) -> dict[str, int]:
    """{table: files added}: one snapshot of NS.<name> naming the run: the files it held (`held`) replaced by the
    merged ones under OUT.tmp/<name>/ (`where`: the temporary OUT, a jobs/output/place.Place; moved into the table's
    location first). UsageError (exit 2) when another run committed to the table since this one read it: its
    merge would be lost."""
    identifier = f"{target.namespace}.{name}"
    fs, root = cast(pafs.FileSystem, where.fs), where.root  # Place.fs is typed object
    table, location = target.waiting(lambda c: table_and_place(target, c, identifier, schema, None),
                                     f"--sink iceberg ({identifier})")
    current = table.current_snapshot()
    if _committed(table, run):
        return {name: 0}  # committed already (a retry after a commit whose answer was lost)
    if (current.snapshot_id if current is not None else None) != held.snapshot_id:
        raise UsageError(f"--sink iceberg: {identifier} changed while this run ran (another run committed to it): "
                         "nothing of this run was committed to it; run the night again")
    files = move_parts(where, name, location, run)
    if fs.get_file_info(f"{root}/{name}").type != pafs.FileType.NotFound:
        fs.delete_dir(f"{root}/{name}")

    def replace(catalog: Catalog) -> None:
        fresh = catalog.load_table(identifier)
        if _committed(fresh, run):
            return
        with fresh.transaction() as tx:
            if held.files:
                with tx.update_snapshot(snapshot_properties={RUN: run}).overwrite() as overwrite:
                    for data_file in held.files:
                        overwrite.delete_data_file(data_file)
            tx.add_files(files, snapshot_properties={RUN: run})
    target.waiting(replace, f"--sink iceberg (committing {identifier})")
    return {name: len(files)}


def _committed(table, run):
    return any(s.summary and s.summary.additional_properties.get(RUN) == run for s in table.snapshots())


def merge_transactions(spark: SparkSession, target: IcebergTarget, out_uri: str, where: Where, written: Written,
                       reads: Reads, window_ms: Mapping[str | None, int], event_files: Sequence[str] = ()
                       ) -> tuple[tuple[Written, Counts], HeldTable]:
    """OUT.tmp/transactions/: the night's ledger folded with NS.transactions' rows. Returns (write_transactions'
    answer, the HeldTable its commit replaces)."""
    held, rows = read_held(spark, target, TRANSACTIONS, TRANSACTIONS_SCHEMA)
    return write_transactions(spark, out_uri, where, written, reads, window_ms, held=rows,
                              event_files=event_files), held


def commit_transactions(target: IcebergTarget, where: Place, run: str, held: HeldTable) -> dict[str, int]:
    """{table: files added}: NS.transactions' files replaced by the merged ones of OUT.tmp/transactions/."""
    return commit_replacing(target, where, run, held, TRANSACTIONS, TRANSACTIONS_SCHEMA)


def merge_consumption(spark: SparkSession, target: IcebergTarget, out_uri: str, where: Where, written: Written,
                      plans: Sequence[Any], event_files: Sequence[str] = ()
                      ) -> tuple[tuple[Written, Counts, Counts | None] | None, HeldTable]:
    """OUT.tmp/traces/ and the night's consumption merged with NS.consumption's rows under OUT.tmp/consumption/.
    Returns (write_trace_ledgers' answer, the HeldTable its commit replaces)."""
    held, rows = read_held(spark, target, CONSUMPTION, CONSUMPTION_SCHEMA)
    _, traces = read_held(spark, target, TRACES, TRACES_SCHEMA.append(pa.field("broker", pa.string())))
    return write_trace_ledgers(spark, out_uri, where, written, plans, held=rows, held_traces=traces,
                               event_files=event_files), held


def commit_consumption(target: IcebergTarget, where: Place, run: str, held: HeldTable) -> dict[str, int]:
    """{table: files added}: NS.consumption's files replaced by the merged ones of OUT.tmp/consumption/."""
    return commit_replacing(target, where, run, held, CONSUMPTION, CONSUMPTION_SCHEMA)


def commit_traces(target: IcebergTarget, where: Place, run: str) -> dict[str, int]:
    """{table: files added}: OUT.tmp/traces/'s files appended to NS.traces, one snapshot naming the run (none
    when a snapshot names it already: a retry after a commit whose answer was lost)."""
    identifier = f"{target.namespace}.{TRACES}"
    schema = TRACES_SCHEMA.append(pa.field("broker", pa.string()))
    table, location = target.waiting(lambda c: table_and_place(target, c, identifier, schema, None),
                                     f"--sink iceberg ({identifier})")
    if any(s.summary and s.summary.additional_properties.get(RUN) == run for s in table.snapshots()):
        return {TRACES: 0}
    files = move_parts(where, TRACES, location, run)
    if not files:
        return {TRACES: 0}

    def append(catalog: Catalog) -> None:
        fresh = catalog.load_table(identifier)
        if not any(s.summary and s.summary.additional_properties.get(RUN) == run for s in fresh.snapshots()):
            fresh.add_files(files, snapshot_properties={RUN: run})
    target.waiting(append, f"--sink iceberg (committing {identifier})")
    return {TRACES: len(files)}
