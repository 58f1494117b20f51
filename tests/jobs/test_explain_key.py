"""python -m jobs.explain --key K: the messages that carry K (RocketMQ's dump of store_a says which) and every
subscribed group's verdict, equal to what RocketMQ delivered (expected.json); through the index, or a scan
without it; a damaged index file named, its span scanned, exit 4."""
import gzip
import json
import shutil

import pytest

from jobs import explain
from tests.jobs.conftest import writable_copy

KEY_FIELDS = {"topic", "queue_id", "queue_offset", "msg_id", "commit_log_offset", "group", "delivered", "reason"}


@pytest.fixture(scope="module")
def dump(store_a):
    """(messages, delivered {(group, topic, queue, offset)}, groups of each topic) of RocketMQ's dumps."""
    with gzip.open(store_a / "messages.jsonl.gz", "rt", encoding="utf-8") as f:
        messages = [json.loads(line) for line in f]
    expected = json.loads((store_a / "expected.json").read_text(encoding="utf-8"))
    delivered = {(g, t, r["queueId"], r["queueOffset"]) for g, ts in expected.items() for t, rows in ts.items()
                 for r in rows}
    groups = {}
    for s in json.loads((store_a / "registrations.json").read_text(encoding="utf-8"))["groups"]:
        for topic in (s["topic"], "%RETRY%" + s["group"]):
            groups.setdefault(topic, set()).add(s["group"])
    return messages, delivered, groups


def _carriers(messages, key, below=None):
    return {(m["topic"], m["queueId"], m["queueOffset"]) for m in messages
            if (key in (m["properties"].get("KEYS") or "").split(" ") or m["properties"]["UNIQ_KEY"] == key)
            and (below is None or m["commitLogOffset"] < below)}


def _cli(capsys, store, store_a, *more):
    code = explain.main([str(a) for a in ["--store", store, "--subscriptions", store_a / "registrations.json",
                                          *more]])
    out, err = capsys.readouterr()
    return code, out, err


def _check(rows, dump, want):
    messages, delivered, groups = dump
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows} == want
    for r in rows:
        assert KEY_FIELDS <= set(r)
        assert r["delivered"] == ((r["group"], r["topic"], r["queue_id"], r["queue_offset"]) in delivered)
    for t, q, o in want:
        assert {r["group"] for r in rows if (r["topic"], r["queue_id"], r["queue_offset"]) == (t, q, o)} == \
            groups.get(t, {None})


def test_a_key_in_several_topics_with_every_groups_verdict(capsys, store_a, dump):
    retried = next(m for m in dump[0] if m["topic"].startswith("%RETRY%") and m["properties"].get("KEYS"))
    key = retried["properties"]["KEYS"].split(" ")[0]
    want = _carriers(dump[0], key)
    assert {"TopicTest", "订单Topic", retried["topic"]} <= {t for t, _, _ in want}
    code, out, err = _cli(capsys, store_a / "store", store_a, "--key", key, "--json")
    assert (code, err) == (0, "")
    _check(json.loads(out), dump, want)


def test_a_unique_key_finds_its_message_and_its_retried_copy(capsys, store_a, dump):
    retried = next(m for m in dump[0] if m["topic"].startswith("%RETRY%"))
    key = retried["properties"]["UNIQ_KEY"]
    code, out, _ = _cli(capsys, store_a / "store", store_a, "--key", key, "--json")
    assert code == 0
    _check(json.loads(out), dump, _carriers(dump[0], key))


def test_topic_and_group_narrow_the_answer(capsys, store_a, dump):
    code, out, _ = _cli(capsys, store_a / "store", store_a, "--key", "k4", "--topic", "订单Topic", "--group",
                        "G_TAG_ORDER", "--json")
    rows = json.loads(out)
    assert code == 0 and {r["group"] for r in rows} == {"G_TAG_ORDER"}
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows} == \
        {w for w in _carriers(dump[0], "k4") if w[0] == "订单Topic"}


def test_no_match_is_an_empty_list(capsys, store_a):
    assert _cli(capsys, store_a / "store", store_a, "--key", "no-such-key", "--json") == (0, "[]\n", "")
    code, out, _ = _cli(capsys, store_a / "store", store_a, "--key", "no-such-key")
    assert (code, out) == (0, "no message carries the key\n")


def test_without_index_the_same_answer_from_a_scan(capsys, store_a, dump, tmp_path):
    store = writable_copy(store_a, tmp_path)
    shutil.rmtree(store / "index")
    code, out, err = _cli(capsys, store, store_a, "--key", "k8", "--json")
    assert code == 0
    assert err == "note: scanned the commit log from offset 0 to the log's end (the store has no index/): 3000 " \
                  "records\n"
    _check(json.loads(out), dump, _carriers(dump[0], "k8"))
    _, indexed, _ = _cli(capsys, store_a / "store", store_a, "--key", "k8", "--json")
    assert out == indexed


def test_an_index_past_the_commit_logs_end_is_named_scanned_around_exit_4(capsys, store_a, dump, tmp_path):
    store = writable_copy(store_a, tmp_path)
    (store / "commitlog" / "00000000000004194304").unlink()  # the log lost its last file, the index did not
    code, out, err = _cli(capsys, store, store_a, "--key", "k2", "--json")
    assert code == 4
    assert "damaged index file" in err and "20261121045715563" in err and "past the commit log's end" in err
    assert "scanned the commit log from offset 2956790" in err  # from the end of the good file before it
    _check(json.loads(out), dump, _carriers(dump[0], "k2", below=4194304))


def test_text_answer_lists_each_message_then_its_groups(capsys, store_a, dump):
    m = next(m for m in dump[0] if m["topic"] == "TopicTest")
    code, out, _ = _cli(capsys, store_a / "store", store_a, "--key", m["properties"]["UNIQ_KEY"])
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"TopicTest queue {m['queueId']} offset {m['queueOffset']}: msgId "
                                             f"{m['msgId']}")
    assert sorted(line.split(":")[0].strip() for line in lines[1:]) == sorted(dump[2]["TopicTest"])


@pytest.mark.parametrize("more, said", [
    (["--key", "k1", "--queue-id", 0, "--queue-offset", 0], "--key finds messages itself"),
    (["--queue-id", 0, "--queue-offset", 0], "required: --group, --topic (or --key)"),
])
def test_key_usage_errors(capsys, store_a, more, said):
    code, _, err = _cli(capsys, store_a / "store", store_a, *more)
    assert code == 2 and said in err
