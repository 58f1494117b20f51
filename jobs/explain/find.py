"""Find a message by key and say who got it: `python -m jobs.explain --key K`. The messages that carry K (a KEYS
token or the UNIQ_KEY) are found through the broker's index, or a scan where it cannot answer
(schemas/index/key_lookup.py); each one's unit is read where explain reads units (jobs/explain/question.py) and every
group subscribed to its topic gets the decision the job makes (question.decide), one row per (copy, group): the
message in its topic, its LMQ copies, a BatchCQ batch's record or inner message (jobs/explain/copies.py), the
timer's records named by the ledger's events; a POP group's row carries the message's POP history (`pop`:
jobs/explain/pop_history.py).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from filtering import decision as D
from jobs.errors import ExplainError
from jobs.explain import copies
from jobs.explain.pop_history import history_lines, pop_histories
from jobs.explain.question import decide, events_per_topic, read_queue_units
from jobs.explain.report import VERDICTS
from jobs.explain.times import ms_text, with_iso
from jobs.explain.traces import attempt_lines, not_traces, published_lines, trace_timelines, traced_row
from jobs.explain.transaction_history import transaction_histories, transaction_line
from jobs.ledgers.timer import CANCEL, DELIVERED, SCHEDULED, fate, timer_events
from schemas.index.key_lookup import locate_keys, store_topics
from schemas.log import layout as L
from schemas.log.lookup import read_records, record_size_at
from schemas.log.multi_dispatch import is_lmq

if TYPE_CHECKING:
    from jobs.explain.question import Context
    from jobs.plan.window import Window
    from schemas.index.key_lookup import Found

NO_UNIT = ("no_unit", "the consume queue holds no unit of it (a transaction's half message, or a unit lost): "
                      "no consumer is given it")
NO_GROUP = ("no_subscription", "no group subscribes to its topic")
TIMER_TIMES = ("deliver_ms", "scheduled_store_timestamp", "delivered_store_timestamp", "cancelled_store_timestamp")
TIMER_COPIES = {SCHEDULED: "timer_scheduled", DELIVERED: "timer_delivered", CANCEL: "recall_marker"}
NOT_COMPILED = ("does_not_compile", "the group's expression does not compile: the broker refuses the subscription")


def topics_of(ctx: Context) -> set[str]:
    """Every topic the store may hold a message of (schemas/index/key_lookup.store_topics), the subscriptions' and
    their groups' retry, POP retry and dead-letter topics included."""
    return store_topics(ctx.fs, ctx.root, set(ctx.topic_configs) | {c.sub.topic for c in ctx.compiled}
                        | copies.pop_retry_topics(ctx.compiled), {c.sub.group for c in ctx.compiled})


def find(ctx: Context, key: str, topic: str | None = None, window: Window | None = None,
         group: str | None = None) -> tuple[list[dict[str, Any]], Found, list[str]]:
    """(rows, found, notes): one JSON-ready dict per (copy of a message that carries `key`, group subscribed to
    the copy's topic), of `topic` alone when given, stored in the window, in commit-log order (a record's own
    topic before its LMQ copies); a copy no group subscribes to has one row with group None. A copy is the
    record in its topic, each LMQ queue multi-dispatch put it in, a BatchCQ batch's record or inner message
    (jobs/explain/copies.py). found: the schemas.index.key_lookup.Found (scans, damaged files); notes: what else was
    read."""
    bounds = (window.since, window.until) if window is not None else None
    topics = sorted(topics_of(ctx)) if topic is None or is_lmq(topic) else [topic]
    found = locate_keys(ctx.fs, ctx.root, ctx.commitlog, [key], copies.search_topics(topics, topic), bounds)
    half = (found.messages.column("sys_flag").to_numpy() & L.TRANSACTION_MASK) == L.TRANSACTION_PREPARED
    rows = [r for m in found.messages.filter(pa.array(half)).to_pylist() if topic in (None, m["topic"])
            for r in _without_unit(ctx, m, group)]  # a half message: dispatched to no queue
    places = copies.record_places(found.messages.filter(pa.array(~half)), topic, copies.pop_retry_topics(ctx.compiled))
    inner, notes = copies.inner_places(ctx, key, topics if topic is None else [topic], window)
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in places + inner:
        by_queue.setdefault((p["topic"], p["queue_id"]), []).append(p)
    mine: Any  # a queue's places, then a row's POP histories by group
    for (t, q), mine in by_queue.items():
        rows += _verdicts(ctx, t, q, mine, window, group)
    rows.sort(key=lambda r: (r["commit_log_offset"], r["copy"] == "lmq", r["topic"], r["queue_offset"],
                             r["group"] or ""))
    _label_timers(ctx, rows, found.messages)
    _label_transactions(ctx, rows, found.messages)
    histories = pop_histories(ctx, found.messages)
    for r in rows:
        mine = histories.get((r["topic"], r["queue_id"], r["queue_offset"]), {})
        if r["group"] in mine:
            r["pop"] = _pop_times(mine[r["group"]])
    timelines = trace_timelines(ctx, found.messages)
    rows = not_traces(ctx, rows, key)
    for r in rows:
        if r["uniq_key"] in timelines:
            r["traces"] = timelines[r["uniq_key"]]
    return rows, found, notes


def _pop_times(history):
    """A POP history with its times' ISO-8601 forms beside them."""
    revived = history["revived"] and with_iso(history["revived"], ("revived_store_timestamp",))
    return {**history, "handles": [with_iso(h, ("pop_time", "acked_time")) for h in history["handles"]],
            "revived": revived}


def _label_timers(ctx, rows, messages):
    """Each timer message's row gets `timer`, its ledger row; the wheel's records and the delivered copy are
    named by their event (a recall marker: the record that cancels the timer message)."""
    fates, kinds = timer_fates(ctx, messages)
    for r in rows:
        if r["uniq_key"] in fates:
            r["timer"] = with_iso(fates[r["uniq_key"]], TIMER_TIMES)
        kind = kinds.get(r["commit_log_offset"])
        if kind is not None and r["copy"] == "message":
            r["copy"] = TIMER_COPIES[kind]


def _label_transactions(ctx, rows, messages):
    """Each transactional message's rows get `transaction`, its history (jobs/explain/transaction_history.py); its
    half copies, committed copies and discarded half are named so."""
    histories, kinds = transaction_histories(ctx, messages)
    for r in rows:
        if r["uniq_key"] in histories:
            r["transaction"] = with_iso(histories[r["uniq_key"]], ("born_timestamp", "decided_timestamp"))
        kind = kinds.get(r["commit_log_offset"])
        if kind is not None and r["copy"] == "message":
            r["copy"] = kind


def timer_fates(ctx: Context, messages: pa.Table) -> tuple[dict[str, dict[str, Any]], dict[int, str]]:
    """({UNIQ_KEY: its timer ledger row}, {commit-log offset: event kind}) of the timer messages among the records
    found (their scheduled record, delivered copy, recall marker: jobs/ledgers/timer.py), by the rules of
    the job's OUT/timers/. A wheel record the wheel cannot read is damaged data under the corruption policy, as
    in a run."""
    events = events_per_topic(ctx, messages, timer_events)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_key.setdefault(e["uniq_key"], []).append(e)
    return {key: fate(group) for key, group in by_key.items()}, {e["commitlog_offset"]: e["kind"] for e in events}


def _verdicts(ctx, topic, queue_id, places, window, group):
    """The rows of the places found in one queue: every subscribed group's decision over their units (a batch
    record's over its inner messages: delivered when one of them is)."""
    subs = [c for c in ctx.compiled if c.sub.topic == topic and (group is None or c.sub.group == group)]
    try:
        units, messages = read_queue_units(ctx, topic, queue_id, [o for p in places for o in p["offsets"]])
    except ExplainError:
        if len(places) > 1:  # one place without a unit: decide the others together, that one apart
            return [r for p in places for r in _verdicts(ctx, topic, queue_id, [p], window, group)]
        return _without_unit(ctx, places[0], group)
    records = messages.to_pylist()
    starts = np.cumsum([0] + [len(p["offsets"]) for p in places])
    if not subs:
        return [_row(p, records[s], None, None, None, NO_GROUP) for p, s in zip(places, starts)]
    rows = []
    for c in subs:
        if c.error:
            rows += [_row(p, records[s], c.sub.group, False, None, NOT_COMPILED) for p, s in zip(places, starts)]
            continue
        q = decide(ctx, c, units, messages, window)
        codes = q.decision.reasons()[0]
        for p, lo, hi in zip(places, starts[:-1], starts[1:]):
            delivered = np.flatnonzero(codes[lo:hi] == D.DELIVERED)
            i = int(lo + (delivered[0] if len(delivered) else 0))
            rows.append(_row(p, records[lo], c.sub.group, len(delivered) > 0, q.stage(i), VERDICTS[q.reason(i)]))
    return rows


def _without_unit(ctx, place, group):
    """The rows of a message the consume queue holds no unit of: no group is given it."""
    offset = place["commitlog_offset"]
    size = record_size_at(ctx.fs, ctx.commitlog, offset)
    record = read_records(ctx.fs, ctx.commitlog, [offset], [size]).to_pylist()[0]
    place = {"copy": "message", "copy_of": None, "batch": None, **place}
    subs = [c for c in ctx.compiled if c.sub.topic == place["topic"] and (group is None or c.sub.group == group)]
    return ([_row(place, record, c.sub.group, False, None, NO_UNIT) for c in subs]
            or [_row(place, record, None, None, None, NO_GROUP)])


def _row(place, record, group, delivered, stage, reason):
    """One answer row: where the copy is (the place's), what the record (or inner message) says, the group's
    verdict. A batch record's row shows the record's own KEYS, tags and UNIQ_KEY, not its first inner message's."""
    properties = dict(record.get("batch_properties") if place["copy"] == "batch_record" else record["properties"]
                      or [])
    if place["copy"] == "batch_record":
        record = {**record, "keys": properties.get("KEYS"), "tags": properties.get("TAGS")}
    row = {"topic": place["topic"], "queue_id": place["queue_id"], "queue_offset": place["queue_offset"],
           "msg_id": record["msg_id"], "commit_log_offset": place["commitlog_offset"], "group": group,
           "delivered": delivered, "stage": stage, "reason": reason[0], "verdict": reason[1],
           "keys": record["keys"], "uniq_key": properties.get("UNIQ_KEY"), "tags": record["tags"],
           "store_timestamp": record["store_timestamp"], "copy": place["copy"], "copy_of": place["copy_of"],
           "batch": place["batch"], "properties": properties}
    return with_iso(row, ("store_timestamp",))


def notes(found: Found) -> list[str]:
    """stderr lines: what was scanned instead of read through the index, and which index files are damaged."""
    lines = [f"damaged index file {path}: {problem}; its span is scanned instead" for path, problem in found.damaged]
    for lo, hi, why, n in found.scanned:
        if why == "past the index's end" and n <= 1:
            continue  # the index's last record itself: nothing past the index
        to = "the log's end" if hi is None else f"offset {hi}"
        lines.append(f"scanned the commit log from offset {lo} to {to} ({why}): {n} records")
    return lines


def render(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The answer as text: a line per copy (its broker first when the rows come from several; what kind of copy
    it is when not the message in its own topic), then a line per group's verdict."""
    lines, last, timers, transactions = [], None, set(), set()
    several = len({r.get("broker") for r in rows}) > 1
    for r in rows:
        place = (r.get("broker"), r["topic"], r["queue_id"], r["queue_offset"], r["commit_log_offset"])
        if place != last:
            last = place
            lines.append(f"{r['broker'] + ' ' if several else ''}{r['topic']} queue {r['queue_id']} offset "
                         f"{r['queue_offset']}{copy_words(r)}: msgId {r['msg_id']}, commit-log offset "
                         f"{r['commit_log_offset']}, storeTimestamp {ms_text(r['store_timestamp'])}, keys "
                         f"{r['keys']!r}, UNIQ_KEY {r['uniq_key']}")
            lines += published_lines(r["traces"], r["topic"]) if traced_row(r) else []
            if r.get("timer") and r["uniq_key"] not in timers:
                timers.add(r["uniq_key"])
                lines.append(f"  {timer_line(r['timer'])}")
            if r.get("transaction") and r["uniq_key"] not in transactions:
                transactions.add(r["uniq_key"])
                lines.append(f"  {transaction_line(r['transaction'])}")
        outcome = "DELIVERED" if r["delivered"] else f"NOT DELIVERED ({r['reason']})"
        lines.append(f"  {r['group']}: {outcome}" if r["group"] is not None else f"  {r['verdict']}")
        if r.get("pop"):
            lines += history_lines({r["group"]: r["pop"]})
        if traced_row(r) and r["group"] is not None:
            lines += attempt_lines(r["traces"], r["group"])
    return lines or ["no message carries the key"]


def copy_words(r: Mapping[str, Any]) -> str:
    """What kind of copy a row's place holds, in words ('' for the message in its own topic)."""
    kind, batch, of = r["copy"], r["batch"], r["copy_of"]
    if kind in ("lmq", "multi_dispatch"):
        return f" ({'LMQ' if kind == 'lmq' else 'multi-dispatch'} copy of {of['topic']} queue {of['queue_id']} " \
               f"offset {of['queue_offset']})"
    if kind == "batch_inner":
        return (f" (message {batch['index'] + 1} of {batch['size']} in the batch at offset {batch['base_offset']}, "
                f"whose UNIQ_KEY is {batch['record_uniq_key']})")
    if kind == "batch_record":
        return f" (a BatchCQ batch of {batch['size']} messages, offsets {batch['base_offset']} to " \
               f"{batch['base_offset'] + batch['size'] - 1}: the broker decides them as one record)"
    return {"retry": " (retry copy)", "pop_retry": " (POP retry copy)", "dlq": " (dead letter)",
            "timer_scheduled": " (timer message, scheduled in the wheel)",
            "timer_delivered": " (timer message, delivered by the wheel)",
            "recall_marker": " (recall marker: cancels the timer message of this UNIQ_KEY)",
            "transaction_half": " (transaction half: stored for a decision, given to no consumer)",
            "transaction_commit": " (committed copy of the transaction)",
            "transaction_discarded": " (transaction half discarded after its checks)"}.get(kind, "")


def timer_line(t: Mapping[str, Any]) -> str:
    """A timer message's fate in words: scheduled at, due at, then delivered at (where, how late), pending, or
    cancelled at."""
    scheduled = (f"scheduled at {ms_text(t['scheduled_store_timestamp'])}" if t["scheduled_store_timestamp"] is not None
                 else "its scheduled record not found")
    head = (f"timer message to {t['real_topic']} queue {t['real_queue_id']}: {scheduled}, due at "
            f"{ms_text(t['deliver_ms'])}")
    if t["state"] == "delivered":
        return (f"{head}, delivered at {ms_text(t['delivered_store_timestamp'])} (queue offset "
                f"{t['delivered_queue_offset']}, {t['lag_ms']} ms after its due time)")
    if t["state"] == "cancelled":
        return f"{head}, cancelled at {ms_text(t['cancelled_store_timestamp'])}"
    return f"{head}, pending (no delivered copy found)"
