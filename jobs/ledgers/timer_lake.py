"""NS.timers, the timer ledger as an Iceberg table (docs/iceberg.md): one row per message with its latest state
across nights. A night's ledger (jobs/ledgers/timer_ledger.py) is merged by Spark with the rows the table holds (a
message pending last night and delivered tonight becomes one delivered row), written under the temporary OUT,
and committed as one snapshot that replaces the table's files with the merged ones (copy on write: pyiceberg
writes no delete files). Merging a night again gives the same rows, so a run killed after this commit and
before its ranges' (the lake's own record that a night counts) is simply run again."""
import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.ledgers.timer_ledger import LEDGER_SCHEMA, TIMERS, write_ledger
from jobs.output.spark_outputs import spark_path
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg.tables import RUN, move_parts, table_and_place
from schemas.arrow_schemas import spark_schema

TABLE = "timers"


class HeldTimers:
    """What NS.timers held when the run read it: its snapshot and data files (None, (): no table yet)."""

    def __init__(self, snapshot_id=None, files=()):
        self.snapshot_id, self.files = snapshot_id, tuple(files)


def merge_ledger(spark, target, out_uri, where, written, reads, overdue_ms, event_files=()):
    """OUT.tmp/timers/: the night's ledger merged with NS.timers' rows. Returns (write_ledger's answer, the
    HeldTimers its commit replaces)."""
    identifier = f"{target.namespace}.{TABLE}"
    table = target.waiting(lambda c: lake.load(c, identifier), f"--sink iceberg ({identifier})")
    snapshot = table.current_snapshot() if table is not None else None
    files = [task.file for task in table.scan().plan_files()] if snapshot is not None else []
    held = HeldTimers(snapshot.snapshot_id if snapshot is not None else None, files)
    rows = None
    if files:
        rows = spark.read.schema(spark_schema(LEDGER_SCHEMA)).parquet(*(spark_path(f.file_path) for f in files))
    return write_ledger(spark, out_uri, where, written, reads, overdue_ms, held=rows, event_files=event_files), held


def commit_timers(target, where, run, held):
    """{table: files added}: one snapshot of NS.timers naming the run: the files it held (`held`) replaced by the
    merged ones under OUT.tmp/timers/ (`where`: the temporary OUT, a jobs/output/place.Place; moved into the
    table's location first). UsageError (exit 2) when another run committed to the table since this one read
    it: its merge would be lost."""
    identifier = f"{target.namespace}.{TABLE}"
    fs, root = where.fs, where.root
    table, location = target.waiting(lambda c: table_and_place(target, c, identifier, LEDGER_SCHEMA, None),
                                     f"--sink iceberg ({identifier})")
    current = table.current_snapshot()
    if _committed(table, run):
        return {TABLE: 0}  # committed already (a retry after a commit whose answer was lost)
    if (current.snapshot_id if current is not None else None) != held.snapshot_id:
        raise UsageError(f"--sink iceberg: {identifier} changed while this run ran (another run committed to it): "
                         "nothing of this run was committed to it; run the night again")
    files = move_parts(where, TIMERS, location, run)
    if fs.get_file_info(f"{root}/{TIMERS}").type != pafs.FileType.NotFound:
        fs.delete_dir(f"{root}/{TIMERS}")

    def replace(catalog):
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
    return {TABLE: len(files)}


def _committed(table, run):
    return any(s.summary and s.summary.additional_properties.get(RUN) == run for s in table.snapshots())
