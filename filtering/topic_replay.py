"""A TopicDecision (filtering/decision.py) as the pieces a replay task hands its sink: `message` (MessageRows:
the messages some group receives or that collide, once, with who gets which), `stats` (a counters row per
group), `topic_stats` and `bitmap` (the bitmap audit), `example` (why an ad hoc SQL92 expression throws)."""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from filtering import dispatcher
from filtering.decision import decide_topic
from schemas.arrow_schemas import BITMAP_SCHEMA, OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS


@dataclass(frozen=True)
class MessageRows:
    """The messages of one topic's batch that some group receives or that collide, once (`table`: the
    OUTPUT_MESSAGE_FIELDS), and who gets which: `delivered` and `collided` are (group index, row index)
    arrays into `groups` and `table`, ordered by group, then row; `rows`: where table's rows are in the
    topic's batch (the data source gives every other message of the batch empty lists)."""

    topic: str
    table: pa.Table
    groups: pa.Array
    delivered: tuple
    collided: tuple
    rows: np.ndarray = None


def replay_topic(plan, topic, units, messages, out):
    """Decide every subscription of one topic over its batch, and hand on what the run writes and counts."""
    decision = decide_topic(plan, topic, units, messages)
    _bitmap_rows(decision, units, messages, out)
    if decision.subscriptions:
        out.add("stats", counters_table(decision.groups, topic, decision.counters()))
    for k, why in decision.error_examples().items():
        sub = decision.subscriptions[k].sub
        out.add("example", pa.table({"group": [sub.group], "topic": [sub.topic], "reason": [why]}))
    _message_rows(out, topic, messages, units, decision.delivered, decision.collided, decision.groups)
    return decision


def _bitmap_rows(decision, units, messages, out):
    """A `bitmap` row per stored bitmap that differs from the recomputed one, and the topic's audit counters."""
    audit, topic = decision.audit, decision.topic
    rows = np.flatnonzero(audit.mismatch)
    if len(rows):
        cols = message_columns(messages, units, rows)
        out.add("bitmap", pa.table({
            "topic": pa.repeat(pa.scalar(topic), len(rows)),
            **{f: cols[f] for f in ("queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_timestamp")},
            "stored_bitmap": units.column("filter_bitmap").take(pa.array(rows)),
            "recomputed_bitmap": [audit.recomputed[i].tobytes() if audit.recomputed is not None else None
                                  for i in rows],
            "reason": [dispatcher.REASON_BORN_AFTER if audit.explained[i] else None for i in rows],
            "groups_missing": [",".join(audit.missing.get(i, ())) or None for i in rows]}, schema=BITMAP_SCHEMA))
    counters = audit.counters()
    out.add("topic_stats", pa.table({"topic": [topic], **{f: [counters[f]] for f in TOPIC_STAT_FIELDS}}))


def _message_rows(out, topic, messages, units, delivered, collided, groups):
    """The messages some group receives (or that collide), once, with who gets which (MessageRows).
    delivered, collided: (groups, units) bool."""
    rows = np.flatnonzero(delivered.any(axis=0) | collided.any(axis=0))
    if not len(rows):
        return
    cols = message_columns(messages, units, rows)
    table = pa.table({name: cols[name] for name, _ in OUTPUT_MESSAGE_FIELDS})
    # np.nonzero walks the (group, row) matrix row by row: pairs come ordered by group, then message
    out.add("message", MessageRows(topic, table, pa.array(groups, pa.string()),
                                   np.nonzero(delivered[:, rows]), np.nonzero(collided[:, rows]), rows))


def counters_table(groups, topic, counters):
    """A `stats` piece: a row per group, every STAT_FIELDS counter (absent ones 0)."""
    g = len(groups)
    return pa.table({"group": pa.array(groups, pa.string()), "topic": pa.repeat(pa.scalar(topic), g),
                     **{f: pa.array(np.broadcast_to(np.asarray(counters.get(f, 0), dtype=np.int64), (g,)))
                        for f in STAT_FIELDS}})


# the output columns a message's consume-queue unit holds; every other one comes from its record
UNIT_FIELDS = ("queue_id", "queue_offset", "commitlog_offset")


def message_columns(messages, units, rows=None):
    """The OUTPUT_MESSAGE_FIELDS columns of a batch's messages at `rows` (None: every row, no copy)."""
    take = None if rows is None or len(rows) == units.num_rows else pa.array(rows)
    cols = {}
    for name, _ in OUTPUT_MESSAGE_FIELDS:
        column = (units if name in UNIT_FIELDS else messages).column(name)
        cols[name] = column if take is None else column.take(take)
    return cols
