"""A TopicDecision (filtering/decision.py) as the pieces a replay task hands its sink: `message` (MessageRows:
the messages some group receives or that collide, once, with who gets which), `stats` (a counters row per
group), `topic_stats` and `bitmap` (the bitmap audit), `example` (why an ad hoc SQL92 expression throws),
`timeline` (per group, what it received, what collided and what was filtered out, per bucket of store time:
the report's charts, counted where the rows are decided)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering import dispatcher
from filtering.decision import TopicDecision, decide_topic
from schemas.arrow_schemas import BITMAP_SCHEMA, OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS


class Pairs:
    """(group index, row index) arrays, unpacked as `groups, rows = pairs`: the True cells of a decision's (groups,
    messages) bool matrix at the messages `rows` (a MessageRows table's), ordered by group, then row. Counted at
    once (the matrix has no True cell outside those rows); listed when first unpacked (np.nonzero: some 330,000
    pairs a batch of the bench store), which only a sink that writes them does: the noop sink counts."""

    _listed: tuple[np.ndarray, ...] | None

    def __init__(self, matrix: np.ndarray, rows: np.ndarray) -> None:
        self._matrix, self._rows, self._listed = matrix, rows, None
        self.count = int(np.count_nonzero(matrix))

    def __iter__(self) -> Iterator[np.ndarray]:
        if self._listed is None:
            self._listed = np.nonzero(self._cells())
        return iter(self._listed)

    def by_message(self) -> tuple[np.ndarray, np.ndarray]:
        """(group index, row index) arrays of the same pairs ordered by row, then group: each message's groups
        together."""
        rows, groups = np.nonzero(np.ascontiguousarray(self._cells().T))
        return groups, rows

    def _cells(self):
        every = len(self._rows) == self._matrix.shape[1]  # rows ascend, distinct: all of them, in order
        return self._matrix if every else self._matrix[:, self._rows]


@dataclass(frozen=True)
class MessageRows:
    """The messages of one topic's batch that some group receives or that collide, once (`table`: the
    OUTPUT_MESSAGE_FIELDS), and who gets which: `delivered` and `collided` are Pairs of indexes into `groups`
    and `table`; `rows`: where table's rows are in the topic's batch (the data source gives every other message
    of the batch empty lists)."""

    topic: str
    table: pa.Table
    groups: pa.Array
    delivered: Pairs
    collided: Pairs
    rows: np.ndarray | None = None


def replay_topic(plan: Any, topic: str, units: pa.Table, messages: pa.Table, out: Any) -> TopicDecision:
    """Decide every subscription of one topic over its batch, and hand on what the run writes and counts."""
    decision = decide_topic(plan, topic, units, messages)
    _bitmap_rows(decision, units, messages, out)
    if decision.subscriptions:
        out.add("stats", counters_table(decision.groups, topic, decision.counters()))
    for k, why in decision.error_examples().items():
        sub = decision.subscriptions[k].sub
        out.add("example", pa.table({"group": [sub.group], "topic": [sub.topic], "reason": [why]}))
    _message_rows(out, topic, messages, units, decision.delivered, decision.collided, decision.groups)
    if decision.subscriptions:
        out.add("timeline", timeline_table(decision, messages.column("store_timestamp").to_numpy()))
    return decision


# Bucket widths of a timeline, each dividing the next, so that buckets of any width re-bucket exactly into a
# wider one: a batch counts at the narrowest width that keeps it within TIMELINE_BUCKETS, the driver at the
# widest of its batches' and the one that keeps the whole run within it (jobs/report/html.py).
TIMELINE_WIDTHS_MS = (1000, 10_000, 60_000, 600_000, 3_600_000, 21_600_000, 86_400_000, 604_800_000)
TIMELINE_BUCKETS = 240


def timeline_width(first: int, last: int) -> int:
    """The narrowest width of TIMELINE_WIDTHS_MS with the time span [first, last] in TIMELINE_BUCKETS buckets."""
    for width in TIMELINE_WIDTHS_MS:
        if last // width - first // width < TIMELINE_BUCKETS:
            return width
    return TIMELINE_WIDTHS_MS[-1]


def timeline_table(decision: TopicDecision, store_times: np.ndarray) -> pa.Table:
    """A `timeline` piece: per group and bucket of store time (epoch-aligned, `width` ms) the messages in scope
    it received (the client kept them), that collided, and that were filtered out; buckets with none left out."""
    groups, n = decision.groups, len(store_times)
    width = timeline_width(int(store_times.min()), int(store_times.max())) if n else TIMELINE_WIDTHS_MS[0]
    bucket = store_times // width
    first = int(bucket.min()) if n else 0
    slot = (bucket - first).astype(np.int64)
    per_slot = _slot_counter(slot, len(groups))
    delivered, collided = per_slot(decision.delivered), per_slot(decision.collided)
    scoped = decision.below_committed.any() or decision.outside_window.any()
    in_scope = per_slot(decision.in_scope) if scoped else np.broadcast_to(np.bincount(slot), delivered.shape)
    counts = {"delivered": delivered, "collided": collided, "filtered": in_scope - delivered - collided}
    keep = np.nonzero(in_scope)
    return pa.table({"group": pa.array([groups[g] for g in keep[0]], pa.string()),
                     "topic": pa.repeat(pa.scalar(decision.topic), len(keep[0])),
                     "width": pa.repeat(pa.scalar(width, pa.int64()), len(keep[0])),
                     "bucket": pa.array((keep[1] + first) * width, pa.int64()),
                     **{name: pa.array(c[keep], pa.int64()) for name, c in counts.items()}})


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
    out.add("message", MessageRows(topic, table, pa.array(groups, pa.string()), Pairs(delivered, rows),
                                   Pairs(collided, rows), rows))


def counters_table(groups: Sequence[str], topic: str, counters: Mapping[str, Any]) -> pa.Table:
    """A `stats` piece: a row per group, every STAT_FIELDS counter (absent ones 0)."""
    g = len(groups)
    return pa.table({"group": pa.array(groups, pa.string()), "topic": pa.repeat(pa.scalar(topic), g),
                     **{f: pa.array(np.broadcast_to(np.asarray(counters.get(f, 0), dtype=np.int64), (g,)))
                        for f in STAT_FIELDS}})


# the output columns a message's consume-queue unit holds; every other one comes from its record
UNIT_FIELDS = ("queue_id", "queue_offset", "commitlog_offset")


# the record's own topic, queue and offset where a row's queue is another's (an LMQ queue written by
# multi-dispatch, schemas/log/multi_dispatch.py): null where they are the row's
SOURCE_FIELDS = {"source_topic": "topic", "source_queue_id": "queue_id", "source_queue_offset": "queue_offset"}


def message_columns(messages: pa.Table, units: pa.Table,
                    rows: np.ndarray | None = None) -> dict[str, pa.Array | pa.ChunkedArray]:
    """The OUTPUT_MESSAGE_FIELDS columns of a batch's messages at `rows` (None: every row, no copy)."""
    take = None if rows is None or len(rows) == units.num_rows else pa.array(rows)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name, _ in OUTPUT_MESSAGE_FIELDS:
        if name in SOURCE_FIELDS:
            continue
        column = (units if name in UNIT_FIELDS else messages).column(name)
        cols[name] = column if take is None else column.take(take)
    n = units.num_rows if take is None else len(take)
    own = pc.equal(messages.column("topic"), units.column("topic"))  # a batch is one topic's units
    own = own if take is None else own.take(take)
    everywhere = pc.all(own).as_py() is not False  # its own queue's rows (all but an LMQ's): no source to name
    for name, field in SOURCE_FIELDS.items():
        column = messages.column(field)
        if everywhere:
            cols[name] = pa.nulls(n, column.type)
        else:
            column = column if take is None else column.take(take)
            cols[name] = pc.if_else(own, pa.scalar(None, column.type), column)
    return cols


def _slot_counter(slot, groups):
    """counter(matrix) -> (groups, slots) int64: the True cells of a (groups, messages) bool matrix per slot.
    A batch is in commit-log order, so its store times, and slots, mostly ascend: then one reduction per run of
    equal slots; else the messages are sorted by slot once first (no per-cell index arrays either way). A
    matrix with no True cell (collisions, mostly) costs one scan."""
    slots = int(slot.max()) + 1 if len(slot) else 0
    if slots <= 1:
        return lambda matrix: np.count_nonzero(matrix, axis=1).reshape(groups, 1)[:, :slots]
    order = None if (slot[1:] >= slot[:-1]).all() else np.argsort(slot, kind="stable")
    ordered = slot if order is None else slot[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    present = ordered[starts]

    def counter(matrix: np.ndarray) -> np.ndarray:
        out = np.zeros((groups, slots), dtype=np.int64)
        if matrix.any():
            cells = (matrix if order is None else matrix[:, order]).view(np.uint8)
            out[:, present] = np.add.reduceat(cells, starts, axis=1, dtype=np.int64)
        return out
    return counter
