"""Write a broker's index/ files as RocketMQ's IndexService.buildIndex and IndexFile.putKey write them.

A tool, not the read path (schemas/index/index_file.py reads them): the tests' hand-built indexes and the bench's.
It keeps its own Java String.hashCode, so what the reader finds is checked against an independent writer.

putKey, for the key `topic#key`: hash = |hashCode| (0 for Integer.MIN_VALUE), slot = hash % slots; the slot's
value is the previous head (kept when 0 < value <= index count, else 0); the entry written at the index count
is (hash, commit-log offset, (store time - begin time) / 1000 clamped to [0, Integer.MAX_VALUE], previous
head); the slot then holds the new entry's number; the first entry sets the begin offset and time, every one
the end offset and time. The count starts at 1; a file is full at maxIndexNum, and the next one starts from
the full file's end offset and time.
"""
import os
import struct
from datetime import datetime, timezone

import numpy as np

HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
TRANSACTION_ROLLBACK = 0xC
INT_MAX, INT_MIN = (1 << 31) - 1, -(1 << 31)


def string_hash(text):
    """Java String.hashCode over UTF-16 code units, as a signed int."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_hash(key):
    """IndexFile.indexKeyHashMethod."""
    h = string_hash(key)
    return 0 if h == INT_MIN else abs(h)


class IndexFileWriter:
    """One index file in memory: put_key as IndexFile.putKey; bytes() its content as flushed."""

    def __init__(self, slots, entries, end_phy_offset=0, end_timestamp=0):
        self.slots, self.entries = slots, entries
        self.buf = bytearray(HEADER.size + 4 * slots + ENTRY.size * entries)
        self.begin_ts = self.end_ts = end_timestamp if end_timestamp > 0 else 0
        self.begin_phy = self.end_phy = end_phy_offset if end_phy_offset > 0 else 0
        self.slot_count, self.count = 0, 1

    def full(self):
        return self.count >= self.entries

    def put_key(self, key, phy_offset, store_timestamp):
        """False when the file is full (IndexFile.putKey)."""
        if self.full():
            return False
        h = index_hash(key)
        slot_at = HEADER.size + 4 * (h % self.slots)
        prev = struct.unpack_from(">i", self.buf, slot_at)[0]
        if prev <= 0 or prev > self.count:
            prev = 0
        diff = (store_timestamp - self.begin_ts) // 1000 if store_timestamp >= self.begin_ts else \
            -((self.begin_ts - store_timestamp) // 1000)
        diff = 0 if self.begin_ts <= 0 else min(max(diff, 0), INT_MAX)
        at = HEADER.size + 4 * self.slots + ENTRY.size * self.count
        ENTRY.pack_into(self.buf, at, h, phy_offset, diff, prev)
        struct.pack_into(">i", self.buf, slot_at, self.count)
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy_offset, store_timestamp
        if prev == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy_offset, store_timestamp
        return True

    def bytes(self):
        HEADER.pack_into(self.buf, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
                         self.count)
        return bytes(self.buf)


class IndexWriter:
    """index/ of a store: add() each record in commit-log order, as the dispatcher hands them to buildIndex;
    close() writes the files, named by a creation time (yyyyMMddHHmmssSSS, from the first record they hold)."""

    def __init__(self, root, slots=5_000_000, entries=20_000_000):
        self.dir = os.path.join(root, "index")
        self.slots, self.entries = slots, entries
        self.files = []  # [(name time, IndexFileWriter)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _current(self, store_timestamp):
        if not self.files or self.files[-1][1].full():
            last = self.files[-1][1] if self.files else None
            f = IndexFileWriter(self.slots, self.entries, last.end_phy if last else 0, last.end_ts if last else 0)
            self.files.append((store_timestamp, f))
        return self.files[-1][1]

    def add(self, topic, keys, uniq_key, phy_offset, store_timestamp, sys_flag=0):
        """IndexService.buildIndex of one record (KEYS as stored, split on a space)."""
        f = self._current(store_timestamp)
        if phy_offset < f.end_phy or sys_flag & TRANSACTION_ROLLBACK == TRANSACTION_ROLLBACK:
            return
        names = ([uniq_key] if uniq_key is not None else []) + [k for k in (keys or "").split(" ") if k]
        for key in names:
            while not self._current(store_timestamp).put_key(f"{topic}#{key}", phy_offset, store_timestamp):
                pass

    def close(self):
        os.makedirs(self.dir, exist_ok=True)
        used = set()
        for when, f in self.files:
            name = datetime.fromtimestamp(when / 1000, timezone.utc).strftime("%Y%m%d%H%M%S%f")[:17]
            while name in used:
                name = str(int(name) + 1)
            used.add(name)
            with open(os.path.join(self.dir, name), "wb") as out:
                out.write(f.bytes())


def string_hashes(texts):
    """string_hash of many strings at once (numpy, a pass per length): for the bench's millions of keys. Strings
    outside the BMP (two UTF-16 units a character) are hashed one by one."""
    texts = np.asarray(texts, dtype=str)
    out = np.zeros(len(texts), np.int64)
    if not len(texts):
        return out
    width = texts.dtype.itemsize // 4
    points = texts.view(np.uint32).reshape(len(texts), width)
    lengths = np.char.str_len(texts)
    wide = (points > 0xFFFF).any(axis=1)
    for n in np.unique(lengths[~wide]):
        rows = np.flatnonzero((lengths == n) & ~wide)
        powers = np.ones(n, np.uint64)
        for j in range(n - 2, -1, -1):
            powers[j] = (powers[j + 1] * np.uint64(31)) & np.uint64(0xFFFFFFFF)
        h = (points[rows, :n].astype(np.uint64) * powers).sum(axis=1, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
        out[rows] = h.astype(np.int64)
    for i in np.flatnonzero(wide):
        out[i] = string_hash(str(texts[i])) & 0xFFFFFFFF
    return np.where(out >= 1 << 31, out - (1 << 32), out)


def write_index_bulk(root, keys, offsets, timestamps, slots=5_000_000, entries=20_000_000):
    """index/ of `keys` (`topic#key` strings, in the order buildIndex puts them: each record's UNIQ_KEY, then its
    KEYS tokens) at their records' commit-log offsets and store times, as putKey one at a time would write it,
    computed with numpy: a file per maxIndexNum - 1 keys, each entry linked to the previous one of its slot in
    the file, each slot holding its last entry. Returns the files' paths."""
    h = string_hashes(keys)
    h = np.where(h == INT_MIN, 0, np.abs(h))
    offsets, timestamps = np.asarray(offsets, np.int64), np.asarray(timestamps, np.int64)
    os.makedirs(os.path.join(root, "index"), exist_ok=True)
    paths, per_file, start = [], entries - 1, 0
    end_phy = end_ts = 0
    while start < len(h) or not paths:
        part = slice(start, min(start + per_file, len(h)))
        k, phy, ts = h[part], offsets[part], timestamps[part]
        n = len(k)
        slot = k % slots
        number = np.arange(1, n + 1, dtype=np.int64)
        order = np.lexsort((number, slot))
        prev = np.zeros(n, np.int64)
        same = slot[order][1:] == slot[order][:-1]
        prev[order[1:][same]] = number[order[:-1][same]]
        table = np.zeros(slots, ">i4")
        last = np.r_[~same, True]
        table[slot[order][last]] = number[order][last]
        begin_ts, begin_phy = (int(ts[0]), int(phy[0])) if n else (end_ts, end_phy)
        diff = np.clip((ts - begin_ts) // 1000, 0, INT_MAX) if begin_ts > 0 else np.zeros(n, np.int64)
        body = np.zeros(entries, np.dtype([("h", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")]))
        body["h"][1:n + 1], body["phy"][1:n + 1], body["diff"][1:n + 1], body["prev"][1:n + 1] = k, phy, diff, prev
        end_phy, end_ts = (int(phy[-1]), int(ts[-1])) if n else (end_phy, end_ts)
        name = datetime.fromtimestamp(begin_ts / 1000, timezone.utc).strftime("%Y%m%d%H%M%S%f")[:17]
        while os.path.join(root, "index", name) in paths:
            name = str(int(name) + 1)
        path = os.path.join(root, "index", name)
        with open(path, "wb") as out:
            out.write(HEADER.pack(begin_ts, end_ts, begin_phy, end_phy, int(len(np.unique(slot))), n + 1))
            out.write(table.tobytes())
            out.write(body.tobytes())
        paths.append(path)
        start += per_file
    return paths
