"""Find a message by key and say who got it: `python -m jobs.explain --key K`. The messages that carry K (a KEYS
token or the UNIQ_KEY) are found through the broker's index, or a scan where it cannot answer
(schemas/key_lookup.py); each one's unit is read where explain reads units (jobs/explain/question.py) and every
group subscribed to its topic gets the decision the job makes (question.decide), one row per (message, group);
a POP group's row carries the message's POP history (`pop`: jobs/explain/pop_history.py).
"""
import sys

from filtering import decision as D
from jobs.errors import ExplainError
from jobs.explain.pop_history import history_lines, pop_histories
from jobs.explain.question import decide, read_queue_units
from jobs.explain.report import VERDICTS
from jobs.pipeline.timer_events import fate, timer_events
from schemas import layout as L
from schemas.key_lookup import locate_keys, store_topics
from schemas.lookup import read_records, record_size_at

NO_UNIT = ("no_unit", "the consume queue holds no unit of it (a transaction's half message, or a unit lost): "
                      "no consumer is given it")
NO_GROUP = ("no_subscription", "no group subscribes to its topic")
NOT_COMPILED = ("does_not_compile", "the group's expression does not compile: the broker refuses the subscription")


def topics_of(ctx):
    """Every topic the store may hold a message of (schemas/key_lookup.store_topics), the subscriptions' and
    their groups' retry and dead-letter topics included."""
    return store_topics(ctx.fs, ctx.root, set(ctx.topic_configs) | {c.sub.topic for c in ctx.compiled},
                        {c.sub.group for c in ctx.compiled})


def find(ctx, key, topic=None, window=None, group=None):
    """(rows, found): one JSON-ready dict per (message, group subscribed to its topic) for the messages that carry
    `key` (of `topic` alone when given; the window's store times), in commit-log order; a message no group
    subscribes to has one row with group None. found: the schemas.key_lookup.Found (scans, damaged files)."""
    bounds = (window.since, window.until) if window is not None else None
    topics = [topic] if topic else sorted(topics_of(ctx))
    found = locate_keys(ctx.fs, ctx.root, ctx.commitlog, [key], topics, bounds)
    rows = []
    by_queue = {}
    for m in found.messages.select(["topic", "queue_id", "queue_offset", "commitlog_offset", "sys_flag"]).to_pylist():
        if m["sys_flag"] & L.TRANSACTION_MASK == L.TRANSACTION_PREPARED:  # a half message: dispatched to no queue
            rows += _without_unit(ctx, m, group)
        else:
            by_queue.setdefault((m["topic"], m["queue_id"]), []).append(m)
    order = {m["commitlog_offset"]: i for i, m in
             enumerate(found.messages.select(["commitlog_offset"]).to_pylist())}
    for (t, q), messages in by_queue.items():
        rows += _verdicts(ctx, t, q, messages, window, group)
    rows.sort(key=lambda r: (order[r["commit_log_offset"]], r["group"] or ""))
    fates = timer_fates(ctx, found.messages)
    for r in rows:
        if r["uniq_key"] in fates:
            r["timer"] = fates[r["uniq_key"]]
    histories = pop_histories(ctx, found.messages)
    for r in rows:
        mine = histories.get((r["topic"], r["queue_id"], r["queue_offset"]), {})
        if r["group"] in mine:
            r["pop"] = mine[r["group"]]
    return rows, found


def timer_fates(ctx, messages):
    """{UNIQ_KEY: its timer ledger row} of the timer messages among the records found (their scheduled record,
    delivered copy, cancel marker: jobs/pipeline/timer_events.py), by the rules of the job's OUT/timers/. A
    wheel record the wheel cannot read is damaged data under the corruption policy, as in a run."""
    events = []
    topics = messages.column("topic").to_pylist()
    for topic in sorted(set(topics)):
        rows = [i for i, t in enumerate(topics) if t == topic]
        found = timer_events(ctx.plan, topic, messages.take(rows), _Audited())
        events += found.to_pylist() if found is not None else []
    by_key = {}
    for e in events:
        by_key.setdefault(e["uniq_key"], []).append(e)
    return {key: fate(group) for key, group in by_key.items()}


class _Audited:
    """Where timer_events puts what it audits under --on-corrupt skip: explain's answer leaves those records out
    of a fate, as the job leaves them out of its ledger."""

    def add(self, kind, piece):
        for row in piece.to_pylist():
            print(f"note: {row['file']} offset {row['offset']}: {row['reason']}", file=sys.stderr)


def _verdicts(ctx, topic, queue_id, found, window, group):
    """The rows of the messages found in one queue: every subscribed group's decision over their units."""
    subs = [c for c in ctx.compiled if c.sub.topic == topic and (group is None or c.sub.group == group)]
    try:
        units, messages = read_queue_units(ctx, topic, queue_id, [m["queue_offset"] for m in found])
    except ExplainError:
        if len(found) > 1:  # one message without a unit: decide the others together, that one apart
            return [r for m in found for r in _verdicts(ctx, topic, queue_id, [m], window, group)]
        return _without_unit(ctx, found[0], group)
    records = messages.to_pylist()
    if not subs:
        return [_row(r, None, None, None, NO_GROUP) for r in records]
    rows = []
    for c in subs:
        if c.error:
            rows += [_row(r, c.sub.group, False, None, NOT_COMPILED) for r in records]
            continue
        q = decide(ctx, c, units, messages, window)
        for i, r in enumerate(records):
            code = q.reason(i)
            rows.append(_row(r, c.sub.group, code == D.DELIVERED, q.stage(i), VERDICTS[code]))
    return rows


def _without_unit(ctx, m, group):
    """The rows of a message the consume queue holds no unit of: no group is given it."""
    record = read_records(ctx.fs, ctx.commitlog, [m["commitlog_offset"]],
                          [record_size_at(ctx.fs, ctx.commitlog, m["commitlog_offset"])]).to_pylist()[0]
    subs = [c for c in ctx.compiled if c.sub.topic == m["topic"] and (group is None or c.sub.group == group)]
    return [_row(record, c.sub.group, False, None, NO_UNIT) for c in subs] or [_row(record, None, None, None, NO_GROUP)]


def _row(record, group, delivered, stage, reason):
    properties = dict(record["properties"] or [])
    return {"topic": record["topic"], "queue_id": record["queue_id"], "queue_offset": record["queue_offset"],
            "msg_id": record["msg_id"], "commit_log_offset": record["commitlog_offset"], "group": group,
            "delivered": delivered, "stage": stage, "reason": reason[0], "verdict": reason[1],
            "keys": record["keys"], "uniq_key": properties.get("UNIQ_KEY"), "tags": record["tags"],
            "store_timestamp": record["store_timestamp"]}


def notes(found):
    """stderr lines: what was scanned instead of read through the index, and which index files are damaged."""
    lines = [f"damaged index file {path}: {problem}; its span is scanned instead" for path, problem in found.damaged]
    for lo, hi, why, n in found.scanned:
        if why == "past the index's end" and n <= 1:
            continue  # the index's last record itself: nothing past the index
        to = "the log's end" if hi is None else f"offset {hi}"
        lines.append(f"scanned the commit log from offset {lo} to {to} ({why}): {n} records")
    return lines


def render(rows):
    """The answer as text: a line per message (its broker first when the rows come from several), then a line
    per group's verdict."""
    lines, last, timers = [], None, set()
    several = len({r.get("broker") for r in rows}) > 1
    for r in rows:
        if (r.get("broker"), r["commit_log_offset"]) != last:
            last = (r.get("broker"), r["commit_log_offset"])
            lines.append(f"{r['broker'] + ' ' if several else ''}{r['topic']} queue {r['queue_id']} offset "
                         f"{r['queue_offset']}: msgId {r['msg_id']}, commit-log offset {r['commit_log_offset']}, "
                         f"storeTimestamp {r['store_timestamp']}, keys {r['keys']!r}, UNIQ_KEY {r['uniq_key']}")
            if r.get("timer") and r["uniq_key"] not in timers:
                timers.add(r["uniq_key"])
                lines.append(f"  {timer_line(r['timer'])}")
        outcome = "DELIVERED" if r["delivered"] else f"NOT DELIVERED ({r['reason']})"
        lines.append(f"  {r['group']}: {outcome}" if r["group"] is not None else f"  {r['verdict']}")
        if r.get("pop"):
            lines += history_lines({r["group"]: r["pop"]})
    return lines or ["no message carries the key"]


def timer_line(t):
    """A timer message's fate in words: scheduled at, due at, then delivered at (where, how late), pending, or
    cancelled at."""
    scheduled = (f"scheduled at {t['scheduled_store_timestamp']}" if t["scheduled_store_timestamp"] is not None
                 else "its scheduled record not found")
    head = f"timer message to {t['real_topic']} queue {t['real_queue_id']}: {scheduled}, due at {t['deliver_ms']}"
    if t["state"] == "delivered":
        return (f"{head}, delivered at {t['delivered_store_timestamp']} (queue offset {t['delivered_queue_offset']}, "
                f"{t['lag_ms']} ms after its due time)")
    if t["state"] == "cancelled":
        return f"{head}, cancelled at {t['cancelled_store_timestamp']}"
    return f"{head}, pending (no delivered copy found)"
