"""Random and mutated bytes into every decoder: only the project's own errors come out, nothing hangs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.errors import CorruptStoreError, UnsupportedStoreError
from schemas.log import layout as L
from schemas.log.records import decode_records, walk_records
from schemas.queues.consume_queue import ExtReader, decode_cq_segment
from schemas.store.config import ConfigError, load_fastjson

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def real_records(store_a):
    """The first records of store_a's commit log: a realistic seed for mutations."""
    return (store_a / "store" / "commitlog" / "00000000000000000000").read_bytes()[:3000]


def _decode_all(data):
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    try:
        starts, _, _ = walk_records(buf, 0, "fuzz")
        decode_records(buf, starts, 0, "fuzz")
    except (CorruptStoreError, UnsupportedStoreError):
        pass


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_give_only_corrupt_store_errors(data):
    _decode_all(data)


@FUZZ
@given(st.data())
def test_mutated_real_records_give_only_corrupt_store_errors(real_records, data):
    blob = bytearray(real_records[:3000])
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    _decode_all(blob[:cut])


@FUZZ
@given(st.binary(max_size=400), st.integers(0, 10).map(lambda k: k * L.CQ_UNIT_SIZE))
def test_random_consume_queue_bytes_decode_or_fail_cleanly(data, start):
    cols = decode_cq_segment(np.frombuffer(data, dtype=np.uint8), start)
    assert (cols["size"] > 0).all() and (cols["commitlog_offset"] >= 0).all()


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=20))
def test_random_ext_files_and_addresses_resolve_or_count_as_missing(data, addresses):
    reader = ExtReader({0: lambda lo, hi: np.frombuffer(data, dtype=np.uint8)[lo:hi]}, max(len(data), 1))
    tags_code, store_time, bitmaps, ok = reader.resolve(np.array(addresses, dtype=np.int64))
    assert len(tags_code) == len(bitmaps) == len(ok) == len(addresses)


@FUZZ
@given(st.text(max_size=200))
def test_random_config_text_gives_only_config_errors(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "x.json"
    path.write_text(text, encoding="utf-8")
    try:
        load_fastjson(path)
    except ConfigError:
        pass
