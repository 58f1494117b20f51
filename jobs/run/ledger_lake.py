"""A ledger kept as one Iceberg table across nights (NS.timers, NS.pop: docs/iceberg.md): one row per message with its
latest fate. A night reads the rows the table holds (`read_held`), its ledger step merges them with the night's
evidence (jobs/run/timer_ledger.py, jobs/run/pop_ledger.py) and writes the merged rows under the temporary OUT,
and `commit_replacing` commits one snapshot that replaces the table's files with the merged ones (copy on write:
pyiceberg writes no delete files). Merging a night again gives the same rows, so a run killed after this commit
and before its ranges' (the lake's own record that a night counts) is simply run again."""
import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.run import lake
from jobs.run.iceberg_sink import RUN, move_parts, table_and_place
from jobs.run.spark_outputs import spark_path
from schemas.arrow_schemas import spark_schema


class HeldTable:
    """What a ledger's table held when the run read it: its snapshot and data files (None, (): no table yet)."""

    def __init__(self, snapshot_id=None, files=()):
        self.snapshot_id, self.files = snapshot_id, tuple(files)


def read_held(spark, target, name, schema):
    """(HeldTable of NS.<name>, a DataFrame of its rows (Arrow `schema`), None when it holds no file)."""
    identifier = f"{target.namespace}.{name}"
    table = target.waiting(lambda c: lake.load(c, identifier), f"--sink iceberg ({identifier})")
    snapshot = table.current_snapshot() if table is not None else None
    files = [task.file for task in table.scan().plan_files()] if snapshot is not None else []
    held = HeldTable(snapshot.snapshot_id if snapshot is not None else None, files)
    if not files:
        return held, None
    return held, spark.read.schema(spark_schema(schema)).parquet(*(spark_path(f.file_path) for f in files))


def commit_replacing(target, where, run, held, name, schema):
    """{table: files added}: one snapshot of NS.<name> naming the run: the files it held (`held`) replaced by the
    merged ones under OUT.tmp/<name>/ (`where`: the temporary OUT, a jobs/run/place.Place; moved into the table's
    location first). UsageError (exit 2) when another run committed to the table since this one read it: its
    merge would be lost."""
    identifier = f"{target.namespace}.{name}"
    fs, root = where.fs, where.root
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
    return {name: len(files)}


def _committed(table, run):
    return any(s.summary and s.summary.additional_properties.get(RUN) == run for s in table.snapshots())
