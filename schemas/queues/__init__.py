"""The consume queues: 20-byte units and their ext (consume_queue.py), BatchCQ, a 5.2+ RocksDB, the units rebuilt
from the commit log, tag hash codes."""
