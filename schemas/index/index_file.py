"""RocketMQ's message index (`<storePathRootDir>/index/`, written by IndexService when messageIndexEnable is on):
which commit-log offsets may hold the message of a key, read with numpy from the broker's own files.

A file (IndexFile, named by its creation time, yyyyMMddHHmmssSSS) is a 40-byte header (IndexHeader: begin and
end store timestamp, begin and end commit-log offset, the count of slots in use, the index count), then
maxHashSlotNum 4-byte slots, then maxIndexNum 20-byte entries (key hash, commit-log offset, seconds since the
header's begin timestamp, the previous entry of the same slot). The index count starts at 1: entry 0 is never
written. putKey hashes `topic#key` (for each space-separated KEYS token and for UNIQ_KEY) with Java's
String.hashCode made non-negative (Math.abs, and 0 for Integer.MIN_VALUE, whose abs stays negative), writes the
next entry, links it to the slot's previous head and makes it the head: a slot's chain runs back in time.
Different keys share hashes and slots, so a hit names an offset to check against its record, never a message.

The slot and entry counts are the broker's settings (MessageStoreConfig maxHashSlotNum, maxIndexNum), not in
the file: they are taken from its size, trying the given counts, RocketMQ's defaults, then its default ratio
(4 entries a slot), each checked against the header (entry 1 holds the begin offset, the last the end offset).
A file that fits none, or whose header or chains contradict themselves, is damaged: `problems` says how.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow.fs as pafs

from schemas.queues.tag_codes import java_hash
from schemas.store import storefs

HEADER_DTYPE = np.dtype([("begin_timestamp", ">i8"), ("end_timestamp", ">i8"), ("begin_phy_offset", ">i8"),
                         ("end_phy_offset", ">i8"), ("hash_slot_count", ">i4"), ("index_count", ">i4")])
HEADER_SIZE = HEADER_DTYPE.itemsize  # 40
SLOT_SIZE = 4
ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize  # 20
DEFAULT_SLOTS, DEFAULT_ENTRIES = 5_000_000, 20_000_000  # MessageStoreConfig maxHashSlotNum, maxIndexNum
_INT_MIN = -(1 << 31)


def index_key(topic: str, key: str) -> str:
    """The string the broker indexes a key of a topic's message under (IndexService.buildKey)."""
    return f"{topic}#{key}"


def key_hash(text: str) -> int:
    """IndexFile.indexKeyHashMethod: |String.hashCode|, 0 where Math.abs overflows (Integer.MIN_VALUE)."""
    h = java_hash(text)
    return 0 if h == _INT_MIN else abs(h)


@dataclass(frozen=True)
class Header:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int  # IndexHeader.load: 0 or less reads as 1 (no entry)


@dataclass
class IndexFile:
    """One index file: its header, slot and entry counts and views of its slots and entries (the bytes of a
    local file are mapped, read as the lookups touch them). `problems` non-empty: damaged, not to be used."""

    path: str
    size: int
    header: Header | None = None
    slots: np.ndarray | None = None  # >i4 per slot
    entries: np.ndarray | None = None  # ENTRY_DTYPE per entry
    problems: list | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def damaged(self) -> bool:
        return bool(self.problems)

    @property
    def count(self) -> int:
        """Entries written, entry 0 (never written) included."""
        assert self.header is not None  # asked of a file whose header was read
        return self.header.index_count

    def covers_time(self, since: int | None = None, until: int | None = None) -> bool:
        """Whether the file's store-time span [begin, end] meets the window since <= t < until."""
        h = self.header
        assert h is not None  # asked of a file whose header was read
        return (until is None or h.begin_timestamp < until) and (since is None or h.end_timestamp >= since)

    def lookup(self, hashes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, ...]:
        """(which, offsets, positions) of every entry whose key hash is one of `hashes` (which: the index into
        `hashes`), walking each hash's slot chain as IndexFile.selectPhyOffset does, with no cap and every
        chain at once. A link forward (to an entry not written before it) would loop: it ends the chain and
        the file is damaged (a problem)."""
        hashes = np.asarray(hashes, np.int64)
        out = tuple([np.zeros(0, np.int64)] for _ in range(3))
        if self.count <= 1 or not len(hashes):
            return tuple(a[0] for a in out)
        assert self.slots is not None and self.entries is not None and self.problems is not None  # not damaged
        cur = self.slots[hashes % len(self.slots)].astype(np.int64)
        live = np.flatnonzero((cur > 0) & (cur < self.count))  # selectPhyOffset: no chain from an invalid slot
        cur = cur[live]
        while len(live):
            e = self.entries[cur]
            keep = e["time_diff"] >= 0  # a negative time difference ends the walk, as in RocketMQ
            hit = keep & (e["key_hash"].astype(np.int64) == hashes[live])
            for acc, values in zip(out, (live[hit], e["phy_offset"][hit], cur[hit])):
                acc.append(values.astype(np.int64))
            prev = e["prev"].astype(np.int64)
            forward = keep & (prev >= cur) & (prev > 0)
            if forward.any():
                i = int(np.argmax(forward))
                self.problems.append(f"entry {int(cur[i])} links forward to entry {int(prev[i])}")
            go = keep & (prev > 0) & (prev < cur)
            live, cur = live[go], prev[go]
        which, offsets, positions = (np.concatenate(a) for a in out)
        order = np.lexsort((positions, which))
        return which[order], offsets[order], positions[order]


def list_index_files(fs: pafs.FileSystem, root: str) -> list[str] | None:
    """The paths of `<root>/index/`'s files in name order (the order IndexService.load keeps them in: creation
    time); None when the store has no index/ directory."""
    info = fs.get_file_info(pafs.FileSelector(f"{root}/index", allow_not_found=True))
    if fs.get_file_info(f"{root}/index").type != pafs.FileType.Directory:
        return None
    return sorted((i.path for i in info if i.type == pafs.FileType.File), key=lambda p: p.rsplit("/", 1)[-1])


def open_index_file(fs: pafs.FileSystem, path: str, slots: int | None = None,
                    entries: int | None = None) -> IndexFile:
    """An IndexFile of one file, its header checked (problems: what is wrong). slots, entries: the broker's
    maxHashSlotNum and maxIndexNum when known (else found from the size, see the module's docstring)."""
    data = storefs.read_range(fs, path)
    f = IndexFile(path, len(data), problems=[])
    assert f.problems is not None
    if len(data) < HEADER_SIZE:
        f.problems.append(f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
        return f
    raw = np.frombuffer(data, HEADER_DTYPE, count=1)[0]
    f.header = Header(*(int(raw[n]) for n in HEADER_DTYPE.names))  # type: ignore[union-attr]  # a structured dtype
    if f.header.index_count <= 0:
        f.header = replace(f.header, index_count=1)
    fits = _geometries(len(data), slots, entries)
    if not fits:
        f.problems.append(f"its size {len(data)} fits no slot and entry count ({HEADER_SIZE} + 4 * maxHashSlotNum "
                          f"+ 20 * maxIndexNum bytes; the defaults give {_size(DEFAULT_SLOTS, DEFAULT_ENTRIES)})")
        return f
    best: tuple[tuple[np.ndarray, np.ndarray], list[str]] | None = None
    for s, n in fits:
        view = (np.frombuffer(data, ">i4", count=s, offset=HEADER_SIZE),
                np.frombuffer(data, ENTRY_DTYPE, count=n, offset=HEADER_SIZE + SLOT_SIZE * s))
        problems = _header_problems(f.header, s, n, view[1])
        if best is None or not problems:
            best = (view, problems)
        if not problems:
            break
    assert best is not None  # fits is not empty
    (f.slots, f.entries), problems = best
    f.problems.extend(problems)
    return f


def _size(slots, entries):
    return HEADER_SIZE + SLOT_SIZE * slots + ENTRY_SIZE * entries


def _geometries(size, slots, entries):
    """(slots, entries) pairs a file of `size` bytes can have: the given counts, RocketMQ's defaults, then the
    default ratio (4 entries a slot), and either given count with the other taken from the size."""
    body = size - HEADER_SIZE
    tried = [(slots, entries), (DEFAULT_SLOTS, DEFAULT_ENTRIES)]
    if body > 0 and body % (SLOT_SIZE + 4 * ENTRY_SIZE) == 0:
        tried.append((body // (SLOT_SIZE + 4 * ENTRY_SIZE), 4 * (body // (SLOT_SIZE + 4 * ENTRY_SIZE))))
    if slots and (body - SLOT_SIZE * slots) % ENTRY_SIZE == 0:
        tried.append((slots, (body - SLOT_SIZE * slots) // ENTRY_SIZE))
    if entries and (body - ENTRY_SIZE * entries) % SLOT_SIZE == 0:
        tried.append(((body - ENTRY_SIZE * entries) // SLOT_SIZE, entries))
    out = []
    for s, n in tried:
        if s and n and s > 0 and n > 0 and _size(s, n) == size and (s, n) not in out:
            out.append((s, n))
    return out


def _header_problems(h, slots, entries, table):
    """What contradicts the header, for a file of `slots` slots and `entries` entries."""
    if h.index_count > entries:
        return [f"bad header: index count {h.index_count} beyond the file's {entries} entries"]
    if not 0 <= h.hash_slot_count <= slots:
        return [f"bad header: hash slot count {h.hash_slot_count} beyond the file's {slots} slots"]
    if h.index_count <= 1:
        return []
    problems = []
    if h.begin_timestamp > h.end_timestamp or h.begin_phy_offset > h.end_phy_offset:
        problems.append(f"bad header: begins after it ends (store times {h.begin_timestamp} to {h.end_timestamp}, "
                        f"commit-log offsets {h.begin_phy_offset} to {h.end_phy_offset})")
    first, last = int(table[1]["phy_offset"]), int(table[h.index_count - 1]["phy_offset"])
    if (first, last) != (h.begin_phy_offset, h.end_phy_offset):
        problems.append(f"bad header: commit-log offsets {h.begin_phy_offset} to {h.end_phy_offset}, its entries "
                        f"1 and {h.index_count - 1} hold {first} and {last}")
    return problems
