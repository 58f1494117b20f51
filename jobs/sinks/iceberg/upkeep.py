"""A lake's upkeep (python -m jobs.maintain): the small files of many nights rewritten into few, old snapshots
expired, files no snapshot references removed, and a lost catalog's tables registered again from their latest
metadata. Every step is one commit per table, retried when a night commits meanwhile (the commit fails on the
changed snapshot and the step starts again from the table as it now is: never a half-applied rewrite).

A table holding files of a run whose ranges are not committed (a night committing right now, or one killed
between two commits) is not compacted this time: its rows must stay removable by the next night's repair
(jobs/sinks/iceberg/lake.py). The ranges table, where continuation and the overlap check read, is data, not snapshot
summaries: expiring snapshots leaves it whole."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Union

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.errors import UsageError
from jobs.parquet_files import STATISTICS, parquet_options
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg.ledger_tables import MERGED
from jobs.sinks.iceberg.tables import TABLES

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from jobs.sinks.iceberg.tables import IcebergTarget

COMPACTED = "mqreplay.compacted"  # a compaction's snapshot: the files it rewrote
TARGET_SIZE = "write.target-file-size-bytes"  # a table's property: the size compaction writes files of
TARGET_FILE_BYTES = 512 << 20  # Iceberg's default of it


def _tables(catalog, namespace, timers=True):
    """The namespace's tables that mqreplay writes, loaded (NS.timers, NS.pop, NS.transactions with `timers`: nights
    rewrite them whole, jobs/sinks/iceberg/ledger_tables.py, so they are never compacted; their old snapshots
    expire and their files go)."""
    out = []
    for name in list(TABLES.values()) + [lake.RANGES] + (list(MERGED) if timers else []):
        table = lake.load(catalog, f"{namespace}.{name}")
        if table is not None:
            out.append((name, table))
    return out


def register_existing(target: IcebergTarget) -> dict[str, str]:
    """Register every table the warehouse holds under the namespace and the catalog lacks, from its newest
    metadata file (its snapshots and history kept): {table: metadata file}."""
    def register(catalog: Catalog) -> dict[str, str]:
        found = lake.table_locations(target.warehouse_place(catalog), target.namespace)
        if not found:
            raise UsageError(f"--register-existing: the warehouse holds no table of namespace {target.namespace} "
                             f"({target.warehouse_uri(catalog)}/{target.namespace}/*/metadata/)")
        catalog.create_namespace_if_not_exists(target.namespace)
        done: dict[str, str] = {}
        for name, metadata in sorted(found.items()):
            if lake.load(catalog, f"{target.namespace}.{name}") is None:
                catalog.register_table(f"{target.namespace}.{name}", metadata)
                done[name] = metadata
        return done
    return target.waiting(register, "--register-existing")


def compact(target: IcebergTarget) -> dict[str, Union[tuple[int, int], str]]:
    """Rewrite the data files of each partition that has more than one into files of about the table's target
    size (`write.target-file-size-bytes`, Iceberg's 512 MiB by default), a partition at a time and its rows
    streamed in batches, so the driver holds one batch and one file's row group, never a whole partition:
    {table: (files before, after)}, or a reason it was left as it is."""
    out: dict[str, Union[tuple[int, int], str]] = {}
    for name, _ in target.waiting(lambda c: _tables(c, target.namespace, timers=False), "--compact"):
        out[name] = target.waiting(lambda c: _compact(target, c, name), f"--compact {name}")
    return out


def _compact(target, catalog, name):
    """One table compacted, one commit per partition (its files removed, the rewritten ones added); a retry (a
    night committed meanwhile) starts again from the table as it is, where the partitions already done hold
    their files of the target size and are passed over. Files written for a commit that lost its race are
    referenced by nothing: orphan removal takes them."""
    identifier = f"{target.namespace}.{name}"
    table = catalog.load_table(identifier)
    before = len(table.inspect.files()) if table.current_snapshot() else 0
    if name != lake.RANGES:
        busy = lake.incomplete(table, lake.Held.of(catalog, target.namespace, ()))
        if busy:
            return f"left as it is: it holds files of run(s) {', '.join(busy)} whose ranges are not committed"
    size = int(table.properties.get(TARGET_SIZE, TARGET_FILE_BYTES))
    for where in _crowded_partitions(table, size) if before > 1 else ():
        files = _rewrite(table, where, target.table_place(catalog, table), size)
        with table.transaction() as tx:
            tx.delete(where, snapshot_properties={COMPACTED: str(before)})
            if files:  # files of no row (quiet nights): dropped
                tx.add_files(files, snapshot_properties={COMPACTED: str(before)})
        table = catalog.load_table(identifier)
    return before, len(table.inspect.files()) if table.current_snapshot() else 0


def _rewrite(table, where, location, size):
    """The rows of one partition written into new files under `location` (a place.Place) of about `size` bytes
    each, batch by batch: their URIs."""
    reader = table.scan(row_filter=where).to_arrow_batch_reader()
    schema = pa.schema([_plain(f) for f in reader.schema])  # add_files takes files without Iceberg's field ids
    folder, files, writer = f"data/compacted-{uuid.uuid4().hex[:12]}", [], None
    options = parquet_options(schema, STATISTICS + ["group", "broker"])
    try:
        for batch in reader:
            if not batch.num_rows:
                continue
            if writer is None:
                relative = f"{folder}/part-{len(files):05d}.parquet"
                location.fs.create_dir(location.path(folder), recursive=True)
                stream = location.fs.open_output_stream(location.path(relative))
                writer = pq.ParquetWriter(stream, schema, **options)
                files.append(f"{location.uri.rstrip('/')}/{relative}")
            writer.write_table(pa.Table.from_batches([batch]).cast(schema))
            if stream.tell() >= size:
                writer.close()
                stream.close()
                writer = None
    finally:
        if writer is not None:
            writer.close()
            stream.close()
    return files


def _plain(field):
    """An Arrow field without metadata at any depth (the Iceberg field ids a scan's schema carries)."""
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_plain(f) for f in kind])
    elif pa.types.is_map(kind):
        kind = pa.map_(_plain(kind.key_field), _plain(kind.item_field))
    elif pa.types.is_large_list(kind):
        kind = pa.large_list(_plain(kind.value_field))
    elif pa.types.is_list(kind):
        kind = pa.list_(_plain(kind.value_field))
    return pa.field(field.name, kind, field.nullable)


def _crowded_partitions(table, size):
    """A row filter per partition of more than one data file, unless its files are all of about the target
    `size` already (half of it or more: a partition compacted before); the whole table when it is unpartitioned."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo, IsNull
    files = table.inspect.files()
    if table.spec().is_unpartitioned():
        return [AlwaysTrue()] if _crowded(files.column("file_size_in_bytes").to_pylist(), size) else []
    field = table.spec().fields[0]
    column = table.schema().find_column_name(field.source_id)
    sizes = {}
    for partition, nbytes in zip(files.column("partition").to_pylist(), files.column("file_size_in_bytes").to_pylist()):
        sizes.setdefault(partition[field.name], []).append(nbytes)
    return [IsNull(column) if value is None else EqualTo(column, value)
            for value, found in sizes.items() if _crowded(found, size)]


def _crowded(sizes, size):
    """Whether a partition's files are more than one and not all of half the target size or more."""
    return len(sizes) > 1 and min(sizes) < size // 2


def expire(target: IcebergTarget, older_than_s: float) -> dict[str, int]:
    """Expire every table's snapshots older than older_than_s (the current one always kept): {table: expired}."""
    cut = datetime.fromtimestamp(time.time() - older_than_s, tz=timezone.utc)
    out: dict[str, int] = {}
    for name, _ in target.waiting(lambda c: _tables(c, target.namespace), "--expire-snapshots-older-than"):
        out[name] = target.waiting(lambda c: _expire(c, target.namespace, name, cut), f"expiring {name}'s snapshots")
    return out


def _expire(catalog, namespace, name, cut):
    table = catalog.load_table(f"{namespace}.{name}")
    before = len(table.snapshots())
    table.maintenance.expire_snapshots().older_than(cut).commit()
    return before - len(catalog.load_table(f"{namespace}.{name}").snapshots())


def remove_orphans(target: IcebergTarget, older_than_s: float) -> dict[str, int]:
    """Delete the data and manifest files under each table's location that no snapshot references, once older than
    older_than_s (a night moving its parts in right now is not touched): {table: files removed}."""
    out: dict[str, int] = {}
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
