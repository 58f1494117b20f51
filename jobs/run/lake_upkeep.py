"""A lake's upkeep (python -m jobs.maintain): the small files of many nights rewritten into few, old snapshots
expired, files no snapshot references removed, and a lost catalog's tables registered again from their latest
metadata. Every step is one commit per table, retried when a night commits meanwhile (the commit fails on the
changed snapshot and the step starts again from the table as it now is: never a half-applied rewrite).

A table holding files of a run whose ranges are not committed (a night committing right now, or one killed
between two commits) is not compacted this time: its rows must stay removable by the next night's repair
(jobs/run/lake.py). The ranges table, where continuation and the overlap check read, is data, not snapshot
summaries: expiring snapshots leaves it whole."""
import time
from datetime import datetime, timezone

import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.run import lake
from jobs.run.iceberg_sink import TABLES

COMPACTED = "mqreplay.compacted"  # a compaction's snapshot: the files it rewrote


def _tables(catalog, namespace):
    """The namespace's tables that mqreplay writes, loaded."""
    out = []
    for name in list(TABLES.values()) + [lake.RANGES]:
        table = lake.load(catalog, f"{namespace}.{name}")
        if table is not None:
            out.append((name, table))
    return out


def register_existing(target):
    """Register every table the warehouse holds under the namespace and the catalog lacks, from its newest
    metadata file (its snapshots and history kept): {table: metadata file}."""
    def register(catalog):
        found = lake.table_locations(target.warehouse_place(catalog), target.namespace)
        if not found:
            raise UsageError(f"--register-existing: the warehouse holds no table of namespace {target.namespace} "
                             f"({target.warehouse_uri(catalog)}/{target.namespace}/*/metadata/)")
        catalog.create_namespace_if_not_exists(target.namespace)
        done = {}
        for name, metadata in sorted(found.items()):
            if lake.load(catalog, f"{target.namespace}.{name}") is None:
                catalog.register_table(f"{target.namespace}.{name}", metadata)
                done[name] = metadata
        return done
    return target.waiting(register, "--register-existing")


def compact(target):
    """Rewrite each table's data files into one per partition (where it has more), a partition at a time, so
    the driver holds one partition's rows (a group's deliveries, a topic's messages), never a whole table:
    {table: (files before, after)}, or a reason it was left as it is."""
    out = {}
    for name, _ in target.waiting(lambda c: _tables(c, target.namespace), "--compact"):
        out[name] = target.waiting(lambda c: _compact(c, target.namespace, name), f"--compact {name}")
    return out


def _compact(catalog, namespace, name):
    """One table compacted, one commit per partition; a retry (a night committed meanwhile) starts again from
    the table as it is, where the partitions already done hold one file and are passed over."""
    identifier = f"{namespace}.{name}"
    table = catalog.load_table(identifier)
    before = len(table.inspect.files()) if table.current_snapshot() else 0
    if name != lake.RANGES:
        busy = lake.incomplete(table, lake.Held.of(catalog, namespace))
        if busy:
            return f"left as it is: it holds files of run(s) {', '.join(busy)} whose ranges are not committed"
    for where in _crowded_partitions(table) if before > 1 else ():
        rows = table.scan(row_filter=where).to_arrow()
        with table.transaction() as tx:
            if rows.num_rows:
                tx.overwrite(rows, overwrite_filter=where, snapshot_properties={COMPACTED: str(before)})
            else:  # files of no row (quiet nights): dropped
                tx.delete(where, snapshot_properties={COMPACTED: str(before)})
        table = catalog.load_table(identifier)
    return before, len(table.inspect.files()) if table.current_snapshot() else 0


def _crowded_partitions(table):
    """A row filter per partition of more than one data file (the whole table when it is unpartitioned)."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo, IsNull
    if table.spec().is_unpartitioned():
        return [AlwaysTrue()]
    field = table.spec().fields[0]
    column = table.schema().find_column_name(field.source_id)
    return [IsNull(column) if row["partition"][field.name] is None else EqualTo(column, row["partition"][field.name])
            for row in table.inspect.partitions().to_pylist() if row["file_count"] > 1]


def expire(target, older_than_s):
    """Expire every table's snapshots older than older_than_s (the current one always kept): {table: expired}."""
    cut = datetime.fromtimestamp(time.time() - older_than_s, tz=timezone.utc)
    out = {}
    for name, _ in target.waiting(lambda c: _tables(c, target.namespace), "--expire-snapshots-older-than"):
        out[name] = target.waiting(lambda c: _expire(c, target.namespace, name, cut), f"expiring {name}'s snapshots")
    return out


def _expire(catalog, namespace, name, cut):
    table = catalog.load_table(f"{namespace}.{name}")
    before = len(table.snapshots())
    table.maintenance.expire_snapshots().older_than(cut).commit()
    return before - len(catalog.load_table(f"{namespace}.{name}").snapshots())


def remove_orphans(target, older_than_s):
    """Delete the data and manifest files under each table's location that no snapshot references, once older than
    older_than_s (a night moving its parts in right now is not touched): {table: files removed}."""
    out = {}
    for name, _ in target.waiting(lambda c: _tables(c, target.namespace), "removing orphan files"):
        out[name] = target.waiting(lambda c: _orphans(target, c, c.load_table(f"{target.namespace}.{name}"),
                                                      older_than_s),
                                   f"removing {name}'s orphan files")
    return out


def _orphans(target, catalog, table, older_than_s):
    location = table.location().rstrip("/")
    referenced = set()
    if table.snapshots():
        referenced |= set(table.inspect.all_files().column("file_path").to_pylist())
        referenced |= set(table.inspect.all_manifests().column("path").to_pylist())
    referenced |= {s.manifest_list for s in table.snapshots()}
    where = target.table_place(catalog, table)
    fs, root = where.fs, where.root
    relative = {p[len(location):] for p in referenced if p and p.startswith(location)}
    cut_ns = (time.time() - older_than_s) * 1e9
    removed = 0
    for folder, suffix in (("data", ".parquet"), ("metadata", ".avro")):
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{folder}", recursive=True, allow_not_found=True))
        for info in infos:
            if info.type != pafs.FileType.File or not info.path.endswith(suffix):
                continue
            if info.path[len(root):] in relative or (info.mtime_ns or 0) > cut_ns:
                continue
            fs.delete_file(info.path)
            removed += 1
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/data", allow_not_found=True)):
        if info.type == pafs.FileType.Directory and info.base_name.startswith("run-") and \
                not fs.get_file_info(pafs.FileSelector(info.path, recursive=True)):
            fs.delete_dir(info.path)  # a run's folder left empty
    return removed
