"""One walk of a record's header (schemas/kernels.record_walk over the offsets schemas/log/layout.py names), used by
the decoder and the consume-queue rebuild alike: the offsets are RocketMQ's, the positions of a record built by
hand are where its fields were put, and a damaged record stops both readers at the same check."""
import struct

import numpy as np

from schemas import kernels as K
from schemas.log import layout as L
from schemas.queues.cq_rebuild import END_DAMAGED, rebuild_units


def test_the_fixed_offsets_are_those_messagedecoder_reads():
    # MessageDecoder.decode: totalSize, magicCode, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag,
    # bornTimeStamp, then bornHost
    assert (L.TOTAL_SIZE_AT, L.MAGIC_AT, L.BODY_CRC_AT, L.QUEUE_ID_AT, L.FLAG_AT, L.QUEUE_OFFSET_AT,
            L.PHYSICAL_OFFSET_AT, L.SYS_FLAG_AT, L.BORN_TIMESTAMP_AT, L.BORN_HOST_AT) == (
                0, 4, 8, 12, 16, 20, 28, 36, 40, 48)
    assert (L.RECONSUME_TIMES_AT, L.PREPARED_TRANSACTION_OFFSET_AT, L.BODY_LENGTH_AT, L.MID_SIZE) == (0, 4, 12, 16)


def _record(body_length=None, magic=L.MAGIC_V2):
    """A v2 record by hand: IPv6 born host, IPv4 store host, body b'hello', topic 'T1', properties 'a=b'."""
    rest = (bytes(16) + struct.pack(">i", 7)  # born: 16-byte address, port
            + struct.pack(">q", 99)  # store timestamp
            + bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)  # store: 4-byte address, port
            + struct.pack(">iqi", 0, 0, 5 if body_length is None else body_length) + b"hello"
            + struct.pack(">h", 2) + b"T1" + struct.pack(">h", 4) + b"a\x01b\x02")
    total = 48 + len(rest)
    head = struct.pack(">iiiiiqqiq", total, magic, 0, 3, 0, 42, 1000, L.BORNHOST_V6, 5)
    return head + rest


def test_a_records_positions_are_where_its_fields_were_put():
    pad = b"\x00" * 16
    buf = np.frombuffer(pad + _record(), np.uint8)
    (err, total, magic, flag, born_at, born_ip, store_at, store_ip, mid_at, body_at, body_len, topic_at,
     topic_len, props_at, props_len) = K.record_walk(buf, 16, len(buf))
    assert (err, total, magic, flag) == (K.OK, 115, L.MAGIC_V2, L.BORNHOST_V6)
    # 16 + 48: born host (16 + 4), store timestamp (8), store host (4 + 4), mid (16), body (5), topic (2 + 2)
    assert (born_at, born_ip, store_at, store_ip, mid_at) == (64, 16, 92, 4, 100)
    assert (body_at, body_len, topic_at, topic_len, props_at, props_len) == (116, 5, 123, 2, 127, 4)


def test_a_body_running_past_its_record_stops_the_decoder_and_the_rebuild_alike():
    good, bad = _record(), _record(body_length=500)
    buf = np.frombuffer(good + bad + good, np.uint8)
    fields = K.record_fields(buf, np.array([0, len(good), len(good) + len(bad)]))
    assert list(fields["error"]) == [K.OK, K.BAD_BODY, K.OK]
    walked = rebuild_units(buf, 0)
    assert (walked.units.num_rows, walked.end, walked.how) == (1, len(good), END_DAMAGED)
