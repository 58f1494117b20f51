"""The vectorized properties parser agrees with the plain reference on any blob."""
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.log.properties import parse_properties, parse_properties_at

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


def _in_a_buffer(blobs):
    """The blobs (bytes) laid in one buffer with a gap between them, as properties lie in commit-log records:
    (buffer, starts, lengths)."""
    buf, starts = b"", []
    for blob in blobs:
        buf += b"\xff\x00gap"
        starts.append(len(buf))
        buf += blob
    return np.frombuffer(buf + b"tail", np.uint8), np.array(starts, np.int64), np.array([len(b) for b in blobs])


def test_properties_split_where_they_lie_equal_the_string_column_s():
    blobs = ["a\x011\x02region\x01\x02\x01x\x02TAGS\x01T", "", "KEYS\x01k1 k2\x02TAGS\x01t\x02TAGS\x01u",
             "名字\x01值\x02TAGS\x01标签", "k\x01v\x01w\x02\x02x"]
    buf, starts, lengths = _in_a_buffer([b.encode() for b in blobs])
    props, named = parse_properties_at(buf, starts, lengths, extract=("TAGS", "KEYS"))
    want, want_named = parse_properties(pa.array(blobs, pa.string()), extract=("TAGS", "KEYS"))
    assert props.equals(want)
    assert named["TAGS"].to_pylist() == ["T", None, "u", "标签", None] == want_named["TAGS"].to_pylist()
    assert named["KEYS"].equals(want_named["KEYS"])


def test_invalid_utf8_in_a_kept_value_is_replaced_as_java_s_new_string_does():
    """A value with bytes that are not UTF-8: the blobs are then decoded as parse_properties decodes them
    (U+FFFD for each bad sequence, as `new String(bytes, UTF_8)`); a bad byte in a dropped piece changes nothing."""
    blobs = [b"a\x01ok\x02b\x01bad\xff\xfe", b"c\x01fine\x02\x01dropped\xff", b"TAGS\x01T"]
    buf, starts, lengths = _in_a_buffer(blobs)
    props, named = parse_properties_at(buf, starts, lengths, extract=("TAGS",))
    assert props.to_pylist() == [[("a", "ok"), ("b", "bad\ufffd\ufffd")], [("c", "fine")], [("TAGS", "T")]]
    assert named["TAGS"].to_pylist() == [None, None, "T"]
    coded = parse_properties_at(buf, starts, lengths, ("TAGS",), ("b", "c"))[2]  # SQL92's columns: the same text
    assert coded["b"].to_pylist() == ["bad\ufffd\ufffd", None, None]
    assert coded["c"].to_pylist() == [None, "fine", None]
    clean = [b"c\x01fine\x02\x01dropped\xff", b"d\x01\xc3\xa9"]  # the bad byte dropped; a valid 2-byte letter
    buf, starts, lengths = _in_a_buffer(clean)
    assert parse_properties_at(buf, starts, lengths).to_pylist() == [[("c", "fine")], [("d", "é")]]


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=20))
def test_split_where_they_lie_equals_the_string_column_s_on_any_blobs(blobs):
    buf, starts, lengths = _in_a_buffer([b.encode() for b in blobs])
    props, named = parse_properties_at(buf, starts, lengths, extract=("TAGS", "KEYS"))
    want, want_named = parse_properties(pa.array(blobs, pa.string()), extract=("TAGS", "KEYS"))
    assert props.to_pylist() == want.to_pylist()
    assert named["TAGS"].to_pylist() == want_named["TAGS"].to_pylist()
    assert named["KEYS"].to_pylist() == want_named["KEYS"].to_pylist()


def test_coded_columns_hold_each_rows_value_over_distinct_values_in_order_of_appearance():
    """coded: a property's value per row as a dictionary column (what SQL92 reads, encoded in the split): the
    last value of a repeated name, null where absent or dropped (empty value), the same from the string column
    and from the buffer; a property held by more than half the rows with distinct values stays a string column."""
    blobs = ["a\x011\x02r\x01hz", "a\x012", "r\x01sh\x02a\x011", "a\x01\x02r\x01杭州", "a\x012\x02a\x013", "x\x01y"]
    props, named, coded = parse_properties(pa.array(blobs), extract=("TAGS",), coded=("a", "r"))
    assert coded["a"].to_pylist() == ["1", "2", "1", None, "3", None]
    assert coded["a"].dictionary.to_pylist() == ["1", "2", "3"]
    assert coded["r"].to_pylist() == ["hz", None, "sh", "杭州", None, None]
    assert coded["r"].dictionary.to_pylist() == ["hz", "sh", "杭州"]
    assert named["TAGS"].to_pylist() == [None] * 6
    buf, starts, lengths = _in_a_buffer([b.encode() for b in blobs])
    _, _, at = parse_properties_at(buf, starts, lengths, ("TAGS",), ("a", "r"))
    assert at["a"].equals(coded["a"]) and at["r"].equals(coded["r"])
    unique = parse_properties(pa.array([f"k\x01v{i}" for i in range(5)] + ["k\x01v0"]), coded=("k",))[2]["k"]
    assert unique.type == pa.string() and unique.to_pylist() == ["v0", "v1", "v2", "v3", "v4", "v0"]


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=20))
def test_coded_columns_equal_the_reference_on_any_blobs(blobs):
    buf, starts, lengths = _in_a_buffer([b.encode() for b in blobs])
    _, _, coded = parse_properties_at(buf, starts, lengths, ("TAGS",), ("a", "TAGS", "é"))
    for name in ("a", "TAGS", "é"):
        assert coded[name].to_pylist() == [properties_reference(b).get(name) for b in blobs]
        if isinstance(coded[name], pa.DictionaryArray):
            values = coded[name].dictionary.to_pylist()
            assert len(set(values)) == len(values)
