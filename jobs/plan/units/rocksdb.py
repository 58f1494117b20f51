"""Units from a 5.2+ broker's RocksDB consume queue (`storeType=defaultRocksDB`: `consumequeue/` itself is the
database, schemas/queues/rocksdb_store.py). RocksDB opens files by path: read only where the store is on this machine's
filesystem. A task finds a queue's units pointing into its split by two binary searches of the queue's
commit-log offsets (units are in commit-log order), then one ranged read: its cost is the needed queues' units
(2.5 M units/s through rocksdict's C iterator, measured on 1 M units)."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.plan.units.base import QueueBounds, SourceRead, Split, UnitsSource
from schemas.log.lookup import rocksdb_units
from schemas.queues.consume_queue import units_without_ext
from schemas.queues.rocksdb_store import consume_queue, is_rocksdb
from schemas.store import storefs

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from jobs.plan.window import Window
    from schemas.log.files import CommitLog


@dataclass(frozen=True)
class RocksDBQueues(UnitsSource):
    """The queues read from a RocksDB consume queue: its path and (topic, queue_id, first, end) each."""

    KIND = "rocksdb"

    path: str
    queues: tuple = ()

    @staticmethod
    def readable(fs: pafs.FileSystem, path: str | None) -> bool:
        """Whether `path` is a RocksDB consume queue this process can open (on the local filesystem)."""
        return path is not None and storefs.is_local(fs) and is_rocksdb(path)

    @classmethod
    def of_store(cls, path: str, topics: Collection[str] | None = None,
                 served: Collection[tuple[str, int]] = frozenset()) -> RocksDBQueues | None:
        """The source of the queues of `topics` (None: all) the database at `path` holds, less those `served`
        already; None when that leaves none."""
        queues = tuple(q for q in consume_queue(path).queues()
                       if (topics is None or q[0] in topics) and (q[0], q[1]) not in served)
        return cls(path, queues) if queues else None

    @property
    def served(self) -> frozenset[tuple[str, int]]:
        return frozenset((t, q) for t, q, _, _ in self.queues)

    def split(self, fs: pafs.FileSystem, split: Split) -> SourceRead:
        db = consume_queue(self.path)
        out = []
        for topic, qid, first, last in self.queues:
            lo = db.first_at_or_after(topic, qid, split.start, first, last)
            hi = db.first_at_or_after(topic, qid, split.end, lo, last)
            if hi > lo:
                v = db.units(topic, qid, lo, hi)
                n = hi - lo
                out.append(units_without_ext(pa.repeat(pa.scalar(topic, pa.string()), n),
                                             pa.array(np.full(n, qid, np.int32)), np.arange(lo, hi),
                                             v["commitlog_offset"], v["size"], v["tags_code"]))
        return SourceRead(tuple(out))

    def queue_bounds(self, fs: pafs.FileSystem, log: CommitLog) -> QueueBounds:
        db = consume_queue(self.path)
        return {(t, q): (first, end, partial(db.store_time, t, q)) for t, q, first, end in self.queues}

    def windowed(self, fs: pafs.FileSystem, window: Window,
                 ranges: Sequence[tuple[str, int, int, int]]) -> RocksDBQueues:
        cut = {(t, q): (a, b) for t, q, a, b in ranges}
        return replace(self, queues=tuple((t, q) + cut[(t, q)] for t, q, _, _ in self.queues))

    def spans(self, fs: pafs.FileSystem, log: CommitLog, window: Window) -> tuple[tuple[int, int], ...]:
        db = consume_queue(self.path)
        return tuple((db.commitlog_offset(t, q, a), db.commitlog_offset(t, q, b - 1) + 1)
                     for t, q, a, b in self.queues if b > a)

    def queue_units(self, fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                    queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
        return rocksdb_units(self.path, topic, queue_id, queue_offsets)
