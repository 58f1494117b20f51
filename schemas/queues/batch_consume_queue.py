"""RocketMQ 5.x BatchConsumeQueue files (`batchconsumequeue/<topic>/<queue>/<20-digit offset>`): a 46-byte unit per
commit-log record of a BatchCQ topic (schemas/log/layout.BCQ_UNIT_DTYPE). Unlike a ConsumeQueue's, a unit's queue offset
is not its position: it is msgBaseOffset, the queue offset of its first message, and the unit covers batch_size
messages (an inner batch, unwrapped by the client: schemas/log/inner_batch.py), so a queue's offsets run
base .. base + batch_size - 1 per unit."""
from __future__ import annotations

import numpy as np

from schemas.errors import CorruptStoreError
from schemas.log import layout as L


def decode_bcq_segment(raw: np.ndarray, start: int, path: str = "batchconsumequeue") -> dict[str, np.ndarray]:
    """The units of one batch-consume-queue file's bytes (dict of numpy columns: queue_offset, commitlog_offset,
    size, tags_code_raw, store_time, batch_num), in file order. Zero fill after the last write (size 0) is not a
    unit; the file's name is its position in the queue's byte space, a multiple of the unit size."""
    raw = np.asarray(raw, dtype=np.uint8)
    if start % L.BCQ_UNIT_SIZE:
        raise CorruptStoreError(path, 0, f"file name {start} is not a multiple of {L.BCQ_UNIT_SIZE}")
    units = raw[: len(raw) // L.BCQ_UNIT_SIZE * L.BCQ_UNIT_SIZE].view(L.BCQ_UNIT_DTYPE)
    valid = (units["size"] > 0) & (units["commitlog_offset"] >= 0) & (units["batch_size"] > 0)
    units = units[valid]
    return {
        "queue_offset": units["base_offset"].astype(np.int64),
        "commitlog_offset": units["commitlog_offset"].astype(np.int64),
        "size": units["size"].astype(np.int32),
        "tags_code_raw": units["tags_code"].astype(np.int64),
        "store_time": units["store_time"].astype(np.int64),
        "batch_num": units["batch_size"].astype(np.int32),
    }
