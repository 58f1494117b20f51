"""TAG hashing, subscription parsing and both match stages against RocketMQ's own outputs."""
import gzip
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filtering.tags import (
    broker_tag_match,
    broker_tag_match_array,
    client_tag_match,
    client_tag_match_array,
    java_hash,
    parse_subscription,
    tags_code,
    tags_code_array,
)
from tests.conftest import read_jsonl

TAG_HASH = read_jsonl("bloom_tags/tag_hash.jsonl.gz")
SUBSCRIPTIONS = read_jsonl("bloom_tags/subscription_parse.jsonl.gz")


def reference_hash(s):
    """Java's hashCode written the slow, obvious way (for long strings, which take the numpy path)."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i:i + 2], "big")) % 2 ** 32
    return h - 2 ** 32 if h >= 2 ** 31 else h


# ------------------------------------------------------------------ Java hash codes
def test_fixture_has_all_tag_hash_lines():
    assert len(TAG_HASH) == 1001 and TAG_HASH[-1]["tag"] is None


def test_java_hash_and_tags_code_match_every_tag_hash_line():
    wrong = [v for v in TAG_HASH if v["tag"] is not None
             and (java_hash(v["tag"]), tags_code(v["tag"])) != (v["hashCode"], v["tagsCode"])]
    assert wrong == []


def test_tags_code_of_null_and_empty_tag_is_zero():
    assert tags_code(None) == 0 == TAG_HASH[-1]["tagsCode"]
    assert tags_code("") == 0


def test_java_hash_counts_non_bmp_char_as_two_surrogate_units():
    assert java_hash("😀") == 31 * 0xD83D + 0xDE00
    assert java_hash("a😀") == reference_hash("a😀")


def test_java_hash_wraps_to_signed_int32():
    assert java_hash("polygenelubricants") == -(2 ** 31)  # a well-known Integer.MIN_VALUE hash
    assert java_hash("Aa") == java_hash("BB") == 2112


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=200, max_size=3000))
def test_java_hash_of_long_strings_equals_reference_loop(s):
    assert java_hash(s) == reference_hash(s)


def test_java_hash_keeps_lone_surrogates_as_units():
    assert java_hash("\ud800x") == reference_hash("\ud800x") == 31 * 0xD800 + ord("x")


# ------------------------------------------------------------------ subscription parsing
def test_fixture_has_all_subscription_lines():
    assert len(SUBSCRIPTIONS) == 67


@pytest.mark.parametrize("case", SUBSCRIPTIONS, ids=lambda v: repr(v["subString"]))
def test_parse_subscription_matches_filter_api(case):
    if case["error"] is not None:
        with pytest.raises(ValueError, match="split error"):
            parse_subscription(case["subString"])
        return
    sub = parse_subscription(case["subString"])
    assert sub.expression == case["result_subString"]
    assert sub.tags == frozenset(case["tagsSet"])
    assert sub.codes == frozenset(case["codeSet"])
    assert sub.match_all is (case["result_subString"] == "*" and not case["tagsSet"])


@pytest.mark.parametrize("s", ["||", "||||", "||||||"])
def test_only_separators_raise_like_java_split(s):
    with pytest.raises(ValueError):
        parse_subscription(s)


def test_trim_strips_control_chars_but_not_unicode_spaces():
    assert parse_subscription("\x00TagA\x1f || \x07").tags == {"TagA"}
    assert parse_subscription("\u3000TagA\u00a0").tags == {"\u3000TagA\u00a0"}


def test_subscription_is_frozen():
    sub = parse_subscription("TagA")
    with pytest.raises(AttributeError):
        sub.expression = "*"


# ------------------------------------------------------------------ match stages
def test_broker_matches_hash_collision_that_client_drops():
    sub = parse_subscription("Aa")
    assert broker_tag_match(sub, tags_code("BB")) is True
    assert client_tag_match(sub, "BB") is False
    assert client_tag_match(sub, "Aa") is True


def test_broker_passes_missing_tags_code():
    assert broker_tag_match(parse_subscription("TagA"), None) is True


def test_broker_truncates_long_tags_code_to_int():
    sub = parse_subscription("TagA")
    tag_a, tag_b = 2598919, 2598920  # tag_hash.jsonl: the tagsCode of TagA and TagB
    assert broker_tag_match(sub, tag_a) is True
    assert broker_tag_match(sub, tag_a + (1 << 32)) is True
    assert broker_tag_match(sub, tag_a - (5 << 40)) is True
    assert broker_tag_match(sub, tag_b) is False


def test_match_all_subscription_matches_everything_at_both_stages():
    for s in (None, "", "*"):
        sub = parse_subscription(s)
        assert broker_tag_match(sub, 12345) and client_tag_match(sub, None) and client_tag_match(sub, "x")


def test_blank_subscription_keeps_nothing_at_broker_and_everything_at_client():
    sub = parse_subscription("  ")  # not "*", but its tagsSet is empty
    assert sub.match_all is False
    assert broker_tag_match(sub, 0) is False and broker_tag_match(sub, tags_code("TagA")) is False
    assert client_tag_match(sub, "TagA") is True


def test_literal_star_tag_matches_only_messages_tagged_star():
    sub = parse_subscription(" * ")
    assert broker_tag_match(sub, tags_code("*")) and client_tag_match(sub, "*")
    assert not broker_tag_match(sub, tags_code("TagA")) and not client_tag_match(sub, "TagA")


@pytest.mark.parametrize("case", [v for v in SUBSCRIPTIONS if v["error"] is None],
                         ids=lambda v: repr(v["subString"]))
def test_every_parsed_tag_matches_at_both_stages_and_others_do_not(case):
    """Tags and codes from RocketMQ's tagsSet / codeSet pass; a fixture tag outside both sets does not."""
    sub = parse_subscription(case["subString"])
    for tag in case["tagsSet"]:
        assert client_tag_match(sub, tag) is True, tag
    for code in case["codeSet"]:
        assert broker_tag_match(sub, code) is True, code
    if case["tagsSet"]:
        other = next(v for v in TAG_HASH if v["tag"] not in case["tagsSet"] and v["tagsCode"] not in case["codeSet"])
        assert client_tag_match(sub, other["tag"]) is False and client_tag_match(sub, None) is False
        assert broker_tag_match(sub, other["tagsCode"]) is False


# ------------------------------------------------------------------ vectorized == scalar
TAG_POOL = ["", "TagA", "TagB", "Aa", "BB", "AaAa", "BBBB", "*", "😀", "杭州", " TagA", "TagA "]
tag_values = st.one_of(st.none(), st.sampled_from(TAG_POOL), st.text(max_size=8))
subscriptions = st.one_of(
    st.sampled_from([None, "", "*", "  ", " * ", "Aa", "TagA || TagB", "BB||杭州||😀"]),
    st.lists(st.one_of(st.sampled_from(TAG_POOL), st.text(max_size=5)), min_size=1, max_size=4)
    .map(" || ".join).filter(lambda s: s.replace("|", "") != "" or "||" not in s))


def as_column(values, layout):
    """The same strings as different pyarrow layouts the job may hand over."""
    arr = pa.array(values, type=pa.string())
    if layout == "large":
        return arr.cast(pa.large_string())
    if layout == "dictionary":
        return arr.dictionary_encode()
    if layout == "chunked":
        half = len(values) // 2
        return pa.chunked_array([arr[:half], arr[half:]], type=pa.string())
    return arr


LAYOUTS = st.sampled_from(["plain", "large", "dictionary", "chunked"])


@settings(max_examples=150, deadline=None)
@given(st.lists(tag_values, max_size=40), LAYOUTS)
def test_tags_code_array_equals_scalar(values, layout):
    got = tags_code_array(as_column(values, layout))
    assert got.dtype == np.int64
    assert got.tolist() == [tags_code(v) for v in values]


@settings(max_examples=150, deadline=None)
@given(subscriptions, st.lists(tag_values, max_size=40), st.data())
def test_broker_tag_match_array_equals_scalar(s, values, data):
    sub = parse_subscription(s)
    codes = np.array([tags_code(v) for v in values], dtype=np.int64)
    codes += np.array(data.draw(st.lists(st.sampled_from([0, 1 << 32, -(1 << 40)]),
                                         min_size=len(values), max_size=len(values))), dtype=np.int64)
    flags = data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    missing = np.array(flags, dtype=bool)
    got = broker_tag_match_array(sub, codes, missing)
    assert got.dtype == bool
    assert got.tolist() == [broker_tag_match(sub, None if m else int(c)) for c, m in zip(codes, missing)]
    assert broker_tag_match_array(sub, codes).tolist() == [broker_tag_match(sub, int(c)) for c in codes]


@settings(max_examples=150, deadline=None)
@given(subscriptions, st.lists(tag_values, max_size=40), LAYOUTS)
def test_client_tag_match_array_equals_scalar(s, values, layout):
    sub = parse_subscription(s)
    got = client_tag_match_array(sub, as_column(values, layout))
    assert got.dtype == bool
    assert got.tolist() == [client_tag_match(sub, v) for v in values]


def test_broker_tag_match_array_treats_arrow_nulls_as_missing_codes():
    sub = parse_subscription("TagA")
    codes = pa.array([tags_code("TagA"), None, tags_code("TagB")], type=pa.int64())
    assert broker_tag_match_array(sub, codes).tolist() == [True, True, False]


def test_broker_tag_match_array_rejects_mismatched_missing_mask():
    with pytest.raises(ValueError):
        broker_tag_match_array(parse_subscription("TagA"), np.zeros(3, np.int64), np.zeros(2, bool))


def test_tags_code_array_of_empty_and_all_null_columns():
    assert tags_code_array(pa.array([], type=pa.string())).tolist() == []
    assert tags_code_array(pa.array([None, None], type=pa.string())).tolist() == [0, 0]


def test_tags_code_array_rejects_non_string_column():
    with pytest.raises(TypeError):
        tags_code_array(pa.array([1, 2]))


# ------------------------------------------------------------------ store_a: what the broker returned
def _store_units(store_a, topic):
    with gzip.open(store_a / "cq.jsonl.gz", "rt", encoding="utf-8") as f:
        units = [u for u in map(json.loads, f) if u["topic"] == topic]
    with gzip.open(store_a / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        tag_of = {(m["queueId"], m["queueOffset"]): m["properties"].get("TAGS")
                  for m in map(json.loads, f) if m["topic"] == topic}
    return units, [tag_of[(u["queueId"], u["index"])] for u in units]


def _tag_groups(store_a):
    groups = json.loads((store_a / "registrations.json").read_text(encoding="utf-8"))["groups"]
    return [g for g in groups if g["expressionType"] == "TAG"]


def test_broker_stage_reproduces_expected_broker_raw_of_store_a(store_a):
    raw = json.loads((store_a / "expected_broker_raw.json").read_text(encoding="utf-8"))
    checked = 0
    for g in _tag_groups(store_a):
        units, _ = _store_units(store_a, g["topic"])
        keep = broker_tag_match_array(parse_subscription(g["expression"]),
                                      np.array([u["ext_tagsCode"] for u in units], dtype=np.int64),
                                      np.array([not u["ext_ok"] for u in units]))
        got = {(u["queueId"], u["index"]) for u, k in zip(units, keep) if k}
        assert got == {(r["queueId"], r["queueOffset"]) for r in raw[g["group"]][g["topic"]]}, g["group"]
        checked += 1
    assert checked == 5


def test_client_stage_reproduces_expected_of_store_a(store_a):
    raw = json.loads((store_a / "expected_broker_raw.json").read_text(encoding="utf-8"))
    expected = json.loads((store_a / "expected.json").read_text(encoding="utf-8"))
    dropped = 0
    for g in _tag_groups(store_a):
        sub = parse_subscription(g["expression"])
        rows = raw[g["group"]][g["topic"]]
        keep = client_tag_match_array(sub, pa.array([r["tags"] for r in rows], type=pa.string()))
        got = [(r["queueId"], r["queueOffset"]) for r, k in zip(rows, keep) if k]
        assert got == [(r["queueId"], r["queueOffset"]) for r in expected[g["group"]][g["topic"]]], g["group"]
        dropped += len(rows) - len(got)
    assert dropped > 0  # the Aa/BB collisions


def test_tags_code_array_equals_stored_tags_codes_of_store_a(store_a):
    units, tag_values = _store_units(store_a, "TopicTest")
    got = tags_code_array(pa.array(tag_values, type=pa.string()))
    assert got.tolist() == [u["ext_tagsCode"] for u in units]
