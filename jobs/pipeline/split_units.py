"""Which bytes and units a task replays: the commit log cut into splits, and the consume-queue units that
point into one split, found in the segments the driver's probes say can hold them (run by the tasks)."""
import numpy as np
import pyarrow as pa

from schemas import storefs
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.consume_queue import resolve_units
from schemas.cq_ranges import units_in_range


def commitlog_splits(plan):
    """(start, end) byte ranges a task each: every commit-log file cut into equal pieces of at most
    split_size, plus the ranges no file covers (below the first file: deleted by retention; holes; beyond
    the last), so that units pointing there are still audited.

    The file holding the end of the data is cut over its data only: its pieces are then as even as the
    others, where cutting the whole file at split_size left one short piece whose task ended early and a
    full one that ran alone. With a window, likewise, a file is cut over the part its units point into
    (the bench store's 10% time window, 640-783 MiB of its first file, fell into grid pieces holding 128
    and 15 MiB of it, so one task ran nearly alone; cut over the window, it is two tasks of 71 MiB)."""
    spans = None if plan.spans is None else _arrays(plan.spans)
    splits, covered = [], 0
    for file in plan.log.files:  # plain and DLedger data files alike, each of its format's size
        start, length = file.start, file.length
        if start > covered:
            splits.append((covered, start))
        size = max(length, file.size)  # a truncated file keeps its nominal range
        used = size if plan.data_end is None else min(size, max(plan.data_end - start, 1))
        lo, hi = (start, start + used) if spans is None else _hull(*spans, start, start + used)
        pieces = -(-(hi - lo) // plan.split_size)  # none: a window that points nowhere into this file
        cuts = [lo + k * (hi - lo) // pieces for k in range(pieces + 1)] if pieces else []
        splits += list(zip(cuts[:-1], cuts[1:]))  # sizes differ by one byte at most
        if used < size:
            splits.append((start + used, start + size))
        covered = start + file.size
    splits.append((covered, 1 << 62))
    if plan.data_end is not None:  # splits past the last unit hold nothing: one catch-all instead
        kept = [s for s in splits[:-1] if s[0] < plan.data_end]
        splits = kept + [(kept[-1][1] if kept else 0, 1 << 62)]
    if plan.spans is not None:  # a window: only the splits its units point into
        splits = _holding(splits, *spans)
    return splits


def _arrays(spans):
    """[start, end) byte ranges as two int64 arrays, by start (a window of many queues has thousands)."""
    pairs = np.array(spans, dtype=np.int64).reshape(-1, 2)
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    return pairs[:, 0], pairs[:, 1]


def _hull(starts, ends, start, end):
    """The smallest [lo, hi) within [start, end) that holds every span's part in it (empty: lo == hi)."""
    inside = (starts < end) & (ends > start)
    if not inside.any():
        return start, start
    return max(int(starts[inside].min()), start), min(int(ends[inside].max()), end)


def _holding(splits, starts, ends):
    """The splits that overlap one of the spans (starts sorted, as _arrays gives them)."""
    if not len(starts):
        return []
    ends = np.maximum.accumulate(ends)
    kept = []
    for start, end in splits:
        k = np.searchsorted(starts, end) - 1  # the last span starting before the split ends
        if k >= 0 and ends[k] > start:
            kept.append((start, end))
    return kept


def split_units(plan, segments, start, end):
    """CONSUME_QUEUE_SCHEMA table of the needed queues' units pointing into [start, end) (run by a task):
    only the segments of the SegmentIndex whose range overlaps the split are opened."""
    fs = storefs.resolve(plan.store_uri)[0]
    rows = segments.overlapping(start, end)  # in (queue, file) order: a run of rows per queue
    batches = []
    for run in np.split(rows, np.flatnonzero(np.diff(segments.queue[rows])) + 1) if len(rows) else ():
        queue = segments.queues[segments.queue[run[0]]]
        parts = [units_in_range(fs, queue.cq[segments.segment[r]], segments.bounds(r), start, end) for r in run]
        parts = [p for p in parts if p is not None]
        if parts:
            batches.append(resolve_units(fs, queue, parts))
    return pa.Table.from_batches(batches, schema=CONSUME_QUEUE_SCHEMA)
