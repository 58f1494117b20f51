"""RocksDB parts of a 5.2+ store (`storeType=defaultRocksDB`), read-only through rocksdict (RocksDB's own
library): the consume queue and the consumer offsets. Keys and values as RocketMQ writes them (big-endian):

- consume queue, `consumequeue/` itself a RocksDB (RocksDBConsumeQueueTable): family `default` maps
  `[int topicLen][0x01][topic][0x01][int queueId][0x01][long cqOffset]` to `[long phyOffset][int size]
  [long tagsCode][long storeTimestamp]` (28 bytes); family `offset` holds each queue's min and max
  (RocksDBConsumeQueueOffsetTable), not needed here: a queue's first and last keys say the same. No ext units.
- consumer offsets, v1 (RocksDBConsumerOffsetManager): `config/consumerOffsets/`, key `topic@group`, value
  fastjson `{"offsetTable": {queueId: offset}}`; v2 (ConsumerOffsetManagerV2, 5.3+): `config/rdb/`, key
  `[0x01][short 1][0x02][short groupLen][group][0x01][short topicLen][topic][0x01][int queueId]`, value
  `[long offset]`.

RocksDB reads files by path: only a store on the local filesystem (or mounted) is read this way."""
from __future__ import annotations

import json
import os
import struct
from contextlib import contextmanager
from typing import Iterator, Optional

import numpy as np

from schemas.errors import ConfigError, CorruptStoreError

CQ_VALUE_DTYPE = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"),
                           ("store_timestamp", ">i8")])
CQ_VALUE_SIZE = CQ_VALUE_DTYPE.itemsize  # 28
_CTRL_1 = b"\x01"
_LONG_MAX = (1 << 63) - 1
_V2_CONSUMER_OFFSET = struct.pack(">bhb", 1, 1, 2)  # TablePrefix.TABLE, TableId.CONSUMER_OFFSET, RecordPrefix.DATA


def is_rocksdb(path: str) -> bool:
    """Whether a local directory holds a RocksDB (its CURRENT file names the live MANIFEST)."""
    return os.path.isfile(os.path.join(path, "CURRENT"))


def _open(path):
    """A read-only handle of a RocksDB in raw mode (bytes keys and values), with all its column families."""
    from rocksdict import AccessType, Options, Rdict  # imported where a RocksDB is read: the rest never needs it
    try:
        return Rdict(path, Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain Exceptions with RocksDB's status text
        raise CorruptStoreError(path, None, f"RocksDB cannot be opened read-only: {exc}") from None


def cq_key(topic: str, queue_id: int, cq_offset: int) -> bytes:
    """RocksDBConsumeQueueTable's key of one unit."""
    t = topic.encode("utf-8")
    return struct.pack(">i", len(t)) + _CTRL_1 + t + _CTRL_1 + struct.pack(">i", queue_id) + _CTRL_1 + \
        struct.pack(">q", cq_offset)


def _queue_of(key):
    """(topic, queue id, cq offset) of a consume-queue key; None for a key of another shape."""
    if len(key) < 4:
        return None
    n = struct.unpack_from(">i", key)[0]
    if n < 0 or len(key) != 4 + 1 + n + 1 + 4 + 1 + 8 or key[4:5] != _CTRL_1 or key[5 + n:6 + n] != _CTRL_1:
        return None
    qid, = struct.unpack_from(">i", key, 6 + n)
    offset, = struct.unpack_from(">q", key, 11 + n)
    return key[5:5 + n].decode("utf-8", "replace"), qid, offset


_HELD: dict = {}  # path -> RocksConsumeQueue opened while `held` lasts
_DEPTH = [0]  # `held` scopes entered and not left


def consume_queue(path: str) -> RocksConsumeQueue:
    """The RocksConsumeQueue at a path: while `held` lasts one handle per path, shared by its readers; outside
    it a handle of the caller's own (closed when no longer referenced)."""
    if not _DEPTH[0]:
        return RocksConsumeQueue(path)
    handle = _HELD.get(path)
    if handle is None:
        handle = _HELD[path] = RocksConsumeQueue(path)
    return handle


@contextmanager
def held() -> Iterator[None]:
    """Within: the consume queues opened are shared; when the outermost scope ends (a task, a plan) each is
    closed, so that no handle outlives the work that opened it (a worker runs other tasks, and other code,
    after it)."""
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        if not _DEPTH[0]:
            while _HELD:
                _HELD.popitem()[1].db.close()


def held_paths() -> tuple[str, ...]:
    """The paths of the consume queues held open now."""
    return tuple(_HELD)


class RocksConsumeQueue:
    """A RocksDB consume queue, read as the broker reads it: units by (topic, queue, cq offset)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.db = _open(path)
        self._queues: Optional[list[tuple[str, int, int, int]]] = None

    def queues(self) -> list[tuple[str, int, int, int]]:
        """[(topic, queue id, first cq offset, end cq offset)] of every queue, by key order: one seek per queue
        (listed once per handle)."""
        if self._queues is None:
            self._queues = self._list_queues()
        return self._queues

    def _list_queues(self):
        out = []
        it = self.db.iter()
        it.seek_to_first()
        while it.valid():
            found = _queue_of(it.key())
            if found is None:
                raise CorruptStoreError(self.path, None, f"RocksDB consume queue holds a key that is not "
                                                         f"RocketMQ's: {it.key()[:64]!r}")
            topic, qid, first = found
            it.seek_for_prev(cq_key(topic, qid, _LONG_MAX))
            last = _queue_of(it.key())[2]
            out.append((topic, qid, first, last + 1))
            it.seek(cq_key(topic, qid, _LONG_MAX))  # the next queue's first key (or this queue's at that offset)
            if it.valid() and _queue_of(it.key())[:2] == (topic, qid):
                it.next()
        return out

    def units(self, topic: str, queue_id: int, first: int, end: int) -> np.ndarray:
        """CQ_VALUE_DTYPE array of the units [first, end) of a queue, in one ranged iteration (C-level: no
        Python per unit); a gap in the offsets is damage (CorruptStoreError)."""
        from rocksdict import ReadOptions
        if end <= first:
            return np.zeros(0, CQ_VALUE_DTYPE)
        bounded = ReadOptions()
        bounded.set_iterate_upper_bound(cq_key(topic, queue_id, end))
        raw = b"".join(self.db.values(from_key=cq_key(topic, queue_id, first), read_opt=bounded))
        if len(raw) != (end - first) * CQ_VALUE_SIZE:
            raise CorruptStoreError(self.path, None, f"RocksDB consume queue {topic}/{queue_id}: units "
                                    f"[{first}, {end}) hold {len(raw)} bytes, not {end - first} values of "
                                    f"{CQ_VALUE_SIZE}", topic, queue_id)
        return np.frombuffer(raw, CQ_VALUE_DTYPE)

    def _value(self, topic, queue_id, cq_offset):
        raw = self.db.get(cq_key(topic, queue_id, cq_offset))
        if raw is None or len(raw) != CQ_VALUE_SIZE:
            raise CorruptStoreError(self.path, None, f"RocksDB consume queue {topic}/{queue_id}: unit {cq_offset} "
                                    "missing or not 28 bytes", topic, queue_id)
        return raw

    def commitlog_offset(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return struct.unpack_from(">q", self._value(topic, queue_id, cq_offset))[0]

    def store_time(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return struct.unpack_from(">q", self._value(topic, queue_id, cq_offset), 20)[0]

    def first_at_or_after(self, topic: str, queue_id: int, commitlog_offset: int, first: int, end: int) -> int:
        """The first cq offset in [first, end) whose unit points at or after a commit-log offset (end if none):
        a binary search of single reads, as RocksDBConsumeQueueTable.binarySearchInCQ."""
        lo, hi = first, end
        while lo < hi:
            mid = (lo + hi) // 2
            if self.commitlog_offset(topic, queue_id, mid) < commitlog_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo


def committed_offsets(config_dir: str | os.PathLike[str]
                      ) -> Optional[tuple[str, dict[tuple[str, str], dict[int, int]]]]:
    """(path, {(topic, group): {queue id: offset}}) of a RocksDB-config broker (v2 `rdb/`, else v1
    `consumerOffsets/`), or None when it has neither."""
    v2, v1 = os.path.join(config_dir, "rdb"), os.path.join(config_dir, "consumerOffsets")
    if is_rocksdb(v2):
        return v2, _v2_offsets(v2)
    if is_rocksdb(v1):
        return v1, _v1_offsets(v1)
    return None


def _v1_offsets(path):
    out = {}
    db = _open(path)
    try:
        for key, value in db.items():
            topic, sep, group = key.decode("utf-8", "replace").rpartition("@")
            try:
                table = json.loads(value.decode("utf-8"))["offsetTable"]
                offsets = {int(q): int(o) for q, o in table.items()}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ConfigError(path, f"not {{\"offsetTable\": {{queueId: offset}}}}: {exc}",
                                  key.decode("utf-8", "replace")) from None
            if sep:
                out[(topic, group)] = offsets
    finally:
        db.close()
    return out


def _v2_offsets(path):
    out = {}
    db = _open(path)
    try:
        for key, value in db.items(from_key=_V2_CONSUMER_OFFSET):
            if not key.startswith(_V2_CONSUMER_OFFSET):
                break
            glen, = struct.unpack_from(">h", key, 4)
            group = key[6:6 + glen].decode("utf-8", "replace")
            tlen, = struct.unpack_from(">h", key, 7 + glen)
            topic = key[9 + glen:9 + glen + tlen].decode("utf-8", "replace")
            qid, = struct.unpack_from(">i", key, 10 + glen + tlen)
            out.setdefault((topic, group), {})[qid] = struct.unpack(">q", value)[0]
    finally:
        db.close()
    return out
