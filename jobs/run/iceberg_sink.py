"""--sink iceberg: a run's answer committed to Apache Iceberg tables, one snapshot per table per run.

The tasks write their Parquet parts as for the Parquet sink (jobs/run/sink.py: no result row through the JVM)
and the driver commits what the successful attempts wrote (sink.commit). Then, table by table, the driver moves
the parts into the table's location (`<location>/data/run-<run>/`), and adds them with pyiceberg's `add_files`
(the files are registered as they are, never rewritten; their statistics are read from the footers) in one
snapshot whose summary records the run: `mqreplay.run`, `mqreplay.store` and `mqreplay.offsets` (the queue
offsets [first, end) the run covered, per topic and queue: what offsets.json says of it).

A rerun of offsets a table already holds for the same store is refused before Spark starts (`overlaps`), and
`--starting-offsets iceberg` starts where the tables' snapshots end (`committed_offsets`). Tables are committed
messages first and matched last; a table that already holds a snapshot of the same run key (store and offsets:
a run that died between two tables' commits and was started again) is not committed twice, and the overlap
check reads the matched table, committed last, so such a rerun is let through to complete the other tables.
Parts moved into a table's location by a run that died before its commit are referenced by no snapshot:
`stale_runs` lists them, `--clean-stale` removes them."""
import hashlib
import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from jobs.errors import UsageError
from jobs.pipeline.cq_audit import CQ_AUDIT_SCHEMA
from jobs.run.sink import answer_schema
from schemas import storefs
from schemas.arrow_schemas import BITMAP_SCHEMA, BODIES_SCHEMA, CORRUPT_SCHEMA

# output folder of a run (jobs/run/sink.py) -> table name; the audits get a table when they have rows
TABLES = {"messages": "messages", "audit/collisions": "collisions", "matched": "matched",
          "audit/corrupt": "audit_corrupt", "audit/bitmaps": "audit_bitmaps", "audit/bodies": "audit_bodies",
          "audit/consume_queue": "audit_consume_queue"}
ANSWERS = ("messages", "audit/collisions", "matched")  # a snapshot every run, empty when it has no row
# each table's partition: what its readers select by (a group's deliveries; a topic's messages); the sink writes a
# file per partition and split (SinkSpec.for_tables), add_files reads a file's partition from its statistics
PARTITIONED_BY = {"matched": "group", "audit/collisions": "group", "messages": "topic"}
RUN, STORE, OFFSETS, KEY = "mqreplay.run", "mqreplay.store", "mqreplay.offsets", "mqreplay.key"
# a run of named brokers: {broker: {topic: {queue: [first, end]}}}, each broker's offsets (its continuation), in
# place of a bare --store's STORE and OFFSETS
BROKERS = "mqreplay.brokers"
DEFAULT_CATALOG = "mqreplay"


@dataclass(frozen=True)
class IcebergTarget:
    """Where a run's tables are: a catalog by pyiceberg's configuration (`name`), or the embedded SQL catalog
    (`uri`, `warehouse`), and the namespace."""

    namespace: str = "mqreplay"
    name: str = None
    uri: str = None
    warehouse: str = None

    def catalog(self):
        """The pyiceberg catalog (imported here: only an Iceberg run pays for it)."""
        if self.uri is None:
            from pyiceberg.catalog import load_catalog
            return load_catalog(self.name)
        from pyiceberg.catalog.sql import SqlCatalog
        return SqlCatalog(self.name or DEFAULT_CATALOG, uri=self.uri, warehouse=_uri(self.warehouse))

    def describe(self):
        return f"catalog {self.name}" if self.uri is None else f"{self.uri} (warehouse {self.warehouse})"


def target_of(args):
    """IcebergTarget of the command line, or None without --sink iceberg; UsageError for a half-given catalog."""
    if args.sink != "iceberg":
        if args.catalog or args.catalog_uri or args.warehouse:
            raise UsageError("--catalog, --catalog-uri and --warehouse go with --sink iceberg")
        return None
    if args.catalog_uri and args.catalog:
        raise UsageError("--sink iceberg: give --catalog NAME (pyiceberg's configuration) or --catalog-uri with "
                         "--warehouse (the embedded SQL catalog), not both")
    if args.catalog_uri and not args.warehouse:
        raise UsageError("--catalog-uri needs --warehouse PATH_OR_URI: where the tables' files go")
    if not args.catalog_uri and not args.catalog:
        raise UsageError("--sink iceberg needs a catalog: --catalog-uri sqlite:///PATH --warehouse PATH_OR_URI "
                         "(embedded, nothing to run), or --catalog NAME from pyiceberg's configuration")
    return IcebergTarget(args.namespace, args.catalog, args.catalog_uri, args.warehouse)


def _uri(path):
    """A warehouse as pyiceberg's FileIO takes it: local paths as file:// URIs, others as given."""
    if path is None or "://" in path:
        return path
    return "file://" + os.path.abspath(path)


def _offsets(ranges):
    """{topic: {queue: [first, end]}} of (topic, queue_id, first, end) ranges, the non-empty ones."""
    out = {}
    for topic, qid, first, end in ranges:
        if end > first:
            out.setdefault(topic, {})[str(qid)] = [int(first), int(end)]
    return out


def _runs(table, store, broker=None):
    """[(run, {topic: {queue: [first, end]}})] of a table's snapshots of one store (a bare --store's), or of
    one named broker (whatever its store's URI that night)."""
    out = []
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if broker is not None and BROKERS in summary:
            held = json.loads(summary[BROKERS]).get(broker)
            if held is not None:
                out.append((summary.get(RUN), held))
        elif broker is None and summary.get(STORE) == store and OFFSETS in summary:
            out.append((summary.get(RUN), json.loads(summary[OFFSETS])))
    return out


def _load(catalog, identifier):
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    try:
        return catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def overlaps(target, store, ranges, broker=None):
    """Refuse (UsageError, exit 2) a run whose queue offsets overlap what the matched table already holds for
    the same store (or named broker), naming the queues; nothing is committed."""
    table = _load(target.catalog(), f"{target.namespace}.matched")
    if table is None:
        return
    mine = _offsets(ranges)
    found = {}  # topic -> [(queue, first, end, held first, held end, run)]
    for run, held in _runs(table, store, broker):
        for topic, queues in mine.items():
            for qid, (first, end) in queues.items():
                other = held.get(topic, {}).get(qid)
                if other and first < other[1] and other[0] < end:
                    found.setdefault(topic, []).append(f"{qid} [{first}, {end}) held [{other[0]}, {other[1]}) by run "
                                                       f"{run}")
    if found:  # the subscribed topics first, their %RETRY% topics after
        topics = sorted(found, key=lambda t: (t.startswith("%RETRY%"), t))
        shown = "; ".join(f"{t}/{', '.join(found[t][:4])}" + (" ..." if len(found[t]) > 4 else "")
                          for t in topics[:4]) + (f"; and {len(topics) - 4} more topics" if len(topics) > 4 else "")
        whose = store if broker is None else f"broker {broker}"
        raise UsageError(f"--sink iceberg: {target.namespace}.matched already holds these offsets of {whose}: "
                         f"{shown} (nothing committed; --starting-offsets iceberg continues after them)")


def committed_offsets(target, store, broker=None):
    """{topic: {queue_id: end}} where the matched table's snapshots of a store (or named broker) end:
    --starting-offsets iceberg."""
    table = _load(target.catalog(), f"{target.namespace}.matched")
    out = {}
    for _, held in _runs(table, store, broker) if table is not None else ():
        for topic, queues in held.items():
            for qid, (_, end) in queues.items():
                out.setdefault(topic, {})[int(qid)] = max(end, out.get(topic, {}).get(int(qid), 0))
    return out


def publish_tables(target, out_uri, written, run, store, ranges, with_body, brokers=None):
    """Commit the parts of the run's temporary OUT (sink.commit's `written`: {output: (files, rows, bytes)}) to
    the tables: {table: files added}. One snapshot per table; the answer tables every run, the audits when they
    have rows. `store` and `ranges`: a bare --store's (its snapshots keyed by the store, as before brokers;
    None for named brokers); `brokers`: {name: ranges} of every broker of the run, recorded as BROKERS (a named
    broker continues from it, also after a night it ran as a bare --store)."""
    catalog = target.catalog()
    catalog.create_namespace_if_not_exists(target.namespace)
    properties = {}
    if brokers is not None:
        properties[BROKERS] = json.dumps({n: _offsets(r) for n, r in brokers.items()}, sort_keys=True,
                                         separators=(",", ":"))
    if store is not None:
        offsets = json.dumps(_offsets(ranges), sort_keys=True, separators=(",", ":"))
        properties.update({STORE: store, OFFSETS: offsets})
    else:
        offsets = json.dumps({n: o for n, o in json.loads(properties[BROKERS]).items() if o}, sort_keys=True,
                             separators=(",", ":"))
        store = ",".join(sorted(brokers))
    key = hashlib.sha256(f"{store}\n{offsets}".encode()).hexdigest()[:32]
    properties.update({RUN: run, KEY: key})
    fs, root = storefs.resolve(out_uri)
    added = {}
    for output, name in TABLES.items():
        if output not in ANSWERS and not written.get(output, (0, 0))[1]:
            continue
        table = _table(catalog, f"{target.namespace}.{name}", _schema(output, with_body),
                       PARTITIONED_BY.get(output))
        if offsets != "{}" and any(s.summary and s.summary.additional_properties.get(KEY) == key
                                   for s in table.snapshots()):
            continue  # committed by an earlier attempt of this run that died before the matched table (a run of
            # no offsets, a quiet night, has no such key: each commits its empty snapshot)
        files = _move_parts(fs, root, output, table.location(), run)
        table.add_files(files, snapshot_properties=properties)
        added[name] = len(files)
    return added


def _table(catalog, identifier, schema, partition_column):
    """The table, created on first use with its identity partition (None: unpartitioned)."""
    table = _load(catalog, identifier)
    if table is not None and "broker" not in {f.name for f in table.schema().fields}:
        with table.update_schema() as update:  # a table made before runs named their brokers: the column added
            update.union_by_name(schema)
        table = catalog.load_table(identifier)
    if table is not None:
        return table
    table = catalog.create_table_if_not_exists(identifier, schema=schema)
    if partition_column is not None and not table.snapshots():
        with table.update_spec() as spec:
            spec.add_identity(partition_column)
        table = catalog.load_table(identifier)
    return table


def _schema(output, with_body):
    audits = {"audit/corrupt": CORRUPT_SCHEMA, "audit/bitmaps": BITMAP_SCHEMA, "audit/bodies": BODIES_SCHEMA,
              "audit/consume_queue": CQ_AUDIT_SCHEMA}
    if output in audits:  # every part names its broker (sink.with_broker)
        return audits[output].append(pa.field("broker", pa.string()))
    return answer_schema(output, "normalized", with_body)


def _move_parts(fs, root, output, location, run):
    """Move an output's parts from the temporary OUT into the table's location, under data/run-<run>/ (a copy
    where OUT and the warehouse are on different filesystems); their new URIs."""
    wfs, wroot = storefs.resolve(location)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/{output}", recursive=True, allow_not_found=True))
    files = []
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.path.endswith(".parquet"):
            continue
        relative = info.path[len(f"{root}/{output}/"):].replace("/", "-").replace("=", "_")
        target = f"{wroot}/data/run-{run}/{relative}"
        wfs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        _move(fs, info.path, wfs, target)
        files.append(location.rstrip("/") + target[len(wroot):])
    return files


def _move(fs, path, wfs, target):
    """A rename where OUT and the warehouse are one local filesystem, else a copy then a delete (another
    device, or another filesystem: S3, HDFS)."""
    if storefs.is_local(fs) and storefs.is_local(wfs):
        try:
            fs.move(path, target)
            return
        except OSError:  # another device: rename cannot cross it
            pass
    pafs.copy_files(path, target, source_filesystem=fs, destination_filesystem=wfs)
    fs.delete_file(path)


def stale_runs(target):
    """[(table, data/run-<run> folder)] of parts moved into the tables' locations by runs that committed no
    snapshot (they died before their commit): listed by the job, removed by --clean-stale."""
    catalog = target.catalog()
    out = []
    for name in TABLES.values():
        table = _load(catalog, f"{target.namespace}.{name}")
        if table is None:
            continue
        runs = {s.summary.additional_properties.get(RUN) for s in table.snapshots() if s.summary}
        fs, root = storefs.resolve(table.location())
        for info in fs.get_file_info(pafs.FileSelector(f"{root}/data", allow_not_found=True)):
            if info.type == pafs.FileType.Directory and info.base_name.startswith("run-") \
                    and info.base_name[4:] not in runs:
                out.append((name, info.path))
    return out


def remove_stale(stale):
    """Remove stale_runs' folders."""
    for _, path in stale:
        fs, where = storefs.resolve(path)
        fs.delete_dir(where)
