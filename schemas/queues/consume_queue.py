"""Consume-queue segments and their ConsumeQueueExt units, decoded with numpy structured dtypes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA
from schemas.columns import gather_bytes, gather_struct
from schemas.errors import CorruptStoreError
from schemas.log import layout as L
from schemas.store import storefs

if TYPE_CHECKING:
    from schemas.store.store import QueueFiles


def decode_cq_segment(raw: np.ndarray, start_offset: int, path: str = "consumequeue") -> dict[str, np.ndarray]:
    """Valid units of one consume-queue file: dict of numpy columns incl. queue_offset from the position.

    Units with offset < 0, size <= 0 (zero fill after the last write) or the pre-blank (0, MAX_INT, 0)
    are not messages and are skipped."""
    raw = np.asarray(raw, dtype=np.uint8)
    whole = len(raw) // L.CQ_UNIT_SIZE
    if start_offset % L.CQ_UNIT_SIZE:
        raise CorruptStoreError(path, 0, f"file name {start_offset} is not a multiple of {L.CQ_UNIT_SIZE}")
    units = raw[: whole * L.CQ_UNIT_SIZE].view(L.CQ_UNIT_DTYPE)
    offset = units["commitlog_offset"].astype(np.int64)
    size = units["size"].astype(np.int32)
    tags = units["tags_code"].astype(np.int64)
    pre_blank = (offset == 0) & (size == L.PRE_BLANK_SIZE) & (tags == 0)
    valid = (offset >= 0) & (size > 0) & ~pre_blank
    index = np.flatnonzero(valid)
    return {
        "queue_offset": start_offset // L.CQ_UNIT_SIZE + index.astype(np.int64),
        "commitlog_offset": offset[valid],
        "size": size[valid],
        "tags_code_raw": tags[valid],
    }


EXT_READ_SLACK = L.EXT_HEAD_SIZE + 32767  # the largest unit that can start at the last address read


class ExtReader:
    """Resolve decorated ext addresses against one queue's ConsumeQueueExt files.

    `files` maps a file's start offset in the ext address space to `loader(lo, hi)`, which returns the
    file's bytes [lo, hi) (fewer at the end of the file). Only the window the addresses need is read."""

    def __init__(self, files: dict[int, Callable[[int, int], np.ndarray]], file_size: int) -> None:
        self.files = files
        self.file_size = file_size

    def resolve(self, tags_code_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray]:
        """(tags_code, msg_store_time, bitmaps, ok) for every unit; non-ext or unreadable -> ok False.

        tags_code is the raw code where the unit holds no ext address; missing (ok False, is ext) otherwise.
        bitmaps is an Arrow binary array (null where the unit holds no bitmap)."""
        n = len(tags_code_raw)
        is_ext = L.is_ext_address(tags_code_raw)
        tags_code = tags_code_raw.copy()
        store_time = np.zeros(n, dtype=np.int64)
        ok = np.zeros(n, dtype=bool)
        bm_len = np.zeros(n, dtype=np.int64)
        pieces: list[tuple[np.ndarray, np.ndarray]] = []
        if not is_ext.any() or not self.file_size:
            return tags_code, store_time, _bitmap_array(n, bm_len, pieces), ok
        pos = L.ext_position(tags_code_raw)
        file_start = (pos // self.file_size) * self.file_size
        within = pos % self.file_size
        starts = file_start[is_ext]
        for start in (starts[:1] if starts.min() == starts.max() else np.unique(starts)):  # mostly one file
            rows = np.flatnonzero(is_ext & (file_start == start))
            loader = self.files.get(int(start))
            if loader is None:
                continue
            window = int(within[rows].min())
            data = np.asarray(loader(window, int(within[rows].max()) + EXT_READ_SLACK), dtype=np.uint8)
            at = within[rows] - window
            fits = at + L.EXT_HEAD_SIZE <= len(data)
            rows, at = rows[fits], at[fits]
            head = gather_struct(data, at, L.EXT_HEAD_DTYPE)
            bm_size = head["bitmap_size"].astype(np.int64)
            good = (head["size"] >= 1) & (at + L.EXT_HEAD_SIZE + np.maximum(bm_size, 0) <= len(data))
            rows, at, bm_size = rows[good], at[good], bm_size[good]
            tags_code[rows] = head["tags_code"][good]
            store_time[rows] = head["msg_store_time"][good]
            ok[rows] = True
            for b in np.unique(bm_size[bm_size > 0]):
                sel = bm_size == b
                bm_len[rows[sel]] = b
                pieces.append((rows[sel], gather_bytes(data, at[sel] + L.EXT_HEAD_SIZE, int(b))))
        return tags_code, store_time, _bitmap_array(n, bm_len, pieces), ok


def _bitmap_array(n, lengths, pieces):
    """Binary array from (rows, matrix) pieces of equal-width bitmaps; rows without one are null."""
    width = int(lengths.max()) if n else 0
    matrix = np.zeros((n, width), dtype=np.uint8)
    for rows, m in pieces:
        matrix[rows, : m.shape[1]] = m
    data = matrix.reshape(-1) if (lengths == width).all() else matrix[np.arange(width) < lengths[:, None]]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    validity = pa.array(lengths > 0).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def cq_table(topic: str, queue_id: int, cols: dict[str, np.ndarray], tags_code: np.ndarray, store_time: np.ndarray,
             bitmaps: pa.Array, ok: np.ndarray) -> pa.RecordBatch:
    """A CONSUME_QUEUE_SCHEMA record batch for one queue."""
    n = len(cols["queue_offset"])
    is_ext = L.is_ext_address(cols["tags_code_raw"])
    missing = is_ext & ~ok
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(np.full(n, queue_id, dtype=np.int32)),
        pa.array(cols["queue_offset"]),
        pa.array(cols["commitlog_offset"]),
        pa.array(cols["size"]),
        pa.array(cols["tags_code_raw"]),
        pa.array(is_ext),
        pa.array(tags_code, mask=missing),
        pa.array(store_time, mask=~ok),
        bitmaps,
    ], schema=CONSUME_QUEUE_SCHEMA)


def units_without_ext(topic: pa.Array | pa.ChunkedArray, queue_id: pa.Array | pa.ChunkedArray,
                      queue_offset: np.ndarray | pa.Array | pa.ChunkedArray,
                      commitlog_offset: np.ndarray | pa.Array | pa.ChunkedArray,
                      size: np.ndarray | pa.Array | pa.ChunkedArray,
                      tags_code: np.ndarray | pa.Array | pa.ChunkedArray) -> pa.Table:
    """A CONSUME_QUEUE_SCHEMA table of units that have no ext unit (a RocksDB consume queue's, or units rebuilt
    from the commit log): the tag code is the tag's, no store time or bitmap from an ext unit. Columns as
    arrays of the schema's types (topic and queue_id per row)."""
    n = len(queue_offset)
    tags_code = pa.array(np.asarray(tags_code, np.int64))
    return pa.table([topic, queue_id, pa.array(np.asarray(queue_offset, np.int64)),
                     pa.array(np.asarray(commitlog_offset, np.int64)), pa.array(np.asarray(size, np.int32)),
                     tags_code, pa.array(np.zeros(n, bool)), tags_code, pa.nulls(n, pa.int64()),
                     pa.nulls(n, pa.binary())], schema=CONSUME_QUEUE_SCHEMA)


def resolve_units(fs: pafs.FileSystem, queue: QueueFiles, parts: Sequence[dict[str, np.ndarray]]) -> pa.RecordBatch:
    """CONSUME_QUEUE_SCHEMA batch of decoded unit columns (decode_cq_segment dicts) of one queue, with
    their ext units read (only the windows the addresses need)."""
    cols = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64)
            for k in ("queue_offset", "commitlog_offset", "size", "tags_code_raw")}
    cols["size"] = cols["size"].astype(np.int32)
    ext = ExtReader({s.start: _window_loader(fs, s) for s in queue.ext}, queue.ext_file_size)
    return cq_table(queue.topic, queue.queue_id, cols, *ext.resolve(cols["tags_code_raw"]))


def _window_loader(fs, segment):
    """loader(lo, hi) of a segment's bytes, clipped to the file."""
    def load(lo: int, hi: int) -> np.ndarray:
        hi = min(hi, segment.length)
        return storefs.read_range(fs, segment.path, lo, max(0, hi - lo))
    return load
