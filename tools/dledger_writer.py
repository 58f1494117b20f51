"""Rewrite a plain store (one StoreWriter made, or any broker's) as RocketMQ's DLedger mode writes it, for the
tests and the bench: the same records, each the body of a DLedger entry; the consume queues pointed at them.

The entry layout is derived from the Java code, not from a fixture: openmessaging/dledger 0.3.1.2
(DLedgerEntryCoder.encode: magic 1, size, index, term, pos, channel, chainCrc, bodyCrc, bodyLength, body;
DLedgerEntry.BODY_OFFSET = 48; MmapFileList.preAppend: an entry that does not fit in what is left of a file
with 8 bytes to spare is preceded by `[int -1][int bytes left]` and goes to the next file;
DLedgerMmapFileStore.appendAsLeader: an index unit of 32 bytes per entry, magic, pos, size, index, term) and
RocketMQ 4.9.8's DLedgerCommitLog (its append hook writes pos + 48 into the record's PHYSICALOFFSET; the
dispatcher then gives the consume queue that offset, and a COMMIT or ROLLBACK record's
preparedTransactionOffset names its half message's, as recorded; a mixed store: the old commit log's files
up to dividedCommitlogOffset, DLedger's from there, which is where the last old file ends). DLedger 0.3.x
computes neither CRC field: both are written 0, as the fixture store_dledger shows.

    python tools/dledger_writer.py SRC_STORE DST_STORE [--from-offset N] [--data-dirs A,B]
"""
import argparse
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from schemas.log import dledger  # noqa: E402
from schemas.log import layout as L  # noqa: E402
from schemas.log.records import walk_records  # noqa: E402
from schemas.store import storefs  # noqa: E402

INDEX_FILE_SIZE = 1024 * dledger.INDEX_UNIT_SIZE  # DLedger's default is 160 MiB; small files for small stores
_INDEX = struct.Struct(">iqiqq")
_LONG = struct.Struct(">q")


def convert(src, dst, from_offset=0, self_id="n0", data_dirs=None, term=0):
    """Copy store `src` to `dst` with the records of its commit-log files from `from_offset` (a file start; 0:
    all) rewritten as DLedger entries in `dst/dledger-<self_id>/data` (or spread over `data_dirs`, file k in
    data_dirs[k % n], as RocketMQ's multi-path lists place them); the files below stay plain in
    `dst/commitlog` (a broker switched to DLedger). Consume-queue units and transaction offsets follow their
    records. Returns {old commit-log offset: new} of the moved records."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("commitlog"))
    for folder, subdirs, names in os.walk(dst):  # a copy of a read-only fixture: writable, as a broker's is
        for name in subdirs + names + [""]:
            os.chmod(os.path.join(folder, name), 0o755 if not name or name in subdirs else 0o644)
    segments, _ = storefs.list_segments(storefs.resolve(src)[0], os.path.join(src, "commitlog"))
    file_size = storefs.file_size_of(segments)
    kept = [s for s in segments if s.start < from_offset]
    if kept:
        os.makedirs(os.path.join(dst, "commitlog"))
        for seg in kept:
            shutil.copyfile(seg.path, os.path.join(dst, "commitlog", L.file_name(seg.start)))
    moved = [s for s in segments if s.start >= from_offset]
    start = max(from_offset, kept[-1].start + file_size if kept else 0) if moved else from_offset
    member = os.path.join(dst, f"dledger-{self_id}")
    dirs = list(data_dirs or [os.path.join(member, "data")])
    for d in dirs + [os.path.join(member, "index")]:
        os.makedirs(d, exist_ok=True)
    writer = _EntryWriter(dirs, file_size, start, term)
    for seg in moved:
        buf = np.fromfile(seg.path, dtype=np.uint8)
        starts, _, _ = walk_records(buf, seg.start, seg.path)
        sizes = buf[starts[:, None] + np.arange(4)].astype(np.int64) if len(starts) else np.zeros((0, 4), np.int64)
        sizes = (sizes[:, 0] << 24) | (sizes[:, 1] << 16) | (sizes[:, 2] << 8) | sizes[:, 3]
        for at, size in zip(starts.tolist(), sizes.tolist()):
            writer.append(seg.start + at, bytearray(buf[at:at + size].tobytes()))
    writer.close()
    _write_index(os.path.join(member, "index"), writer.index)
    with open(os.path.join(member, "checkpoint"), "w") as f:
        f.write(f"committedIndex={len(writer.index) - 1}\nendIndex={len(writer.index) - 1}\n")
    _rewrite_consume_queues(dst, writer.moved)
    return writer.moved


class _EntryWriter:
    """Entries appended to data files of `file_size` bytes from global offset `start` (MmapFileList.preAppend)."""

    def __init__(self, dirs, file_size, start, term):
        self.dirs, self.file_size, self.term = dirs, file_size, term
        self.file_start, self.pos = start, 0
        self.buf = bytearray(file_size)
        self.index, self.moved = [], {}

    def append(self, old_offset, record):
        size = dledger.HEADER_SIZE + len(record)
        if size + 8 > self.file_size - self.pos:  # preAppend keeps MIN_BLANK_LEN for the end mark
            struct.pack_into(">ii", self.buf, self.pos, dledger.BLANK_MAGIC, self.file_size - self.pos)
            self._flush()
        entry_pos = self.file_start + self.pos
        body_at = entry_pos + dledger.HEADER_SIZE
        _LONG.pack_into(record, L.PHYSICAL_OFFSET_AT, body_at)  # DLedgerCommitLog's append hook
        sys_flag = struct.unpack_from(">i", record, 36)[0]
        if sys_flag & L.TRANSACTION_MASK in (L.TRANSACTION_COMMIT, L.TRANSACTION_ROLLBACK):
            at = _prepared_at(sys_flag)  # preparedTransactionOffset: its half message's offset, moved earlier
            old = _LONG.unpack_from(record, at)[0]
            _LONG.pack_into(record, at, self.moved.get(old, old))
        header = dledger.entry_header(record, len(self.index), self.term, entry_pos)
        self.buf[self.pos:self.pos + size] = header + record
        self.index.append((entry_pos, size))
        self.moved[old_offset] = body_at
        self.pos += size

    def _flush(self):
        k = self.file_start // self.file_size
        with open(os.path.join(self.dirs[k % len(self.dirs)], L.file_name(self.file_start)), "wb") as f:
            f.write(self.buf)
        self.file_start += self.file_size
        self.pos = 0
        self.buf = bytearray(self.file_size)

    def close(self):
        if self.pos:
            self._flush()


def _prepared_at(sys_flag):
    """Where preparedTransactionOffset is in a record: after bornHost, storeTimestamp, storeHost, reconsumeTimes."""
    born = L.HOST_V6_SIZE if sys_flag & L.BORNHOST_V6 else L.HOST_V4_SIZE
    store = L.HOST_V6_SIZE if sys_flag & L.STOREHOST_V6 else L.HOST_V4_SIZE
    return L.HEAD_SIZE + born + 8 + store + 4


def _write_index(path, index):
    """DLedger's index: a 32-byte unit per entry (magic, pos, size, index, term), entry i at byte i * 32."""
    data = bytearray(max(1, -(-len(index) * dledger.INDEX_UNIT_SIZE // INDEX_FILE_SIZE)) * INDEX_FILE_SIZE)
    for i, (pos, size) in enumerate(index):
        _INDEX.pack_into(data, i * dledger.INDEX_UNIT_SIZE, dledger.MAGIC, pos, size, i, 0)
    for start in range(0, len(data), INDEX_FILE_SIZE):
        with open(os.path.join(path, L.file_name(start)), "wb") as f:
            f.write(data[start:start + INDEX_FILE_SIZE])


def _rewrite_consume_queues(root, moved):
    """Every consume-queue unit pointing at a moved record, pointed at its new offset."""
    if not moved:
        return
    old = np.fromiter(moved.keys(), dtype=np.int64, count=len(moved))
    new = np.fromiter(moved.values(), dtype=np.int64, count=len(moved))
    order = np.argsort(old)
    old, new = old[order], new[order]
    for folder, _, names in os.walk(os.path.join(root, "consumequeue")):
        for name in names:
            path = os.path.join(folder, name)
            units = np.fromfile(path, dtype=L.CQ_UNIT_DTYPE)
            offsets = units["commitlog_offset"].astype(np.int64)
            k = np.clip(np.searchsorted(old, offsets), 0, len(old) - 1)
            hit = (old[k] == offsets) & (units["size"] > 0)
            if hit.any():
                units["commitlog_offset"][hit] = new[k[hit]]
                units.tofile(path)


def spread(folder, dirs):
    """Move the 20-digit files of `folder` into `dirs`, file k (in offset order) into dirs[k % n], as
    MultiPathMappedFileQueue.tryCreateMappedFile places them (storePathCommitLog=A,B); the folder is removed."""
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    names = sorted(n for n in os.listdir(folder) if n.isdigit() and len(n) == 20)
    for k, name in enumerate(names):
        shutil.move(os.path.join(folder, name), os.path.join(dirs[k % len(dirs)], name))
    shutil.rmtree(folder)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--from-offset", type=int, default=0, help="the first commit-log file to rewrite (a mixed store)")
    p.add_argument("--data-dirs", help="spread the DLedger data files over these directories")
    args = p.parse_args(argv)
    moved = convert(args.src, args.dst, args.from_offset,
                    data_dirs=args.data_dirs.split(",") if args.data_dirs else None)
    print(f"{len(moved):,} records rewritten as DLedger entries in {args.dst}")


if __name__ == "__main__":
    main()
