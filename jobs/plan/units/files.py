"""Units from the broker's consume-queue files (`consumequeue/<topic>/<queue>/`, their ConsumeQueueExt units
resolved): the segments of the needed queues probed once on the driver (jobs/plan/cq_index.py), so that a
task opens only the segments whose units point into its split."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.plan.cq_index import SegmentIndex, probe_segments
from jobs.plan.units.base import QueueBounds, QueueFilesSource, SourceRead, Split
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.errors import CorruptStoreError, NotInStore
from schemas.log import layout as L
from schemas.log.lookup import read_records, read_units
from schemas.queues.consume_queue import resolve_units
from schemas.queues.cq_ranges import units_in_range

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from jobs.plan.window import Window
    from schemas.log.files import CommitLog


@dataclass(frozen=True)
class ConsumeQueueFiles(QueueFilesSource):
    """The queues read from consume-queue files (QueueFiles) and, once probed, their SegmentIndex."""

    KIND = "consumequeue"

    queues: tuple = ()  # schemas.store.store.QueueFiles
    segments: SegmentIndex | None = None

    @property
    def data_end(self) -> int:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return self.segments.data_end

    def prepared(self, fs: pafs.FileSystem) -> ConsumeQueueFiles:
        """Itself with its segments' heads and tails read, once (cq_index.probe_segments)."""
        return replace(self, segments=probe_segments(fs, self.queues))

    def split(self, fs: pafs.FileSystem, split: Split) -> SourceRead:
        assert self.segments is not None  # probed: prepared() ran on the driver
        index = self.segments
        rows = index.overlapping(split.start, split.end)  # in (queue, file) order: a run of rows per queue
        batches = []
        for run in np.split(rows, np.flatnonzero(np.diff(index.queue[rows])) + 1) if len(rows) else ():
            queue = index.queues[index.queue[run[0]]]
            found = [units_in_range(fs, queue.cq[index.segment[r]], index.bounds(r), split.start, split.end)
                     for r in run]
            parts = [p for p in found if p is not None]
            if parts:
                batches.append(resolve_units(fs, queue, parts))
        return SourceRead((pa.Table.from_batches(batches, schema=CONSUME_QUEUE_SCHEMA),))

    def split_holds(self, start: int, end: int) -> bool:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return len(self.segments.overlapping(start, end)) > 0

    def for_split(self, start: int, end: int) -> ConsumeQueueFiles:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return replace(self, segments=self.segments.take(self.segments.overlapping(start, end)))

    def queue_bounds(self, fs: pafs.FileSystem, log: CommitLog) -> QueueBounds:
        assert self.segments is not None  # probed: prepared() ran on the driver
        index = self.segments
        out: QueueBounds = {}
        for row in range(len(index.queue)):
            queue = index.queues[index.queue[row]]
            base = queue.cq[index.segment[row]].start // L.CQ_UNIT_SIZE
            first, last = base + int(index.first[row]), base + int(index.last[row]) + 1
            lo, hi, time_of = out.get((queue.topic, queue.queue_id), (first, last, None))
            out[(queue.topic, queue.queue_id)] = (min(lo, first), max(hi, last), time_of or _store_time(fs, log, queue))
        return out

    def windowed(self, fs: pafs.FileSystem, window: Window,
                 ranges: Sequence[tuple[str, int, int, int]]) -> ConsumeQueueFiles:
        """Each segment's first and last units cut to its queue's range (their commit-log offsets read where
        the cut moved them), segments outside dropped."""
        assert self.segments is not None  # probed: prepared() ran on the driver
        index = self.segments
        by_queue = {(t, q): (a, b) for t, q, a, b in ranges}
        keep, first, last, first_offset, last_offset = [], [], [], [], []
        for row in range(len(index.queue)):
            queue = index.queues[index.queue[row]]
            seg = queue.cq[index.segment[row]]
            base = seg.start // L.CQ_UNIT_SIZE
            lo, hi = by_queue[(queue.topic, queue.queue_id)]
            a, b = max(int(index.first[row]), lo - base), min(int(index.last[row]), hi - 1 - base)
            if a > b:
                continue
            keep.append(row)
            first.append(a)
            last.append(b)
            first_offset.append(_commitlog_offset(fs, seg, a) if a != index.first[row] else index.first_offset[row])
            last_offset.append(_commitlog_offset(fs, seg, b) if b != index.last[row] else index.last_offset[row])
        rows = np.asarray(keep, dtype=np.int64)
        col = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
        return replace(self, segments=SegmentIndex(index.queues, index.queue[rows], index.segment[rows], col(first),
                                                   col(last), col(first_offset), col(last_offset), index.data_end))

    def spans(self, fs: pafs.FileSystem, log: CommitLog, window: Window) -> tuple[tuple[int, int], ...]:
        assert self.segments is not None  # probed: prepared() ran on the driver
        index = self.segments
        return tuple(zip(index.first_offset.tolist(), (index.last_offset + 1).tolist()))

    def queue_units(self, fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                    queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
        queue = next((q for q in self.queues if (q.topic, q.queue_id) == (topic, queue_id)), None)
        if queue is None:
            raise NotInStore(f"the store has no consume queue {queue_id} of topic {topic}")
        return read_units(fs, queue, queue_offsets)


def _store_time(fs, log, queue):
    """The store time of the unit at a queue offset: its ext unit's msgStoreTime, else its record's
    storeTimestamp; -1 (before any window) when the unit or its record is gone (a truncated consume-queue
    file, retention) or damaged: the tasks audit those units as they do in any run."""
    def time_of(offset: int) -> int:
        try:
            unit = read_units(fs, queue, [offset]).to_pylist()[0]
            if unit["msg_store_time"] is not None:
                return unit["msg_store_time"]
            record = read_records(fs, log, [unit["commitlog_offset"]], [unit["size"]])
        except (NotInStore, CorruptStoreError, ValueError):
            return -1
        return record.column("store_timestamp")[0].as_py()
    return time_of


def _commitlog_offset(fs, segment, index):
    with fs.open_input_file(segment.path) as f:
        return int.from_bytes(f.read_at(8, index * L.CQ_UNIT_SIZE), "big", signed=True)
