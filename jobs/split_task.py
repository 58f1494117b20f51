"""One replay task: the consume-queue units that point into one commit-log split, in, (kind, piece) pairs
out. The stages, each owned elsewhere: decoding under the corruption policy (jobs/split_decode.py), every
group of a topic (filtering/topic_replay.py); the sink (jobs/sink.py) writes what comes out.

Pure Arrow and numpy (no Spark): the Spark job runs it in one task per split, tests run it
directly. The task reads only its split's byte range of one commit-log file; record starts come from the
units, so no header walk is needed; every message is decoded once and serves all groups."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering.topic_replay import counters_table, in_scope, replay_topic
from jobs.split_decode import check_ext, decode_messages
from jobs.window import Window
from schemas.columns import one_array


def iter_split(plan, units):
    """What one split's units (a CONSUME_QUEUE_SCHEMA table) produce, as a stream of (kind, piece) pairs,
    batch by batch: `message` (MessageRows), `bitmap` (BITMAP_SCHEMA), `corrupt` (CORRUPT_SCHEMA),
    `stats` (group, topic and STAT_FIELDS), `topic_stats` (topic and TOPIC_STAT_FIELDS), `example`
    (group, topic, reason: why an expression throws). The sink writes each as it comes."""
    out = Pieces()
    for topic, topic_units, messages in decoded_topics(plan, units, out):
        yield from out.flush()
        replay_topic(plan, topic, topic_units, messages, out)
        yield from out.flush()
    _skipped_stats(plan, out)
    yield from out.flush()


def decoded_topics(plan, units, out):
    """(topic, units, messages) batches of a split's units and their decoded records, row for row: one
    per topic and decoded chunk, each a zero-copy slice of one chunk. Damaged units go to `out` (the
    corruption policy of jobs/split_decode.py). The job's task and the data source read through this."""
    if units.num_rows == 0:
        return
    # topic by topic, each in log order: every topic is then a zero-copy slice of the decoded columns
    units = _by_topic_then_offset(units)
    check_ext(plan, units, out)
    messages, units = decode_messages(plan, units, out)
    messages, units = _in_window(plan, messages, units)
    if not units.num_rows:
        return
    # topic runs from integer codes (comparing 270 k Python strings costs more than the encoding)
    encoded = pc.dictionary_encode(one_array(units.column("topic")))
    names, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    chunks = np.cumsum([len(c) for c in messages.column(0).chunks])[:-1]
    bounds = np.union1d(np.flatnonzero(codes[1:] != codes[:-1]) + 1, chunks)
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)]):
        yield names[codes[lo]], units.slice(lo, hi - lo), messages.slice(lo, hi - lo)


def _in_window(plan, messages, units):
    """(messages, units) stored since <= t < until: the exact check of each unit the window's offset range
    holds (jobs/window.py); units outside are not counted anywhere."""
    if plan.since is None and plan.until is None:
        return messages, units
    keep = Window(plan.since, plan.until).contains(messages.column("store_timestamp").to_numpy())
    if keep.all():
        return messages, units
    rows = pa.array(np.flatnonzero(keep))
    return messages.take(rows), units.take(rows)


def _by_topic_then_offset(units):
    """units sorted by (topic, commit-log offset): a sort of small integer topic ranks and offsets, not of
    strings, and no copy when they already are in that order."""
    encoded = pc.dictionary_encode(one_array(units.column("topic")))
    names = encoded.dictionary.to_pylist()
    rank = np.argsort(np.argsort(names, kind="stable"))  # alphabetical rank of each distinct topic
    topic_rank = rank[encoded.indices.to_numpy(zero_copy_only=False)]
    offsets = units.column("commitlog_offset").to_numpy()
    order = np.lexsort((offsets, topic_rank))
    if (order == np.arange(len(order))).all():
        return units
    return units.take(pa.array(order))


class Pieces:
    """(kind, piece) pairs collected until the task hands them on; units audited and left out, by topic."""

    def __init__(self):
        self.pieces = []
        self.skipped = []  # (topic, queue_id, queue_offset) tables of units audited and left out

    def add(self, kind, piece):
        self.pieces.append((kind, piece))

    def flush(self):
        pieces, self.pieces = self.pieces, []
        yield from pieces


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
