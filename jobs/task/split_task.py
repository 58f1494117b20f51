"""One replay task: the consume-queue units that point into one commit-log split, in, (kind, piece) pairs
out. The stages, each owned elsewhere: decoding under the corruption policy (jobs/task/split_decode.py), every
group of a topic (filtering/topic_replay.py); the sink (jobs/output/writers.py) writes what comes out.

Pure Arrow and numpy (no Spark): the Spark job runs it in one task per split, tests run it
directly. The task reads only its split's byte range of one commit-log file; record starts come from the
units, so no header walk is needed; every message is decoded once and serves all groups."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering.decision import in_scope
from filtering.topic_replay import counters_table, replay_topic
from jobs.ledgers.pop import add_pop_pieces
from jobs.ledgers.timer import add_timer_pieces
from jobs.ledgers.traces import add_trace_pieces
from jobs.ledgers.transactions import add_transaction_pieces
from jobs.plan.window import Window
from jobs.task.split_decode import check_ext, decode_messages, held_split, inflated, unwrapped
from schemas.columns import batch_bounds, one_array

if TYPE_CHECKING:
    from jobs.plan.replay_plan import ReplayPlan

# units decoded, filtered and written per batch: arrays stay cache- and allocator-friendly (measured: 64k
# rows decode at 1.6 M/s, 270k at 1.2 M/s), and a task's memory is one batch's, a small part of its split's
BATCH_ROWS = 65536
# and bytes per batch: of records as stored (the units' sizes, known before reading), then of bodies as
# inflated (each compressed one's known once inflated), so that no column nears Arrow's 2 GiB and a task's
# memory is bounded whatever the bodies. 64 MiB: records of up to 1 KiB (the bench stores' are 300-600 bytes)
# fill BATCH_ROWS first, so their batches are as before. Measured on 128 MiB splits, decoding only: the rate
# is the same from 4 MiB to unbounded (25,000 records of 4 KiB: 0.04-0.05 s; 12,000 zlib bodies of 16 KiB,
# 192 MiB inflated: 0.5 s), the peak RSS is not (zlib: 854 MiB at 64, 1,528 unbounded, 455 at 16)
BATCH_BYTES = 64 << 20


def iter_split(plan: ReplayPlan, units: pa.Table, left_out: pa.Table | None = None) -> Iterator[tuple[str, Any]]:
    """What one split's units (a CONSUME_QUEUE_SCHEMA table) produce, as a stream of (kind, piece) pairs,
    batch by batch: `message` (MessageRows), `bitmap` (BITMAP_SCHEMA), `corrupt` (CORRUPT_SCHEMA), `bodies`
    (BODIES_SCHEMA), `stats` (group, topic and STAT_FIELDS), `topic_stats` (topic and TOPIC_STAT_FIELDS),
    `example` (group, topic, reason: why an expression throws), `timer_event` and `timer_clock` (the timer
    ledger's: jobs/ledgers/timer.py), `pop_event` (the POP ledger's: jobs/ledgers/pop.py), `trans_event` (the
    transaction ledger's: jobs/ledgers/transactions.py), `trace_event` (the traces': jobs/ledgers/traces.py). The
    sink writes each as it comes. left_out:
    (topic, queue_id, queue_offset) of units left out before (the consume-queue audit's): counted as skipped."""
    out = Pieces()
    if left_out is not None:
        out.skipped.append(left_out)
    for topic, topic_units, messages in decoded_topics(plan, units, out):
        yield from out.flush()
        replay_topic(plan, topic, topic_units, messages, out)
        add_trace_pieces(plan, topic, messages, out)
        add_timer_pieces(plan, topic, topic_units, messages, out)
        add_pop_pieces(plan, topic, messages, out)
        add_transaction_pieces(plan, topic, messages, out)
        yield from out.flush()
    _skipped_stats(plan, out)
    yield from out.flush()


def decoded_topics(plan: ReplayPlan, units: pa.Table, out: Pieces) -> Iterator[tuple[str, pa.Table, pa.Table]]:
    """(topic, units, messages) batches of a split's units and their decoded records, row for row: a
    topic's units in commit-log order, at most BATCH_ROWS and BATCH_BYTES at a time, each batch decoded only
    when the one before has been handed on, so that a task holds one batch's records, not its split's (on
    the bench store: worker peak RSS 765 -> 600 MiB, and the first split of a fresh worker 0.3 s faster, that
    memory being new to the process). A batch whose inflated bodies pass BATCH_BYTES is handed on in pieces
    (split_decode.inflated). Damaged units, and bodies left null (beyond plan.max_body), go to `out` (the
    corruption policy of jobs/task/split_decode.py), batch by batch. The job's task and the data source read
    through this."""
    if units.num_rows == 0:
        return
    units, names, codes = _by_topic_then_offset(units)
    check_ext(plan, units, out)
    runs = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    sizes = units.column("size").to_numpy()
    with held_split(plan, units):  # the split's bytes mapped once, for all its batches
        for start, end in zip(np.r_[0, runs], np.r_[runs, len(codes)]):
            for lo, hi in batch_bounds(sizes[start:end], BATCH_ROWS, BATCH_BYTES) + start:
                messages, batch = decode_messages(plan, units.slice(lo, hi - lo), out)
                if batch.num_rows:
                    messages, batch = _in_window(plan, messages, batch)
                if batch.num_rows:
                    for messages, batch in inflated(plan, messages, batch, out, BATCH_BYTES):
                        if batch.num_rows:
                            messages, batch = unwrapped(plan, messages, batch, out)
                        if batch.num_rows:
                            yield names[codes[lo]], batch, messages


def _in_window(plan, messages, units):
    """(messages, units) stored since <= t < until: the exact check of each unit the window's offset range
    holds (jobs/plan/window.py); units outside are not counted anywhere."""
    if plan.since is None and plan.until is None:
        return messages, units
    keep = Window(plan.since, plan.until).contains(messages.column("store_timestamp").to_numpy())
    if keep.all():
        return messages, units
    rows = pa.array(np.flatnonzero(keep))
    return messages.take(rows), units.take(rows)


def _by_topic_then_offset(units):
    """(units sorted by (topic, commit-log offset), the distinct topics, each row's index into them): a sort
    of small integer topic ranks and offsets, not of strings (comparing 270 k Python strings costs more
    than the encoding), and no copy when the units already are in that order."""
    encoded = pc.dictionary_encode(one_array(units.column("topic")))
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    rank = np.argsort(np.argsort(names, kind="stable"))  # alphabetical rank of each distinct topic
    offsets = units.column("commitlog_offset").to_numpy()
    order = np.lexsort((offsets, rank[codes]))
    if (order == np.arange(len(order))).all():
        return units, names, codes
    return units.take(pa.array(order)), names, codes[order]


class Pieces:
    """(kind, piece) pairs collected until the task hands them on; units audited and left out, by topic."""

    def __init__(self) -> None:
        self.pieces: list[tuple[str, Any]] = []
        self.skipped: list[pa.Table] = []  # (topic, queue_id, queue_offset) tables of units audited and left out

    def add(self, kind: str, piece: Any) -> None:
        self.pieces.append((kind, piece))

    def flush(self) -> list[tuple[str, Any]]:
        """The pieces collected so far, handed on and forgotten (a list: a caller that drops it still empties
        the collection, so nothing piles up over a split)."""
        pieces, self.pieces = self.pieces, []
        return pieces


def _skipped_stats(plan, out):
    """Per (group, topic): units audited and left out, so that every unit is accounted for."""
    if not out.skipped:
        return
    skipped = pa.concat_tables(out.skipped)
    topics = skipped.column("topic").to_numpy(zero_copy_only=False)
    for csub in plan.subscriptions:
        rows = np.flatnonzero(topics == csub.sub.topic)
        if not len(rows):
            continue
        sel = skipped.take(pa.array(rows))
        scope = in_scope(plan, csub.sub, sel.column("queue_id").to_numpy(), sel.column("queue_offset").to_numpy())
        n = len(rows) if scope is None else int(scope.sum())
        if n:
            out.add("stats", counters_table([csub.sub.group], csub.sub.topic, {"units": n, "skipped": n}))
