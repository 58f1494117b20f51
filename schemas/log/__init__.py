"""The commit log: its files and layouts (files.py, dledger.py), a record's layout (layout.py) and its decode
(records.py, properties.py, hosts.py), the 5.x inner batches and multi-dispatch, records read by offset (lookup.py)."""
