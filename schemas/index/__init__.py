"""The broker's index files (index_file.py) and the lookup of a key through them or a scan (key_lookup.py)."""
