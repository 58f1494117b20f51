"""Which bytes and units a task replays: the commit log cut into splits, and the units that point into one
split (run by the tasks): consume-queue units found in the segments the driver's probes say can hold them,
units of a RocksDB consume queue found by binary search, and units rebuilt from the split's own records
(jobs/pipeline/units_source.py says which queue takes which)."""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.pipeline.cq_audit import audit_units
from schemas import storefs
from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.columns import queue_index
from schemas.commitlog_files import PLAIN
from schemas.consume_queue import resolve_units, units_without_ext
from schemas.cq_ranges import units_in_range
from schemas.cq_rebuild import END_DAMAGED, END_SHORT, file_units, rebuild_units, record_cuts
from schemas.errors import CorruptStoreError
from schemas.rocksdb_store import consume_queue

# bytes read past a split's end for the records that start in it and end beyond (a record of the bench stores
# is 300-600 bytes; a longer one is read again whole, its size known from its header)
RECORD_MARGIN = 64 << 10
# bytes a pass over a file's record headers reads at a time (storefs.chunk_reader)
HOP_CHUNK = 16 << 20


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


def snap_to_records(plan, splits, mapper=map):
    """The splits with their bounds moved to record starts, where units are rebuilt from the records (a task
    then hops over its own split from its first record): each bound inside a plain file becomes the first
    record start at or after it, found by one pass over each file's record headers (0.37 s per GiB), a file
    per call of `mapper` (Spark's map over the files in the job, the builtin map in the data source). Units
    point at record starts, so the units of a split are the same before and after. A DLedger file, whose
    records are found through its entries, is one split. Splits outside the files stay as they are."""
    by_file, rest = {}, []
    for start, end in splits:
        f = plan.log.file_at(start)
        (by_file.setdefault(f, []) if f is not None else rest).append((start, end))
    plain = [(f, sorted({b for s in ranges for b in s if f.start < b < f.start + f.length}))
             for f, ranges in by_file.items() if f.kind == PLAIN]
    found = dict(zip([f for f, _ in plain], mapper(_cuts_of_file(plan.store_uri), plain)))
    out = []
    for f, ranges in by_file.items():
        if f.kind != PLAIN:
            out.append((min(s for s, _ in ranges), max(e for _, e in ranges)))
            continue
        moved = dict(found[f])
        for start, end in ranges:
            start, end = moved.get(start, start), moved.get(end, end)
            if start < end:
                out.append((start, end))
    return sorted(out + rest)


def _cuts_of_file(store_uri):
    """f((file, bounds)) -> [(bound, first record start at or after it)] of one plain file (run where mapper
    runs it)."""
    def cuts(item):
        logfile, bounds = item
        fs = storefs.resolve(store_uri)[0]
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
    audit: pa.Table = None  # --audit-consume-queue: jobs/pipeline/cq_audit.CQ_AUDIT_SCHEMA rows
    left_out: pa.Table = None  # (topic, queue_id, queue_offset) of the units the audit found wrong: skipped


# per rebuilt queue and split, in the offsets window: the first queue offset stored at or after --since, one past
# the last stored before --until, the first stored at or after --until (nulls: none); the driver takes the least
# of `first` and `after` over the splits, the most of `end`, and ends a queue at `after` where it has one
QUEUE_MARKS_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("first", pa.int64()),
                                ("end", pa.int64()), ("after", pa.int64())])


def split_units(plan, segments, start, end):
    """CONSUME_QUEUE_SCHEMA table of the needed queues' units pointing into [start, end) (run by a task):
    only the segments of the SegmentIndex whose range overlaps the split are opened; with a RocksDB consume
    queue, its queues' units found by binary search; with queues rebuilt from the commit log, the units of
    the split's records (its bounds are record starts: snap_to_records)."""
    fs = storefs.resolve(plan.store_uri)[0]
    rows = segments.overlapping(start, end)  # in (queue, file) order: a run of rows per queue
    batches = []
    for run in np.split(rows, np.flatnonzero(np.diff(segments.queue[rows])) + 1) if len(rows) else ():
        queue = segments.queues[segments.queue[run[0]]]
        parts = [units_in_range(fs, queue.cq[segments.segment[r]], segments.bounds(r), start, end) for r in run]
        parts = [p for p in parts if p is not None]
        if parts:
            batches.append(resolve_units(fs, queue, parts))
    tables = [pa.Table.from_batches(batches, schema=CONSUME_QUEUE_SCHEMA)]
    if plan.rocks is not None:
        tables += _rocks_units(plan.rocks, start, end)
    damaged, marks, audit, left_out = [], None, None, None
    if plan.walks_records:
        walked, problem = rebuilt_units(plan, fs, start, end)
        if walked is not None and plan.audit_queues is not None:
            queue_units = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            audit, wrong = audit_units(queue_units, walked.units, plan.audit_queues)
            if len(wrong):
                keep = np.ones(queue_units.num_rows, bool)
                keep[wrong] = False
                left_out = queue_units.take(pa.array(wrong)).select(["topic", "queue_id", "queue_offset"])
                tables = [queue_units.filter(pa.array(keep))]
        if walked is not None and plan.rebuild:
            rebuilt = _in_offsets(plan.rebuild, _rebuilt_kept(plan.rebuild, walked.units))
            marks = queue_marks(rebuilt, plan.since, plan.until)
            tables.append(units_without_ext(*(rebuilt.column(c) for c in UNIT_COLUMNS)))
        damaged += [problem] if problem else []
    return SplitUnits(pa.concat_tables(tables) if len(tables) > 1 else tables[0], damaged, marks, audit, left_out)


def _rocks_units(rocks, start, end):
    """Units of the RocksDB consume queue's queues (RocksQueues) pointing into [start, end): per queue, two
    binary searches of its cq offsets (units are in commit-log order), then one ranged read."""
    db = consume_queue(rocks.path)
    out = []
    for topic, qid, first, last in rocks.queues:
        lo = db.first_at_or_after(topic, qid, start, first, last)
        hi = db.first_at_or_after(topic, qid, end, lo, last)
        if hi > lo:
            v = db.units(topic, qid, lo, hi)
            n = hi - lo
            out.append(units_without_ext(pa.repeat(pa.scalar(topic, pa.string()), n),
                                         pa.array(np.full(n, qid, np.int32)), np.arange(lo, hi),
                                         v["commitlog_offset"], v["size"], v["tags_code"]))
    return out


def rebuilt_units(plan, fs, start, end):
    """(cq_rebuild.Walked of the records starting in [start, end), a record start in one file, or None where no
    file holds the split; the CORRUPT_SCHEMA row of a damaged record that ended it, or None). A plain file's
    split is read with RECORD_MARGIN past its end (a longer last record is read again, whole); a DLedger file
    is read whole (its split is the file). A damaged record fails the task, or under --on-corrupt skip ends
    the split's rebuilt units there: the records after it cannot be found, which the audit row says."""
    f = plan.log.file_at(start)
    if f is None:
        return None, None
    rel = start - f.start
    if f.kind != PLAIN:
        walked = file_units(f, storefs.read_range(fs, f.path), rel, end - f.start)
        damaged_at = None if walked.how != END_DAMAGED else f.start + walked.end
    else:
        stop, want = min(end - start, f.length - rel), RECORD_MARGIN
        while True:
            buf = storefs.read_range(fs, f.path, rel, min(f.length - rel, stop + want))
            walked = rebuild_units(buf, start, 0, stop)
            if walked.how != END_SHORT or rel + len(buf) >= f.length:  # a record cut by the file's end: never
                break  # dispatched by the broker either
            want = walked.end + max(int.from_bytes(bytes(buf[walked.end:walked.end + 4]), "big"), 8) - stop
        damaged_at = None if walked.how != END_DAMAGED else start + walked.end
    if damaged_at is None:
        return walked, None
    reason = ("record damaged: the units of the records from here to the end of the split "
              f"(commit-log offset {end}) cannot be rebuilt from the commit log")
    if plan.on_corrupt != "skip":
        raise CorruptStoreError(f.path, damaged_at, reason)
    return walked, dict(file=f.path, offset=damaged_at, topic=None, queue_id=None, queue_offset=None,
                        commitlog_offset=damaged_at, reason=reason)


UNIT_COLUMNS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "tags_code")


def _rebuilt_kept(rebuild, units):
    """The walked units (cq_rebuild.UNITS_SCHEMA) of the rebuilt queues (Rebuild: its topics, less the queues a
    consume queue serves)."""
    keep = pc.is_in(units.column("topic"), pa.array(sorted(rebuild.topics), pa.string())).to_numpy(
        zero_copy_only=False)
    if rebuild.kept and keep.any():
        keep &= queue_index(units, tuple(rebuild.kept)) < 0
    return units.filter(pa.array(keep))


def _in_offsets(rebuild, units):
    """The units inside the offsets window of their queue (Rebuild.offsets), as a file queue's narrowed
    segments hold only those."""
    if not rebuild.offsets or not units.num_rows:
        return units
    index = queue_index(units, rebuild.offsets)
    first = np.array([-1 if a is None else a for _, _, a, _ in rebuild.offsets] + [-1], np.int64)
    end = np.array([1 << 62 if b is None else b for _, _, _, b in rebuild.offsets] + [1 << 62], np.int64)
    offsets = units.column("queue_offset").to_numpy()
    return units.filter(pa.array((offsets >= first[index]) & (offsets < end[index])))  # index -1: the open bounds


def queue_marks(units, since, until):
    """QUEUE_MARKS_SCHEMA of rebuilt units (with store_timestamp), per queue."""
    if not units.num_rows:
        return None
    t = units.column("store_timestamp").to_numpy()
    before = np.ones(len(t), bool) if until is None else t < until
    from_since = before & (True if since is None else t >= since)
    table = units.select(["topic", "queue_id"]).append_column(
        "first", pa.array(units.column("queue_offset").to_numpy(), mask=~from_since)).append_column(
        "end", pa.array(units.column("queue_offset").to_numpy() + 1, mask=~before)).append_column(
        "after", pa.array(units.column("queue_offset").to_numpy(), mask=before))
    marks = table.group_by(["topic", "queue_id"]).aggregate([("first", "min"), ("end", "max"), ("after", "min")])
    return pa.table({"topic": marks["topic"], "queue_id": marks["queue_id"], "first": marks["first_min"],
                     "end": marks["end_max"], "after": marks["after_min"]}).cast(QUEUE_MARKS_SCHEMA)
