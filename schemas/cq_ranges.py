"""The consume-queue units of one queue that point into a commit-log byte range, found by binary search.

A queue's units are appended in commit-log order, so their commit-log offsets increase; pre-blank units
at the head sort first and the zero fill after the last write sorts last. A task therefore reads only
the few units it needs (about log2(units) 20-byte probes per segment, then one range read), and no
shuffle is needed to bring units to the task that decodes their records."""
import struct

import numpy as np

from schemas import layout as L
from schemas.consume_queue import decode_cq_segment

_UNIT = struct.Struct(">qiq")
_HEAD_KEY, _TAIL_KEY = -1, 1 << 62


def _key(raw):
    offset, size, tags = _UNIT.unpack(raw)
    if offset == 0 and size == L.PRE_BLANK_SIZE and tags == 0:
        return _HEAD_KEY
    if offset < 0 or size <= 0:
        return _TAIL_KEY
    return offset


def _first_at_or_after(f, n_units, target):
    """Index of the first unit whose commit-log offset is >= target (n_units if none)."""
    lo, hi = 0, n_units
    while lo < hi:
        mid = (lo + hi) // 2
        if _key(f.read_at(L.CQ_UNIT_SIZE, mid * L.CQ_UNIT_SIZE)) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def queue_data_end(fs, segments):
    """End (offset + size) in the commit log of a queue's last unit; 0 for a queue without units."""
    for segment in reversed(segments):
        n_units = segment.length // L.CQ_UNIT_SIZE
        with fs.open_input_file(segment.path) as f:
            tail = _first_at_or_after(f, n_units, _TAIL_KEY)
            if tail:
                offset, size, _ = _UNIT.unpack(f.read_at(L.CQ_UNIT_SIZE, (tail - 1) * L.CQ_UNIT_SIZE))
                if offset >= 0 and size > 0 and size != L.PRE_BLANK_SIZE:
                    return offset + size
    return 0


def segment_units_in_range(fs, segment, start, end):
    """decode_cq_segment columns of the units of one segment with start <= commitlog_offset < end."""
    n_units = segment.length // L.CQ_UNIT_SIZE
    with fs.open_input_file(segment.path) as f:
        first = _first_at_or_after(f, n_units, start)
        last = _first_at_or_after(f, n_units, end) if end < _TAIL_KEY else n_units
        if last <= first:
            return None
        raw = np.frombuffer(f.read_at((last - first) * L.CQ_UNIT_SIZE, first * L.CQ_UNIT_SIZE), dtype=np.uint8)
    cols = decode_cq_segment(raw, segment.start + first * L.CQ_UNIT_SIZE, segment.path)
    keep = (cols["commitlog_offset"] >= start) & (cols["commitlog_offset"] < end)
    return {k: v[keep] for k, v in cols.items()}
