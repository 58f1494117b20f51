"""The Iceberg sink: the tables and their commits (tables.py), what the lake holds per store, group and queue
(lake.py), its upkeep (upkeep.py), the catalog and its busy waits."""
