"""The timer ledger's events of one decoded batch (docs/output.md, "The timer ledger"): which records are a timer
message scheduled in the wheel, a cancel marker, or a copy the wheel delivered, with what the ledger joins them on
(the UNIQ_KEY). Task side: a part per split (`timer_event` pieces); the driver's Spark step pairs them
(jobs/ledgers/timer_ledger.py).

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
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.policy import report_damage
from schemas.log.layout import LMQ_PREFIX

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


def timer_topics(topics_present, narrowed=()):
    """The topics the ledger reads whatever the subscriptions: the timer wheel's (5.x), when the store has it and
    --topics (`narrowed`) does not leave it out. Not 4.x's SCHEDULE_TOPIC_XXXX: a broker lists its 18 queues in
    topics.json and writes only those of the levels used, so reading it unasked would rebuild (walk the whole
    commit log for) or, under --units-from consumequeue, refuse every run of such a store; its records are
    events when the run reads it (a subscription of it)."""
    return {WHEEL_TOPIC} if WHEEL_TOPIC in topics_present and (not narrowed or WHEEL_TOPIC in narrowed) else set()


def timer_events(plan, topic, messages, out, units=None):
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


def add_timer_pieces(plan, topic, units, messages, out):
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


def fate(events):
    """The ledger row (jobs/ledgers/timer_ledger.LEDGER_SCHEMA's columns but broker) of one message's events (dicts
    of TIMER_EVENT_SCHEMA, a handful: explain --key's), by the rules the job's Spark step pairs them with: the
    first scheduled record, delivered copy and cancel marker in commit-log order; delivered over cancelled over
    pending."""
    first = {}
    for e in sorted(events, key=lambda e: e["commitlog_offset"]):
        first.setdefault(e["kind"], e)
    s, d, c = (first.get(k) for k in (SCHEDULED, DELIVERED, CANCEL))
    known = [x for x in (s, d, c) if x is not None]

    def pick(name):
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
