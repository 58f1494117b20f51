"""The bloom filter against RocketMQ's outputs: k/m, bit positions, isHit, byte layout, real store bitmaps."""
import base64
import gzip
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filtering.bloom import BloomFilter, bitmap_matrix, is_hit_array, or_bits
from tests.conftest import read_jsonl

KM = read_jsonl("bloom_tags/bloom_km.jsonl.gz")
BITPOS = read_jsonl("bloom_tags/bloom_bitpos.jsonl.gz")
ISHIT = read_jsonl("bloom_tags/bloom_ishit.jsonl.gz")
HIT_LINES = [v for v in ISHIT if v.get("kind") != "single_bit_demo"]
DEMO_LINES = [v for v in ISHIT if v.get("kind") == "single_bit_demo"]


def bits_to_string(bitmap, bit_length: int | None = None) -> str:
    """``BitsArray.toString()``, as the fixtures print it: bytes last to first, bits high to low, newline after byte 8i.

    For a bit length that is not a multiple of 8, Java prints one bit more than the remainder of the last
    byte; that quirk is kept.
    """
    data = bytes(bitmap)
    bit_length = len(data) * 8 if bit_length is None else bit_length
    parts = []
    for i in range(len(data) - 1, -1, -1):
        top = bit_length % 8 if i == len(data) - 1 and bit_length % 8 else 7
        parts.extend("1" if data[i] >> j & 1 else "0" for j in range(top, -1, -1))
        if i % 8 == 0:
            parts.append("\n")
    return "".join(parts)


def bitmap_column(matrix, valid=None) -> pa.FixedSizeBinaryArray:
    """An (N, w) uint8 matrix as a fixed_size_binary(w) column; rows with ``valid`` False become null."""
    matrix = np.ascontiguousarray(matrix, dtype=np.uint8)
    if matrix.ndim != 2 or matrix.shape[1] < 1:
        raise ValueError(f"matrix must be (N, w) with w >= 1, got {matrix.shape}")
    n, width = matrix.shape
    validity = None
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        if valid.shape != (n,):
            raise ValueError(f"valid has shape {valid.shape}, expected ({n},)")
        if not valid.all():
            validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [validity, pa.py_buffer(matrix.tobytes())],
        null_count=-1 if validity is not None else 0)


def test_fixtures_have_every_line():
    assert (len(KM), len(BITPOS), len(HIT_LINES) + len(DEMO_LINES)) == (359, 2500, 69)
    assert len(DEMO_LINES) == 9


# ------------------------------------------------------------------ k and m
def test_k_and_m_match_every_grid_line():
    wrong = []
    for v in KM:
        try:
            b = BloomFilter(v["f"], v["n"])
        except ValueError as e:
            if v["error"] != "IllegalArgumentException" or str(e) != v["error_message"]:
                wrong.append((v, str(e)))
            continue
        if v["error"] is not None or (b.k, b.m) != (v["k"], v["m"]):
            wrong.append((v, b))
    assert wrong == []


def test_grid_contains_both_kinds_of_error():
    assert {v["error_message"] for v in KM if v["error"]} == {
        "f must be greater or equal than 1 and less than 100", "n must be greater than 0"}


def test_broker_defaults_give_k3_m112():
    b = BloomFilter()
    assert (b.f, b.n, b.k, b.m) == (20, 32, 3, 112)
    assert b.empty_bitmap() == bytearray(14)


def test_m_saturates_like_a_java_int_cast():
    assert BloomFilter(1, 2 ** 31 - 1).m == 2 ** 31 - 1  # value printed by a JVM for the same formula


@pytest.mark.parametrize("f, n", [(20, 2 ** 31), (2 ** 31, 32), (20, -(2 ** 31) - 1)])
def test_arguments_outside_java_int_are_rejected(f, n):
    with pytest.raises(ValueError):
        BloomFilter(f, n)


@pytest.mark.parametrize("f, n", [(20.0, 32), (20, "32"), (True, 32)])
def test_non_integer_arguments_are_rejected(f, n):
    with pytest.raises(TypeError):
        BloomFilter(f, n)


# ------------------------------------------------------------------ bit positions
def test_bit_positions_match_all_2500_lines():
    filters = {}
    wrong = []
    for v in BITPOS:
        b = filters.setdefault((v["f"], v["n"]), BloomFilter(v["f"], v["n"]))
        if (b.k, b.m) != (v["k"], v["m"]) or b.m != v["bitNum"] or b.bit_positions(v["str"]) != v["bitPos"]:
            wrong.append(v)
    assert wrong == []


def test_registration_bits_hash_group_hash_sign_topic():
    b = BloomFilter()
    assert b.registration_bits("CID_A", "TopicTest") == b.bit_positions("CID_A#TopicTest") == [20, 68, 27]


def reference_bit_positions(data, k, m):
    """fixtures/README.md's formula over the UTF-8 bytes `data`, written out: h = murmur3_128(seed 0).asLong()
    (the first 8 bytes, little-endian), hash1 = (int) h, hash2 = (int) (h >>> 32), c = hash1 + i*hash2
    (32-bit wrap), ~c when negative, c % m."""
    import mmh3

    h = int.from_bytes(mmh3.hash_bytes(data, 0)[:8], "little")
    hash1, hash2 = h & 0xFFFFFFFF, (h >> 32) & 0xFFFFFFFF
    positions = []
    for i in range(1, k + 1):
        c = (hash1 + i * hash2) & 0xFFFFFFFF
        c = c - (1 << 32) if c >= 1 << 31 else c
        positions.append((~c if c < 0 else c) % m)
    return positions


def test_reference_formula_reproduces_the_fixture_lines():
    """The written-out formula below is itself right: it gives RocketMQ's bitPos on the fixture's lines."""
    for v in BITPOS[::50] + [v for v in BITPOS if not v["str"].isascii()]:
        assert reference_bit_positions(v["str"].encode("utf-8"), v["k"], v["m"]) == v["bitPos"], v["str"]


def test_lone_surrogate_is_hashed_as_question_mark_like_java_getbytes():
    b = BloomFilter(1, 1000)
    assert b.bit_positions("a\ud800b") == reference_bit_positions(b"a?b", b.k, b.m)
    pair = "\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16")  # a surrogate pair: one character
    assert b.bit_positions(pair) == reference_bit_positions("😀".encode("utf-8"), b.k, b.m)


# ------------------------------------------------------------------ hash_to / is_hit
@pytest.mark.parametrize("case", HIT_LINES, ids=lambda v: f"f{v['f']}n{v['n']}x{len(v['members'])}")
def test_hash_to_layout_and_is_hit_probes_match(case):
    b = BloomFilter(case["f"], case["n"])
    bitmap = b.empty_bitmap()
    for member in case["members"]:
        b.hash_to(b.bit_positions(member), bitmap)
    assert bitmap.hex() == case["bits_hex"]
    assert bytes(bitmap) == base64.b64decode(case["bits_base64"])
    assert bits_to_string(bitmap, b.m) == case["bits_toString"]
    stored = bytes.fromhex(case["bits_hex"])
    for probe in case["probes"]:
        hit = b.is_hit(b.bit_positions(probe["str"]), stored)
        assert hit is probe["isHit"] is probe["isHit_by_data"], probe["str"]
        if probe["member"]:
            assert hit is True


def test_probes_include_misses_and_false_positives():
    probes = [p for v in HIT_LINES for p in v["probes"]]
    assert any(not p["isHit"] for p in probes)
    assert any(p["isHit"] and not p["member"] for p in probes)  # bloom false positives are reproduced


@pytest.mark.parametrize("case", DEMO_LINES, ids=lambda v: f"bit{v['setBit']}")
def test_single_bit_byte_layout(case):
    bitmap = bytearray(case["bitLength"] // 8)
    BloomFilter().hash_to([case["setBit"]], bitmap)
    assert bitmap.hex() == case["bits_hex"]
    assert bits_to_string(bitmap, case["bitLength"]) == case["bits_toString"]


def test_bits_to_string_prints_one_extra_bit_of_a_partial_last_byte():
    assert bits_to_string(b"\xff\x01", 9) == "01" + "1" * 8 + "\n"


@pytest.mark.parametrize("size", [13, 15, 0])
def test_wrong_bitmap_size_is_rejected_like_check(size):
    b = BloomFilter()
    with pytest.raises(ValueError, match="is not equal to 112"):
        b.hash_to([1], bytearray(size))
    with pytest.raises(ValueError, match="is not equal to 112"):
        b.is_hit([1], bytes(size))


@pytest.mark.parametrize("pos", [-1, 112, 10 ** 6])
def test_out_of_range_positions_are_rejected(pos):
    b = BloomFilter()
    bitmap = b.empty_bitmap()
    with pytest.raises(ValueError):
        b.hash_to([3, pos], bitmap)
    assert bitmap == b.empty_bitmap()  # nothing was set
    with pytest.raises(ValueError):
        b.is_hit([3, pos], bytes(14))  # Java reads every position, even after a clear bit


def test_is_hit_without_positions_raises():
    with pytest.raises(ValueError):
        BloomFilter().is_hit([], bytes(14))


def test_is_hit_returns_a_real_bool():
    b = BloomFilter()
    assert b.is_hit([0], b"\x01" + bytes(13)) is True
    assert b.is_hit([0], np.zeros(14, dtype=np.uint8)) is False


# ------------------------------------------------------------------ vectorized == scalar
names = st.text(min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(names, min_size=1, max_size=6, unique=True), st.data(),
       st.sampled_from([(20, 32), (10, 128), (1, 1), (50, 8)]))
def test_or_bits_equals_hash_to_per_row(registrations, data, fn):
    b = BloomFilter(*fn)
    bits = [b.bit_positions(r) for r in registrations]
    rows = data.draw(st.integers(0, 30))
    match = np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=len(bits), max_size=len(bits)),
                                        min_size=rows, max_size=rows)), dtype=bool).reshape(rows, len(bits))
    got = or_bits(match, bits, b.m)
    assert got.dtype == np.uint8 and got.shape == (rows, b.m // 8)
    for i in range(rows):
        want = b.empty_bitmap()
        for r in np.flatnonzero(match[i]):
            b.hash_to(bits[r], want)
        assert got[i].tobytes() == bytes(want)
    for r, positions in enumerate(bits):
        hits = is_hit_array(got, positions, b.m)
        assert hits.tolist() == [b.is_hit(positions, row.tobytes()) for row in got]
        assert hits[match[:, r]].all()  # no false negatives


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=14, max_size=14), max_size=20), names)
def test_is_hit_array_equals_is_hit(bitmaps, probe):
    b = BloomFilter()
    matrix = np.frombuffer(b"".join(bitmaps), dtype=np.uint8).reshape(len(bitmaps), 14)
    positions = b.bit_positions(probe)
    assert is_hit_array(matrix, positions).tolist() == [b.is_hit(positions, x) for x in bitmaps]


def test_vectorized_functions_reject_what_is_hit_rejects():
    with pytest.raises(ValueError):
        is_hit_array(np.zeros((2, 14), dtype=np.uint8), [])
    with pytest.raises(ValueError):
        is_hit_array(np.zeros((2, 14), dtype=np.uint8), [112])
    with pytest.raises(ValueError):
        is_hit_array(np.zeros((2, 13), dtype=np.uint8), [1], m=112)
    with pytest.raises(ValueError):
        or_bits(np.zeros((2, 1), dtype=bool), [[112]], 112)
    with pytest.raises(ValueError):
        or_bits(np.zeros((2, 2), dtype=bool), [[1]], 112)


maybe_bitmaps = st.lists(st.one_of(st.none(), st.binary(min_size=14, max_size=14), st.binary(max_size=20)),
                         max_size=20)


@settings(max_examples=100, deadline=None)
@given(maybe_bitmaps, st.sampled_from([pa.binary(), pa.large_binary()]), st.integers(0, 3))
def test_bitmap_matrix_of_binary_column(values, arrow_type, cut):
    column = pa.array(values, type=arrow_type)[cut:]  # a slice has a non-zero offset
    values = values[cut:]
    matrix, valid = bitmap_matrix(column, 112)
    assert matrix.shape == (len(values), 14) and matrix.dtype == np.uint8
    assert valid.tolist() == [v is not None and len(v) == 14 for v in values]
    for row, v, ok in zip(matrix, values, valid):
        assert row.tobytes() == (v if ok else bytes(14))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(min_size=14, max_size=14)), max_size=20), st.integers(0, 3))
def test_bitmap_column_round_trips_through_fixed_size_binary(values, cut):
    column = pa.array(values, type=pa.binary(14))[cut:]
    values = values[cut:]
    matrix, valid = bitmap_matrix(column, 112)
    assert valid.tolist() == [v is not None for v in values]
    back = bitmap_column(matrix, valid)
    assert back.type == pa.binary(14)
    assert back.to_pylist() == values
    assert bitmap_matrix(pa.chunked_array([back]), 112)[0].tolist() == matrix.tolist()


def test_bitmap_matrix_marks_other_widths_invalid():
    matrix, valid = bitmap_matrix(pa.array([b"\x01" * 7], type=pa.binary(7)), 112)
    assert valid.tolist() == [False] and matrix.tolist() == [[0] * 14]


def test_bitmap_column_without_mask_has_no_nulls():
    col = bitmap_column(np.ones((3, 14), dtype=np.uint8))
    assert col.null_count == 0 and col.to_pylist() == [b"\x01" * 14] * 3


# ------------------------------------------------------------------ store_a: registrations and real bitmaps
def _registrations(store_a):
    return json.loads((store_a / "registrations.json").read_text(encoding="utf-8"))


def test_registration_bits_equal_bloom_bit_pos_of_every_sql92_group_of_store_a(store_a):
    reg = _registrations(store_a)
    b = BloomFilter(reg["bloom_f"], reg["bloom_n"])
    assert (b.k, b.m) == (reg["bloom_k"], reg["bloom_m"])
    sql = [g for g in reg["groups"] if g["expressionType"] == "SQL92"]
    assert len(sql) == 5
    for g in sql:
        assert b.registration_bits(g["group"], g["topic"]) == g["bloomBitPos"], g["group"]
        assert g["bloomBitNum"] == b.m


def test_or_bits_of_matching_registrations_rebuilds_every_stored_bitmap_of_store_a(store_a):
    """The dispatcher's bitmap = OR of the groups whose SQL matched, for groups born before the message.

    A SQL92 group's rows in expected.json are exactly the messages its SQL matched (the bloom has no false
    negatives), so they give the match matrix without evaluating SQL here.
    """
    reg = _registrations(store_a)
    expected = json.loads((store_a / "expected.json").read_text(encoding="utf-8"))
    with gzip.open(store_a / "cq.jsonl.gz", "rt", encoding="utf-8") as f:
        cq = [json.loads(line) for line in f]
    b = BloomFilter(reg["bloom_f"], reg["bloom_n"])
    for topic in ("TopicTest", "订单Topic"):
        units = [u for u in cq if u["topic"] == topic]
        groups = [g for g in reg["groups"] if g["topic"] == topic and g["expressionType"] == "SQL92"]
        matched = [{(r["queueId"], r["queueOffset"]) for r in expected[g["group"]][topic]} for g in groups]
        match = np.array([[(u["queueId"], u["index"]) in m and u["ext_msgStoreTime"] >= g["bornTime"]
                           for g, m in zip(groups, matched)] for u in units], dtype=bool)
        hexes = [u["ext_filterBitMap_hex"] for u in units]
        stored, valid = bitmap_matrix(pa.array([bytes.fromhex(h) for h in hexes]), b.m)
        assert valid.all()
        rebuilt = or_bits(match, [b.registration_bits(g["group"], topic) for g in groups], b.m)
        assert np.array_equal(rebuilt, stored), topic
        for g, m in zip(groups, matched):
            hit = is_hit_array(stored, g["bloomBitPos"], b.m)
            in_live = np.array([u["ext_msgStoreTime"] >= g["bornTime"] for u in units])
            in_expected = np.array([(u["queueId"], u["index"]) in m for u in units])
            assert hit[in_live & in_expected].all(), g["group"]
            assert not in_expected[in_live & ~hit].any(), g["group"]


def test_or_bits_of_many_rows_with_few_patterns_equals_hash_to_per_row():
    """Above 256 rows with few distinct match patterns or_bits builds one bitmap per pattern and gathers."""
    b = BloomFilter(20, 32)
    bits = [b.bit_positions(f"G{r}#T") for r in range(5)]
    rng = np.random.default_rng(5)
    match = rng.random((3000, len(bits))) < [0.9, 0.5, 0.1, 0.0, 1.0]
    got = or_bits(match, bits, b.m)
    for i in range(len(match)):
        want = b.empty_bitmap()
        for r in np.flatnonzero(match[i]):
            b.hash_to(bits[r], want)
        assert got[i].tobytes() == bytes(want), i
