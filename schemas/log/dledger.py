"""DLedger's data files as data: what RocketMQ 4.5+ writes with `enableDLegerCommitLog=true`.

Read from openmessaging/dledger (0.2 to 0.4: DLedgerEntry, DLedgerEntryCoder.encode, MmapFileList.preAppend,
DLedgerMmapFileStore.recover) and RocketMQ's DLedgerCommitLog (its append hook). All integers big-endian.

Entry (DLedgerEntryCoder.encode), 48 bytes of header, then the body:

    off  size  field
    0    4     magic          DLedgerMmapFileStore.MAGIC_1 (1)
    4    4     size           the whole entry: 48 + body length
    8    8     index          0, 1, 2, ... (the Raft log index)
    16   8     term
    24   8     pos            the entry's own global offset: its file's name + its position in the file
    32   4     channel        reserved (0)
    36   4     chainCrc       not computed by any DLedger release: 0
    40   4     bodyCrc        not computed either: 0
    44   4     bodyLength     size - 48
    48   n     body           a commit-log record (schemas/log/layout.py); DLedgerCommitLog's append hook writes
                              pos + 48 into its PHYSICALOFFSET, so the consume queue, the offsetMsgId and a
                              COMMIT record's preparedTransactionOffset all name the body, not the entry

A data file is named by its first byte's global offset (20 digits) and sized as mappedFileSizeCommitLog
(DLedger's mappedFileSizeForEntryData is set from it). An entry never crosses files: when the next one does
not fit, MmapFileList.preAppend writes `[int -1][int bytes left]` and zeros, and the entry starts the next
file. After the last entry the bytes are zeros. The index files (`dledger-<selfId>/index/`) hold 32-byte
units (magic, pos, size, index, term) that a reader of the messages does not need.
"""
import os
import struct

import numba
import numpy as np

from schemas.errors import CorruptStoreError
from schemas.log import layout as L
from schemas.log.records import END_BLANK, END_LIMIT, END_ZERO

ENTRY_DTYPE = np.dtype([
    ("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"), ("channel", ">i4"),
    ("chain_crc", ">i4"), ("body_crc", ">i4"), ("body_length", ">i4"),
])
HEADER_SIZE = ENTRY_DTYPE.itemsize  # 48: DLedgerEntry.BODY_OFFSET
MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1 (CURRENT_MAGIC)
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE: the rest of the file is unused
INDEX_UNIT_SIZE = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE

_MAGIC_SIZE = struct.Struct(">ii")
_HEADER = struct.Struct(">iiqqqiiii")


def entry_header(record: bytes, index: int, term: int, pos: int) -> bytes:
    """The 48 header bytes of an entry holding `record` at global offset `pos` (DLedgerEntryCoder.encode;
    the CRC fields as DLedger writes them: 0)."""
    return _HEADER.pack(MAGIC, HEADER_SIZE + len(record), index, term, pos, 0, 0, 0, len(record))


def walk_entries(buf: np.ndarray | bytes, base_offset: int = 0, path: str = "dledger data",
                 limit: int | None = None) -> tuple[np.ndarray, int, str]:
    """Relative start positions of the records (the entries' bodies) in buf[:limit], a DLedger data file
    (or its head) starting at global offset base_offset, and how the walk ended, as commitlog.walk_records
    returns them: (starts, end position, end kind). Raises CorruptStoreError naming the entry for a header
    that is not what DLedger writes (the checks of DLedgerMmapFileStore.recover)."""
    data = buf.data if isinstance(buf, np.ndarray) else memoryview(buf)
    limit = len(buf) if limit is None else limit
    starts: list[int] = []
    pos = 0
    while pos + 8 <= limit:
        magic, size = _MAGIC_SIZE.unpack_from(data, pos)
        if magic == BLANK_MAGIC:
            return np.array(starts, dtype=np.int64), pos, END_BLANK
        if magic == 0 and size == 0:
            return np.array(starts, dtype=np.int64), pos, END_ZERO
        if magic != MAGIC:
            raise CorruptStoreError(path, base_offset + pos, f"DLedger entry header damaged: magic code {magic:#010x} "
                                                             f"is not DLedger's (1)")
        if size < HEADER_SIZE + L.MIN_RECORD_SIZE or pos + size > limit:
            raise CorruptStoreError(path, base_offset + pos, f"DLedger entry header damaged: entry size {size} "
                                    + ("runs past the end of the file" if size >= HEADER_SIZE else "is too small"))
        header = _HEADER.unpack_from(data, pos)
        if header[4] != base_offset + pos:
            raise CorruptStoreError(path, base_offset + pos, f"DLedger entry header damaged: pos {header[4]} is not "
                                                             f"where the entry is")
        if header[8] + HEADER_SIZE != size:
            raise CorruptStoreError(path, base_offset + pos, f"DLedger entry header damaged: body length "
                                                             f"{header[8]} + 48 is not the entry size {size}")
        record_size = _MAGIC_SIZE.unpack_from(data, pos + HEADER_SIZE)[0]
        if record_size != size - HEADER_SIZE:
            raise CorruptStoreError(path, base_offset + pos + HEADER_SIZE, f"record size {record_size} is not its "
                                                                           f"DLedger entry's body length {size - 48}")
        starts.append(pos + HEADER_SIZE)
        pos += size
    if pos < limit and not np.any(np.asarray(buf[pos:limit])):
        return np.array(starts, dtype=np.int64), pos, END_ZERO
    if pos < limit:
        raise CorruptStoreError(path, base_offset + pos, f"truncated DLedger entry header ({limit - pos} bytes left)")
    return np.array(starts, dtype=np.int64), pos, END_LIMIT


# header_codes results, in the order the checks apply (the first failing one names the damage)
OK, BAD_MAGIC, BAD_POS, BAD_SIZE = 0, 1, 2, 3
REASONS = {BAD_MAGIC: "magic code is not DLedger's (1)", BAD_POS: "pos is not where the entry is",
           BAD_SIZE: "size and body length do not hold the unit's record"}


@numba.njit(cache=os.path.isfile(__file__), nogil=True, boundscheck=False)
def _be(buf, p, n):
    value = np.int64(0)
    for k in range(n):
        value = (value << 8) | np.int64(buf[p + k])
    return value


@numba.njit(cache=os.path.isfile(__file__), nogil=True, boundscheck=False)
def header_codes(buf, at, offsets, sizes):
    """Per unit, the first check its entry header fails (OK when none): the header at buf[at[i]:at[i] + 48]
    before the record of a consume-queue unit at commit-log offset offsets[i] of sizes[i] bytes. The checks
    DLedgerMmapFileStore.recover makes (magic, size = body + 48, pos = where the entry is) and the unit's
    own (the body is the unit's record). One compiled pass: 20 bytes read per entry."""
    out = np.zeros(len(at), dtype=np.int8)
    for i in range(len(at)):
        p = at[i]
        magic = _be(buf, p, 4)
        if magic != MAGIC:
            out[i] = BAD_MAGIC
        elif _be(buf, p + 24, 8) != offsets[i] - HEADER_SIZE:
            out[i] = BAD_POS
        else:
            size, body = _be(buf, p + 4, 4), _be(buf, p + 44, 4)
            if size != body + HEADER_SIZE or body != sizes[i]:
                out[i] = BAD_SIZE
    return out


def header_problems(buf: np.ndarray, at: np.ndarray, offsets: np.ndarray,
                    sizes: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """[(reason, rows)] of the units whose entry header (at positions `at` of buf) does not hold their record
    (header_codes), one pair per kind of damage."""
    codes = header_codes(buf, np.asarray(at, np.int64), np.asarray(offsets, np.int64), np.asarray(sizes, np.int64))
    if not codes.any():
        return []
    return [(f"DLedger entry header damaged: {REASONS[code]}", np.flatnonzero(codes == code))
            for code in (BAD_MAGIC, BAD_POS, BAD_SIZE) if (codes == code).any()]
