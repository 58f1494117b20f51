"""The embedded catalog (`--catalog-uri sqlite:///PATH`) is pyiceberg's own SqlCatalog: a catalog file the job's
earlier hand-written catalog wrote (Iceberg's JDBC catalog tables, with or without the views column) opens and
commits unchanged; a file another writer holds is a busy catalog, waited for; only sqlite:///PATH is taken, its
folder made when missing. Expectations: the rows and names each test writes, the DDL written out by hand."""
import sqlite3

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from jobs.errors import UsageError
from jobs.sinks.iceberg import catalog_wait
from jobs.sinks.iceberg.tables import IcebergTarget, sqlite_path

SCHEMA = pa.schema([pa.field("n", pa.int64())])
# the two tables of Iceberg's JDBC catalog as the job's earlier embedded catalog created them (with the views
# column), and as catalogs from before views have them (without)
TABLES_WITH_TYPE = ("CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) "
                    "NOT NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), "
                    "previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5), "
                    "PRIMARY KEY (catalog_name, table_namespace, table_name))")
TABLES_BEFORE_VIEWS = TABLES_WITH_TYPE.replace(" iceberg_type VARCHAR(5),", "")
NAMESPACES = ("CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace "
              "VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT NULL, "
              "PRIMARY KEY (catalog_name, namespace, property_key))")


def _target(tmp_path, name="catalog.db"):
    return IcebergTarget("night", uri=f"sqlite:///{tmp_path}/{name}", warehouse=str(tmp_path / "wh"))


def _values(table):
    return sorted(table.scan().to_arrow().column("n").to_pylist())


def test_the_embedded_catalog_is_pyicebergs_sql_catalog_and_makes_its_folder(tmp_path):
    catalog = _target(tmp_path, "lake/new/catalog.db").catalog()
    assert isinstance(catalog, SqlCatalog)
    catalog.create_namespace("night")
    assert (tmp_path / "lake" / "new" / "catalog.db").is_file()


@pytest.mark.parametrize("tables", [TABLES_WITH_TYPE, TABLES_BEFORE_VIEWS], ids=["with types", "before views"])
def test_a_catalog_file_written_before_opens_and_commits_unchanged(tmp_path, tables):
    with sqlite3.connect(tmp_path / "catalog.db") as con:
        con.execute(tables)
        con.execute(NAMESPACES)
    catalog = _target(tmp_path).catalog()
    catalog.create_namespace("night")
    catalog.create_table("night.t", schema=SCHEMA).append(pa.table({"n": pa.array([1, 2], pa.int64())}))
    assert _values(_target(tmp_path).catalog().load_table("night.t")) == [1, 2]
    with sqlite3.connect(tmp_path / "catalog.db") as con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(iceberg_tables)")]
    assert ("iceberg_type" in columns) == (tables is TABLES_WITH_TYPE)  # never migrated


def test_a_file_another_writer_holds_is_a_busy_catalog_waited_for_then_refused(tmp_path):
    target = IcebergTarget("night", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                           wait_s=0)
    target.catalog().create_namespace("night")
    holder = sqlite3.connect(tmp_path / "catalog.db")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(UsageError, match="locked by another writer"):
            target.waiting(lambda c: c.create_table("night.t", schema=SCHEMA), "--sink iceberg")
    finally:
        holder.rollback()
        holder.close()
    target.waiting(lambda c: c.create_table("night.t", schema=SCHEMA), "--sink iceberg")  # free again: done


def test_a_locked_file_is_busy_and_a_missing_column_is_not():
    from sqlalchemy.exc import OperationalError

    assert catalog_wait.busy(OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked")))
    assert catalog_wait.busy(OperationalError("SELECT", {}, sqlite3.OperationalError("no such column: x"))) is None


@pytest.mark.parametrize("uri", ["postgresql://db/lake", "sqlite://", "sqlite:///:memory:",
                                 "sqlite:///lake.db?mode=ro", "lake.db"])
def test_only_a_sqlite_file_is_the_embedded_catalog(uri, tmp_path):
    with pytest.raises(UsageError, match="give sqlite:///PATH"):
        IcebergTarget("night", uri=uri, warehouse=str(tmp_path)).catalog()


def test_a_sqlite_uri_names_its_file_as_sqlalchemy_reads_it():
    assert sqlite_path("sqlite:////abs/lake.db") == "/abs/lake.db"
    assert sqlite_path("sqlite:///relative/lake.db") == "relative/lake.db"
