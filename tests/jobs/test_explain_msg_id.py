"""`jobs.explain --msg-id` needs no `--topic`: an offset msg id names one record of a broker (its store host and
commit-log offset), whose topic, queue and queue offset the record says. A position (--queue-id, --queue-offset)
still needs its topic."""
import json

from jobs import explain


def _cli(capsys, *args):
    code = explain.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_msg_id_alone_finds_its_topic_queue_and_offset(capsys, store_a, store_a_expected):
    (group, topic, queue_id, offset), row = max(store_a_expected[0].items())  # RocketMQ's expected.json
    code, out, err = _cli(capsys, "--store", store_a / "store", "--subscriptions", store_a / "registrations.json",
                          "--group", group, "--msg-id", row["msgId"], "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert (answer["topic"], answer["queue_id"], answer["queue_offset"], answer["delivered"]) == \
        (topic, queue_id, offset, True)


def test_a_position_without_its_topic_is_refused_naming_topic(capsys, store_a):
    code, _, err = _cli(capsys, "--store", store_a / "store", "--group", "G_TAG_A", "--queue-id", 0,
                        "--queue-offset", 0)
    assert code == 2 and "--topic" in err
