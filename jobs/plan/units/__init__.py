"""Where a queue's consume-queue units come from: the files, a 5.2+ RocksDB, a BatchCQ, or rebuilt from the commit log
(choose.py picks per queue; each source implements base.UnitsSource)."""
