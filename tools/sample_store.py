"""A seeded generator of realistic broker stores, written with the store writer.

The shape follows fixture store_a (tags with a hash collision, missing and empty tags, numeric and
decimal properties, non-ASCII values and topic names, IPv6 born hosts, zlib bodies, retry topics) at any
size. SQL92 groups of the subscription file are registered in config/consumerFilter.json and the
dispatcher computes every message's bitmap, as a broker with enableCalcFilterBitMap does.

    python -m tools.sample_store OUT_DIR [--messages N] [--seed S] [--commitlog-mb MB]
"""
import argparse
import json
import os
import random
import sys

import pyarrow as pa

from filtering import dispatcher
from filtering.bloom import BloomFilter
from filtering.subscriptions import Subscription, compile_subscription
from schemas.log import layout as L
from schemas.log.properties import parse_properties, properties_to_blob
from tools.store_writer import Message, StoreWriter

DEFAULT_SUBSCRIPTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf",
                                     "sample_subscriptions.json")
TOPICS = {"TopicTest": 4, "订单Topic": 3}
TAGS = ["TagA", "TagB", "TagC", "TagD", "Aa", "BB", None, ""]
TAG_WEIGHTS = [24, 24, 10, 10, 6, 6, 12, 8]
REGIONS = ["杭州", "上海", "北京", "深圳"]


def _message(rng, i, topics, now, store_host, retry_groups):
    retry = retry_groups and rng.random() < 0.01
    topic = rng.choice(topics)
    props = {}
    if rng.random() < 0.8:
        props["a"] = str(rng.randint(0, 99)) if rng.random() < 0.9 else f"{rng.randint(0, 99)}.5"
    if rng.random() < 0.5:
        props["price"] = f"{rng.uniform(1, 1000):.2f}"
    if topic == "订单Topic" or rng.random() < 0.2:
        props["region"] = rng.choice(REGIONS) if rng.random() < 0.9 else ""
    props["KEYS"] = " ".join(f"k{rng.randint(0, 99)}" for _ in range(rng.randint(1, 2)))
    props["UNIQ_KEY"] = f"{0xFD000000:08X}{i:024X}"
    props["CLUSTER"] = "DefaultCluster"
    props["WAIT"] = "true"
    tag = rng.choices(TAGS, TAG_WEIGHTS)[0]
    if tag is not None:
        props["TAGS"] = tag
    queue_id = rng.randrange(TOPICS.get(topic, 1))
    reconsume = 0
    if retry:
        group = rng.choice(retry_groups)
        props.update(RETRY_TOPIC=topic, ORIGIN_MESSAGE_ID=f"{i:032X}")
        topic, queue_id, reconsume = f"%RETRY%{group}", 0, rng.randint(1, 3)
    big = rng.random() < 0.02
    body = (f"msg-{i} 消息体 " * (rng.randint(3000, 9000) if big else rng.randint(8, 20))).encode("utf-8")
    sys_flag = 0
    if len(body) >= 4096 and rng.random() < 0.5:
        sys_flag |= L.COMPRESSED | (L.COMPRESSION_ZLIB << L.COMPRESSION_TYPE_SHIFT if rng.random() < 0.5 else 0)
    v6 = rng.random() < 0.1
    born_host = f"fe80:0:0:0:0:0:1:{rng.randint(0, 0xffff):x}:{rng.randint(1024, 65535)}" if v6 else \
        f"192.168.0.{rng.randint(1, 254)}:{rng.randint(1024, 65535)}"
    stored = now + i * 2 + 1  # a broker's store times follow the log
    return Message(topic=topic, queue_id=queue_id, body=body, properties=props, sys_flag=sys_flag,
                   born_timestamp=stored - rng.randint(1, 40), born_host=born_host, store_timestamp=stored,
                   store_host=store_host, reconsume_times=reconsume)


def generate_store(root, messages=3000, seed=11, subscriptions=DEFAULT_SUBSCRIPTIONS, commitlog_file_size=1 << 20,
                   cq_file_size=6000, ext_file_size=16384, now=1795237034500, batch_size=20000):
    """Write a store of `messages` messages under root; returns the registrations it persisted."""
    rng = random.Random(seed)
    with open(subscriptions, encoding="utf-8") as f:
        groups = json.load(f)["groups"]
    bloom = BloomFilter()
    topics = list(TOPICS)
    sql = []
    for g in groups:
        if g["expressionType"] == "SQL92":
            after = int(messages * float(g.get("registerAfterFraction", 0)))
            born = now + after * 2 + 45 if after else now - 1000
            sub = Subscription(g["group"], g["topic"], "SQL92", g["expression"], born,
                               tuple(bloom.registration_bits(g["group"], g["topic"])), True)
            sql.append(compile_subscription(sub))
    retry_groups = sorted({g["group"] for g in groups})
    with StoreWriter(root, commitlog_file_size, cq_file_size, ext_file_size) as writer:
        for start in range(0, messages, batch_size):
            batch = [_message(rng, i, topics, now, "127.0.0.1:10911", retry_groups)
                     for i in range(start, min(messages, start + batch_size))]
            _dispatch(batch, sql, bloom, dispatcher)
            for m in batch:
                writer.append(m)
        writer.write_config("consumerFilter.json", _consumer_filter_json(sql, bloom))
        writer.write_config("topics.json", {"topicConfigTable": {
            t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicFilterType": "SINGLE_TAG"}
            for t, n in sorted(writer_topics(writer).items())}})
        writer.write_config("consumerOffset.json", _consumer_offsets(groups, writer))
    return sql


def _consumer_offsets(groups, writer):
    """Every group has consumed the first 80% of each queue of its topic: `--from committed` then has a
    backlog to show."""
    table = {}
    for g in groups:
        for (topic, qid), next_offset in sorted(writer.next_queue_offset.items()):
            if topic == g["topic"]:
                table.setdefault(f"{topic}@{g['group']}", {})[str(qid)] = next_offset * 4 // 5
    return {"offsetTable": table}


def writer_topics(writer):
    out = {}
    for topic, qid in writer.next_queue_offset:
        out[topic] = max(out.get(topic, 0), qid + 1)
    return out


def dispatched_properties(messages):
    """The properties as the dispatcher sees them: decoded from the stored bytes (empty values dropped)."""
    return parse_properties(pa.array([properties_to_blob(m.properties) for m in messages], pa.string()))


def _dispatch(batch, registrations, bloom, dispatcher):
    """Bitmaps as CommitLogDispatcherCalcBitMap computes them when each message arrives."""
    by_topic = {}
    for i, m in enumerate(batch):
        by_topic.setdefault(m.topic, []).append(i)
    for topic, rows in by_topic.items():
        regs = [c for c in registrations if c.sub.topic == topic]
        if not regs:
            continue
        props = dispatched_properties([batch[i] for i in rows])
        match = dispatcher.registration_matches(regs, props)
        times = [batch[i].store_timestamp for i in rows]
        for r, c in enumerate(regs):  # registered later: absent from earlier messages' bitmaps
            match[:, r] &= [t >= c.sub.born_time for t in times]
        bitmaps, _ = dispatcher.recompute_bitmaps(regs, match, bloom.m)
        for k, i in enumerate(rows):
            batch[i].filter_bitmap = bitmaps[k].tobytes()


def _consumer_filter_json(registrations, bloom):
    table = {}
    for c in registrations:
        s = c.sub
        table.setdefault(s.topic, {"topic": s.topic, "groupFilterData": {}})["groupFilterData"][s.group] = {
            "consumerGroup": s.group, "topic": s.topic, "expression": s.expression, "expressionType": "SQL92",
            "bornTime": s.born_time, "deadTime": 0, "dead": False, "clientVersion": s.born_time,
            "bloomFilterData": {"bitPos": list(s.bloom_bits), "bitNum": bloom.m}}
    return {"filterDataByTopic": table}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.sample_store", description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--commitlog-mb", type=int, default=1)
    p.add_argument("--subscriptions", default=DEFAULT_SUBSCRIPTIONS)
    args = p.parse_args(argv)
    if os.path.exists(os.path.join(args.out, ".complete")):
        print(f"{args.out} exists")
        return 0
    generate_store(args.out, args.messages, args.seed, args.subscriptions, args.commitlog_mb << 20)
    open(os.path.join(args.out, ".complete"), "w").close()
    print(f"wrote a sample store of {args.messages} messages to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
