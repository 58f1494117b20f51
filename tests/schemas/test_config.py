"""Config loaders on store_a's real broker files (fastjson output) and on malformed input."""
import gzip
import json
from collections import Counter

import pytest

from schemas.store.config import (
    ConfigError,
    Registration,
    SubscriptionGroupConfig,
    load_consumer_filters,
    load_consumer_offsets,
    load_fastjson,
    load_registrations,
    load_store_config,
    load_subscription_groups,
    load_topics,
)


@pytest.fixture(scope="module")
def config_dir(store_a):
    return store_a / "store" / "config"


@pytest.fixture(scope="module")
def registrations_json(store_a):
    return json.loads((store_a / "registrations.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def queue_sizes(store_a):
    """Units per (topic, queue) in store_a's consume queues: the offset a consumer ends at."""
    with gzip.open(store_a / "cq.jsonl.gz", "rt", encoding="utf-8") as f:
        return Counter((u["topic"], u["queueId"]) for u in map(json.loads, f))


def write(tmp_path, text, name="x.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ store_a's real files
def test_consumer_offset_file_really_has_unquoted_keys(config_dir):
    with pytest.raises(json.JSONDecodeError):
        json.loads((config_dir / "consumerOffset.json").read_text(encoding="utf-8"))


def test_consumer_offsets_of_store_a_are_the_queue_ends(config_dir, queue_sizes, registrations_json):
    offsets = load_consumer_offsets(config_dir / "consumerOffset.json")
    assert offsets[("TopicTest", "G_TAG_ALL")] == {0: 490, 1: 477, 2: 485, 3: 477}
    assert offsets[("%RETRY%G_SQL_TAGS", "G_SQL_TAGS")] == {0: 6}
    groups = {(g["topic"], g["group"]) for g in registrations_json["groups"]}
    groups |= {("%RETRY%" + g, g) for _, g in groups}
    assert set(offsets) == groups
    for (topic, _), table in offsets.items():
        assert table == {q: n for (t, q), n in queue_sizes.items() if t == topic}, topic
        assert all(type(q) is int and type(o) is int for q, o in table.items())


def test_consumer_filters_of_store_a_equal_the_sql92_registrations(config_dir, registrations_json):
    filters = load_consumer_filters(config_dir / "consumerFilter.json")
    sql = {(g["topic"], g["group"]): g
           for g in registrations_json["groups"] if g["expressionType"] == "SQL92"}
    assert len(filters) == len(sql) == 5
    for fd in filters:
        g = sql[(fd.topic, fd.consumer_group)]
        assert (fd.expression, fd.expression_type) == (g["expression"], "SQL92")
        assert (fd.born_time, fd.client_version) == (g["bornTime"], g["subVersion"])
        assert (fd.bloom_bit_pos, fd.bloom_bit_num) == (tuple(g["bloomBitPos"]), g["bloomBitNum"])
        assert (fd.dead_time, fd.dead) == (0, False)


def test_topics_of_store_a(config_dir, queue_sizes):
    topics = load_topics(config_dir / "topics.json")
    raw = json.loads((config_dir / "topics.json").read_text(encoding="utf-8"))["topicConfigTable"]
    assert set(topics) == set(raw) and len(topics) == 13
    for name, tc in topics.items():
        assert tc.topic_name == name
        assert tc.read_queue_nums == raw[name]["readQueueNums"]
        assert tc.write_queue_nums == raw[name]["writeQueueNums"]
        assert (tc.perm, tc.topic_filter_type, tc.topic_sys_flag, tc.order) == (6, "SINGLE_TAG", 0, False)
    assert (topics["TopicTest"].read_queue_nums, topics["订单Topic"].read_queue_nums) == (4, 3)
    for topic, queue in queue_sizes:
        assert queue < topics[topic].read_queue_nums


def test_load_store_config_of_store_a(store_a, config_dir, queue_sizes, registrations_json):
    """Every file of store_a/config, against the fixture's own record of it (registrations.json, cq.jsonl.gz
    and topics.json read as plain JSON), not against the single-file loaders it is built from."""
    cfg = load_store_config(store_a / "store")
    assert cfg.subscription_groups == {}  # store_a has no subscriptionGroup.json
    sql = {(g["topic"], g["group"]): g for g in registrations_json["groups"] if g["expressionType"] == "SQL92"}
    assert {(fd.topic, fd.consumer_group): (fd.expression, fd.born_time, fd.bloom_bit_pos)
            for fd in cfg.consumer_filters} == {
        key: (g["expression"], g["bornTime"], tuple(g["bloomBitPos"])) for key, g in sql.items()}
    groups = {g["group"]: g["topic"] for g in registrations_json["groups"]}
    want_offsets = {}
    for group, topic in groups.items():  # every queue read to its end, the group's retry topic too
        for t in (topic, "%RETRY%" + group):
            want_offsets[(t, group)] = {q: n for (u, q), n in queue_sizes.items() if u == t}
    assert cfg.consumer_offsets == want_offsets
    raw = json.loads((config_dir / "topics.json").read_text(encoding="utf-8"))["topicConfigTable"]
    assert {name: (tc.read_queue_nums, tc.write_queue_nums, tc.perm) for name, tc in cfg.topics.items()} == {
        name: (t["readQueueNums"], t["writeQueueNums"], t["perm"]) for name, t in raw.items()}
    regs = cfg.registrations()
    assert {r.source for r in regs} == {str(config_dir / "consumerFilter.json")}
    assert {(r.topic, r.group, r.expression_type, r.expression) for r in regs} == {
        (t, g, "SQL92", reg["expression"]) for (t, g), reg in sql.items()}


def test_registrations_file_of_store_a(store_a, registrations_json):
    path = store_a / "registrations.json"
    regs = load_registrations(path)
    assert [(r.group, r.topic, r.expression_type, r.expression, r.born_time) for r in regs] == [
        (g["group"], g["topic"], g["expressionType"], g["expression"], g["bornTime"])
        for g in registrations_json["groups"]]
    for r, g in zip(regs, registrations_json["groups"]):
        assert r.bloom_bit_pos == (tuple(g["bloomBitPos"]) if "bloomBitPos" in g else None)
        assert r.source == str(path)
    assert sum(r.born_time is None for r in regs) == 5  # the TAG groups


def test_broker_registrations_agree_with_the_registrations_file(store_a):
    def key(r):
        return r.group, r.topic, r.expression_type, r.expression, r.born_time, r.bloom_bit_pos

    from_file = {key(r) for r in load_registrations(store_a / "registrations.json")
                 if r.expression_type == "SQL92"}
    assert {key(r) for r in load_store_config(store_a / "store").registrations()} == from_file


# ------------------------------------------------------------------ fastjson text
def test_unquoted_keys_inside_strings_are_left_alone(tmp_path):
    text = '{"offsetTable":{"a,{0:1}@G":{0:1,\n\t-1 : 2},"b\\"{3:4}\\\\@H":{7:8}}}'
    assert load_consumer_offsets(write(tmp_path, text)) == {
        ("a,{0:1}", "G"): {0: 1, -1: 2}, ('b"{3:4}\\', "H"): {7: 8}}


def test_integer_array_elements_and_values_stay_numbers(tmp_path):
    assert load_fastjson(write(tmp_path, '{"a":[1,2, 3],5:{6:7}}')) == {"a": [1, 2, 3], "5": {"6": 7}}


def test_already_quoted_keys_load_too(tmp_path):
    assert load_consumer_offsets(write(tmp_path, '{"offsetTable":{"T@G":{"0":5}}}')) == {("T", "G"): {0: 5}}


def test_malformed_json_names_file_and_original_position(tmp_path):
    path = write(tmp_path, '{"offsetTable":{\n"T@G":{0:1,1:2,\n2:}}}')
    with pytest.raises(ConfigError) as err:
        load_consumer_offsets(path)
    assert str(path) in str(err.value) and "malformed JSON" in str(err.value)
    assert (err.value.line, err.value.column) == (3, 3)


def test_truncated_file_is_an_error(tmp_path, config_dir):
    text = (config_dir / "consumerOffset.json").read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match="malformed JSON"):
        load_consumer_offsets(write(tmp_path, text[: len(text) // 2]))


def test_non_utf8_file_is_an_error(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'{"offsetTable":{"\xff@G":{}}}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_consumer_offsets(path)


def test_empty_file_is_an_empty_table(tmp_path):
    assert load_consumer_offsets(write(tmp_path, "")) == {}
    assert load_consumer_filters(write(tmp_path, " \n")) == []


# ------------------------------------------------------------------ shape errors name the key
@pytest.mark.parametrize("loader, text, key", [
    (load_consumer_offsets, "[1]", None),
    (load_topics, '{"offsetTable":{}}', "topicConfigTable"),
    (load_consumer_offsets, '{"offsetTable":{"TG":{0:1}}}', "offsetTable.TG"),
    (load_consumer_offsets, '{"offsetTable":{"T@G":{0:"5"}}}', "offsetTable.T@G.0"),
    (load_consumer_offsets, '{"offsetTable":{"T@G":{"q":5}}}', "offsetTable.T@G.q"),
    (load_consumer_offsets, '{"offsetTable":{"T@G":[5]}}', "offsetTable.T@G"),
    (load_consumer_filters, '{"filterDataByTopic":{"T":{"groupFilterData":{"G":{"expressionType":"SQL92",'
                            '"bornTime":1}}}}}', "filterDataByTopic.T.groupFilterData.G.expression"),
    (load_consumer_filters, '{"filterDataByTopic":{"T":{"groupFilterData":{"G":{"expression":"a=1",'
                            '"expressionType":"SQL92","bornTime":"1"}}}}}',
     "filterDataByTopic.T.groupFilterData.G.bornTime"),
    (load_consumer_filters, '{"filterDataByTopic":{"T":{"groupFilterData":{"G":{"expression":"a=1",'
                            '"expressionType":"SQL92","bornTime":1,"bloomFilterData":{"bitNum":112,'
                            '"bitPos":[1,"2"]}}}}}}',
     "filterDataByTopic.T.groupFilterData.G.bloomFilterData.bitPos[1]"),
    (load_topics, '{"topicConfigTable":{"T":{"readQueueNums":true}}}', "topicConfigTable.T.readQueueNums"),
    (load_topics, '{"topicConfigTable":{"T":{"topicFilterType":"ANY"}}}',
     "topicConfigTable.T.topicFilterType"),
    (load_subscription_groups, '{"subscriptionGroupTable":{"G":{"consumeEnable":1}}}',
     "subscriptionGroupTable.G.consumeEnable"),
    (load_subscription_groups,
     '{"subscriptionGroupTable":{"G":{"subscriptionDataSet":[{"expression":"*"}]}}}',
     "subscriptionGroupTable.G.subscriptionDataSet[0].topic"),
])
def test_unknown_shape_raises_config_error_naming_file_and_key(tmp_path, loader, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        loader(path)
    assert err.value.path == str(path) and err.value.key == key
    assert str(path) in str(err.value) and (key is None or key in str(err.value))


def test_malformed_store_config_stops_the_job_with_exit_1_naming_the_file(tmp_path, capsys):
    """README, exit codes: 1 = store or config unreadable or damaged, the message naming the file (a file the
    run reads: consumerFilter.json; topics.json is not read, see tests/jobs/test_config_files_read.py)."""
    from jobs.replay import main

    for folder in ("commitlog", "consumequeue", "config"):  # an empty store but for its config
        (tmp_path / "store" / folder).mkdir(parents=True)
    bad = write(tmp_path / "store" / "config", '{"filterDataByTopic":{"T":{0:', "consumerFilter.json")
    assert main(["--store", str(tmp_path / "store"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("log: ")  # the run's log file, named as it starts (docs/logging.md)
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and str(bad) in errors[0] and "malformed JSON" in errors[0]
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ subscriptionGroup.json (5.1.1+)
SUBSCRIPTION_GROUPS = """{
\t"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},
\t"forbiddenTable":{},
\t"subscriptionGroupTable":{
\t\t"G1":{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":false,
\t\t\t"consumeFromMinEnable":true,"consumeMessageOrderly":true,"consumeTimeoutMinute":15,
\t\t\t"groupName":"G1","groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,
\t\t\t"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":3,"retryQueueNums":1,
\t\t\t"subscriptionDataSet":[
\t\t\t\t{"expression":"TagA || TagB","expressionType":"TAG","topic":"T","version":1},
\t\t\t\t{"expression":"a > 1","expressionType":"SQL92","topic":"T2","version":2},
\t\t\t\t{"expression":null,"expressionType":null,"topic":"T3","version":3}],
\t\t\t"whichBrokerWhenConsumeSlowly":1},
\t\t"G2":{"groupName":"G2"}
\t}
}"""


def test_subscription_groups_with_static_subscriptions(tmp_path):
    groups = load_subscription_groups(write(tmp_path, SUBSCRIPTION_GROUPS))
    g1 = groups["G1"]
    assert (g1.consume_enable, g1.consume_message_orderly, g1.retry_max_times) == (False, True, 3)
    assert g1.subscriptions == [("T", "TAG", "TagA || TagB"), ("T2", "SQL92", "a > 1"), ("T3", "TAG", None)]
    assert groups["G2"] == SubscriptionGroupConfig(group_name="G2")  # Java's defaults


def test_store_config_turns_static_subscriptions_into_registrations(tmp_path):
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    path = write(config, SUBSCRIPTION_GROUPS, "subscriptionGroup.json")
    regs = load_store_config(tmp_path / "store").registrations()
    assert regs == [Registration("G1", "T", "TAG", "TagA || TagB", None, None, str(path)),
                    Registration("G1", "T2", "SQL92", "a > 1", None, None, str(path)),
                    Registration("G1", "T3", "TAG", "*", None, None, str(path))]


# ------------------------------------------------------------------ load_store_config edge cases
def test_missing_config_files_are_empty(tmp_path):
    (tmp_path / "config").mkdir()
    cfg = load_store_config(tmp_path)
    assert (cfg.consumer_filters, cfg.consumer_offsets) == ([], {})
    assert (cfg.topics, cfg.subscription_groups) == ({}, {})
    assert cfg.registrations() == []


def test_present_malformed_config_file_is_an_error(tmp_path):
    (tmp_path / "config").mkdir()
    write(tmp_path / "config", "{", "topics.json")
    with pytest.raises(ConfigError, match="topics.json"):
        load_store_config(tmp_path)


def test_backup_file_is_used_when_the_file_is_missing_or_empty(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    write(config, "", "consumerOffset.json")
    write(config, '{"offsetTable":{"T@G":{0:9}}}', "consumerOffset.json.bak")
    write(config, '{"topicConfigTable":{"T":{}}}', "topics.json.bak")
    cfg = load_store_config(tmp_path)
    assert cfg.consumer_offsets == {("T", "G"): {0: 9}}
    assert list(cfg.topics) == ["T"] and cfg.topics["T"].read_queue_nums == 16


def test_missing_store_directory_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_store_config(tmp_path / "nope")


# ------------------------------------------------------------------ the project's subscription file
def registrations_text(*entries, extra=""):
    return json.dumps({"groups": list(entries), "comment": "ignored" + extra})


GOOD = {"group": "G", "topic": "T", "expressionType": "TAG", "expression": "TagA"}


def test_registrations_optional_and_unknown_keys(tmp_path):
    regs = load_registrations(write(tmp_path, registrations_text(
        dict(GOOD, bornTime=None, whatever=1), dict(GOOD, group="G2", expressionType="PYTHON",
                                                    expression="mod:fn", bornTime=5))))
    assert [(r.group, r.expression_type, r.born_time, r.bloom_bit_pos) for r in regs] == [
        ("G", "TAG", None, None), ("G2", "PYTHON", 5, None)]


@pytest.mark.parametrize("entry, key", [
    ({k: v for k, v in GOOD.items() if k != "group"}, "groups[0].group"),
    (dict(GOOD, topic=""), "groups[0].topic"),
    (dict(GOOD, expressionType="tag"), "groups[0].expressionType"),
    (dict(GOOD, expressionType="CLASS"), "groups[0].expressionType"),
    (dict(GOOD, expression=None), "groups[0].expression"),
    (dict(GOOD, bornTime="1"), "groups[0].bornTime"),
    (dict(GOOD, bloomBitPos=[1, 2.5]), "groups[0].bloomBitPos[1]"),
    ("G", "groups[0]"),
])
def test_bad_registration_entries_name_the_key(tmp_path, entry, key):
    path = write(tmp_path, registrations_text(entry))
    with pytest.raises(ConfigError) as err:
        load_registrations(path)
    assert err.value.key == key and str(path) in str(err.value)


def test_unparsable_expression_is_loaded_so_that_only_its_group_fails(tmp_path):
    regs = load_registrations(write(tmp_path, registrations_text(dict(GOOD, expression="||"))))
    assert [r.expression for r in regs] == ["||"]


def test_registration_file_without_groups_list_is_an_error(tmp_path):
    for text, key in (('{"group": []}', "groups"), ('{"groups": {}}', "groups"), ("[]", None)):
        with pytest.raises(ConfigError) as err:
            load_registrations(write(tmp_path, text))
        assert err.value.key == key


def test_same_group_and_topic_twice_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="twice"):
        load_registrations(write(tmp_path, registrations_text(GOOD, dict(GOOD, expression="TagB"))))
