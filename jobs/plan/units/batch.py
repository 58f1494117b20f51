"""Units from a 5.x broker's batch consume queues (`batchconsumequeue/<topic>/<queue>/`, BatchCQ topics: 46-byte
units, schemas/queues/batch_consume_queue.py). A unit is one commit-log record: a single message, or an inner batch
whose messages the tasks unwrap (schemas/log/inner_batch.py); its queue offset is its first message's.

Each segment's first and last units are read once on the driver (their commit-log offsets say which splits it
serves, their queue offsets the queue's bounds); a task reads the segments overlapping its split. A window keeps
whole units: a unit is in a range when its first message is (store times are a unit's, so a time window's
bounds fall between units)."""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.plan.units.base import QueueBounds, QueueFilesSource, SourceRead, Split
from schemas.errors import NotInStore
from schemas.log import layout as L
from schemas.queues.batch_consume_queue import decode_bcq_segment
from schemas.queues.consume_queue import units_without_ext
from schemas.store import storefs

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from jobs.plan.window import Window
    from schemas.log.files import CommitLog


@dataclass(frozen=True)
class BatchSegment:
    """One batch-consume-queue file as probed: its queue (an index into the source's queues), its units'
    commit-log span [first_offset, end_offset), the queue offsets it holds [first, end) and its units' count."""

    queue: int
    segment: int
    first_offset: int
    end_offset: int
    first: int
    end: int
    units: int


@dataclass(frozen=True)
class BatchQueueFiles(QueueFilesSource):
    """The queues read from batch-consume-queue files (schemas.store.store.QueueFiles with batch=True) and, once probed,
    their segments; `offsets`: a window's (topic, queue_id, first, end) ranges."""

    KIND = "batchconsumequeue"

    queues: tuple = ()
    segments: tuple | None = None
    offsets: tuple = ()

    @property
    def data_end(self) -> int:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return max((s.end_offset for s in self.segments), default=0)

    def prepared(self, fs: pafs.FileSystem) -> BatchQueueFiles:
        """Itself with each segment's first and last units read (a few small reads per file)."""
        segments = []
        for k, queue in enumerate(self.queues):
            for j, seg in enumerate(queue.cq):
                head, tail, count = _ends(fs, seg)
                if head is not None:
                    segments.append(BatchSegment(k, j, int(head["commitlog_offset"]),
                                                 int(tail["commitlog_offset"]) + int(tail["size"]),
                                                 int(head["base_offset"]),
                                                 int(tail["base_offset"]) + int(tail["batch_size"]), count))
        return replace(self, segments=tuple(segments))

    def split(self, fs: pafs.FileSystem, split: Split) -> SourceRead:
        assert self.segments is not None  # probed: prepared() ran on the driver
        tables = []
        for seg in self.segments:
            if seg.end_offset <= split.start or seg.first_offset >= split.end:
                continue
            queue = self.queues[seg.queue]
            path = queue.cq[seg.segment]
            cols = decode_bcq_segment(storefs.read_range(fs, path.path), path.start, path.path)
            keep = (cols["commitlog_offset"] >= split.start) & (cols["commitlog_offset"] < split.end)
            bounds = self._range(queue)
            if bounds is not None:
                keep &= (cols["queue_offset"] >= bounds[0]) & (cols["queue_offset"] < bounds[1])
            if keep.any():
                tables.append(_table(queue, {k: v[keep] for k, v in cols.items()}))
        return SourceRead(tuple(tables))

    def split_holds(self, start: int, end: int) -> bool:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return any(s.end_offset > start and s.first_offset < end for s in self.segments)

    def for_split(self, start: int, end: int) -> BatchQueueFiles:
        assert self.segments is not None  # probed: prepared() ran on the driver
        return replace(self, segments=tuple(s for s in self.segments if s.end_offset > start and s.first_offset < end))

    def queue_bounds(self, fs: pafs.FileSystem, log: CommitLog) -> QueueBounds:
        assert self.segments is not None  # probed: prepared() ran on the driver
        out = {}
        for k, queue in enumerate(self.queues):
            mine = [s for s in self.segments if s.queue == k]
            if mine:
                out[(queue.topic, queue.queue_id)] = (min(s.first for s in mine), max(s.end for s in mine),
                                                      _store_time(fs, queue, mine))
        return out

    def windowed(self, fs: pafs.FileSystem, window: Window,
                 ranges: Sequence[tuple[str, int, int, int]]) -> BatchQueueFiles:
        mine = self.served
        return replace(self, offsets=tuple(r for r in ranges if (r[0], r[1]) in mine))

    def spans(self, fs: pafs.FileSystem, log: CommitLog, window: Window) -> tuple[tuple[int, int], ...]:
        assert self.segments is not None  # probed: prepared() ran on the driver
        kept = []
        for seg in self.segments:
            queue = self.queues[seg.queue]
            bounds = self._range(queue)
            if bounds is None or (bounds[0] < seg.end and bounds[1] > seg.first and bounds[0] < bounds[1]):
                kept.append((seg.first_offset, seg.end_offset))
        return tuple(kept)

    def queue_units(self, fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                    queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
        queue = next((q for q in self.queues if (q.topic, q.queue_id) == (topic, queue_id)), None)
        if queue is None:
            raise NotInStore(f"the store has no batch consume queue {queue_id} of topic {topic}")
        cols = _queue_units(fs, queue)
        at = np.searchsorted(cols["queue_offset"], np.asarray(queue_offsets, np.int64), side="right") - 1
        inside = (at >= 0) & (np.asarray(queue_offsets) < cols["queue_offset"][np.maximum(at, 0)]
                              + cols["batch_num"][np.maximum(at, 0)])
        if not inside.all():
            missing = np.asarray(queue_offsets)[~inside][0]
            raise NotInStore(f"batch consume queue {queue_id} of topic {topic} has no message at offset {missing}")
        return _table(queue, {k: v[at] for k, v in cols.items()})

    def _range(self, queue):
        """(first, end) of a window's range of the queue, None without one."""
        for topic, qid, first, end in self.offsets:
            if (topic, qid) == (queue.topic, queue.queue_id):
                return first, end
        return None


def _table(queue, cols):
    """CONSUME_QUEUE_SCHEMA table of one queue's decoded units (a batch unit holds no ext unit)."""
    n = len(cols["queue_offset"])
    return units_without_ext(pa.repeat(pa.scalar(queue.topic, pa.string()), n),
                             pa.array(np.full(n, queue.queue_id, np.int32)), cols["queue_offset"],
                             cols["commitlog_offset"], cols["size"], cols["tags_code_raw"])


def _unit_at(fs, seg, k):
    raw = storefs.read_range(fs, seg.path, k * L.BCQ_UNIT_SIZE, L.BCQ_UNIT_SIZE)
    if len(raw) < L.BCQ_UNIT_SIZE:
        return None
    unit = np.asarray(raw, np.uint8).view(L.BCQ_UNIT_DTYPE)[0]
    return unit if unit["size"] > 0 and unit["batch_size"] > 0 else None


def _ends(fs, seg):
    """(first unit, last unit, units written) of a segment ((None, None, 0) when it holds none): the last found by a
    binary search for the end of the written units (the file is zero-filled past them)."""
    count = seg.length // L.BCQ_UNIT_SIZE
    head = _unit_at(fs, seg, 0) if count else None
    if head is None:
        return None, None, 0
    lo, hi = 0, count  # unit lo is written; the first unwritten one is in (lo, hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _unit_at(fs, seg, mid) is None:
            hi = mid
        else:
            lo = mid
    return head, _unit_at(fs, seg, lo), lo + 1


def _queue_units(fs, queue):
    """Every unit of one queue (its segments decoded, in order): explain's few questions."""
    parts = [decode_bcq_segment(storefs.read_range(fs, s.path), s.start, s.path) for s in queue.cq]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else \
        decode_bcq_segment(np.zeros(0, np.uint8), 0)


def _store_time(fs, queue, segments):
    """time_of(queue offset) -> the store time of the unit holding it (the window's binary search), found by a
    binary search of single units in the segment holding that offset: a few 46-byte reads, never a whole queue
    on the driver. `segments`: the queue's probed segments, in queue-offset order."""
    firsts = [s.first for s in segments]

    def time_of(offset: int) -> int:
        seg = segments[max(bisect.bisect_right(firsts, offset) - 1, 0)]
        path = queue.cq[seg.segment]
        lo, hi = 0, seg.units  # the last unit whose first message is at or before `offset` is in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(_unit_at(fs, path, mid)["base_offset"]) <= offset:
                lo = mid
            else:
                hi = mid
        return int(_unit_at(fs, path, lo)["store_time"])
    return time_of
