"""Write a store in RocketMQ's exact byte format: commit log, consume queues, ext units, config JSON.

A tool, not the read path: it writes the sample store of `make run` (tools/sample_store.py), the tests'
stores and benchmark stores of any size. The record encoder is
the byte layout of schemas/log/layout.py written the other way round; files are preallocated to full size
with zeros, as a broker's mapped files are.
"""
import functools
import ipaddress
import json
import os
import struct
import zlib
from dataclasses import dataclass, field

from schemas.log import layout as L
from schemas.log.properties import properties_to_blob
from schemas.queues.tag_codes import tags_code

_HEAD = struct.Struct(">iiiiiqqiq")
_MID = struct.Struct(">iqi")
_EXT_HEAD = struct.Struct(">hqqh")
_CQ_UNIT = struct.Struct(">qiq")


@dataclass
class Message:
    """A message as a producer and the broker set it; stored_body is the body bytes as written to disk."""

    topic: str
    queue_id: int
    body: bytes = b""
    properties: dict = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    stored_body: bytes = None
    properties_raw: str = None  # the exact blob to write instead of encoding `properties`
    filter_bitmap: bytes = None
    queue_offset: int = None
    magic: int = L.MAGIC_V1

    def body_on_disk(self):
        if self.stored_body is not None:
            return self.stored_body
        if self.sys_flag & L.COMPRESSED:
            ctype = (self.sys_flag & L.COMPRESSION_TYPE_MASK) >> L.COMPRESSION_TYPE_SHIFT
            if ctype not in (0, L.COMPRESSION_ZLIB):
                raise ValueError("the writer compresses with zlib only (Deflater level 5, as 4.9.x)")
            return zlib.compress(self.body, 5)
        return self.body


@functools.lru_cache(maxsize=65536)
def _host_bytes(text):
    host, _, port = text.rpartition(":")
    return ipaddress.ip_address(host).packed + struct.pack(">i", int(port))


def encode_record(msg, physical_offset, queue_offset):
    """The exact bytes of one commit-log record."""
    body = msg.body_on_disk()
    topic = msg.topic.encode("utf-8")
    blob = msg.properties_raw if msg.properties_raw is not None else properties_to_blob(msg.properties)
    props = blob.encode("utf-8")
    born, store = _host_bytes(msg.born_host), _host_bytes(msg.store_host)
    sys_flag = msg.sys_flag & ~(L.BORNHOST_V6 | L.STOREHOST_V6)
    sys_flag |= (L.BORNHOST_V6 if len(born) == 20 else 0) | (L.STOREHOST_V6 if len(store) == 20 else 0)
    topic_len = struct.pack(">h", len(topic)) if msg.magic == L.MAGIC_V2 else struct.pack(">b", len(topic))
    rest = b"".join([born, struct.pack(">q", msg.store_timestamp), store,
                     _MID.pack(msg.reconsume_times, msg.prepared_transaction_offset, len(body)), body,
                     topic_len, topic, struct.pack(">h", len(props)), props])
    total = _HEAD.size + len(rest)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    head = _HEAD.pack(total, msg.magic, crc, msg.queue_id, msg.flag, queue_offset, physical_offset,
                      sys_flag, msg.born_timestamp)
    return head + rest


class _MappedFiles:
    """A sequence of fixed-size files named by start offset, written append-only and zero-filled."""

    def __init__(self, folder, file_size):
        self.folder, self.file_size = folder, file_size
        self.start = None
        self.pos = 0
        self.handle = None

    def offset(self):
        return (self.start or 0) + self.pos

    def remaining(self):
        return self.file_size - self.pos if self.handle else 0

    def roll(self):
        self.close()
        self.start = 0 if self.start is None else self.start + self.file_size
        os.makedirs(self.folder, exist_ok=True)
        self.handle = open(os.path.join(self.folder, L.file_name(self.start)), "wb")
        self.pos = 0

    def write(self, data):
        if self.handle is None:
            self.roll()
        self.handle.write(data)
        self.pos += len(data)

    def close(self):
        if self.handle:
            self.handle.truncate(self.file_size)  # preallocated, zero tail
            self.handle.close()
            self.handle = None


class StoreWriter:
    """Append messages and get a broker store directory; call close() (or use as a context manager)."""

    def __init__(self, root, commitlog_file_size=L.DEFAULT_COMMITLOG_FILE_SIZE,
                 cq_file_size=L.DEFAULT_CQ_FILE_SIZE, ext_file_size=L.DEFAULT_EXT_FILE_SIZE, enable_ext=True):
        if cq_file_size % L.CQ_UNIT_SIZE:
            raise ValueError("the consume-queue file size must be a multiple of 20")
        self.root = root
        self.commitlog = _MappedFiles(os.path.join(root, "commitlog"), commitlog_file_size)
        self.cq_file_size, self.ext_file_size, self.enable_ext = cq_file_size, ext_file_size, enable_ext
        self.queues = {}
        self.exts = {}
        self.next_queue_offset = {}
        self.count = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def append(self, msg):
        """Write one message; returns its commit-log offset. Prepared/rollback ones get no queue unit."""
        key = (msg.topic, msg.queue_id)
        queue_offset = msg.queue_offset if msg.queue_offset is not None else self.next_queue_offset.get(key, 0)
        record = encode_record(msg, 0, queue_offset)
        clog = self.commitlog
        if clog.handle is None or len(record) + L.END_FILE_MIN_BLANK_LENGTH > clog.remaining():
            if clog.handle is not None:
                clog.write(struct.pack(">ii", clog.remaining(), L.BLANK_MAGIC))
            clog.roll()
            if len(record) + L.END_FILE_MIN_BLANK_LENGTH > clog.remaining():
                raise ValueError(f"a record of {len(record)} bytes does not fit a commit-log file")
        physical = clog.offset()
        record = record[:28] + struct.pack(">q", physical) + record[36:]
        clog.write(record)
        self.count += 1
        if msg.sys_flag & L.TRANSACTION_MASK in (L.TRANSACTION_PREPARED, L.TRANSACTION_ROLLBACK):
            return physical
        self.next_queue_offset[key] = queue_offset + 1
        tags = msg.properties.get("TAGS")
        code = tags_code(tags)
        if self.enable_ext:
            code = self._put_ext(key, code, msg.store_timestamp, msg.filter_bitmap)
        self._put_cq(key, physical, len(record), code, queue_offset)
        return physical

    def _put_ext(self, key, code, store_time, bitmap):
        """ConsumeQueueExt.put: a unit never crosses a file; a full file ends with short -1."""
        ext = self.exts.get(key)
        if ext is None:
            ext = self.exts[key] = _MappedFiles(self._queue_dir("consumequeue_ext", key), self.ext_file_size)
        bitmap = bitmap or b""
        unit = _EXT_HEAD.pack(L.EXT_HEAD_SIZE + len(bitmap), code, store_time, len(bitmap)) + bitmap
        if ext.handle is None or len(unit) > ext.remaining() - L.EXT_END_BLANK_LENGTH:
            if ext.handle is not None:
                ext.write(struct.pack(">h", -1))
            ext.roll()
        address = L.ext_address(ext.offset())
        ext.write(unit)
        return address

    def _put_cq(self, key, physical, size, code, queue_offset):
        cq = self.queues.get(key)
        if cq is None:
            cq = self.queues[key] = _MappedFiles(self._queue_dir("consumequeue", key), self.cq_file_size)
        expected = queue_offset * L.CQ_UNIT_SIZE
        if cq.handle is None or cq.remaining() == 0:
            cq.roll()
        if cq.offset() != expected:
            raise ValueError(f"queue {key}: unit for queue offset {queue_offset} is not the next one")
        cq.write(_CQ_UNIT.pack(physical, size, code))

    def _queue_dir(self, kind, key):
        return os.path.join(self.root, kind, key[0], str(key[1]))

    def write_config(self, name, document):
        """A config file under config/ (standard JSON; the readers also take fastjson's bare int keys)."""
        os.makedirs(os.path.join(self.root, "config"), exist_ok=True)
        with open(os.path.join(self.root, "config", name), "w", encoding="utf-8") as f:
            json.dump(document, f, ensure_ascii=False, indent=2, sort_keys=True)

    def close(self):
        self.commitlog.close()
        for files in list(self.queues.values()) + list(self.exts.values()):
            files.close()
