"""The vectorized properties parser agrees with the plain reference on any blob."""
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.properties import parse_properties

pieces = st.lists(st.sampled_from(["a", "TAGS", "KEYS", "é", "杭州", "\x01", "\x02", "", "x\x01y", "b\x01"]),
                  max_size=12).map("".join)


def properties_reference(blob):
    """Row-at-a-time reference: 4.9.x `string2messageProperties`, as plainly as it reads in Java."""
    out = {}
    index, length = 0, len(blob)
    while index < length:
        new_index = blob.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = blob.find("\x01", index)
            if index < kv < new_index - 1:
                out[blob[index:kv]] = blob[kv + 1:new_index]
        index = new_index + 1
    return out


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


def test_repeated_names_keep_first_position_and_last_value_in_every_row_and_extracted_column():
    blobs = ["a\x011", "TAGS\x01t1\x02b\x012\x02TAGS\x01t2\x02TAGS\x01t3", "TAGS\x01u\x02c\x013\x02c\x014", "d\x015"]
    props, named = parse_properties(pa.array(blobs), extract=("TAGS",))
    assert props.to_pylist() == [[("a", "1")], [("TAGS", "t3"), ("b", "2")], [("TAGS", "u"), ("c", "4")],
                                 [("d", "5")]]
    assert named["TAGS"].to_pylist() == [None, "t3", "u", None]


def test_reference_and_vectorized_parse_give_rocketmqs_properties_of_store_a(store_a, store_a_messages):
    """The reference the random test compares against is itself right: on every raw property string of
    store_a both parsers give what RocketMQ's MessageDecoder gave (messages.jsonl.gz)."""
    import schemas

    blobs = schemas.read_messages(store_a / "store", raw=True).column("properties_raw").combine_chunks()
    want = [m["properties"] for m in store_a_messages]
    assert len(blobs) == len(want) == 3000
    assert [properties_reference(b) for b in blobs.to_pylist()] == want
    assert [dict(p) for p in parse_properties(blobs).to_pylist()] == want
