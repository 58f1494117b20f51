"""The timer ledger (OUT/timers/, docs/output.md): every message that went through the timer wheel, one row each,
with its fate, in one module: the events (task side: scheduled records, delivered copies, cancel markers of a
decoded batch, written under the temporary OUT), then the driver's one Spark step that pairs them by (broker, UNIQ_KEY)
(the copies of a message lie in different splits) and writes the ledger with Spark's writer: no ledger row goes
through the driver, only the counts per real topic the summary shows.

The events of one decoded batch: which records are a timer message scheduled in the wheel, a cancel marker, or a
copy the wheel delivered, with what the ledger joins them on (the UNIQ_KEY); a part per split (`timer_event`
pieces).

How RocketMQ 5.x stores them (broker HookUtils.transformTimerMessage, store TimerMessageStore.convertMessage,
broker RecallMessageProcessor.buildMessage): a timer message is stored in `rmq_sys_wheel_timer` with REAL_TOPIC,
REAL_QID and TIMER_OUT_MS; when due, a copy is stored in its real topic with the same UNIQ_KEY, adding
TIMER_ENQUEUE_MS; a cancel is a record in `rmq_sys_wheel_timer` carrying TIMER_DEL_UNIQKEY and the original's
UNIQ_KEY. A message whose deliver time had passed at send is stored straight into its topic, without
TIMER_ENQUEUE_MS: it never went through the wheel and is no event.

RocketMQ 4.x's delay levels (store CommitLog.putMessage, ScheduleMessageService.messageTimeup): a message with
DELAY is stored in `SCHEDULE_TOPIC_XXXX` (queue level - 1) with REAL_TOPIC and REAL_QID, its consume-queue unit's
tag code the deliver time the broker computed (store time + the level's delay); when due, a copy is stored in its
real topic whose properties are the scheduled record's (DELAY, REAL_TOPIC and REAL_QID still in them: the broker
writes the properties string before it clears DELAY), same UNIQ_KEY.

Left out: messages whose real topic is a system topic (`rmq_sys_`: 5.x POP's checkpoints, which the wheel carries
to the revive log) or a retry or dead-letter topic (a consumer's retries go through the same queues, several per
UNIQ_KEY): they are no scheduled message a producer sent."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ledgers.report_bars import stacked_bars, states_in_words
from jobs.ledgers.spark_io import write_ledger_table
from jobs.policy import report_damage
from schemas.log.layout import LMQ_PREFIX

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

# `plan` below is a jobs.plan.replay_plan.ReplayPlan, `out` a jobs.task.split_task.Pieces (or explain's audit) and
# `planned` a jobs.plan.cluster.ClusterPlan: of layers above the ledgers (setup.cfg [importlinter]), so typed Any here

WHEEL_TOPIC = "rmq_sys_wheel_timer"  # 5.x TimerMessageStore.TIMER_TOPIC
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # 4.x TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
NOT_SCHEDULED = ("rmq_sys_", "%RETRY%", "%DLQ%")  # real topics of records that are no producer's timer message
SCHEDULED, DELIVERED, CANCEL = "scheduled", "delivered", "cancel"
TIMER_EVENT_SCHEMA = pa.schema([
    ("uniq_key", pa.string()), ("kind", pa.string()), ("real_topic", pa.string()), ("real_queue_id", pa.int32()),
    ("deliver_ms", pa.int64()), ("store_timestamp", pa.int64()), ("commitlog_offset", pa.int64()),
    ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
])
# Long.parseLong / Integer.parseInt of what TimerMessageStore reads (a sign, then digits; at most what never
# overflows: 18 digits of epoch ms, 9 of a queue id)
_LONG = r"^[+-]?[0-9]{1,18}$"
_INT = r"^[+-]?[0-9]{1,9}$"


def timer_topics(topics_present: Collection[str], narrowed: Collection[str] = ()) -> set[str]:
    """The topics the ledger reads whatever the subscriptions: the timer wheel's (5.x), when the store has it and
    --topics (`narrowed`) does not leave it out. Not 4.x's SCHEDULE_TOPIC_XXXX: a broker lists its 18 queues in
    topics.json and writes only those of the levels used, so reading it unasked would rebuild (walk the whole
    commit log for) or, under --units-from consumequeue, refuse every run of such a store; its records are
    events when the run reads it (a subscription of it)."""
    return {WHEEL_TOPIC} if WHEEL_TOPIC in topics_present and (not narrowed or WHEEL_TOPIC in narrowed) else set()


def timer_events(plan: Any, topic: str, messages: pa.Table, out: Any, units: pa.Table | None = None) -> pa.Table | None:
    """The TIMER_EVENT_SCHEMA rows of a decoded batch of `topic` (None when it holds none); `units`: the batch's
    consume-queue units, row for row (a 4.x scheduled record's deliver time is its unit's tag code; None: unknown,
    as for explain, which reads records, not units). A wheel
    record the wheel itself could not read (no REAL_TOPIC, a TIMER_OUT_MS or REAL_QID that is not a number) is
    damaged data under the corruption policy: the run stops, or (--on-corrupt skip) it is audited and left out of
    the ledger; its groups still decide it, as the broker delivers it to a consumer of the wheel topic."""
    props = messages.column("properties")
    wheel = topic in (WHEEL_TOPIC, SCHEDULE_TOPIC)
    if wheel:
        rows = np.arange(messages.num_rows)
        cancel = pc.is_valid(_lookup(props, "TIMER_DEL_UNIQKEY")).to_numpy(zero_copy_only=False)
    elif not _may_hold(props, ("TIMER_ENQUEUE_MS", "DELAY")):
        return None
    else:
        copied = pc.or_(pc.is_valid(_lookup(props, "TIMER_ENQUEUE_MS")),
                        pc.and_(pc.is_valid(_lookup(props, "DELAY")), pc.is_valid(_lookup(props, "REAL_TOPIC"))))
        rows = np.flatnonzero(copied.to_numpy(zero_copy_only=False))
        cancel = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return None
    take = None if len(rows) == messages.num_rows else pa.array(rows)
    sel = messages if take is None else messages.take(take)
    props = sel.column("properties")
    real_topic = _lookup(props, "REAL_TOPIC")
    if topic == SCHEDULE_TOPIC:  # the broker's own deliver time, kept in the unit (unknown without it)
        tags = pa.nulls(len(rows), pa.int64()) if units is None else \
            units.column("tags_code") if take is None else units.column("tags_code").take(take)
        out_ms, out_ok = tags, np.ones(len(rows), dtype=bool)
    else:
        out_ms, out_ok = _number(_lookup(props, "TIMER_OUT_MS"), _LONG, pa.int64())
        out_ok |= topic != WHEEL_TOPIC  # a delivered copy tells its due time where it can
    qid, qid_ok = _number(_lookup(props, "REAL_QID"), _INT, pa.int32())
    has_topic = pc.is_valid(real_topic).to_numpy(zero_copy_only=False)
    bad = ~(has_topic & out_ok & qid_ok) if wheel else np.zeros(len(rows), dtype=bool)
    if bad.any():
        _audit(plan, out, sel, bad, has_topic, out_ok)
    foreign = pc.fill_null(pc.starts_with(real_topic, NOT_SCHEDULED[0]), False).to_numpy(zero_copy_only=False)
    for prefix in NOT_SCHEDULED[1:]:
        foreign |= pc.fill_null(pc.starts_with(real_topic, prefix), False).to_numpy(zero_copy_only=False)
    keep = ~bad & ~foreign
    if not keep.any():
        return None
    n = len(rows)
    kind = np.full(n, SCHEDULED if wheel else DELIVERED, dtype=object)
    kind[cancel] = CANCEL
    uniq = pc.coalesce(_lookup(props, "UNIQ_KEY"), sel.column("msg_id"))
    events = pa.table([uniq, pa.array(kind, pa.string()), real_topic, qid, pc.cast(out_ms, pa.int64()),
                       sel.column("store_timestamp"), sel.column("commitlog_offset"), sel.column("queue_id"),
                       sel.column("queue_offset")], schema=TIMER_EVENT_SCHEMA)
    return events if keep.all() else events.filter(pa.array(keep))


def _may_hold(props, names):
    """Whether any message of the batch may have one of the property names: a compare of the batch's property
    names (0.5 ms per 65,536 messages, where a lookup per message costs 15), a superset where a chunk is a slice.
    Most batches of most topics hold no timer message."""
    for chunk in props.chunks:
        keys = chunk.keys
        if any(pc.any(pc.equal(keys, name)).as_py() for name in names):
            return True
    return False


def _lookup(props, name):
    """The property's value per row (null where absent; a repeated name's last value, as a HashMap keeps)."""
    return pc.map_lookup(props, pa.scalar(name), "last")


def _number(values, pattern, type_):
    """(the values parsed where they are numbers, null elsewhere; where they are numbers)."""
    ok = pc.fill_null(pc.match_substring_regex(values, pattern), False)
    parsed = pc.cast(pc.if_else(ok, pc.utf8_ltrim(values, characters="+"), pa.scalar(None, pa.string())), type_)
    return parsed, ok.to_numpy(zero_copy_only=False)


def _audit(plan, out, sel, bad, has_topic, out_ok):
    """The wheel records at `bad` to the corruption policy (jobs/task/split_decode.py's, by its own function):
    the run stops, or they are audit/corrupt rows, still decided for the groups (not counted as skipped)."""
    reasons = np.where(~has_topic, "timer record without REAL_TOPIC",
                       np.where(~out_ok, "timer record whose TIMER_OUT_MS is not a number",
                                "timer record whose REAL_QID is not a number"))
    paths = np.array([plan.log.file_at(int(o)).path for o in sel.column("commitlog_offset").to_numpy()], dtype=object)
    rows = np.flatnonzero(bad)
    for reason, path in sorted({(reasons[i], paths[i]) for i in rows}):
        at = rows[(reasons[rows] == reason) & (paths[rows] == path)]
        report_damage(plan, out, sel, at, f"{reason}: left out of the timer ledger", path, kept=True)


def add_timer_pieces(plan: Any, topic: str, units: pa.Table | None, messages: pa.Table, out: Any) -> None:
    """A decoded batch's `timer_event` piece (when it holds any) and its `timer_clock` (the latest store time
    it holds: overdue timers are counted against the latest record the run read)."""
    if not messages.num_rows:
        return
    if topic.startswith(LMQ_PREFIX):  # an LMQ queue's records are its source topics' (multi-dispatch): their
        return  # events come from the batches of those topics, once
    events = timer_events(plan, topic, messages, out, units)
    if events is not None:
        out.add("timer_event", events)
    out.add("timer_clock", int(pc.max(messages.column("store_timestamp")).as_py()))


def fate(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ledger row (jobs/ledgers/timer.LEDGER_SCHEMA's columns but broker) of one message's events (dicts
    of TIMER_EVENT_SCHEMA, a handful: explain --key's), by the rules the job's Spark step pairs them with: the
    first scheduled record, delivered copy and cancel marker in commit-log order; delivered over cancelled over
    pending."""
    first: dict[str, Mapping[str, Any]] = {}
    for e in sorted(events, key=lambda e: e["commitlog_offset"]):
        first.setdefault(e["kind"], e)
    s, d, c = (first.get(k) for k in (SCHEDULED, DELIVERED, CANCEL))
    known = [x for x in (s, d, c) if x is not None]

    def pick(name: str) -> Any:
        return next((x[name] for x in known if x[name] is not None), None)
    deliver_ms = pick("deliver_ms")
    return {"uniq_key": known[0]["uniq_key"], "real_topic": pick("real_topic"), "real_queue_id": pick("real_queue_id"),
            "deliver_ms": deliver_ms, "state": "delivered" if d else "cancelled" if c else "pending",
            "scheduled_store_timestamp": s and s["store_timestamp"],
            "scheduled_commitlog_offset": s and s["commitlog_offset"],
            "delivered_store_timestamp": d and d["store_timestamp"], "delivered_queue_offset": d and d["queue_offset"],
            "delivered_commitlog_offset": d and d["commitlog_offset"],
            "cancelled_store_timestamp": c["store_timestamp"] if c and not d else None,
            "lag_ms": d["store_timestamp"] - deliver_ms if d and deliver_ms is not None else None}


TIMERS = "timers"
TIMER_EVENTS = "_timer_events"  # a run's timer events, until the driver has paired them into timers/
DELIVERED_STATE, PENDING, CANCELLED = "delivered", "pending", "cancelled"
LEDGER_SCHEMA = pa.schema([
    ("uniq_key", pa.string()), ("real_topic", pa.string()), ("real_queue_id", pa.int32()), ("deliver_ms", pa.int64()),
    ("state", pa.string()), ("scheduled_store_timestamp", pa.int64()), ("scheduled_commitlog_offset", pa.int64()),
    ("delivered_store_timestamp", pa.int64()), ("delivered_queue_offset", pa.int64()),
    ("delivered_commitlog_offset", pa.int64()), ("cancelled_store_timestamp", pa.int64()), ("lag_ms", pa.int64()),
    ("broker", pa.string()),
])
COUNT_FIELDS = ("delivered", "pending", "cancelled", "overdue", "overdue_by_wheel", "lag_ms_median", "lag_ms_max")


def write_ledger(
        spark: SparkSession, out_uri: str, where: tuple[pafs.FileSystem, str], written: dict[str, tuple[int, int, int]],
        reads: Reads, overdue_ms: int, held: DataFrame | None = None, event_files: Sequence[str] = ()
) -> tuple[dict[str, tuple[int, int, int]], list[dict[str, Any]]]:
    """OUT/timers/ from the run's committed timer events (`written`: the sink's {output: (files, rows, bytes)}),
    then the events removed (`where`: OUT's (filesystem, path)). Returns ({output: (files, rows, bytes)} of
    timers/, the counts per (broker, real topic): count_rows' rows). `reads`: what the run read of each broker
    (Reads); a pending timer of a topic it read due more than `overdue_ms` before its latest record is overdue.
    `held`: a DataFrame of the ledger rows a table holds (Iceberg: jobs/sinks/iceberg/ledger_tables.py), merged with the
    run's. No row at all: a table of no row. `event_files`: the events' parts where the commit left them
    (relative to OUT: an object store's attempts, each read where it is, never copied); default timer events/."""
    return write_ledger_table(spark, out_uri, where, written, {TIMER_EVENTS: TIMER_EVENT_SCHEMA}, TIMERS,
                              LEDGER_SCHEMA, pair, merged, lambda rows: count_rows(rows, reads, overdue_ms), held,
                              event_files)


def pair(events: DataFrame) -> DataFrame:
    """The ledger (LEDGER_SCHEMA's columns) of a DataFrame of timer events: per (broker, UNIQ_KEY) its first
    scheduled record, delivered copy and cancel marker (the first in commit-log order: a message parked beyond
    the roll window is stored again in the wheel, one message still), joined. Delivered wins over a cancel that
    came too late; a copy or marker whose scheduled record the run did not read (retention, the window) is a
    row with what it tells."""
    from pyspark.sql import functions as F

    def first_of(kind: str, name: str, fields: Sequence[str]) -> DataFrame:
        return events.where(F.col("kind") == kind).groupBy("broker", "uniq_key").agg(
            F.min_by(F.struct(*fields), F.col("commitlog_offset")).alias(name))

    common = ["real_topic", "real_queue_id", "deliver_ms", "store_timestamp", "commitlog_offset"]
    keys = ["broker", "uniq_key"]
    joined = first_of(SCHEDULED, "s", common) \
        .join(first_of(DELIVERED, "d", common + ["queue_offset"]), keys, "full") \
        .join(first_of(CANCEL, "c", common), keys, "full")
    return settled(joined.select(
        "broker", "uniq_key",
        *(F.coalesce(*(F.col(f"{side}.{name}") for side in "sdc")).alias(name)
          for name in ("real_topic", "real_queue_id", "deliver_ms")),
        F.col("s.store_timestamp").alias("scheduled_store_timestamp"),
        F.col("s.commitlog_offset").alias("scheduled_commitlog_offset"),
        F.col("d.store_timestamp").alias("delivered_store_timestamp"),
        F.col("d.queue_offset").alias("delivered_queue_offset"),
        F.col("d.commitlog_offset").alias("delivered_commitlog_offset"),
        F.col("c.store_timestamp").alias("cancelled_store_timestamp")))


KNOWN = ("real_topic", "real_queue_id", "deliver_ms", "scheduled_store_timestamp", "scheduled_commitlog_offset",
         "delivered_store_timestamp", "delivered_queue_offset", "delivered_commitlog_offset",
         "cancelled_store_timestamp")


def merged(old: DataFrame, new: DataFrame) -> DataFrame:
    """Ledger rows of two runs (an Iceberg table's and a night's) as one row per (broker, UNIQ_KEY): each
    column what the night tells, else what the table held (a pending row's scheduled record and a later
    night's delivered copy), the state settled again. Merging a night twice gives the same rows."""
    from pyspark.sql import functions as F

    both = old.alias("o").join(new.alias("n"), ["broker", "uniq_key"], "full")
    return settled(both.select("broker", "uniq_key", *(F.coalesce(F.col(f"n.{name}"), F.col(f"o.{name}")).alias(name)
                                                       for name in KNOWN)))


def settled(rows: DataFrame) -> DataFrame:
    """LEDGER_SCHEMA's columns of rows holding what is known (KNOWN, broker, uniq_key): delivered when a copy
    was delivered (a cancel that came too late then counts for nothing), else cancelled when a marker was
    stored, else pending; the lag of a delivered one."""
    from pyspark.sql import functions as F

    delivered = F.col("delivered_store_timestamp").isNotNull()
    state = F.when(delivered, DELIVERED_STATE).when(F.col("cancelled_store_timestamp").isNotNull(), CANCELLED) \
        .otherwise(PENDING)
    columns = {"state": state.alias("state"),
               "cancelled_store_timestamp": F.when(~delivered, F.col("cancelled_store_timestamp"))
               .alias("cancelled_store_timestamp"),
               "lag_ms": (F.col("delivered_store_timestamp") - F.col("deliver_ms")).alias("lag_ms")}
    return rows.select(*(columns.get(name, F.col(name)) for name in LEDGER_SCHEMA.names))


def count_rows(ledger: DataFrame, reads: Reads, overdue_ms: int) -> list[dict[str, Any]]:
    """Per (broker, real topic): delivered, pending, cancelled, overdue (pending, of a topic the run read, due
    more than overdue_ms before the latest record the run read of its broker, or before the wheel's own read time:
    `reads`), overdue_by_wheel (those of them due before the wheel's read time, config/timercheck's lastReadTimeMs:
    slots the wheel dequeued without delivering them, lost by the wheel), the delivery lag's exact
    median and max (ms; null without a delivered row), and `copies_looked_for` (whether the run read the real
    topic, where a delivered copy would be). Small: a row per real topic, collected."""
    from pyspark.sql import functions as F

    state = F.col("state")
    pairs = [F.lit(x) for broker, last in sorted(reads.clocks.items()) for x in (broker, last - overdue_ms)]
    due_before = F.element_at(F.create_map(*pairs), F.col("broker")) if pairs else F.lit(None).cast("long")
    passed = [F.lit(x) for broker, read_ms in sorted(reads.wheel.items()) for x in (broker, read_ms)]
    wheel_read = F.element_at(F.create_map(*passed), F.col("broker")) if passed else F.lit(None).cast("long")
    topics = [x for broker, names in sorted(reads.topics.items())
              for x in (F.lit(broker), F.array(*(F.lit(t) for t in sorted(names))).cast("array<string>"))]
    read = F.coalesce(F.array_contains(F.element_at(F.create_map(*topics), F.col("broker")), F.col("real_topic")),
                      F.lit(False)) if topics else F.lit(False)
    rows = ledger.groupBy("broker", "real_topic").agg(
        F.sum((state == DELIVERED_STATE).cast("long")).alias("delivered"),
        F.sum((state == PENDING).cast("long")).alias("pending"),
        F.sum((state == CANCELLED).cast("long")).alias("cancelled"),
        F.sum(((state == PENDING) & read & F.coalesce((F.col("deliver_ms") < due_before)
                                                      | (F.col("deliver_ms") < wheel_read), F.lit(False)))
              .cast("long")).alias("overdue"),
        F.sum(((state == PENDING) & read & F.coalesce(F.col("deliver_ms") < wheel_read, F.lit(False)))
              .cast("long")).alias("overdue_by_wheel"),
        F.percentile(F.col("lag_ms"), F.lit(0.5)).alias("lag_ms_median"),
        F.max("lag_ms").alias("lag_ms_max")).collect()
    return sorted(({"broker": r["broker"], "real_topic": r["real_topic"],
                    **{k: (None if r[k] is None else int(r[k]) if k != "lag_ms_median" else float(r[k]))
                       for k in COUNT_FIELDS},
                    "copies_looked_for": r["real_topic"] in reads.topics.get(r["broker"], ())} for r in rows),
                  key=lambda r: (r["broker"] or "", r["real_topic"] or ""))


@dataclass(frozen=True)
class Reads:
    """What a run read of each broker: the latest store time of its records, its topics, and its timer wheel's
    read time (config/timercheck's lastReadTimeMs) where the run read the wheel and its checkpoint is sound."""

    clocks: dict  # {broker: epoch ms}
    topics: dict  # {broker: frozenset of topic names}
    wheel: dict = field(default_factory=dict)  # {broker: epoch ms}


def timer_reads(reports: Iterable[Mapping[str, Any]], planned: Any) -> Reads:
    """Reads of a run: the clocks from the tasks' `timer_clock` rows, the topics and the wheel's read time from
    each broker's plan."""
    clocks: dict[str | None, int] = {}
    for r in reports:
        if r["kind"] == "timer_clock":
            clocks[r["broker"]] = max(clocks.get(r["broker"], r["last"]), r["last"])
    return Reads(clocks, {b.name: frozenset(t for t, *_ in part.ranges) for b, part in planned.parts},
                 {b.name: part.plan.timer_wheel_read for b, part in planned.parts
                  if part.plan.timer_wheel_read is not None})


def timers_summary(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `timers`: the counts per (broker, real topic) and their totals (the lag's largest)."""
    lags = [r["lag_ms_max"] for r in counts if r["lag_ms_max"] is not None]
    summed = ("delivered", "pending", "cancelled", "overdue", "overdue_by_wheel")
    totals = {k: sum(r[k] for r in counts) for k in summed}
    return {"topics": counts, "totals": dict(totals, lag_ms_max=max(lags) if lags else None)}


STATE_WORDS = {  # what each state means, as the report says it
    DELIVERED_STATE: ("#2e7d32", "delivered: the wheel put the message into its real topic when it was due; the lag "
                      "is how late"),
    PENDING: ("#5c6bc0", "pending: still in the wheel when the store (or the run's window) ended, due later; overdue "
              "when its due time is long past (a stuck wheel), lost by the wheel when due before the wheel's own "
              "read time (config/timercheck)"),
    CANCELLED: ("#b0bec5", "cancelled: a delete marker (TIMER_DEL_UNIQKEY) took it out of the wheel before it was "
                "due; no consumer got it"),
}


def report_section(timers: Mapping[str, Any] | None, escape: Callable[[Any], str]) -> str:
    """The report's section (HTML) of summary.json's `timers`: the states in words, a stacked bar per (broker,
    real topic) and the counts' table; "" without any. `escape`: the report's HTML escape."""
    topics = (timers or {}).get("topics") or []
    if not topics:
        return ""
    assert timers is not None  # its topics are
    out = ["<h2>Timer messages per real topic (OUT/timers/)</h2>",
           states_in_words(timers["totals"], STATE_WORDS, escape),
           stacked_bars({(t["broker"] or "", t["real_topic"] or ""): t for t in topics}, STATE_WORDS, escape),
           "<table><tr><th>real topic</th><th>broker</th><th>delivered</th><th>pending</th><th>cancelled</th>"
           "<th>overdue</th><th>lag median (ms)</th><th>lag max (ms)</th></tr>"]
    out += [f"<tr><td>{escape(t['real_topic'])}</td><td class=\"t\">{escape(t['broker'])}</td><td>{t['delivered']}"
            f"</td><td>{t['pending']}</td><td>{t['cancelled']}</td><td>{t['overdue']}</td>"
            f"<td>{escape(t['lag_ms_median'])}</td><td>{escape(t['lag_ms_max'])}</td></tr>" for t in topics]
    return "".join(out) + "</table>\n"


def overdue_warnings(counts: Iterable[Mapping[str, Any]], overdue_ms: int) -> list[str]:
    """The operator's alarm: pending timers due well before the latest record read (a stuck wheel); and the
    pending ones whose real topic the run did not read (their state is only what the wheel's records tell)."""
    out = []
    unread = sorted({r["real_topic"] for r in counts if r["pending"] and not r["copies_looked_for"]})
    if unread:
        out.append(f"timer ledger: the run did not read {', '.join(unread[:5])}{' ...' if len(unread) > 5 else ''}, "
                   "real topics of pending timer messages: their delivered copies were not looked for (give a "
                   "subscription of those topics to see them delivered)")
    for r in counts:
        wheel = r.get("overdue_by_wheel") or 0
        late = r["overdue"] - wheel
        if late:
            out.append(f"timer wheel: {late} message(s) of {r['real_topic']} (broker {r['broker']}) still "
                       f"pending more than {overdue_ms / 1000:g} s after their due time (OUT/timers/, state "
                       "pending): is the broker's timer wheel stuck?")
        if wheel:
            out.append(f"timer wheel: {wheel} message(s) of {r['real_topic']} (broker {r['broker']}) still pending "
                       "though due before the wheel's own read time (config/timercheck lastReadTimeMs: the wheel "
                       "passed their slots without delivering them): lost by the wheel (OUT/timers/, state pending)")
    return out
