"""The embedded catalog (`--catalog-uri sqlite:///PATH`): Iceberg's JDBC catalog schema on SQLite through the
standard library's sqlite3.

The file holds the two tables Iceberg Java's JdbcCatalog and pyiceberg's SqlCatalog keep (`iceberg_tables`, one row
a table naming its current metadata file; `iceberg_namespace_properties`), written the way SqlCatalog writes them,
so either can open a catalog this one wrote and the other way round. It exists for the driver's memory: SqlCatalog
reaches SQLite through SQLAlchemy and its ORM, 18 MiB resident on every Iceberg run's driver (docs/performance.md,
issue 47) for the handful of statements below. A commit is one conditional UPDATE (the row still names the metadata
the commit started from, else CommitFailedException), as in both of those catalogs. A busy file waits
`BUSY_TIMEOUT_S`, then raises sqlite3's OperationalError ("database is locked"), which catalog_wait retries.
Catalogs on other databases are pyiceberg's own (`--catalog NAME`, `type: sql`)."""
import os
import sqlite3
from contextlib import closing, contextmanager

from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import EMPTY_DICT

from jobs.errors import UsageError

SCHEME = "sqlite:///"
BUSY_TIMEOUT_S = 5.0  # sqlite3's own default, which SqlCatalog's connections keep too
TABLE_TYPE = "TABLE"
NAMESPACE_MINIMAL_PROPERTIES = {"exists": "true"}
CREATE_TABLES = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables (catalog_name VARCHAR(255) NOT NULL, "
    "table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), "
    "previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5), "
    "PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, "
    "namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT NULL, "
    "PRIMARY KEY (catalog_name, namespace, property_key))",
)


def sqlite_path(uri):
    """The file of a `sqlite:///PATH` URI (`sqlite:////abs/path` or `sqlite:///relative/path`, as SQLAlchemy reads
    them); UsageError for anything else."""
    path = uri[len(SCHEME):] if uri and uri.startswith(SCHEME) else ""
    if not path or "?" in path or path == ":memory:":
        raise UsageError(f"--catalog-uri {uri!r}: give sqlite:///PATH, the embedded catalog's file (a catalog on "
                         "another database: --catalog NAME, configured for pyiceberg)")
    return path


class SqliteCatalog(MetastoreCatalog):
    """A pyiceberg catalog over one SQLite file (see the module's docstring); views are not supported, as in
    SqlCatalog."""

    def __init__(self, name, **properties):
        super().__init__(name, **properties)
        self.path = sqlite_path(properties.get("uri"))
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)  # a new lake's folder, as its warehouse's
        with self._session() as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"iceberg_tables", "iceberg_namespace_properties"} <= tables:
                for statement in CREATE_TABLES:
                    con.execute(statement)
            # a catalog from before views (no iceberg_type column) is used as it is, never migrated
            self._typed = any(r[1] == "iceberg_type" for r in con.execute("PRAGMA table_info(iceberg_tables)"))

    @contextmanager
    def _session(self):
        """One connection, one transaction: committed when the block ends, rolled back if it raises."""
        with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)) as con:
            with con:
                yield con

    def _tables_only(self):
        """The condition that leaves out other engines' views (rows of another iceberg_type)."""
        return " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)" if self._typed else ""

    def _insert_table(self, namespace, table_name, metadata_location):
        row = [self.name, namespace, table_name, metadata_location, None] + ([TABLE_TYPE] if self._typed else [])
        columns = "catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location" + \
            (", iceberg_type" if self._typed else "")
        try:
            with self._session() as con:
                con.execute(f"INSERT INTO iceberg_tables ({columns}) VALUES ({', '.join('?' * len(row))})", row)
        except sqlite3.IntegrityError as e:
            raise TableAlreadyExistsError(f"Table {namespace}.{table_name} already exists") from e

    @staticmethod
    def _names(identifier):
        return Catalog.namespace_to_string(Catalog.namespace_from(identifier)), Catalog.table_name_from(identifier)

    def create_table(self, identifier, schema, location=None, partition_spec=UNPARTITIONED_PARTITION_SPEC,
                     sort_order=UNSORTED_SORT_ORDER, properties=EMPTY_DICT):
        schema = self._convert_schema_if_needed(
            schema, int(properties.get(TableProperties.FORMAT_VERSION, TableProperties.DEFAULT_FORMAT_VERSION)))
        namespace, table_name = self._names(identifier)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        location = self._resolve_table_location(location, namespace, table_name)
        metadata_location = load_location_provider(table_location=location, table_properties=properties) \
            .new_table_metadata_file_location()
        metadata = new_table_metadata(location=location, schema=schema, partition_spec=partition_spec,
                                      sort_order=sort_order, properties=properties)
        self._write_metadata(metadata, load_file_io(properties=self.properties, location=metadata_location),
                             metadata_location)
        self._insert_table(namespace, table_name, metadata_location)
        return self.load_table(identifier)

    def register_table(self, identifier, metadata_location, overwrite=False):
        if overwrite:
            raise NotImplementedError("`overwrite` isn't supported")
        namespace, table_name = self._names(identifier)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        self._insert_table(namespace, table_name, metadata_location)
        return self.load_table(identifier)

    def load_table(self, identifier):
        namespace, table_name = self._names(identifier)
        with self._session() as con:
            row = con.execute("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND "
                              f"table_namespace = ? AND table_name = ?{self._tables_only()}",
                              (self.name, namespace, table_name)).fetchone()
        if row is None:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table_name}")
        if not row[0]:
            raise NoSuchTableError(f"Table {namespace}.{table_name} has no metadata location")
        metadata_location = row[0]
        io = load_file_io(properties=self.properties, location=metadata_location)
        metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
        return Table(identifier=Catalog.identifier_to_tuple(namespace) + (table_name,), metadata=metadata,
                     metadata_location=metadata_location, io=self._load_file_io(metadata.properties, metadata_location),
                     catalog=self)

    def drop_table(self, identifier):
        namespace, table_name = self._names(identifier)
        with self._session() as con:
            dropped = con.execute("DELETE FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND "
                                  f"table_name = ?{self._tables_only()}", (self.name, namespace, table_name)).rowcount
        if dropped < 1:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table_name}")

    def rename_table(self, from_identifier, to_identifier):
        namespace, table_name = self._names(from_identifier)
        to_namespace, to_name = self._names(to_identifier)
        if not self.namespace_exists(to_namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {to_namespace}")
        try:
            with self._session() as con:
                renamed = con.execute(
                    "UPDATE iceberg_tables SET table_namespace = ?, table_name = ? WHERE catalog_name = ? AND "
                    f"table_namespace = ? AND table_name = ?{self._tables_only()}",
                    (to_namespace, to_name, self.name, namespace, table_name)).rowcount
        except sqlite3.IntegrityError as e:
            raise TableAlreadyExistsError(f"Table {to_namespace}.{to_name} already exists") from e
        if renamed < 1:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table_name}")
        return self.load_table(to_identifier)

    def commit_table(self, table, requirements, updates):
        namespace, table_name = self._names(table.name())
        try:
            current = self.load_table(table.name())
        except NoSuchTableError:
            current = None
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        if current is None:
            self._insert_table(namespace, table_name, staged.metadata_location)
        else:
            with self._session() as con:
                moved = con.execute(
                    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? WHERE "
                    "catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?",
                    (staged.metadata_location, current.metadata_location, self.name, namespace, table_name,
                     current.metadata_location)).rowcount
            if moved < 1:
                raise CommitFailedException(f"Table has been updated by another process: {namespace}.{table_name}")
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def namespace_exists(self, namespace):
        """Whether the namespace was created, or holds a table or a namespace below it (as in SqlCatalog)."""
        name = Catalog.namespace_to_string(Catalog.identifier_to_tuple(namespace), NoSuchNamespaceError)
        below = name.replace("!", "!!").replace("_", "!_").replace("%", "!%") + ".%"
        with self._session() as con:
            return any(con.execute(
                f"SELECT 1 FROM {table} WHERE catalog_name = ? AND ({column} = ? OR {column} LIKE ? ESCAPE '!') "
                "LIMIT 1", (self.name, name, below)).fetchone()
                for table, column in (("iceberg_tables", "table_namespace"),
                                      ("iceberg_namespace_properties", "namespace")))

    def create_namespace(self, namespace, properties=EMPTY_DICT):
        if self.namespace_exists(namespace):
            raise NamespaceAlreadyExistsError(f"Namespace {namespace} already exists")
        name = Catalog.namespace_to_string(namespace, NoSuchNamespaceError)
        with self._session() as con:
            con.executemany("INSERT INTO iceberg_namespace_properties VALUES (?, ?, ?, ?)",
                            [(self.name, name, k, v) for k, v in (properties or NAMESPACE_MINIMAL_PROPERTIES).items()])

    def drop_namespace(self, namespace):
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        name = Catalog.namespace_to_string(namespace)
        if tables := self.list_tables(namespace):
            raise NamespaceNotEmptyError(f"Namespace {name} is not empty. {len(tables)} tables exist.")
        with self._session() as con:
            con.execute("DELETE FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ?",
                        (self.name, name))

    def list_tables(self, namespace):
        if namespace and not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        name = Catalog.namespace_to_string(namespace)
        with self._session() as con:
            rows = con.execute("SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ? AND "
                               f"table_namespace = ?{self._tables_only()}", (self.name, name)).fetchall()
        return [Catalog.identifier_to_tuple(ns) + (table_name,) for ns, table_name in rows]

    def list_namespaces(self, namespace=()):
        if namespace and not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        parent = Catalog.identifier_to_tuple(namespace)
        with self._session() as con:
            names = [r[0] for r in con.execute(
                "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ? UNION "
                "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?", (self.name, self.name))]
        level = len(parent) + 1
        return list({ns[:level] for ns in map(Catalog.identifier_to_tuple, names)
                     if len(ns) >= level and ns[:level - 1] == parent})

    def load_namespace_properties(self, namespace):
        name = Catalog.namespace_to_string(namespace)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace {name} does not exists")
        with self._session() as con:
            return dict(con.execute("SELECT property_key, property_value FROM iceberg_namespace_properties WHERE "
                                    "catalog_name = ? AND namespace = ?", (self.name, name)))

    def update_namespace_properties(self, namespace, removals=None, updates=EMPTY_DICT):
        name = Catalog.namespace_to_string(namespace)
        summary = self._get_updated_props_and_update_summary(
            current_properties=self.load_namespace_properties(namespace), removals=removals, updates=updates)[0]
        with self._session() as con:
            for key in set(removals or ()) | set(updates):
                con.execute("DELETE FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ? AND "
                            "property_key = ?", (self.name, name, key))
            con.executemany("INSERT INTO iceberg_namespace_properties VALUES (?, ?, ?, ?)",
                            [(self.name, name, k, v) for k, v in updates.items()])
        return summary

    def _no_views(self, *args, **kwargs):
        raise NotImplementedError("views are not supported by the embedded catalog")

    create_view = list_views = view_exists = register_view = drop_view = load_view = _no_views
