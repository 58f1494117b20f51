"""The vectorized properties parser agrees with the plain reference on any blob."""
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.properties import parse_properties, properties_reference

pieces = st.lists(st.sampled_from(["a", "TAGS", "KEYS", "é", "杭州", "\x01", "\x02", "", "x\x01y", "b\x01"]),
                  max_size=12).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.lists(pieces, max_size=20), st.integers(0, 3))
def test_vectorized_parse_equals_reference(blobs, cut):
    array = pa.array(blobs, pa.string()).slice(min(cut, len(blobs)))
    props, named = parse_properties(array, extract=("TAGS", "KEYS"))
    for blob, got, tags, keys in zip(array.to_pylist(), props.to_pylist(), named["TAGS"].to_pylist(),
                                     named["KEYS"].to_pylist()):
        want = properties_reference(blob)
        assert dict(got) == want and len(got) == len(want)
        assert tags == want.get("TAGS") and keys == want.get("KEYS")


def test_empty_values_and_nameless_pieces_are_dropped():
    props = parse_properties(pa.array(["a\x011\x02region\x01\x02\x01x\x02TAGS\x01T"]))
    assert dict(props.to_pylist()[0]) == {"a": "1", "TAGS": "T"}


def test_repeated_name_keeps_the_last_value_like_a_hashmap():
    props = parse_properties(pa.array(["k\x01first\x02o\x01x\x02k\x01last"]))
    assert dict(props.to_pylist()[0]) == {"k": "last", "o": "x"}


def _general_path(array):
    import numpy as np

    from schemas import kernels as K

    offsets = np.frombuffer(array.buffers()[1], np.int32)[array.offset:array.offset + len(array) + 1].astype(np.int64)
    data = np.frombuffer(array.buffers()[2], np.uint8)
    key_at, key_len, value_at, value_len, map_offsets = K.property_pieces(data, offsets)
    return (data, offsets, K.small_slices(data, key_at, key_len, pa.string()),
            K.small_slices(data, value_at, value_len, pa.string()), map_offsets)


distinct_names = st.lists(st.sampled_from(["a\x011", "TAGS\x01t", "KEYS\x01k k", "é\x01杭州", "\x01x", "b\x01", ""]),
                          max_size=7, unique=True).map("\x02".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(pieces, distinct_names), min_size=1, max_size=20))
def test_fused_split_agrees_with_the_general_scan_and_gives_up_only_on_repeated_names(blobs):
    import numpy as np

    from schemas import kernels as K

    array = pa.array(blobs, pa.string())
    data, offsets, keys, values, map_offsets = _general_path(array)
    fast = K.split_properties(data, offsets, ("TAGS", "KEYS"))
    repeated = any(len(properties_reference(b)) < sum(1 for p in b.split("\x02") if 0 < p.find("\x01") < len(p) - 1)
                   for b in blobs)
    assert (fast is None) == repeated
    if fast is not None:
        assert fast[0].equals(keys) and fast[1].equals(values)
        assert np.array_equal(fast[2], map_offsets)
