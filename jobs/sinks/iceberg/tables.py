"""--sink iceberg: a run's answer committed to Apache Iceberg tables, one snapshot per table per run.

The tasks write their Parquet parts as for the Parquet sink (jobs/output/writers.py: no result row through the JVM)
and the driver commits what the successful attempts wrote (sink.commit). Then, table by table, the driver moves
the parts into the table's location (`<location>/data/run-<run>/`), and adds them with pyiceberg's `add_files`
(the files are registered as they are, never rewritten; their statistics are read from the footers) in one
snapshot whose summary names the run (`mqreplay.run`). What the lake holds is kept by jobs/sinks/iceberg/lake.py in
`NS._mqreplay_ranges` (per store, group, topic and queue), committed last: a run counts once its ranges are there.

Before Spark starts, a run whose offsets a group already holds is refused (`check_lake`, exit 2), as is a lake whose
catalog was lost (the warehouse holds the tables, the catalog none: `jobs.maintain --register-existing`), and
`--starting-offsets iceberg` reads the groups' ranges once before the plan (`LakeScope`), which the plan asks
where each queue starts for the run's groups (where their ranges end) and which offsets beyond that a group holds
(out of its scope in the tasks' plan: a group continuing behind the others writes no row it holds). At the
commit, runs killed between two tables' commits are removed from the tables first (lake.repair), and a backfill's
messages the table holds are trimmed from its parts.
Every catalog operation waits while the catalog is busy, up to `--catalog-wait` (jobs/sinks/iceberg/catalog_wait.py).
Parts moved into a table's location by a run that died before its commit are referenced by no snapshot:
`stale_runs` lists them, `--clean-stale` (or jobs.maintain) removes them."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping, Optional, Sequence, TypeVar, Union

import pyarrow as pa
import pyarrow.fs as pafs

from jobs.errors import PublishFailed, UsageError
from jobs.output import place
from jobs.output.layouts import NORMALIZED
from jobs.output.place import Place
from jobs.output.writers import answer_schema, move_all, remove_attempts
from jobs.plan.brokers import store_identity
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg.catalog_wait import DEFAULT_WAIT, seconds, waiting
from jobs.task.cq_audit import CQ_AUDIT_SCHEMA
from schemas.arrow_schemas import BITMAP_SCHEMA, BODIES_SCHEMA, CORRUPT_SCHEMA

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from filtering.subscriptions import CompiledSubscription
    from jobs.plan.brokers import Broker
    from jobs.plan.build import Planned
    from jobs.sinks.iceberg.lake import HeldSpan

T = TypeVar("T")  # what an operation on the catalog returns

# output folder of a run (jobs/output/writers.py) -> table name; the audits get a table when they have rows
TABLES = {"messages": "messages", "audit/collisions": "collisions", "matched": "matched",
          "audit/corrupt": "audit_corrupt", "audit/bitmaps": "audit_bitmaps", "audit/bodies": "audit_bodies",
          "audit/consume_queue": "audit_consume_queue"}
ANSWERS = ("messages", "audit/collisions", "matched")  # a snapshot every run, empty when it has no row
# each table's partition: what its readers select by (a group's deliveries; a topic's messages); the sink writes a
# file per partition and split (TableSplitWriter), add_files reads a file's partition from its statistics
PARTITIONED_BY = {"matched": "group", "audit/collisions": "group", "messages": "topic"}
RUN, STORE, OFFSETS = lake.RUN, "mqreplay.store", "mqreplay.offsets"
# {broker: {topic: {queue: [first, end]}}} of the run, for people reading a snapshot (the lake reads its ranges)
BROKERS = "mqreplay.brokers"
DEFAULT_CATALOG = "mqreplay"
EMBEDDED_SCHEME = "sqlite:///"  # --catalog-uri: the embedded catalog is pyiceberg's SqlCatalog on this SQLite file
DEFAULT_NAMESPACE = "mqreplay"  # --namespace's default (the job's and jobs.maintain's)


@dataclass(frozen=True)
class CatalogArgs:
    """The catalog's arguments as the command line gave them (jobs/cli.py catalog_args), before they are checked:
    a catalog by name, or the embedded SQL catalog's URI and warehouse; the namespace; --catalog-wait's text."""

    namespace: str = DEFAULT_NAMESPACE
    name: str | None = None
    uri: str | None = None
    warehouse: str | None = None
    wait: str = DEFAULT_WAIT

    @property
    def given(self) -> bool:
        """Whether any catalog argument was given (they go with --sink iceberg only)."""
        return bool(self.name or self.uri or self.warehouse)


@dataclass(frozen=True)
class IcebergTarget:
    """Where a run's tables are: a catalog by pyiceberg's configuration (`name`), or the embedded SQL catalog
    (`uri`, `warehouse`), and the namespace; how long a busy catalog is waited for; the run's stores
    (lake.StoreRef) and whether it continues from the tables (`--starting-offsets iceberg`: offsets a group holds
    are out of its scope, not refused)."""

    namespace: str = DEFAULT_NAMESPACE
    name: str | None = None
    uri: str | None = None
    warehouse: str | None = None
    wait_s: float = 300.0
    refs: tuple = ()
    continuing: bool = False

    def catalog(self) -> Catalog:
        """The pyiceberg catalog (imported here: only an Iceberg run pays for it): pyiceberg's by name, or the
        embedded one, pyiceberg's SqlCatalog on a SQLite file (Iceberg's JDBC catalog tables: Java's JdbcCatalog
        opens it too), its folder made when missing; UsageError for a URI other than sqlite:///PATH.
        Called by the job's driver and jobs.maintain only, where two defaults change unless the environment sets
        them (measured on the bench store's second night, docs/performance.md): pydantic looks for no plugins
        (PYDANTIC_DISABLE_PLUGINS), as scanning every installed distribution's entry points for them held 5 MiB
        (the zip archives on sys.path, PySpark's among them, read whole); pyiceberg's thread pool has a thread per
        core (PYICEBERG_MAX_WORKERS), not Python's cores + 4, each of which kept its own malloc arena: 3 MiB."""
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        os.environ.setdefault("PYICEBERG_MAX_WORKERS", str(os.cpu_count() or 1))
        from pyiceberg.catalog import load_catalog
        if self.uri is None:
            return load_catalog(self.name)
        path = sqlite_path(self.uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # a new lake's folder, as its warehouse's
        return load_catalog(self.name or DEFAULT_CATALOG, type="sql", uri=self.uri, warehouse=_uri(self.warehouse))

    def describe(self) -> str:
        return f"catalog {self.name}" if self.uri is None else f"{self.uri} (warehouse {self.warehouse})"

    def waiting(self, operation: Callable[[Catalog], T], what: str) -> T:
        """operation(catalog), retried while the catalog is busy (catalog_wait.waiting); each try's catalog closed
        after it (SqlCatalog's engine keeps a pool of connections to the file: none left open between operations)."""
        def once() -> T:
            catalog = self.catalog()
            try:
                return operation(catalog)
            finally:
                getattr(catalog, "close", lambda: None)()
        return waiting(once, self.wait_s, what, self.uri, repair=self.register_command())

    def register_command(self) -> str:
        """jobs.maintain's command that registers the warehouse's tables in a new catalog (a lost or damaged one)."""
        where = (f"--catalog-uri {self.uri} --warehouse {self.warehouse}" if self.uri is not None
                 else f"--catalog {self.name}")
        return f"python -m jobs.maintain {where} --namespace {self.namespace} --register-existing"

    def warehouse_uri(self, catalog: Catalog) -> Optional[str]:
        return _uri(self.warehouse) if self.uri is not None else catalog.properties.get("warehouse")

    def warehouse_place(self, catalog: Catalog) -> Optional[Place]:
        """The warehouse as a place.Place, resolved once (None: the catalog names none)."""
        return place.warehouse(self.warehouse_uri(catalog))

    def table_place(self, catalog: Catalog, table: Table) -> Place:
        """Where a table's files are, as a place.Place: inside the warehouse's, or its own location's."""
        return place.location(self.warehouse_uri(catalog), table.location())


def catalog_target(given: CatalogArgs, what: str = "--sink iceberg") -> IcebergTarget:
    """IcebergTarget of the command line's catalog (CatalogArgs); UsageError for a half-given catalog or a
    --catalog-wait without its unit."""
    if given.uri and given.name:
        raise UsageError(f"{what}: give --catalog NAME (pyiceberg's configuration) or --catalog-uri with "
                         "--warehouse (the embedded SQL catalog), not both")
    if given.uri and not given.warehouse:
        raise UsageError("--catalog-uri needs --warehouse PATH_OR_URI: where the tables' files go")
    if not given.uri and not given.name:
        raise UsageError(f"{what} needs a catalog: --catalog-uri sqlite:///PATH --warehouse PATH_OR_URI "
                         "(embedded, nothing to run), or --catalog NAME from pyiceberg's configuration")
    return IcebergTarget(given.namespace, given.name, given.uri, given.warehouse, seconds(given.wait))


def with_stores(target: IcebergTarget, brokers: Iterable[Broker], continuing: bool) -> IcebergTarget:
    """The target knowing the run's stores by what they are (brokers.store_identity), not by their spelling."""
    return replace(target, refs=tuple(lake.StoreRef(b.name, *store_identity(b)) for b in brokers),
                   continuing=continuing)


def sqlite_path(uri: Optional[str]) -> str:
    """The file of an embedded catalog's URI (`sqlite:///PATH`: absolute with four slashes, relative with three, as
    SQLAlchemy reads them); UsageError for anything else."""
    path = uri[len(EMBEDDED_SCHEME):] if uri and uri.startswith(EMBEDDED_SCHEME) else ""
    if not path or "?" in path or path == ":memory:":
        raise UsageError(f"--catalog-uri {uri!r}: give sqlite:///PATH, the embedded catalog's file (a catalog on "
                         "another database: --catalog NAME, configured for pyiceberg)")
    return path


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


def _load(catalog, identifier):
    return lake.load(catalog, identifier)


def open_lake(target: IcebergTarget, catalog: Catalog) -> lake.Held:
    """lake.Held of the namespace, once it is known to be a lake this code continues: UsageError (exit 2) for a
    lost catalog (the warehouse holds the namespace's tables, the catalog none: never a second lake over them)
    and for a lake committed before per-group ranges."""
    matched = _load(catalog, f"{target.namespace}.matched")
    ranges = _load(catalog, f"{target.namespace}.{lake.RANGES}")
    if matched is None and ranges is None:
        found = lake.table_locations(target.warehouse_place(catalog), target.namespace)
        if found:
            where = (f"--catalog-uri {target.uri} --warehouse {target.warehouse}" if target.uri is not None
                     else f"--catalog {target.name}")
            raise UsageError(f"--sink iceberg: the warehouse holds tables of namespace {target.namespace} "
                             f"({', '.join(sorted(found))}) but {target.describe()} has none of them: the catalog was "
                             "lost or is another one. Nothing committed (a new lake over them would be a second "
                             "lake in the same place). Register them from their latest metadata, history kept: "
                             f"python -m jobs.maintain {where} --namespace {target.namespace} --register-existing")
    if matched is not None and ranges is None and matched.snapshots():
        raise UsageError(f"--sink iceberg: {target.namespace}.matched was committed by an earlier mqreplay that kept "
                         f"its offsets in snapshot summaries ({STORE}, {OFFSETS}, {BROKERS}) and has no "
                         f"{target.namespace}.{lake.RANGES}: its continuation cannot be read per group. Continue in a "
                         "new --namespace (and rebuild this one's history there with a backfill run)")
    return lake.Held.of(catalog, target.namespace, target.refs)


def check_lake(target: IcebergTarget, parts: Sequence[tuple[Broker, Planned]]) -> list[str]:
    """Before Spark: the lake opened (open_lake), and a run of given offsets that a group already holds refused
    (exit 2, nothing committed; a continuing run leaves them out of its groups' scope instead: held_scope). The
    runs killed between two commits, which the commit will remove, as warnings."""
    def check(catalog: Catalog) -> list[str]:
        held = open_lake(target, catalog)
        lake.refuse_renamed(target.namespace, lake.stores_held(catalog, target.namespace), target.refs)
        if not target.continuing:
            lake.refuse_overlaps(target.namespace, held, target.refs, lake.run_ranges(_named(parts)))
        dead: dict[str, list[str]] = {}
        for name in TABLES.values():
            table = _load(catalog, f"{target.namespace}.{name}")
            for run in lake.incomplete(table, held) if table is not None else ():
                dead.setdefault(run, []).append(name)
        return [f"run {r} committed {', '.join(t)} but was killed before its ranges: its rows are removed from "
                "them before this run commits" for r, t in sorted(dead.items())]
    return target.waiting(check, "--sink iceberg (checking the tables)")


class LakeScope:
    """What a continuing run (`--starting-offsets iceberg`) takes from the lake, read once before the plan (the
    groups' ranges, lake.Held): the plan asks it, broker by broker, where the run's groups start
    (`starts`) and which offsets of its ranges they hold already (`held`), and is made once with the answers."""

    def __init__(self, target: IcebergTarget) -> None:
        self.refs = target.refs
        self.lake = target.waiting(lambda catalog: open_lake(target, catalog), "--starting-offsets iceberg")

    def starts(self, broker: str, pairs: Optional[Collection[tuple[str, str]]] = None) -> dict[str, dict[int, int]]:
        """{topic: {queue: offset}} where `broker`'s queues start for the groups `pairs` ({(group, topic)}; None:
        every group the lake holds): where the ranges of the groups reading each queue end (lake.starts)."""
        return lake.starts(self.lake, self.refs, None if pairs is None else {broker: pairs}).get(broker, {})

    def held(self, broker: str, subscriptions: Collection[CompiledSubscription],
             ranges: Collection[tuple[str, int, int, int]]) -> tuple[HeldSpan, ...]:
        """((group, topic, queue, first, end), ...): the offsets of `broker`'s planned `ranges` its groups
        (`subscriptions`) hold in the lake already (lake.held_scope), left out of their scope (ReplayPlan.held)."""
        pairs = {broker: {(s.sub.group, s.sub.topic) for s in subscriptions}}
        return lake.held_scope(self.lake, self.refs, lake.broker_ranges(broker, subscriptions, ranges), pairs).get(
            broker, ())


def _named(parts):
    return [(b.name, p) for b, p in parts]


def publish_tables(target: IcebergTarget, out: Union[Place, str], written: Mapping[str, tuple[int, int, int]], run: str,
                   with_body: bool, parts: Sequence[tuple[Broker, Planned]],
                   kept: Optional[Mapping[str, Sequence[tuple[str, str]]]] = None,
                   before_ranges: Iterable[Callable[[], Mapping[str, int]]] = ()) -> dict[str, int]:
    """Commit the parts of the run's temporary OUT (sink.commit's `written`: {output: (files, rows, bytes)}) to
    the tables: {table: files added}. Runs killed between two commits are removed first; the rows a group held
    when the run was planned were never written (its plan's `held`); offsets a group holds besides them are
    refused (exit 2, nothing committed: a night that committed the same offsets meanwhile); the messages a
    backfill shares with the table are trimmed; then one snapshot per table, the answer tables every run, the
    audits when they have rows, matched last; then `before_ranges` (callables returning {table: files added}: the
    ledgers merged across nights, jobs/sinks/iceberg/ledger_tables.py); then the run's ranges. `kept`: {output:
    [(attempt's file, final name)]} of the parts the commit left where their attempts wrote them (an object store:
    sink.attempt_parts), each moved from there into its table, _attempts/ removed then."""
    out, kept = Place.of(out), kept or {}
    ranges = lake.run_ranges(_named(parts))
    held = target.waiting(lambda catalog: _prepare_commit(target, catalog, run), "--sink iceberg (repairing)")
    scope = {b.name: p.plan.held for b, p in parts if p.plan.held}
    lake.refuse_overlaps(target.namespace, held, target.refs, lake.unheld(ranges, scope))
    messages = target.waiting(lambda c: _load(c, f"{target.namespace}.messages"), "--sink iceberg")
    present = lake.messages_present(messages, held, target.refs, ranges)
    lake.trim_messages(out, [out.path(p) for p, _ in kept.get("messages", ())], present)
    properties = {RUN: run, BROKERS: json.dumps({b.name: _offsets(p.ranges) for b, p in parts}, sort_keys=True,
                                                separators=(",", ":"))}
    if len(target.refs) == 1:
        properties[STORE] = target.refs[0].key
    added: dict[str, int] = {}
    for output, name in TABLES.items():
        if output not in ANSWERS and not written.get(output, (0, 0))[1]:
            continue
        identifier = f"{target.namespace}.{name}"
        table, where = target.waiting(lambda c: table_and_place(target, c, identifier, _schema(output, with_body),
                                                                PARTITIONED_BY.get(output)),
                                      f"--sink iceberg ({identifier})")
        files = move_parts(out, output, where, run, kept.get(output, ()))
        target.waiting(lambda c: _add(c, identifier, files, properties), f"--sink iceberg (committing {identifier})")
        added[name] = len(files)
    for commit in before_ranges:
        added.update(commit())
    remove_attempts(out)
    rows = lake.ranges_rows(target.refs, ranges, run)
    target.waiting(lambda c: _append_ranges(target, c, rows, run), "--sink iceberg (committing the ranges)")
    return added


def _prepare_commit(target, catalog, run):
    """The namespace, the lake's ranges, and the runs killed between two commits removed from every table."""
    catalog.create_namespace_if_not_exists(target.namespace)
    held = open_lake(target, catalog)
    repair(catalog, target.namespace, held)
    return held


def repair(catalog: Catalog, namespace: str, held: lake.Held) -> dict[str, int]:
    """Remove from every table the files of runs whose ranges were never committed: {table: files removed}."""
    removed: dict[str, int] = {}
    for name in list(TABLES.values()):
        table = _load(catalog, f"{namespace}.{name}")
        dead = lake.incomplete(table, held) if table is not None else []
        if dead:
            removed[name] = lake.remove_runs(table, dead)
    return removed


def _add(catalog, identifier, files, properties):
    """add_files once: a retry after a commit whose answer was lost finds the run's snapshot and adds nothing."""
    table = catalog.load_table(identifier)
    if any(s.summary and s.summary.additional_properties.get(RUN) == properties[RUN] for s in table.snapshots()):
        return
    table.add_files(files, snapshot_properties=properties)


def _append_ranges(target, catalog, rows, run):
    identifier = f"{target.namespace}.{lake.RANGES}"
    table = _load(catalog, identifier)
    if table is None:
        _refuse_second_lake(target, catalog, lake.RANGES)
        table = catalog.create_table_if_not_exists(identifier, schema=lake.RANGES_SCHEMA)
    if lake.committed(table, run):
        return
    table.append(rows, snapshot_properties={RUN: run})


def _refuse_second_lake(target, catalog, name):
    """A table is never created where the warehouse already holds one of that name (a lost catalog's)."""
    found = lake.table_locations(target.warehouse_place(catalog), target.namespace).get(name)
    if found:
        raise UsageError(f"--sink iceberg: {target.namespace}.{name} is not in {target.describe()} but its files are "
                         f"({found}): register them (python -m jobs.maintain ... --register-existing), never a "
                         "second table in the same place")


def _table(target, catalog, identifier, schema, partition_column):
    """The table, created on first use with its identity partition (None: unpartitioned)."""
    table = _load(catalog, identifier)
    if table is not None and set(schema.names) - {f.name for f in table.schema().fields}:
        # a table made by an earlier version (before runs named their brokers, before LMQ rows named their
        # source queue): the new columns added, null in its earlier rows
        with table.update_schema() as update:
            update.union_by_name(schema)
        table = catalog.load_table(identifier)
    if table is not None:
        return table
    _refuse_second_lake(target, catalog, identifier.rsplit(".", 1)[1])
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
    return answer_schema(output, NORMALIZED, with_body)


def table_and_place(target: IcebergTarget, catalog: Catalog, identifier: str, schema: pa.Schema,
                    partition_column: Optional[str]) -> tuple[Table, Place]:
    table = _table(target, catalog, identifier, schema, partition_column)
    return table, target.table_place(catalog, table)


def move_parts(out: Place, output: str, location: Place, run: str,
               kept: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Move an output's parts from the temporary OUT (a Place: those at their final names, and `kept`, those
    left where their attempts wrote them) into the table's location (a Place), under data/run-<run>/, a folder
    no other run wrote (PublishFailed if it exists: part paths are never reused), sink.MOVE_THREADS at a time (a
    copy where OUT and the warehouse are on different filesystems or devices); their new URIs."""
    infos = out.fs.get_file_info(pafs.FileSelector(out.path(output), recursive=True, allow_not_found=True))
    found = [(i.path, i.path[len(out.path(output)) + 1:]) for i in infos
             if i.type == pafs.FileType.File and i.path.endswith(".parquet")]
    found += [(out.path(path), final[len(output) + 1:]) for path, final in kept]
    folder = location.path(f"data/run-{run}")
    if location.fs.get_file_info(folder).type != pafs.FileType.NotFound:  # never another run's files replaced
        raise PublishFailed(f"--sink iceberg: {folder} exists already: a run's part paths are its own, and run {run} "
                            "is not this run's to write into (nothing of this run was committed to this table)")
    moves, files = [], []
    for path, name in sorted(found, key=lambda f: f[1]):
        relative = name.replace("/", "-").replace("=", "_")
        moves.append((path, location.path(f"data/run-{run}/{relative}")))
        files.append(f"{location.uri.rstrip('/')}/data/run-{run}/{relative}")
    move_all(out.fs, moves, location.fs)
    return files


def stale_runs(target: IcebergTarget) -> list[tuple[str, str, pafs.FileSystem]]:
    """[(table, data/run-<run> folder, its filesystem)] of parts moved into the tables' locations that no snapshot
    references (their run died before its commit, or its files were compacted and their snapshots expired): listed
    by the job, removed by --clean-stale and jobs.maintain."""
    return target.waiting(lambda catalog: _stale(target, catalog), "--sink iceberg (listing stale parts)")


def _stale(target, catalog):
    out = []
    for name in TABLES.values():
        table = _load(catalog, f"{target.namespace}.{name}")
        if table is None:
            continue
        where = target.table_place(catalog, table)
        folders = {info.base_name[4:]: info.path
                   for info in where.fs.get_file_info(pafs.FileSelector(where.path("data"), allow_not_found=True))
                   if info.type == pafs.FileType.Directory and info.base_name.startswith("run-")}
        referenced = lake.referenced_runs(table, folders)
        out += [(name, path, where.fs) for run, path in sorted(folders.items()) if run not in referenced]
    return out


def remove_stale(stale: Iterable[tuple[str, str, pafs.FileSystem]]) -> None:
    """Remove stale_runs' folders."""
    for _, path, fs in stale:
        fs.delete_dir(path)
