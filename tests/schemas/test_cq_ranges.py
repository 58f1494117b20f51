"""A consume-queue segment's bounds and its units in a range equal a decode of the whole file, whatever the
lengths of its pre-blank head and zero tail against the probe's read size, and on a truncated file."""
import itertools
import struct

import numpy as np
import pyarrow.fs as pafs
import pytest

from schemas.log import layout as L
from schemas.queues import cq_ranges
from schemas.queues.consume_queue import decode_cq_segment
from schemas.store.storefs import Segment

PROBE = 4  # units per probe read in these tests: heads and tails longer and shorter than a read
WHOLE = 6  # a split reads a segment's units whole up to this many, else searches where its range begins or ends


def _segment(tmp_path, head, real, tail, junk=b""):
    """A file of `head` pre-blank units, `real` units at offsets 1000, 1100, ..., `tail` zero units."""
    units = [struct.pack(">qiq", 0, L.PRE_BLANK_SIZE, 0)] * head
    units += [struct.pack(">qiq", 1000 + 100 * i, 60 + i, i) for i in range(real)]
    units += [bytes(L.CQ_UNIT_SIZE)] * tail
    path = tmp_path / f"{head}-{real}-{tail}-{len(junk)}"
    path.write_bytes(b"".join(units) + junk)
    return Segment(str(path), 6000, path.stat().st_size)


@pytest.fixture(autouse=True)
def small_probes(monkeypatch):
    monkeypatch.setattr(cq_ranges, "PROBE_UNITS", PROBE)
    monkeypatch.setattr(cq_ranges, "WHOLE_UNITS", WHOLE)


CASES = list(itertools.product([0, 1, 3, 9, 30], [0, 1, 2, 5, 12, 45], [0, 1, 4, 11, 40])) + [(0, 3, 0, b"junk!")]


@pytest.mark.parametrize("case", CASES)
def test_bounds_and_units_in_range_equal_a_decode_of_the_whole_file(tmp_path, case):
    segment = _segment(tmp_path, *case)
    fs = pafs.LocalFileSystem()
    whole = decode_cq_segment(np.fromfile(segment.path, dtype=np.uint8), segment.start, segment.path)
    bounds = cq_ranges.segment_bounds(fs, segment)
    if not len(whole["commitlog_offset"]):
        assert bounds is None
        return
    offsets, sizes = whole["commitlog_offset"], whole["size"]
    first, last = (whole["queue_offset"][[0, -1]] - segment.start // L.CQ_UNIT_SIZE).tolist()
    assert bounds == (first, last, offsets[0], offsets[-1], offsets[-1] + sizes[-1])
    for start, end in [(0, 1 << 62), (1000, 1001), (1050, 1350), (1100, 2000), (0, 1000), (2100, 9000)]:
        got = cq_ranges.units_in_range(fs, segment, bounds[:4], start, end)
        keep = (offsets >= start) & (offsets < end)
        if not keep.any():
            assert got is None
            continue
        assert {k: v.tolist() for k, v in got.items()} == {k: v[keep].tolist() for k, v in whole.items()}
