"""Nights committed to a real SQLite catalog without Spark: a run's parts written by hand (the answer tables'
own schemas), then iceberg_sink.publish_tables as the job calls it. Rows are (group, topic, queue, offset); a
message's commit-log offset is 1000 * queue + offset, its body the text of both."""
import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.output.layouts import NORMALIZED
from jobs.output.writers import answer_schema
from jobs.sinks.iceberg import lake
from jobs.sinks.iceberg.tables import IcebergTarget, publish_tables

BROKER = "broker"
REF = lake.StoreRef(BROKER, "broker@127.0.0.1:10911", "0:1795237034764")


def target(tmp_path, continuing=False, namespace="lake", wait_s=30.0, refs=(REF,)):
    return IcebergTarget(namespace, uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path / "wh"),
                         wait_s=wait_s, refs=refs, continuing=continuing)


def offset(queue, at):
    return 1000 * queue + at


def parts(subscriptions, ranges, broker=BROKER, held=()):
    """The (Broker, Planned) pairs publish_tables reads: `subscriptions` [(group, topic)], `ranges` [(topic, queue,
    first, end)], `held` the plan's offsets left out of its groups' scope ((group, topic, queue, first, end), ...)."""
    subs = tuple(SimpleNamespace(sub=SimpleNamespace(group=g, topic=t)) for g, t in subscriptions)
    return ((SimpleNamespace(name=broker), SimpleNamespace(plan=SimpleNamespace(subscriptions=subs, held=held),
                                                           ranges=tuple(ranges))),)


def write_run(out, rows, broker=BROKER):
    """A run's temporary OUT: matched/ and messages/ parts of `rows`, an empty collisions/ part."""
    matched = answer_schema("matched", NORMALIZED, True)
    messages = answer_schema("messages", NORMALIZED, True)
    for name in ("matched", "audit/collisions", "messages"):
        os.makedirs(os.path.join(out, name), exist_ok=True)
    by_group = {}
    for g, t, q, o in rows:
        by_group.setdefault(g, []).append({"group": g, "topic": t, "queue_id": q, "queue_offset": o,
                                           "commitlog_offset": offset(q, o), "broker": broker})
    for n, (g, mine) in enumerate(sorted(by_group.items())):  # a file per group: the partition the sink cuts
        pq.write_table(pa.Table.from_pylist(mine, schema=matched), os.path.join(out, "matched", f"part-{n}.parquet"))
    if not by_group:
        pq.write_table(matched.empty_table(), os.path.join(out, "matched", "part-empty.parquet"))
    pq.write_table(answer_schema("audit/collisions", NORMALIZED, True).empty_table(),
                   os.path.join(out, "audit/collisions", "part-empty.parquet"))
    seen, by_topic = set(), {}
    for _, t, q, o in rows:
        if (t, q, o) not in seen:
            seen.add((t, q, o))
            by_topic.setdefault(t, []).append({"topic": t, "queue_id": q, "queue_offset": o, "broker": broker,
                                               "commitlog_offset": offset(q, o), "body": f"{t}/{q}/{o}".encode()})
    for n, (t, mine) in enumerate(sorted(by_topic.items())):
        pq.write_table(pa.Table.from_pylist(mine, schema=messages), os.path.join(out, "messages", f"part-{n}.parquet"))
    if not by_topic:
        pq.write_table(messages.empty_table(), os.path.join(out, "messages", "part-empty.parquet"))
    return {"matched": (1, len(rows), 0), "audit/collisions": (1, 0, 0), "messages": (1, len(seen), 0)}


def night(tgt, out, run, subscriptions, ranges, rows, held=()):
    """One night committed: rows of the subscriptions' groups over `ranges` (none in `held`, as a task writes)."""
    written = write_run(str(out), rows)
    return publish_tables(tgt, str(out), written, run, True, parts(subscriptions, ranges, held=held))


def keys(tgt, name="matched"):
    """[(group, topic, queue, offset)] of NS.matched (with repeats), or [(topic, commit-log offset)] of messages."""
    table = tgt.catalog().load_table(f"{tgt.namespace}.{name}").scan().to_arrow()
    if name == "messages":
        return sorted(zip(table.column("topic").to_pylist(), table.column("commitlog_offset").to_pylist()))
    return sorted(zip(*(table.column(c).to_pylist() for c in ("group", "topic", "queue_id", "queue_offset"))))
