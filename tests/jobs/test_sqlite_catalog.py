"""The embedded catalog (jobs/sinks/iceberg/sqlite_catalog.py) against pyiceberg's own SqlCatalog on the same
SQLite file: each reads and commits what the other wrote; a commit racing another writer is refused, then
retried; a locked file is a busy catalog; a catalog from before views is used as it is; only sqlite:///PATH
is taken; and an Iceberg run's driver never imports SQLAlchemy (the reason it exists). Expectations: the rows
and names each test writes."""
import sqlite3
import subprocess
import sys

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

from jobs.errors import UsageError
from jobs.sinks.iceberg import catalog_wait, sqlite_catalog
from jobs.sinks.iceberg.sqlite_catalog import SqliteCatalog, sqlite_path
from jobs.sinks.iceberg.tables import IcebergTarget
from tests.jobs.test_exit_codes import ROOT

SCHEMA = pa.schema([pa.field("n", pa.int64())])


def _rows(*values):
    return pa.table({"n": pa.array(values, pa.int64())})


def _catalogs(tmp_path):
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/wh"
    return SqliteCatalog("mqreplay", uri=uri, warehouse=warehouse), SqlCatalog("mqreplay", uri=uri,
                                                                               warehouse=warehouse)


def _values(table):
    return sorted(table.scan().to_arrow().column("n").to_pylist())


def test_each_reads_and_commits_what_pyicebergs_sql_catalog_wrote(tmp_path):
    ours, theirs = _catalogs(tmp_path)
    ours.create_namespace("night")
    ours.create_table("night.t", schema=SCHEMA).append(_rows(1, 2, 3))
    assert _values(theirs.load_table("night.t")) == [1, 2, 3]
    theirs.load_table("night.t").append(_rows(4, 5))
    theirs.create_table("night.u", schema=SCHEMA).append(_rows(9))
    assert _values(ours.load_table("night.t")) == [1, 2, 3, 4, 5]
    assert _values(ours.load_table("night.u")) == [9]
    assert ours.load_table("night.t").metadata_location == theirs.load_table("night.t").metadata_location
    both = [("night", "t"), ("night", "u")]
    assert sorted(ours.list_tables("night")) == sorted(theirs.list_tables("night")) == both
    assert ours.list_namespaces() == theirs.list_namespaces() == [("night",)]


def test_a_commit_racing_another_writer_is_refused_then_retried_never_lost(tmp_path, monkeypatch):
    """The row moved on after the commit loaded the table (its requirements passed): the conditional UPDATE
    matches nothing, so the commit fails and pyiceberg retries it on the new metadata. An unconditional one
    would have dropped the other writer's row (7)."""
    ours, theirs = _catalogs(tmp_path)
    ours.create_namespace("night")
    table = ours.create_table("night.t", schema=SCHEMA)
    load, commit, refused = SqliteCatalog.load_table, SqliteCatalog.commit_table, []

    def load_then_lose_the_race(self, identifier):
        loaded = load(self, identifier)
        monkeypatch.setattr(SqliteCatalog, "load_table", load)
        theirs.load_table("night.t").append(_rows(7))
        return loaded

    def counted_commit(self, *args):
        try:
            return commit(self, *args)
        except CommitFailedException as e:
            refused.append(str(e))
            raise

    monkeypatch.setattr(SqliteCatalog, "load_table", load_then_lose_the_race)
    monkeypatch.setattr(SqliteCatalog, "commit_table", counted_commit)
    table.append(_rows(8))
    assert refused == ["Table has been updated by another process: night.t"]
    assert _values(ours.load_table("night.t")) == [7, 8]


def test_a_file_another_writer_holds_is_a_busy_catalog(tmp_path, monkeypatch):
    ours, _ = _catalogs(tmp_path)
    ours.create_namespace("night")
    monkeypatch.setattr(sqlite_catalog, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tmp_path / "catalog.db")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError) as locked:
            ours.create_table("night.t", schema=SCHEMA)
    finally:
        holder.rollback()
        holder.close()
    assert catalog_wait.busy(locked.value) == "the SQLite file is locked by another writer"


def test_a_catalog_from_before_views_is_used_without_migrating_it(tmp_path):
    with sqlite3.connect(tmp_path / "catalog.db") as con:
        con.execute("CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) "
                    "NOT NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), "
                    "previous_metadata_location VARCHAR(1000), PRIMARY KEY (catalog_name, table_namespace, "
                    "table_name))")
        con.execute("CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace "
                    "VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT "
                    "NULL, PRIMARY KEY (catalog_name, namespace, property_key))")
    ours, _ = _catalogs(tmp_path)
    ours.create_namespace("night")
    ours.create_table("night.t", schema=SCHEMA).append(_rows(1))
    assert _values(ours.load_table("night.t")) == [1]
    with sqlite3.connect(tmp_path / "catalog.db") as con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(iceberg_tables)")]
    assert "iceberg_type" not in columns


def test_namespaces_and_tables_are_created_renamed_and_dropped_as_in_pyicebergs(tmp_path):
    ours, theirs = _catalogs(tmp_path)
    ours.create_namespace("a.b", {"owner": "night"})
    with pytest.raises(NamespaceAlreadyExistsError):
        ours.create_namespace("a.b")
    assert ours.namespace_exists("a") and not ours.namespace_exists("ab")
    assert ours.list_namespaces() == [("a",)] and ours.list_namespaces("a") == [("a", "b")]
    ours.update_namespace_properties("a.b", removals={"owner"}, updates={"team": "mq"})
    assert ours.load_namespace_properties("a.b") == theirs.load_namespace_properties("a.b") == {"team": "mq"}
    ours.create_table("a.b.t", schema=SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        ours.create_table("a.b.t", schema=SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        ours.drop_namespace("a.b")
    ours.rename_table("a.b.t", "a.b.u")
    assert theirs.list_tables("a.b") == [("a", "b", "u")]
    ours.drop_table("a.b.u")
    with pytest.raises(NoSuchTableError):
        ours.load_table("a.b.u")
    ours.drop_namespace("a.b")
    assert theirs.list_namespaces() == []


@pytest.mark.parametrize("uri", ["postgresql://db/lake", "sqlite://", "sqlite:///:memory:",
                                 "sqlite:///lake.db?mode=ro", "lake.db"])
def test_only_a_sqlite_file_is_the_embedded_catalog(uri, tmp_path):
    with pytest.raises(UsageError, match="give sqlite:///PATH"):
        IcebergTarget("night", uri=uri, warehouse=str(tmp_path)).catalog()


def test_a_sqlite_uri_names_its_file_as_sqlalchemy_reads_it():
    assert sqlite_path("sqlite:////abs/lake.db") == "/abs/lake.db"
    assert sqlite_path("sqlite:///relative/lake.db") == "relative/lake.db"


def test_an_iceberg_commit_never_imports_sqlalchemy(tmp_path):
    script = ("import sys\n"
              "import pyarrow as pa\n"
              "from jobs.sinks.iceberg.tables import IcebergTarget\n"
              f"c = IcebergTarget('night', uri='sqlite:///{tmp_path}/c.db', warehouse='{tmp_path}/wh').catalog()\n"
              "c.create_namespace_if_not_exists('night')\n"
              "t = c.create_table_if_not_exists('night.t', schema=pa.schema([('n', pa.int64())]))\n"
              "t.append(pa.table({'n': [1]}))\n"
              "print(len(c.load_table('night.t').scan().to_arrow()), 'sqlalchemy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "False"]
