"""Which consume-queue segments each split reads: every needed segment probed once per run, on the driver.

A segment's first and last real units bound the commit-log range it points into, so a split opens only
the segments whose range overlaps its own, whatever the number of splits and queues. The index holds a
few integers per segment (never per unit) and ships with the tasks; each task selects its segments from
it, so tasks stay independent and a retried task finds the same units."""
from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.fs as pafs

from schemas.queues.cq_ranges import segment_bounds

if TYPE_CHECKING:
    from schemas.store.store import QueueFiles

# probes in flight on a remote filesystem (S3, HDFS, GCS), where each is a round trip
REMOTE_PROBE_THREADS = 32


@dataclass(frozen=True)
class SegmentIndex:
    """Per consume-queue segment holding units, in (queue, file) order: where its units point."""

    queues: tuple  # QueueFiles of the queues the run reads
    queue: np.ndarray  # the segment's queue, an index into `queues`
    segment: np.ndarray  # its index in queues[queue].cq
    first: np.ndarray  # the unit indexes in the file of its first and last real units
    last: np.ndarray
    first_offset: np.ndarray  # their commit-log offsets
    last_offset: np.ndarray
    data_end: int  # where the last record any unit points at ends (0: no units)

    def overlapping(self, start: int, end: int) -> np.ndarray:
        """Rows of the segments that can hold units pointing into [start, end)."""
        return np.flatnonzero((self.first_offset < end) & (self.last_offset >= start))

    def take(self, rows: np.ndarray) -> SegmentIndex:
        """The index of some of its rows (a data source partition ships only the segments its split reads)."""
        return replace(self, queue=self.queue[rows], segment=self.segment[rows], first=self.first[rows],
                       last=self.last[rows], first_offset=self.first_offset[rows], last_offset=self.last_offset[rows])

    def bounds(self, row: int) -> tuple[int, int, int, int]:
        """(first, last, first_offset, last_offset) of one row, for cq_ranges.units_in_range."""
        return (int(self.first[row]), int(self.last[row]), int(self.first_offset[row]), int(self.last_offset[row]))


def probe_segments(fs: pafs.FileSystem, queues: Iterable[QueueFiles]) -> SegmentIndex:
    """SegmentIndex of the queues: each segment opened once, its head and tail read (threads on a remote
    filesystem, where every probe is a round trip)."""
    queues = tuple(queues)
    where = [(q, s) for q, queue in enumerate(queues) for s in range(len(queue.cq))]
    files = [queues[q].cq[s] for q, s in where]
    if isinstance(fs, pafs.LocalFileSystem) or len(files) < 2:
        found = [segment_bounds(fs, f) for f in files]
    else:
        with ThreadPoolExecutor(REMOTE_PROBE_THREADS) as pool:
            found = list(pool.map(partial(segment_bounds, fs), files))
    rows = [(q, s) + b for (q, s), b in zip(where, found) if b is not None]
    cols = np.array(rows, dtype=np.int64).reshape(-1, 7).T
    # mypy cannot count *cols[:6]: six columns, the fields before data_end
    return SegmentIndex(queues, *cols[:6], data_end=int(cols[6].max()) if len(rows) else 0)  # type: ignore[misc]
