"""Where a consume-queue segment points in the commit log, and its units that point into a byte range.

A queue's units are appended in commit-log order, so their commit-log offsets increase; pre-blank units
at the head sort first and the zero fill after the last write sorts last. A segment's first and last real
units therefore bound the commit-log range it points into (`segment_bounds`, read once per run), and a
split reads only the segments overlapping its range: between those bounds it binary-searches only where
its range begins or ends inside the segment, then reads its units in one range read. No shuffle is
needed to bring units to the task that decodes their records."""
from __future__ import annotations

import struct
from typing import Optional, Sequence

import numpy as np
import pyarrow.fs as pafs

from schemas.log import layout as L
from schemas.queues.consume_queue import decode_cq_segment
from schemas.store.storefs import Segment

_UNIT = struct.Struct(">qiq")
_HEAD_KEY, _TAIL_KEY = -1, 1 << 62
# Units read at once by a probe (16 KiB: one request, like a 20-byte one, on a disk or an object store):
# a segment's head and its tail; a file of up to twice as many, or a split's units of a segment up to as
# many, are read whole instead of searched.
PROBE_UNITS = (16 << 10) // L.CQ_UNIT_SIZE
# A split's units of a segment are read whole, with no search, when the segment's real units are at most
# this many (1 MiB): on an object store a request costs its latency whatever its size up to megabytes, and
# a search costs a request a step (the 300,000-message bench store on a local S3 server: 504 consume-queue
# requests a run, 168 a split, before; see the README's S3 bench); locally the extra bytes cost microseconds.
WHOLE_UNITS = (1 << 20) // L.CQ_UNIT_SIZE


def _key(raw):
    offset, size, tags = _UNIT.unpack(raw)
    if offset == 0 and size == L.PRE_BLANK_SIZE and tags == 0:
        return _HEAD_KEY
    if offset < 0 or size <= 0:
        return _TAIL_KEY
    return offset


def _first_at_or_after(f, target, lo, hi):
    """Index of the first unit in [lo, hi) whose sort key is >= target (hi if none): a binary search reading
    one unit a step down to PROBE_UNITS units, then those in one read."""
    while hi - lo > PROBE_UNITS:
        mid = (lo + hi) // 2
        if _key(f.read_at(L.CQ_UNIT_SIZE, mid * L.CQ_UNIT_SIZE)) < target:
            lo = mid + 1
        else:
            hi = mid
    if lo >= hi:
        return lo
    first, keys, _ = _read_keys(f, lo, hi)
    return first + int(np.searchsorted(keys, target, side="left"))


def _read_keys(f, lo, hi):
    """(first index, sort keys, sizes) of the units [lo, hi), in one read."""
    units = np.frombuffer(f.read_at((hi - lo) * L.CQ_UNIT_SIZE, lo * L.CQ_UNIT_SIZE), dtype=L.CQ_UNIT_DTYPE)
    offset = units["commitlog_offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    pre_blank = (offset == 0) & (size == L.PRE_BLANK_SIZE) & (units["tags_code"] == 0)
    keys = np.where(pre_blank, _HEAD_KEY, np.where((offset < 0) | (size <= 0), _TAIL_KEY, offset))
    return lo, keys, size


def _unit_at(f, chunks, i):
    """(sort key, size) of unit i: from a chunk already read, else one read."""
    for lo, keys, sizes in chunks:
        if lo <= i < lo + len(keys):
            return int(keys[i - lo]), int(sizes[i - lo])
    raw = f.read_at(L.CQ_UNIT_SIZE, i * L.CQ_UNIT_SIZE)
    return _key(raw), _UNIT.unpack(raw)[1]


def segment_bounds(fs: pafs.FileSystem, segment: Segment) -> Optional[tuple[int, int, int, int, int]]:
    """(first, last, first_offset, last_offset, last_end) of a segment's real units: the indexes of the first
    and the last in the file, their commit-log offsets, and where the last one's record ends; None when the
    segment holds none (all pre-blank or zero fill).

    One open and two reads of PROBE_UNITS (one for a small file); a binary search only past a longer
    pre-blank head, or where a longer zero tail begins (in the last file of a queue with more units than a
    read holds)."""
    n = segment.length // L.CQ_UNIT_SIZE
    if not n:
        return None
    with fs.open_input_file(segment.path) as f:
        whole = n <= 2 * PROBE_UNITS
        head = _read_keys(f, 0, n if whole else PROBE_UNITS)
        tail = head if whole else _read_keys(f, n - PROBE_UNITS, n)
        chunks = (head, tail)
        not_head = np.flatnonzero(head[1] != _HEAD_KEY)
        first = int(not_head[0]) if len(not_head) else _first_at_or_after(f, 0, len(head[1]), n)
        first_key = _unit_at(f, chunks, first)[0] if first < n else _TAIL_KEY
        if first_key == _TAIL_KEY:
            return None
        in_tail, in_head = _real(tail[1]), _real(head[1])
        if len(in_tail):
            last = tail[0] + int(in_tail[-1])
        elif len(in_head) and in_head[-1] < len(head[1]) - 1:  # the data ends inside the head read
            last = int(in_head[-1])
        else:  # between the two reads (first < tail[0] here)
            last = _last_before_fill(f, first + 1, tail[0])
        last_key, last_size = _unit_at(f, chunks, last)
    return first, last, first_key, last_key, last_key + last_size


def _real(keys):
    """Positions of the real units (neither pre-blank nor fill) among sort keys."""
    return np.flatnonzero((keys >= 0) & (keys < _TAIL_KEY))


def _last_before_fill(f, lo, hi):
    """Index of the last real unit, given that unit lo - 1 is real and the units from hi on are zero fill:
    a binary search that reads PROBE_UNITS units a step, so it ends in about log2((hi - lo) / PROBE_UNITS)."""
    while lo < hi:
        a = max(lo, (lo + hi) // 2 - PROBE_UNITS // 2)
        b = min(hi, a + PROBE_UNITS)
        real = _real(_read_keys(f, a, b)[1])
        if not len(real):  # all fill: the data ends before this read
            hi = a
        elif real[-1] < b - a - 1 or b == hi:  # the fill starts inside this read, or right after it
            return a + int(real[-1])
        else:  # the read ends on a real unit: the data goes on after it
            lo = b
    return lo - 1


def units_in_range(fs: pafs.FileSystem, segment: Segment, bounds: Sequence[int], start: int, end: int
                   ) -> Optional[dict[str, np.ndarray]]:
    """decode_cq_segment columns of the units of one segment with start <= commitlog_offset < end, or None.

    bounds: the segment's (first, last, first_offset, last_offset) from segment_bounds. A binary search
    finds the units only where the range begins or ends between the first and the last (not when there
    are at most WHOLE_UNITS: they are read whole); then one range read."""
    first, last, first_offset, last_offset = bounds
    lo, hi = first, last + 1
    with fs.open_input_file(segment.path) as f:
        if hi - lo > WHOLE_UNITS:
            if start > first_offset:
                lo = _first_at_or_after(f, start, lo, hi)
            if end <= last_offset:
                hi = _first_at_or_after(f, end, lo, hi)
        if hi <= lo:
            return None
        raw = np.frombuffer(f.read_at((hi - lo) * L.CQ_UNIT_SIZE, lo * L.CQ_UNIT_SIZE), dtype=np.uint8)
    cols = decode_cq_segment(raw, segment.start + lo * L.CQ_UNIT_SIZE, segment.path)
    keep = (cols["commitlog_offset"] >= start) & (cols["commitlog_offset"] < end)
    return {k: v[keep] for k, v in cols.items()} if keep.any() else None
