"""Single units and records read where they are, for questions about a few messages (jobs/explain/__init__.py).

The unit at queue offset O is bytes [20*O, 20*O + 20) of its queue, in the file whose name is
20*O // file size * file size; a record is `size` bytes at its commit-log offset, in the data file whose
range holds it (schemas/log/files.py: plain or DLedger); an offsetMsgId holds that offset. Only the
folders of one queue are listed and only the bytes asked for are read, so an answer costs the same on a
store of any size.
"""
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from schemas.errors import CorruptStoreError, NotInStore
from schemas.log import layout as L
from schemas.log.files import CommitLog, LogFile, file_units, header_problems
from schemas.log.records import decode_records
from schemas.queues.consume_queue import decode_cq_segment, resolve_units, units_without_ext
from schemas.queues.cq_ranges import segment_bounds
from schemas.queues.cq_rebuild import UNITS_SCHEMA
from schemas.queues.rocksdb_store import CQ_VALUE_DTYPE, consume_queue
from schemas.store import storefs
from schemas.store.store import QueueFiles

_HOST_BYTES = {32: 4, 56: 16}  # offsetMsgId length in hex digits -> store host address bytes (IPv4, IPv6)


def queue_files(fs: pafs.FileSystem, root: str, topic: str, queue_id: int) -> QueueFiles:
    """QueueFiles of one consume queue and its ext queue, from the listing of their two folders only."""
    cq, _ = storefs.list_segments(fs, f"{root}/consumequeue/{topic}/{queue_id}")
    if not cq or not storefs.file_size_of(cq):
        raise NotInStore(f"the store has no consume queue {queue_id} of topic {topic}")
    ext, _ = storefs.list_segments(fs, f"{root}/consumequeue_ext/{topic}/{queue_id}")
    return QueueFiles(topic, queue_id, tuple(cq), storefs.file_size_of(cq) or 0, tuple(ext),
                      storefs.file_size_of(ext) or 0)


def batch_queue_files(fs: pafs.FileSystem, root: str, topic: str, queue_id: int) -> QueueFiles:
    """QueueFiles of one 5.x batch consume queue (batchconsumequeue/), from the listing of its folder only."""
    cq, _ = storefs.list_segments(fs, f"{root}/batchconsumequeue/{topic}/{queue_id}")
    if not cq or not storefs.file_size_of(cq):
        raise NotInStore(f"the store has no batch consume queue {queue_id} of topic {topic}")
    return QueueFiles(topic, queue_id, tuple(cq), storefs.file_size_of(cq) or 0, batch=True)


def read_units(fs: pafs.FileSystem, queue: QueueFiles,
               queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
    """CONSUME_QUEUE_SCHEMA table of the units at `queue_offsets` of one queue, in that order, ext units
    resolved; NotInStore names the first offset that holds no message."""
    wanted = np.asarray(queue_offsets, dtype=np.int64)
    parts: list[dict[str, np.ndarray]] = []
    for start in np.unique(wanted * L.CQ_UNIT_SIZE // queue.cq_file_size * queue.cq_file_size):
        in_file = wanted[wanted * L.CQ_UNIT_SIZE // queue.cq_file_size * queue.cq_file_size == start]
        segment = next((s for s in queue.cq if s.start == start), None)
        if segment is None:
            continue
        lo, hi = int(in_file.min()) * L.CQ_UNIT_SIZE, (int(in_file.max()) + 1) * L.CQ_UNIT_SIZE
        raw = storefs.read_range(fs, segment.path, lo - int(start), hi - lo)
        parts.append(decode_cq_segment(raw, lo, segment.path))
    found = np.concatenate([p["queue_offset"] for p in parts]) if parts else np.zeros(0, np.int64)
    missing = wanted[~np.isin(wanted, found)]
    if len(missing):
        raise NotInStore(f"queue {queue.queue_id} of topic {queue.topic} has no message at queue offset "
                         f"{int(missing[0])} ({_queue_range(fs, queue)})")
    table = pa.Table.from_batches([resolve_units(fs, queue, parts)])
    order = np.searchsorted(table.column("queue_offset").to_numpy(), wanted)
    return table.take(pa.array(order))


def rocksdb_units(path: str, topic: str, queue_id: int,
                  queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
    """CONSUME_QUEUE_SCHEMA table of the units at `queue_offsets` of one queue of a RocksDB consume queue, in that
    order; NotInStore names the first offset that holds no unit."""
    db = consume_queue(path)
    bounds = next(((a, b) for t, q, a, b in db.queues() if (t, q) == (topic, queue_id)), None)
    wanted = np.asarray(queue_offsets, dtype=np.int64)
    if bounds is None:
        raise NotInStore(f"the store has no consume queue {queue_id} of topic {topic}")
    outside = wanted[(wanted < bounds[0]) | (wanted >= bounds[1])]
    if len(outside):
        raise NotInStore(f"queue {queue_id} of topic {topic} has no message at queue offset {int(outside[0])} (the "
                         f"queue holds offsets {bounds[0]} to {bounds[1] - 1})")
    values = np.concatenate([db.units(topic, queue_id, int(o), int(o) + 1) for o in wanted]) if len(wanted) else \
        np.zeros(0, CQ_VALUE_DTYPE)
    n = len(wanted)
    return units_without_ext(pa.repeat(pa.scalar(topic, pa.string()), n), pa.array(np.full(n, queue_id, np.int32)),
                             wanted, values["commitlog_offset"], values["size"], values["tags_code"])


def rebuilt_queue_units(fs: pafs.FileSystem, log: CommitLog, topic: str, queue_id: int,
                        queue_offsets: Sequence[int] | np.ndarray) -> pa.Table:
    """CONSUME_QUEUE_SCHEMA table of the units at `queue_offsets` of one queue as the broker would rebuild them
    from the commit log (schemas/queues/cq_rebuild.py), in that order: a pass over every file's records, for a few
    units (explain); NotInStore names the first offset no record holds."""
    wanted = np.asarray(queue_offsets, dtype=np.int64)
    parts = []
    for f in log.files:
        units = file_units(f, storefs.read_range(fs, f.path)).units
        mine = pc.and_(pc.equal(units.column("topic"), topic), pc.equal(units.column("queue_id"), queue_id))
        units = units.filter(mine)
        parts.append(units.filter(pa.array(np.isin(units.column("queue_offset").to_numpy(), wanted))))
    found = pa.concat_tables(parts) if parts else UNITS_SCHEMA.empty_table()
    offsets = found.column("queue_offset").to_numpy() if found.num_rows else np.zeros(0, np.int64)
    missing = wanted[~np.isin(wanted, offsets)]
    if len(missing):
        raise NotInStore(f"queue {queue_id} of topic {topic} has no message at queue offset {int(missing[0])} "
                         "(units rebuilt from the commit log)")
    found = found.take(pa.array(np.argsort(offsets, kind="stable")[np.searchsorted(np.sort(offsets), wanted)]))
    return units_without_ext(*(found.column(c) for c in ("topic", "queue_id", "queue_offset", "commitlog_offset",
                                                         "size", "tags_code")))


def _queue_range(fs, queue):
    """The queue offsets of the queue's first and last unit (not its files' capacity: the last file is
    zero-filled past the data), from the head and tail probes of the files holding them."""
    first = next(((s, b) for s in queue.cq if (b := segment_bounds(fs, s))), None)
    if first is None:
        return "the queue holds no units"
    last = next((s, b) for s in reversed(queue.cq) if (b := segment_bounds(fs, s)))
    return f"the queue holds offsets {first[0].start // L.CQ_UNIT_SIZE + first[1][0]} to " \
           f"{last[0].start // L.CQ_UNIT_SIZE + last[1][1]}"


def read_records(fs: pafs.FileSystem, log: CommitLog,
                 offsets: Sequence[int] | np.ndarray | pa.Array | pa.ChunkedArray,
                 sizes: Sequence[int] | np.ndarray | pa.Array | pa.ChunkedArray,
                 max_body: int | None = None) -> pa.Table:
    """MESSAGE_SCHEMA table of the records at commit-log `offsets` (each `sizes` bytes), in that order, bodies
    left out (a window's bounds need none), or with max_body, decoded as the job decodes them: a compressed
    one that inflates beyond max_body bytes is null (explain says so).

    log: the store's CommitLog (schemas/log/files.py): plain or DLedger data files, whose entry headers
    are checked as the job checks them (CorruptStoreError when damaged)."""
    offsets, sizes = np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    files = [_commitlog_file(log, int(o)) for o in offsets]
    batches, rows = [], []
    for start in sorted({f.start for f in files}):
        segment = next(f for f in files if f.start == start)
        sel = np.flatnonzero([f.start == start for f in files])
        rel = offsets[sel] - start
        lo, hi = int(rel.min()) - segment.header_size, int((rel + sizes[sel]).max())
        if lo < 0:
            raise NotInStore(f"no message record starts at commit-log offset {int(offsets[sel][np.argmin(rel)])}")
        buf = storefs.read_range(fs, segment.path, lo, hi - lo)
        if len(buf) < hi - lo:
            raise NotInStore(f"commit-log file {segment.path} ends before offset {int(start) + hi}")
        for reason, bad in header_problems(segment, buf, rel - lo, offsets[sel], sizes[sel]):
            raise CorruptStoreError(segment.path, int(offsets[sel][bad[0]]) - segment.header_size, reason)
        batches.append(decode_records(buf, rel - lo, int(start) + lo, segment.path, with_body=max_body is not None,
                                      max_body=max_body))
        rows.append(sel)
    table = pa.Table.from_batches(batches)
    return table.take(pa.array(np.argsort(np.concatenate(rows), kind="stable")))


def record_size_at(fs: pafs.FileSystem, log: CommitLog, offset: int) -> int:
    """totalSize of the record starting at a commit-log offset; NotInStore when none starts there."""
    segment = _commitlog_file(log, offset)
    head = storefs.read_range(fs, segment.path, offset - segment.start, 8)
    size, magic = (int.from_bytes(head[i:i + 4].tobytes(), "big", signed=True) for i in (0, 4)) \
        if len(head) == 8 else (0, 0)
    if magic not in L.MESSAGE_MAGICS or size < L.MIN_RECORD_SIZE:
        raise NotInStore(f"no message record starts at commit-log offset {offset}")
    return size


def _commitlog_file(log, offset):
    segment = log.file_at(offset)
    if segment is None:
        name, deleted = log.missing(offset)
        why = "deleted by retention" if deleted else "not in the store"
        raise NotInStore(f"commit-log offset {int(offset)}: its file {name.split('/')[-1]} is {why}")
    return segment


def first_store_time(fs: pafs.FileSystem, logfile: LogFile) -> int | None:
    """The store time of a commit-log file's first record (None: it holds none), from its header alone: what
    a store-time window prunes the files of a rebuilt queue by."""
    head = logfile.header_size
    raw = np.frombuffer(storefs.read_range(fs, logfile.path, 0, min(logfile.length, head + 128)), np.uint8)
    if len(raw) < head + L.HEAD_SIZE + 2 * L.HOST_V6_SIZE:
        return None
    magic = int.from_bytes(bytes(raw[head + 4:head + 8]), "big", signed=True)
    if magic not in L.MESSAGE_MAGICS:
        return None
    sys_flag = int.from_bytes(bytes(raw[head + 36:head + 40]), "big", signed=True)
    at = head + L.HEAD_SIZE + (L.HOST_V6_SIZE if sys_flag & L.BORNHOST_V6 else L.HOST_V4_SIZE)
    return int.from_bytes(bytes(raw[at:at + 8]), "big", signed=True)


def parse_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """(store host address bytes, port, commit-log offset) of an offsetMsgId: the hex of the store host's
    address (4 or 16 bytes), its port (4) and the record's physical offset (8), as MessageDecoder writes it."""
    text = msg_id.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = None
    if raw is None or len(text) not in _HOST_BYTES:
        raise NotInStore(f"{msg_id!r} is not an offsetMsgId (32 hex digits for an IPv4 store host, 56 for IPv6)")
    n = _HOST_BYTES[len(text)]
    return raw[:n], int.from_bytes(raw[n:n + 4], "big"), int.from_bytes(raw[n + 4:], "big", signed=True)
