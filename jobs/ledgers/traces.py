"""Message traces (issue 63; docs/output.md, "OUT/traces/" and "OUT/consumption/"): what each consumer group's
clients did with what its filter delivered, from the trace records the clients wrote into the store.

RocketMQ's clients with message trace on (`enableMsgTrace`; apache/rocketmq 5.3.3 org.apache.rocketmq.client.trace)
send trace messages to `RMQ_SYS_TRACE_TOPIC` (or the topic the client names, `customizedTraceTopic`; a cloud
client's `rmq_sys_TRACE_DATA_<region>`): AsyncTraceDispatcher batches contexts into one message per business
topic, its KEYS the traced msgIds and their keys, its body the contexts TraceDataEncoder writes
(schemas/trace_body.py decodes them): Pub when a producer sends, SubBefore and SubAfter around each consume attempt
(retries under the same msgId, with retryTimes), EndTransaction. Consume records carry no topic: a message is
named by its msgId, the UNIQ_KEY.

Built as the house's ledgers are: the task turns its batches into `trace_event` pieces (`add_trace_pieces`):
`trace` (a row per decoded record, with its trace message's place), `delivered` (a row per message a group's
subscription delivered, business topics only: a retry copy is the same message) and `message` (every message of a
subscribed topic, its UNIQ_KEY and place: what a consume trace of an undelivered message is placed by). One Spark
step after the stage (`write_trace_ledgers`) writes OUT/traces/ and joins the rest into OUT/consumption/, a row
per (broker, group, topic, message) the group's subscription delivered or a consume trace of that group names
(for the (group, topic) pairs the run replays: only there is `delivered` known). No row goes through the driver.

A row's `final`: consumed (a SubAfter succeeded, none failed), failed_then_consumed (failures, then a success),
failed (every attempt failed: a push consumer sends it to %DLQ% after maxReconsumeTimes), not_consumed (delivered,
no attempt traced), consumed_without_delivery (a consumer saw what the filter would not deliver), untraced
(delivered to a group that left no trace record at all: trace off). Across nights (Iceberg, NS.consumption) the
rows keep the consume records they rest on (`records`), joined with a later night's as one run over both nights
would join them, each once (a later night reads the trace topic from its start again): a message delivered one
night and consumed the next ends consumed. NS.traces gets each night's records it does not hold yet."""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ledgers.spark_io import read_events, remove, sizes, write_empty_part, write_table
from jobs.policy import report_damage
from schemas.log.lookup import read_records
from schemas.trace_body import RECORD_SCHEMA, SUB_AFTER, SUB_BEFORE, decode_bodies

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

    from filtering.subscriptions import Subscription
    from filtering.topic_replay import MessageRows

# `plan` below is a jobs.plan.replay_plan.ReplayPlan and `out` a jobs.task.split_task.Pieces (or explain's audit):
# both of layers above the ledgers (setup.cfg [importlinter]), so typed Any here

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC: the default trace topic
TRACE_DATA_PREFIX = "rmq_sys_TRACE_DATA_"  # TraceConstants.TRACE_TOPIC_PREFIX + region (a cloud client's)
TRACES, CONSUMPTION = "traces", "consumption"
TRACE_EVENTS = "_trace_events"  # a run's trace events, until the driver has joined them into traces/, consumption/
TRACE, DELIVERED, MESSAGE = "trace", "delivered", "message"
CONSUMED, FAILED_THEN_CONSUMED, FAILED = "consumed", "failed_then_consumed", "failed"
NOT_CONSUMED, WITHOUT_DELIVERY, UNTRACED = "not_consumed", "consumed_without_delivery", "untraced"
FINALS = (CONSUMED, FAILED_THEN_CONSUMED, FAILED, NOT_CONSUMED, WITHOUT_DELIVERY, UNTRACED)
# a trace message's place, beside each of its records
PLACE_FIELDS = [("trace_topic", pa.string()), ("trace_queue_id", pa.int32()), ("trace_queue_offset", pa.int64()),
                ("trace_store_timestamp", pa.int64()), ("trace_msg_id", pa.string()),
                ("trace_commitlog_offset", pa.int64())]
TRACES_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name != "body_index"] + PLACE_FIELDS)
TRACE_EVENT_SCHEMA = pa.schema([("kind", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                                ("commitlog_offset", pa.int64())] + list(TRACES_SCHEMA))
# a consume record a consumption row rests on, kept with the row so that a later night's records join it and a
# record read twice (a trace topic read again by a later night) counts once
ATTEMPT_TYPE = pa.struct([
    ("trace_broker", pa.string()), ("trace_commitlog_offset", pa.int64()), ("record_index", pa.int32()),
    ("trace_type", pa.string()), ("timestamp", pa.int64()), ("success", pa.bool_()),
])
ATTEMPTS_DDL = ("array<struct<trace_broker: string, trace_commitlog_offset: bigint, record_index: int, "
                "trace_type: string, timestamp: bigint, success: boolean>>")  # a list of ATTEMPT_TYPE, for Spark
CONSUMPTION_SCHEMA = pa.schema([
    ("broker", pa.string()), ("group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()), ("uniq_key", pa.string()),
    ("delivered", pa.bool_()), ("attempts", pa.int64()), ("successes", pa.int64()), ("failures", pa.int64()),
    ("final", pa.string()), ("below_committed", pa.bool_()), ("first_attempt_time", pa.int64()),
    ("last_attempt_time", pa.int64()), ("consumed_time", pa.int64()), ("records", pa.list_(ATTEMPT_TYPE)),
])
KEY = ["broker", "group", "topic", "uniq_key"]
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "%LMQ%")


@dataclass(frozen=True)
class TraceScope:
    """What a task needs of the traces (ReplayPlan.traces): the trace topics the run reads, the (group, topic)
    pairs it replays; and the driver's step, the groups' committed offsets ((group, topic, queue, offset), ...)."""

    topics: frozenset
    pairs: tuple = ()
    committed: tuple = ()


def trace_topics(topics_present: Iterable[str], given: Collection[str] = (),
                 narrowed: Collection[str] = ()) -> set[str]:
    """The trace topics a run reads whatever the subscriptions: RMQ_SYS_TRACE_TOPIC, the cloud clients'
    rmq_sys_TRACE_DATA_* and the --trace-topic names, those the store has (unless --topics leaves them out)."""
    wanted = {t for t in topics_present if t == TRACE_TOPIC or t.startswith(TRACE_DATA_PREFIX) or t in given}
    return {t for t in wanted if not narrowed or t in narrowed}


def trace_scope(topics_present: Iterable[str], given: Collection[str], subscriptions: Iterable[Subscription],
                consumer_offsets: Mapping[tuple[str, str], Mapping[int, int]] | None) -> TraceScope | None:
    """The run's TraceScope, None for a store without a trace topic (the tasks then emit no trace event)."""
    topics = trace_topics(topics_present, given)
    if not topics:
        return None
    pairs = tuple(sorted({(s.group, s.topic) for s in subscriptions if not s.topic.startswith(SYSTEM_PREFIXES)}))
    committed = tuple((g, t, int(q), int(o)) for g, t in pairs
                      for q, o in sorted((consumer_offsets or {}).get((t, g), {}).items()))
    return TraceScope(frozenset(topics), pairs, committed)


def add_trace_pieces(plan: Any, topic: str, messages: pa.Table, out: Any) -> None:
    """A decoded batch's `trace_event` piece (plan.traces: a store with a trace topic): the records of a trace
    topic's messages, or a business topic's deliveries (the `message` pieces replay_topic just added to `out`)
    and messages."""
    scope = plan.traces
    if scope is None or not messages.num_rows:
        return
    if topic in scope.topics:
        events = trace_records(plan, messages, out)
    elif topic.startswith(SYSTEM_PREFIXES) or topic not in {t for _, t in scope.pairs}:
        return
    else:
        delivered = [delivered_events(p) for k, p in out.pieces if k == "message" and p.topic == topic]
        events = pa.concat_tables([message_events(messages)] + delivered)
    if events is not None and events.num_rows:
        out.add("trace_event", events)


def trace_records(plan: Any, messages: pa.Table, out: Any) -> pa.Table:
    """`trace` events of a batch of a trace topic: each body's records with its message's place. A body that does
    not decode is damaged data (the run stops, or under --on-corrupt skip it is audited, left out)."""
    body = messages.column("body") if plan.with_body else read_records(
        plan.fs, plan.log, messages.column("commitlog_offset"), messages.column("store_size"), plan.max_body
    ).column("body")  # read without bodies (--no-body): these records read again, with theirs
    records, bad = decode_bodies(body)
    if bad.any():
        _audit(plan, out, messages, bad)
    at = pa.array(records.column("body_index").to_numpy())
    uniq = pc.coalesce(pc.map_lookup(messages.column("properties"), pa.scalar("UNIQ_KEY"), "last"),
                       messages.column("msg_id"))
    place = {"trace_topic": messages.column("topic"), "trace_queue_id": messages.column("queue_id"),
             "trace_queue_offset": messages.column("queue_offset"),
             "trace_store_timestamp": messages.column("store_timestamp"), "trace_msg_id": uniq,
             "trace_commitlog_offset": messages.column("commitlog_offset")}
    n = records.num_rows
    columns = {"kind": pa.repeat(pa.scalar(TRACE), n), "queue_id": pa.nulls(n, pa.int32()),
               "queue_offset": pa.nulls(n, pa.int64()), "commitlog_offset": pa.nulls(n, pa.int64()),
               **{f.name: records.column(f.name) for f in RECORD_SCHEMA if f.name != "body_index"},
               **{name: _array(values).take(at) for name, values in place.items()}}
    return pa.table(columns).cast(TRACE_EVENT_SCHEMA)


def message_events(messages: pa.Table) -> pa.Table:
    """`message` events: every message of a subscribed topic, its UNIQ_KEY (the offset msgId without one) and
    place: where a consume trace of a message its group was not delivered is put."""
    uniq = pc.coalesce(pc.map_lookup(messages.column("properties"), pa.scalar("UNIQ_KEY"), "last"),
                       messages.column("msg_id"))
    return _events(MESSAGE, messages.num_rows, {"topic": messages.column("topic"), "msg_id": uniq,
                                                "queue_id": messages.column("queue_id"),
                                                "queue_offset": messages.column("queue_offset"),
                                                "commitlog_offset": messages.column("commitlog_offset")})


def delivered_events(piece: MessageRows) -> pa.Table:
    """`delivered` events of a MessageRows piece (filtering/topic_replay.py): a row per (group, message) its
    subscription delivered, the message's UNIQ_KEY and place."""
    groups, rows = piece.delivered
    table, take = piece.table, pa.array(np.asarray(rows, dtype=np.int64))
    uniq = pc.coalesce(table.column("uniq_key"), table.column("msg_id")).take(take)
    return _events(DELIVERED, len(rows), {
        "group": piece.groups.take(pa.array(np.asarray(groups, dtype=np.int64))), "msg_id": uniq,
        "topic": pa.repeat(pa.scalar(piece.topic), len(rows)),
        **{c: table.column(c).take(take) for c in ("queue_id", "queue_offset", "commitlog_offset")}})


def _events(kind, n, columns):
    """A TRACE_EVENT_SCHEMA table of `columns`, the others null."""
    return pa.table({f.name: columns[f.name] if f.name in columns else pa.nulls(n, f.type)
                     for f in TRACE_EVENT_SCHEMA if f.name != "kind"} | {"kind": pa.repeat(pa.scalar(kind), n)}) \
        .select(TRACE_EVENT_SCHEMA.names).cast(TRACE_EVENT_SCHEMA)


def _audit(plan, out, messages, bad):
    """The trace messages whose body does not decode, to the corruption policy (split_decode's), each named."""
    ids = messages.column("msg_id").to_numpy(zero_copy_only=False)
    uniq = pc.map_lookup(messages.column("properties"), pa.scalar("UNIQ_KEY"), "last").to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(bad):
        path = plan.log.file_at(int(messages.column("commitlog_offset")[int(row)].as_py())).path
        report_damage(plan, out, messages, [row], f"trace message {uniq[row] or ids[row]} (offset msg id {ids[row]}) "
                      "whose body does not decode as TraceDataEncoder writes it: its records left out of OUT/traces/",
                      path, kept=True)


def _array(values):
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def write_trace_ledgers(
        spark: SparkSession, out_uri: str, where: tuple[pafs.FileSystem, str], written: dict[str, tuple[int, int, int]],
        plans: Sequence[Any], held: DataFrame | None = None, held_traces: DataFrame | None = None,
        event_files: Sequence[str] = ()
) -> tuple[dict[str, tuple[int, int, int]], list[dict[str, Any]], list[dict[str, Any]] | None] | None:
    """OUT/traces/ and OUT/consumption/ from the run's committed trace events, then the events removed. Returns
    ({output: (files, rows, bytes)}, the night's counts per (broker, group, final), the written consumption's
    counts or None), None when no broker of the run has a trace topic. `held`: a DataFrame of the consumption
    rows a table holds (Iceberg), merged with the night's: consumption/ is then the merged table; `held_traces`:
    the trace records a table holds, left out of traces/ (a later night reads a trace topic from its start)."""
    scopes = [p for p in plans if p.traces is not None]
    if not scopes and held is None:
        return None
    events = written.pop(TRACE_EVENTS, (0, 0, 0))
    fs, root = where
    base = out_uri.rstrip("/")
    night = None
    if events[1]:
        night = read_events(spark, TRACE_EVENT_SCHEMA.append(pa.field("broker", pa.string())), base, TRACE_EVENTS,
                            event_files)
        write_table(traces_of(night, held_traces), base, where, TRACES)
    counts, table = [], None
    rows = consumption(spark, night, scopes, held) if night is not None or held is not None else None
    if rows is not None:
        write_table(rows, base, where, CONSUMPTION)
        table = count_rows(read_events(spark, CONSUMPTION_SCHEMA, base, CONSUMPTION))
        counts = table if held is None else \
            count_rows(cast("DataFrame", consumption(spark, night, scopes, None))) if night is not None else []
    for output, schema in ((TRACES, TRACES_SCHEMA.append(pa.field("broker", pa.string()))),
                           (CONSUMPTION, CONSUMPTION_SCHEMA)):
        if not sizes(fs, f"{root}/{output}")[0]:
            write_empty_part(where, output, schema)
    remove(fs, f"{root}/{TRACE_EVENTS}")
    made = {o: sizes(fs, f"{root}/{o}") for o in (TRACES, CONSUMPTION)}
    return made, counts, None if held is None else table


def traces_of(events: DataFrame, held: DataFrame | None = None) -> DataFrame:
    """OUT/traces/'s rows: the `trace` events, a row per decoded record, but those `held` holds already."""
    from pyspark.sql import functions as F

    rows = events.where(F.col("kind") == TRACE).select("broker", *TRACES_SCHEMA.names)
    if held is None:
        return rows
    place = ["broker", "trace_topic", "trace_commitlog_offset"]
    seen = held.select(F.coalesce(F.col("broker"), F.lit("")).alias("broker"), *place[1:]).distinct()
    return rows.withColumn("b", F.coalesce(F.col("broker"), F.lit(""))).join(
        seen.withColumnRenamed("broker", "b"), ["b", *place[1:]], "left_anti").drop("b").select(rows.columns)


def consumption(spark: SparkSession, events: DataFrame | None, scopes: Sequence[Any],
                held: DataFrame | None = None) -> DataFrame | None:
    """OUT/consumption/'s rows (CONSUMPTION_SCHEMA) of the night's events (None: none) and the `held` rows (None:
    none): the deliveries and held rows by (group, UNIQ_KEY), each with the consume records of that group naming
    that msgId; a consume trace of no such row placed by the messages of a subscribed topic (delivered false);
    the records of held rows joined with the night's; `final` and `below_committed` decided last (settle)."""
    from pyspark.sql import functions as F

    pairs = spark.createDataFrame([(g, t) for p in scopes for g, t in p.traces.pairs], "`group` string, topic string") \
        .distinct()
    committed = spark.createDataFrame(
        [(p.broker or "", g, t, q, o) for p in scopes for g, t, q, o in p.traces.committed],
        "broker string, `group` string, topic string, queue_id int, committed long")
    place = ["queue_id", "queue_offset", "commitlog_offset"]
    rows, attempts = None, None
    if events is not None:
        ev = events.withColumn("broker", F.coalesce(F.col("broker"), F.lit("")))
        attempts = attempts_of(ev)
        delivered = first_copy(ev.where(F.col("kind") == DELIVERED).select(
            "broker", "group", "topic", *place, F.col("msg_id").alias("uniq_key")), KEY)
        known = delivered.select("group", "uniq_key")
        if held is not None:
            known = known.unionByName(held.select("group", "uniq_key"))
        messages = first_copy(ev.where(F.col("kind") == MESSAGE).select(
            "broker", "topic", *place, F.col("msg_id").alias("uniq_key")), ["broker", "topic", "uniq_key"])
        unplaced = attempts.join(known, ["group", "uniq_key"], "left_anti").select("group", "uniq_key")
        seen = unplaced.join(messages, "uniq_key").join(pairs, ["group", "topic"])
        rows = delivered.withColumn("delivered", F.lit(True)).unionByName(seen.withColumn("delivered", F.lit(False)))
        rows = rows.join(attempts, ["group", "uniq_key"], "left").select(*KEY, *place, "delivered", "records")
    if held is not None:
        old = held.withColumn("broker", F.coalesce(F.col("broker"), F.lit(""))).select(
            *KEY, *place, "delivered", "records")
        if attempts is not None:  # tonight's records of a row held (delivered an earlier night)
            late = attempts.join(old.select(*KEY, *place), ["group", "uniq_key"])
            old = old.unionByName(late.withColumn("delivered", F.lit(False)).select(*KEY, *place, "delivered",
                                                                                    "records"))
        rows = old if rows is None else rows.unionByName(old)
    return None if rows is None else settle(rows, committed)


def first_copy(rows: DataFrame, key: Sequence[str]) -> DataFrame:
    """A row per `key`: the one stored first (lowest commit-log offset), where a producer sent the same message
    (UNIQ_KEY) twice."""
    from pyspark.sql import functions as F

    rest = [c for c in rows.columns if c not in key]
    first = F.min_by(F.struct(*rest), F.col("commitlog_offset")).alias("first")
    return rows.groupBy(*key).agg(first).select(*key, *(F.col(f"first.{c}").alias(c) for c in rest))


def attempts_of(events: DataFrame) -> DataFrame:
    """Per (group, msgId): the consume records (ATTEMPT_TYPE) naming it. A SubAfter without its groupName (a
    cloud client's 7 fields) takes its SubBefore's (same requestId and msgId)."""
    from pyspark.sql import functions as F

    sub = events.where((F.col("kind") == TRACE) & F.col("trace_type").isin(SUB_BEFORE, SUB_AFTER))
    before = sub.where(F.col("trace_type") == SUB_BEFORE)
    named = before.select("request_id", "msg_id", F.col("group").alias("before_group")).dropDuplicates(
        ["request_id", "msg_id"])
    after = sub.where(F.col("trace_type") == SUB_AFTER).join(named, ["request_id", "msg_id"], "left") \
        .withColumn("group", F.coalesce(F.col("group"), F.col("before_group"))).drop("before_group")
    record = F.struct(F.col("broker").alias("trace_broker"), *(F.col(f.name) for f in ATTEMPT_TYPE
                                                               if f.name != "trace_broker"))
    return before.unionByName(after).where(F.col("group").isNotNull()).groupBy(
        "group", F.col("msg_id").alias("uniq_key")).agg(F.collect_set(record).alias("records"))


def settle(rows: DataFrame, committed: DataFrame) -> DataFrame:
    """One row per (broker, group, topic, UNIQ_KEY): its records once each, `delivered` if any night delivered
    it, then the counts, times, `final` (the module's rules; untraced: a group of no consume record at all) and
    `below_committed`."""
    from pyspark.sql import functions as F

    none = F.array().cast(ATTEMPTS_DDL)
    one = rows.groupBy(*KEY).agg(
        F.max("delivered").alias("delivered"),
        *(F.first(c, ignorenulls=True).alias(c) for c in ("queue_id", "queue_offset", "commitlog_offset")),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list(F.coalesce(F.col("records"), none))))).alias("records"))
    before = F.filter("records", lambda r: r["trace_type"] == SUB_BEFORE)
    ok = F.filter("records", lambda r: (r["trace_type"] == SUB_AFTER) & r["success"])
    bad = F.filter("records", lambda r: (r["trace_type"] == SUB_AFTER) & ~r["success"])
    one = one.select("*", F.size(before).cast("long").alias("attempts"), F.size(ok).cast("long").alias("successes"),
                     F.size(bad).cast("long").alias("failures"),
                     F.array_min(F.transform(before, lambda r: r["timestamp"])).alias("first_attempt_time"),
                     F.array_max(F.transform(before, lambda r: r["timestamp"])).alias("last_attempt_time"),
                     F.array_min(F.transform(ok, lambda r: r["timestamp"])).alias("consumed_time"))
    traced = one.where(F.size("records") > 0).select("group").distinct().withColumn("traced", F.lit(True))
    one = one.join(traced, "group", "left").join(committed, ["broker", "group", "topic", "queue_id"], "left")
    tried = F.size("records") > 0
    final = F.when(tried & ~F.col("delivered"), WITHOUT_DELIVERY) \
        .when(F.col("successes") > 0, F.when(F.col("failures") > 0, FAILED_THEN_CONSUMED).otherwise(CONSUMED)) \
        .when(F.col("failures") > 0, FAILED) \
        .when(F.coalesce(F.col("traced"), F.lit(False)), NOT_CONSUMED).otherwise(UNTRACED)
    below = F.coalesce(F.col("queue_offset") < F.col("committed"), F.lit(False))
    return one.select(F.when(F.col("broker") != "", F.col("broker")).alias("broker"), "group", "topic",
                      F.col("queue_id").cast("int"), "queue_offset", "commitlog_offset", "uniq_key", "delivered",
                      "attempts", "successes", "failures", final.alias("final"), below.alias("below_committed"),
                      "first_attempt_time", "last_attempt_time", "consumed_time", "records")


def count_rows(rows: DataFrame) -> list[dict[str, Any]]:
    """Per (broker, group, final): rows. Small: a row per group and final, collected."""
    found = rows.groupBy("broker", "group", "final").count().collect()
    return sorted(({"broker": r["broker"], "group": r["group"], "final": r["final"], "rows": int(r["count"])}
                   for r in found), key=lambda r: (r["broker"] or "", r["group"], FINALS.index(r["final"])))


def trace_summary(counts: Iterable[Mapping[str, Any]],
                  table: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """summary.json's `consumption`: per (broker, group) the rows of each final and their totals; with a table
    merged across nights (`table`: its counts), the same of it as `lake`."""
    groups: dict[tuple[str | None, str], dict[str, Any]] = {}
    for r in counts:
        g = groups.setdefault((r["broker"], r["group"]), {"broker": r["broker"], "group": r["group"],
                                                          **dict.fromkeys(FINALS, 0)})
        g[r["final"]] += r["rows"]
    rows = [groups[k] for k in sorted(groups, key=lambda k: (k[0] or "", k[1]))]
    out = {"groups": rows, "totals": {f: sum(g[f] for g in rows) for f in FINALS}}
    return out if table is None else dict(out, lake=trace_summary(table))


def trace_warnings(summary: Mapping[str, Any]) -> list[str]:
    """The operator's alarms: messages failed to the DLQ, and consumers that saw what their filter would not
    deliver (a client filtering otherwise than the broker thinks)."""
    out = []
    for g in summary["groups"]:
        if g[FAILED]:
            out.append(f"traces: {g[FAILED]} message(s) of group {g['group']} failed every consume attempt (to "
                       "its %DLQ% after maxReconsumeTimes; OUT/consumption/, final failed)")
        if g[WITHOUT_DELIVERY]:
            out.append(f"traces: group {g['group']} consumed {g[WITHOUT_DELIVERY]} message(s) its subscription "
                       "does not deliver (OUT/consumption/, final consumed_without_delivery)")
    return out
