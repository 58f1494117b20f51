"""RocketMQ's on-disk layouts, written out as data (all integers big-endian, as the broker writes them).

Commit-log record (`CommitLog.calMsgLength` / `MessageDecoder.decode`):

    off  size  field
    0    4     totalSize                 whole record, this field included
    4    4     magicCode                 MAGIC_V1 / MAGIC_V2 / BLANK_MAGIC
    8    4     bodyCRC                   CRC32 of the stored body & 0x7fffffff
    12   4     queueId
    16   4     flag
    20   8     queueOffset
    28   8     physicalOffset
    36   4     sysFlag
    40   8     bornTimestamp
    48   8|20  bornHost                  4 B IPv4 + 4 B port, or 16 B IPv6 + port (sysFlag & BORNHOST_V6)
    ..   8     storeTimestamp
    ..   8|20  storeHost                 as bornHost (sysFlag & STOREHOST_V6)
    ..   4     reconsumeTimes
    ..   8     preparedTransactionOffset
    ..   4+n   bodyLength, body          body as stored (compressed when sysFlag & COMPRESSED)
    ..   1+n   topicLength, topic        v1: signed byte length; v2: 2-byte length; UTF-8
    ..   2+n   propertiesLength, props   signed short; UTF-8 `name \\x01 value \\x02 ...`

Consume-queue unit: `[long commitLogOffset][int size][long tagsCode]` (20 B).
ConsumeQueueExt unit: `[short size][long tagsCode][long msgStoreTime][short bitMapSize][bitmap]`.
"""
from typing import Any

import numpy as np

MAGIC_V1 = -626843481  # 0xdaa320a7
MAGIC_V2 = -626843477  # 0xdaa320ab, 5.1+: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xcbd43194: end of a commit-log file
MESSAGE_MAGICS = (MAGIC_V1, MAGIC_V2)

# sysFlag bits
COMPRESSED = 0x1
TRANSACTION_MASK = 0xC
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
COMPRESSION_TYPE_SHIFT = 8
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_ZLIB = 1, 2, 3

# Fixed prefix of a record, up to and including bornTimestamp; the host-dependent part follows.
HEAD_DTYPE = np.dtype([
    ("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
])
HEAD_SIZE = HEAD_DTYPE.itemsize  # 48: bornHost starts here
# Where each fixed field starts in a record, named once from the dtype (schemas/kernels.record_walk reads
# them; no kernel spells a literal offset): 0, 4, 8, 12, 16, 20, 28, 36, 40.
(TOTAL_SIZE_AT, MAGIC_AT, BODY_CRC_AT, QUEUE_ID_AT, FLAG_AT, QUEUE_OFFSET_AT, PHYSICAL_OFFSET_AT, SYS_FLAG_AT,
 BORN_TIMESTAMP_AT) = (offset for _, offset, *_ in HEAD_DTYPE.fields.values())  # type: ignore[union-attr]
BORN_HOST_AT = HEAD_SIZE
HOST_V4_SIZE = 8
HOST_V6_SIZE = 20
IP_V4_SIZE, IP_V6_SIZE = HOST_V4_SIZE - 4, HOST_V6_SIZE - 4  # a host is its address, then a 4-byte port
STORE_TIMESTAMP_SIZE = 8
# After storeHost: reconsumeTimes, preparedTransactionOffset, bodyLength; offsets from the end of storeHost.
MID_DTYPE = np.dtype([("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_length", ">i4")])
RECONSUME_TIMES_AT, PREPARED_TRANSACTION_OFFSET_AT, BODY_LENGTH_AT = (
    offset for _, offset, *_ in MID_DTYPE.fields.values())  # type: ignore[union-attr]
MID_SIZE = MID_DTYPE.itemsize  # 16: the body starts past it
# Smallest possible record (v1, IPv4 hosts, empty body/topic/properties).
MIN_RECORD_SIZE = HEAD_SIZE + HOST_V4_SIZE + 8 + HOST_V4_SIZE + MID_SIZE + 1 + 2
# CommitLog.doAppend keeps room for a blank record of [int size][int magic] at the end of a file.
END_FILE_MIN_BLANK_LENGTH = 8

CQ_UNIT_DTYPE = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
CQ_UNIT_SIZE = CQ_UNIT_DTYPE.itemsize  # 20
PRE_BLANK_SIZE = 2147483647  # ConsumeQueue.fillPreBlank writes (0, Integer.MAX_VALUE, 0)

# RocketMQ 5.x BatchConsumeQueue (`batchconsumequeue/<topic>/<queue>/`): a 46-byte unit per commit-log record of a
# BatchCQ topic; its queue offset is msgBaseOffset (the unit's first message), batch_size its messages
# (BatchConsumeQueue.putBatchMessagePositionInfo: offset, size, tagsCode, storeTime, msgBaseOffset, batchSize,
# compactedOffset, 4 reserved bytes)
BCQ_UNIT_DTYPE = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_time", ">i8"),
                           ("base_offset", ">i8"), ("batch_size", ">i2"), ("compacted_offset", ">i4"),
                           ("reserved", ">i4")])
BCQ_UNIT_SIZE = BCQ_UNIT_DTYPE.itemsize  # 46
# MessageSysFlag: a record holding a batch of messages (5.x, BatchCQ topics) that the client unwraps
NEED_UNWRAP = 0x40
INNER_BATCH = 0x80
# MixAll.LMQ_PREFIX: a light message queue, a consume queue written by multi-dispatch (INNER_MULTI_DISPATCH)
LMQ_PREFIX = "%LMQ%"

EXT_HEAD_DTYPE = np.dtype([("size", ">i2"), ("tags_code", ">i8"), ("msg_store_time", ">i8"), ("bitmap_size", ">i2")])
EXT_HEAD_SIZE = EXT_HEAD_DTYPE.itemsize  # 20
EXT_END_BLANK_LENGTH = 4  # ConsumeQueueExt.END_BLANK_DATA_LENGTH
EXT_MAX_ADDRESS = -2147483649  # Integer.MIN_VALUE - 1: addresses at or below are ext addresses
LONG_MIN = -(1 << 63)

DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30
DEFAULT_CQ_FILE_SIZE = 300000 * CQ_UNIT_SIZE
DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024


def is_ext_address(tags_code: int | np.ndarray) -> Any:  # a bool, or a bool array
    """ConsumeQueueExt.isExtAddr, for a scalar or an int64 array."""
    return tags_code <= EXT_MAX_ADDRESS


def ext_position(address: int | np.ndarray) -> Any:  # an int, or an int64 array
    """Position in the ext address space of a decorated address (address - Long.MIN_VALUE)."""
    return address & 0x7FFFFFFFFFFFFFFF


def ext_address(position: int | np.ndarray) -> Any:  # an int, or an int64 array
    """Decorate an ext-space position as the consume-queue tag field stores it (position + Long.MIN_VALUE)."""
    return position | LONG_MIN if isinstance(position, int) else position | np.int64(LONG_MIN)


def file_name(start_offset: int) -> str:
    """RocketMQ's mapped-file name: the 20-digit zero-padded start offset."""
    return f"{start_offset:020d}"
