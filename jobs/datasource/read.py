"""One data source partition, read (on an executor): the job's task code on one commit-log split (its units,
decoded under the corruption policy, every group of a topic when subscriptions are given), as Arrow
batches of a row per decodable unit. Memory is bounded by the split, as the job's is."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from filtering.decision import decide_topic
from filtering.topic_replay import message_columns
from jobs.ledgers.timer import TIMER_EVENT_SCHEMA, timer_events
from jobs.ledgers.traces import TRACES_SCHEMA, trace_records
from jobs.task.split_task import Pieces, decoded_topics
from jobs.task.split_units import snap_to_records, split_units
from schemas.queues import rocksdb_store

if TYPE_CHECKING:
    from jobs.datasource.filters import Narrowing
    from jobs.plan.replay_plan import ReplayPlan

log = logging.getLogger("mqreplay")
TIMER_EVENTS_SCHEMA = TIMER_EVENT_SCHEMA.append(pa.field("broker", pa.string()))  # option timers' rows
TRACE_ROWS_SCHEMA = TRACES_SCHEMA.append(pa.field("broker", pa.string()))  # option traces' rows: OUT/traces/'s


@dataclass(frozen=True)
class SplitRead:
    """What every partition's read needs besides its byte range: pickled to the executors."""

    plan: ReplayPlan  # ReplayPlan, its units sources cut to the partition's split (ReplayPlan.for_split)
    narrowing: Narrowing  # jobs.datasource.filters.Narrowing
    timers: bool = False  # a row per timer event (jobs/ledgers/timer.py), not per message
    traces: bool = False  # a row per trace record of the trace topics (jobs/ledgers/traces.py), not per message


def read_split(job: SplitRead, start: int, end: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """RecordBatches (of the Arrow `schema`) of the units of [start, end) that decode and pass the narrowing. Where
    units are rebuilt from the records, the partition's bounds are first moved to record starts here, in its task
    (split_units.snap_to_records: the records starting in [start, end) are those of the bounds moved)."""
    if job.plan.walks_records:
        snapped = snap_to_records(job.plan, [(start, end)])
        if not snapped:
            return
        (start, end), = snapped
    with rocksdb_store.held():  # a RocksDB consume queue read for the partition: closed once its units are read
        found = split_units(job.plan, start, end)
    for problem in found.damaged:  # --on-corrupt skip: the job audits it, a read can only say it
        log.warning("rocketmq: %s at offset %d: %s", problem["file"], problem["offset"], problem["reason"])
    units = found.units
    keep: np.ndarray | None  # the units' mask, then each batch's messages' (None: all)
    keep = job.narrowing.unit_mask(units)
    if not keep.all():
        units = units.filter(pa.array(keep))
    out = Pieces()  # the job's audits and counters: a read has no place for them (damaged units: no row)
    for topic, topic_units, messages in decoded_topics(job.plan, units, out):
        _warn_of_null_bodies(out)
        keep = job.narrowing.message_mask(messages)
        if keep is not None and not keep.all():
            topic_units, messages = topic_units.filter(pa.array(keep)), messages.filter(pa.array(keep))
        if job.timers:
            yield from _timer_rows(job.plan, topic, topic_units, messages, out)
        elif job.traces:
            yield from _trace_rows(job.plan, topic, messages, out)
        elif topic_units.num_rows:
            yield from _rows(job.plan, topic, topic_units, messages, out, schema).to_batches()


def _timer_rows(plan, topic, units, messages, out):
    """The timer events of one topic's batch, with their broker; a wheel record the wheel could not read fails
    the read, or (onCorrupt=skip) is left out with a warning, as the job audits it."""
    if not messages.num_rows:
        return
    events = timer_events(plan, topic, messages, out, units)
    for kind, piece in out.flush():
        if kind == "corrupt":
            for problem in piece.to_pylist():
                log.warning("rocketmq: %s at offset %d: %s", problem["file"], problem["offset"], problem["reason"])
    if events is not None:
        yield from events.append_column("broker", pa.array([plan.broker] * events.num_rows, pa.string())) \
            .to_batches()


def _trace_rows(plan, topic, messages, out):
    """The trace records of one trace topic's batch (OUT/traces/'s columns), with their broker; a body that does
    not decode fails the read, or (onCorrupt=skip) is left out with a warning, as the job audits it."""
    if plan.traces is None or topic not in plan.traces.topics or not messages.num_rows:
        return
    records = trace_records(plan, messages, out)
    for kind, piece in out.flush():
        if kind == "corrupt":
            for problem in piece.to_pylist():
                log.warning("rocketmq: %s at offset %d: %s", problem["file"], problem["offset"], problem["reason"])
    rows = records.select(TRACES_SCHEMA.names)
    yield from rows.append_column("broker", pa.array([plan.broker] * rows.num_rows, pa.string())).to_batches()


def _warn_of_null_bodies(out):
    """A log line per batch for the bodies left null (beyond max_body_mb), which the job lists in
    OUT/audit/bodies/: the one place a read has to say it; the batch's other audits are dropped."""
    for kind, piece in out.flush():
        if kind == "bodies":
            first = piece.slice(0, 1).to_pylist()[0]
            log.warning("rocketmq: %d message bod%s left null, e.g. %s queue %d offset %d: %s", piece.num_rows,
                        "y" if piece.num_rows == 1 else "ies", first["topic"], first["queue_id"],
                        first["queue_offset"], first["reason"])


def _rows(plan, topic, units, messages, out, schema):
    """The rows of one topic's batch, with the groups each reaches when the plan has subscriptions."""
    cols = {"broker": pa.array([plan.broker] * units.num_rows, pa.string()), "topic": units.column("topic")}
    cols.update((name, column) for name, column in message_columns(messages, units).items() if name in schema.names)
    if "delivered_to" in schema.names:
        decision = decide_topic(plan, topic, units, messages)
        cols["delivered_to"] = _group_lists(decision.delivered, decision.groups)
        cols["collided_for"] = _group_lists(decision.collided, decision.groups)
    return pa.table(cols).cast(schema)


def _group_lists(matrix, groups):
    """A list of group names per message of a (groups, messages) bool matrix, names in order (empty lists for
    the messages no group gets)."""
    order = np.argsort(np.asarray(groups, dtype=object), kind="stable")
    rows, picks = np.nonzero(matrix[order].T)  # ordered by message, then by name
    offsets = np.zeros(matrix.shape[1] + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=matrix.shape[1]), out=offsets[1:])
    names = pa.array(np.asarray(groups, dtype=object)[order][picks] if len(picks) else [], pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets), names)
