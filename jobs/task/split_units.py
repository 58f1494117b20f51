"""Which bytes and units a task replays: the commit log cut into splits, and the units that point into one
split (run by the tasks): each units source of the plan (jobs/plan/units/: consume-queue files, a RocksDB
consume queue, units rebuilt from the split's own records) reads its queues' units, and the walk of the split's
records that a rebuild or the consume-queue audit needs is made here, once."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jobs.plan.units.base import Split
from jobs.plan.units.rebuilt import QUEUE_MARKS_SCHEMA  # noqa: F401 - what SplitUnits.marks holds
from jobs.task.cq_audit import audit_units
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.errors import CorruptStoreError
from schemas.queues.cq_rebuild import END_DAMAGED, record_cuts
from schemas.store import storefs

if TYPE_CHECKING:
    from jobs.plan.replay_plan import ReplayPlan
    from schemas.log.files import LogFile
    from schemas.queues.cq_rebuild import Walked

# bytes a pass over a file's record headers reads at a time (storefs.chunk_reader)
HOP_CHUNK = 16 << 20


def commitlog_splits(plan: ReplayPlan) -> list[tuple[int, int]]:
    """(start, end) byte ranges a task each: every commit-log file cut into equal pieces of at most
    split_size, plus the ranges no file covers (below the first file: deleted by retention; holes; beyond
    the last), so that units pointing there are still audited.

    The file holding the end of the data is cut over its data only: its pieces are then as even as the
    others, where cutting the whole file at split_size left one short piece whose task ended early and a
    full one that ran alone. With a window, likewise, a file is cut over the part its units point into
    (the bench store's 10% time window, 640-783 MiB of its first file, fell into grid pieces holding 128
    and 15 MiB of it, so one task ran nearly alone; cut over the window, it is two tasks of 71 MiB)."""
    spans: tuple[np.ndarray, np.ndarray] | None = None if plan.spans is None else _arrays(plan.spans)
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
        assert spans is not None  # made of plan.spans
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


def snap_to_records(plan: ReplayPlan, splits: Iterable[tuple[int, int]],
                    mapper: Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]] = map
                    ) -> list[tuple[int, int]]:
    """The splits with their bounds moved to record starts, where units are rebuilt from the records (a task
    then hops over its own split from its first record): each bound inside a plain file becomes the first
    record start at or after it, found by one pass over each file's record headers (0.37 s per GiB), a file
    per call of `mapper` (Spark's map over the files in the job, the builtin map in the data source). Units
    point at record starts, so the units of a split are the same before and after. A DLedger file, whose
    records are found through its entries, is one split. Splits outside the files stay as they are."""
    by_file: dict[LogFile, list[tuple[int, int]]] = {}
    rest: list[tuple[int, int]] = []
    for start, end in splits:
        f = plan.log.file_at(start)
        (by_file.setdefault(f, []) if f is not None else rest).append((start, end))
    bounds = [(f, f.kind.bounds_to_find(f, ranges)) for f, ranges in by_file.items()]
    bounds = [(f, found) for f, found in bounds if found]
    moved = dict(zip([f for f, _ in bounds], mapper(_cuts_of_file(plan.fs), bounds)))
    out = [span for f, ranges in by_file.items() for span in f.kind.snapped(ranges, dict(moved.get(f, ())))]
    return sorted(out + rest)


def unwalked(plan: ReplayPlan, splits: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The splits as snap_to_records leaves them without reading a record: those inside a file whose records are
    found only from its start (DLedger) one per file, the others as they are, for their own tasks to snap
    (snap_to_records of one split): what a data source plans, reading nothing on the driver."""
    return snap_to_records(plan, splits, lambda fn, items: [[] for _ in items])


def _cuts_of_file(fs):
    """f((file, bounds)) -> [(bound, first record start at or after it)] of one plain file (run where mapper
    runs it; pyarrow filesystems pickle)."""
    def cuts(item: tuple[LogFile, Sequence[int]]) -> list[tuple[int, int]]:
        logfile, bounds = item
        with storefs.chunk_reader(fs, logfile.path, HOP_CHUNK) as read:
            found = record_cuts(read, logfile.length, np.asarray(bounds, np.int64) - logfile.start, HOP_CHUNK)
        return list(zip(bounds, (found + logfile.start).tolist()))
    return cuts


@dataclass
class SplitUnits:
    """A split's units (CONSUME_QUEUE_SCHEMA), the CORRUPT_SCHEMA rows of what ended its rebuild early, and the
    queue offsets the rebuilt queues' units reach (QUEUE_MARKS_SCHEMA: what offsets.json says of them)."""

    units: pa.Table
    damaged: list
    marks: pa.Table = None
    audit: pa.Table = None  # --audit-consume-queue: jobs/task/cq_audit.CQ_AUDIT_SCHEMA rows
    left_out: pa.Table = None  # (topic, queue_id, queue_offset) of the units the audit found wrong: skipped


def split_units(plan: ReplayPlan, start: int, end: int) -> SplitUnits:
    """CONSUME_QUEUE_SCHEMA table of the needed queues' units pointing into [start, end) (run by a task): each
    of the plan's units sources (jobs/plan/units/) reads its own; when the split's records are walked (a
    source rebuilds units from them, or --audit-consume-queue), the stored units are audited against them."""
    walked, problem = walk_split(plan, start, end) if plan.walks_records else (None, None)
    split = Split(start, end, None if walked is None else walked.units, plan.since, plan.until)
    reads = [(source, source.split(plan.fs, split)) for source in plan.units]
    stored = [t for source, read in reads if source.STORED for t in read.tables]
    queue_units = pa.concat_tables(stored) if stored else CONSUME_QUEUE_SCHEMA.empty_table()
    audit, left_out = None, None
    if walked is not None and plan.audit_queues is not None:
        audit, wrong = audit_units(queue_units, walked.units, plan.audit_queues)
        if len(wrong):
            keep = np.ones(queue_units.num_rows, bool)
            keep[wrong] = False
            left_out = queue_units.take(pa.array(wrong)).select(["topic", "queue_id", "queue_offset"])
            queue_units = queue_units.filter(pa.array(keep))
    tables = [queue_units] + [t for source, read in reads if not source.STORED for t in read.tables]
    marks = [read.marks for _, read in reads if read.marks is not None]
    return SplitUnits(pa.concat_tables(tables) if len(tables) > 1 else tables[0], [problem] if problem else [],
                      pa.concat_tables(marks) if marks else None, audit, left_out)


def walk_split(plan: ReplayPlan, start: int, end: int) -> tuple[Walked | None, dict[str, Any] | None]:
    """(cq_rebuild.Walked of the records starting in [start, end), a record start in one file, or None where no
    file holds the split; the CORRUPT_SCHEMA row of a damaged record that ended it, or None), walked as the file's
    format walks a split (LogFormat.walk_split: a plain file from the split's start, a DLedger file whole). A
    damaged record fails the task, or under --on-corrupt skip ends
    the split's rebuilt units there: the records after it cannot be found, which the audit row says."""
    fs, f = plan.fs, plan.log.file_at(start)
    if f is None:
        return None, None
    rel, path = start - f.start, f.path

    def read(pos: int, n: int | None = None) -> np.ndarray:
        return storefs.read_range(fs, path, pos, n)

    walked, ended = f.kind.walk_split(read, f, rel, min(end - f.start, f.length))
    damaged_at = None if walked.how != END_DAMAGED else f.start + ended
    if damaged_at is None:
        return walked, None
    reason = ("record damaged: the units of the records from here to the end of the split "
              f"(commit-log offset {end}) cannot be rebuilt from the commit log")
    if not plan.skips_damage:
        raise CorruptStoreError(f.path, damaged_at, reason)
    return walked, dict(file=f.path, offset=damaged_at, topic=None, queue_id=None, queue_offset=None,
                        commitlog_offset=damaged_at, reason=reason)
