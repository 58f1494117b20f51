"""Compressed bodies are inflated with a bound: one beyond it is never inflated whole (a few MB of zlib
zeros inflate to gigabytes), and the record decodes with a null body."""
import struct
import time
import tracemalloc
import zlib

import lz4.frame
import numpy as np
import pytest
import zstandard

from schemas.errors import CorruptStoreError
from schemas.log.records import decode_records, decompress
from tools.store_writer import Message, encode_record

MIB = 1 << 20
ZLIB, LZ4, ZSTD = 3, 1, 2


def zlib_zeros(mib):
    """A zlib stream of `mib` MiB of zeros, made without holding them: after a full flush the compressor
    starts afresh, so every further MiB compresses to the same bytes and one such piece is repeated; the
    stream ends with an empty final block and adler32 of n zeros, (n % 65521) << 16 | 1."""
    c = zlib.compressobj(9)
    zeros = bytes(MIB)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()[:-4]
    return first + again * (mib - 1) + end + struct.pack(">I", ((mib * MIB) % 65521) << 16 | 1)


def test_four_mb_of_zlib_zeros_that_inflate_to_4_gb_are_refused_quickly_without_inflating():
    """4,000 MiB inflated: beyond Arrow's 2 GiB and any task's memory; the bound stops at 64 MiB + 1."""
    assert zlib.decompress(zlib_zeros(5)) == bytes(5 * MIB)  # the generator's stream is valid zlib
    bomb = zlib_zeros(4000)
    assert 3_000_000 < len(bomb) < 4 * MIB  # within RocketMQ's 4 MiB maxMessageSize
    tracemalloc.start()
    started = time.perf_counter()
    try:
        got = decompress(bomb, ZLIB, limit=64 * MIB)
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is None
    assert seconds < 5  # inflating 64 MiB of zeros: some 0.05 s; all of it: tens of seconds, if memory allowed
    assert peak < 3 * 64 * MIB


def _codec(ctype, data):
    if ctype == LZ4:
        return lz4.frame.compress(data)
    if ctype == ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    return zlib.compress(data)


@pytest.mark.parametrize("ctype", [ZLIB, 0, LZ4, ZSTD])
def test_a_body_inflates_up_to_the_bound_and_not_beyond(ctype):
    body = bytes(range(256)) * 4096  # 1 MiB
    stored = _codec(ctype, body)
    assert decompress(stored, ctype, limit=MIB) == body
    assert decompress(stored, ctype, limit=MIB - 1) is None
    assert decompress(stored, ctype) == body  # no bound


def test_an_lz4_frame_without_its_content_size_is_bounded_while_inflating():
    """lz4-java's LZ4FrameOutputStream (RocketMQ's Lz4Compressor) writes no content size."""
    stored = lz4.frame.compress(bytes(3 * MIB), store_size=False)
    assert decompress(stored, LZ4, limit=MIB) is None
    assert decompress(stored, LZ4, limit=3 * MIB) == bytes(3 * MIB)


def test_a_zstd_frame_without_its_content_size_is_bounded_while_inflating():
    stored = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(3 * MIB))
    assert decompress(stored, ZSTD, limit=MIB) is None
    assert decompress(stored, ZSTD, limit=3 * MIB) == bytes(3 * MIB)


@pytest.mark.parametrize("ctype", [ZLIB, LZ4, ZSTD])
def test_a_truncated_body_is_damaged_not_cut_short(ctype):
    stored = _codec(ctype, bytes(range(256)) * 400)
    with pytest.raises(CorruptStoreError, match="does not decompress"):
        decompress(stored[:-6], ctype, "commitlog/00000000000000000000", 4096, limit=MIB)


def test_a_record_beyond_the_bound_decodes_with_a_null_body_and_its_neighbours_whole():
    flag = 1 | (ZLIB << 8)
    messages = [Message("T", 0, b"plain", {"TAGS": "a"}),
                Message("T", 0, bytes(3 * MIB), {"TAGS": "b"}, sys_flag=flag),
                Message("T", 0, b"small" * 1000, {"TAGS": "c"}, sys_flag=flag)]
    records = [encode_record(m, 0, i) for i, m in enumerate(messages)]
    starts = np.cumsum([0] + [len(r) for r in records[:-1]])
    batch = decode_records(np.frombuffer(b"".join(records), np.uint8), starts, max_body=MIB)
    assert batch.column("body").to_pylist() == [b"plain", None, b"small" * 1000]
    assert batch.column("tags").to_pylist() == ["a", "b", "c"]
