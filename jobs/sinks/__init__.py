"""Where a run's answer goes: Parquet under OUT, Iceberg tables (iceberg/), or nowhere (noop); kinds.py holds the
sinks and `sink_of`."""
