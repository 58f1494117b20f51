"""Where explain --key looks for a key's copies beyond the records the broker's index names (RocketMQ 5.x): the
units multi-dispatch wrote in LMQ queues (INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET: the index keys a record
under its own topic alone, so an LMQ copy is found through its record), and the inner messages of BatchCQ batches
(the index keys a batch by its record's UNIQ_KEY only, IndexService.buildIndex: an inner message's own UNIQ_KEY or
KEYS are read from the batches themselves).

A place is one consume-queue position that holds a copy: `topic`, `queue_id`, `queue_offset` (of the unit, or of
an inner message), `commitlog_offset`, `copy` (what kind of copy, COPY_KINDS), `copy_of` (an LMQ copy's record's
own topic, queue and offset), `batch` (an inner message's or batch record's place in its batch) and `offsets`
(the queue offsets whose decisions make its verdict: a batch record's are all its inner messages')."""
from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.explain.question import read_queue_units
from jobs.plan.units.choose import queue_source
from schemas.errors import NotInStore
from schemas.index.key_lookup import DLQ_PREFIX, RETRY_PREFIX, carries
from schemas.log.inner_batch import is_inner_batch
from schemas.log.multi_dispatch import dispatched_queues, is_lmq
from schemas.store import storefs

if TYPE_CHECKING:
    from filtering.subscriptions import CompiledSubscription
    from jobs.explain.question import Context
    from jobs.plan.window import Window

# what a place holds: the message in its own topic, its copy in an LMQ queue (or in another queue multi-dispatch
# named), a BatchCQ batch's record (found by
# the batch's UNIQ_KEY) or one of its inner messages (by its own), a consumer's retry (%RETRY%<group>), a POP
# consumer's retry (%RETRY%<group>_<topic>, or + in 5.x's v2 names), a dead letter; the timer kinds are named
# after the timer ledger's events (find.py)
COPY_KINDS = ("message", "lmq", "multi_dispatch", "batch_record", "batch_inner", "retry", "pop_retry", "dlq",
              "timer_scheduled", "timer_delivered", "recall_marker")


def pop_retry_topics(compiled: Iterable[CompiledSubscription]) -> set[str]:
    """The POP retry topics of the subscriptions (PopBrokerService / KeyBuilder.buildPopRetryTopic: v1
    `%RETRY%<group>_<topic>`, v2 `%RETRY%<group>+<topic>`): where a POP group's revived copies go."""
    return {f"{RETRY_PREFIX}{c.sub.group}{sep}{c.sub.topic}" for c in compiled
            if not c.sub.topic.startswith(RETRY_PREFIX) for sep in ("_", "+")}


def kind_of_topic(topic: str, pop_retries: Collection[str]) -> str:
    """The copy kind a record of `topic` is by its topic's name."""
    if topic in pop_retries:
        return "pop_retry"
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    return "dlq" if topic.startswith(DLQ_PREFIX) else "message"


def record_places(records: pa.Table, asked: str | None, pop_retries: Collection[str]) -> list[dict[str, Any]]:
    """The places of the records the index found (key_lookup.Found.messages, half messages left out) and of their
    LMQ copies; `asked`: the --topic (None: every topic), whose places alone are kept."""
    places = []
    batch = is_inner_batch(records.column("sys_flag").to_numpy())
    props = records.column("properties")
    for i, r in enumerate(records.select(["topic", "queue_id", "queue_offset", "commitlog_offset"]).to_pylist()):
        if asked is not None and r["topic"] != asked:
            continue
        place = dict(r, copy=kind_of_topic(r["topic"], pop_retries), copy_of=None, batch=None,
                     offsets=[r["queue_offset"]])
        if batch[i]:
            place.update(copy="batch_record", **_batch_of(props[i].as_py(), r["queue_offset"]))
        places.append(place)
    return places + lmq_places(records, asked)


def _batch_of(properties, base):
    """A batch record's place fields: its size and inner offsets (INNER_NUM, the record's queue offset its
    INNER_BASE: CommitLog.setBatchSizeIfNeeded)."""
    size = int(dict(properties or []).get("INNER_NUM") or 1)
    return {"batch": {"size": size, "base_offset": base}, "offsets": list(range(base, base + size))}


def lmq_places(records: pa.Table, asked: str | None = None) -> list[dict[str, Any]]:
    """The places of the units multi-dispatch wrote for the records (schemas/log/multi_dispatch.py), of the LMQ `asked`
    alone when one is named."""
    units = dispatched_queues(records.column("topic"), records.column("queue_id").to_numpy(),
                              records.column("properties"))
    source = records.select(["topic", "queue_id", "queue_offset", "commitlog_offset"]).to_pylist()
    places = []
    for u in units.to_pylist():
        r = source[u["row"]]
        if asked is not None and u["topic"] != asked:
            continue
        kind = "lmq" if is_lmq(u["topic"]) else "multi_dispatch"
        places.append({"topic": u["topic"], "queue_id": u["queue_id"], "queue_offset": u["queue_offset"],
                       "commitlog_offset": r["commitlog_offset"], "copy": kind,
                       "copy_of": {k: r[k] for k in ("topic", "queue_id", "queue_offset")}, "batch": None,
                       "offsets": [u["queue_offset"]]})
    return places


def search_topics(topics: Iterable[str], asked: str | None) -> list[str]:
    """The topics whose index keys to look up: the one asked, or, for an LMQ (whose units point at records the
    index keys under their own topics), every topic but the LMQs."""
    if asked is None:
        return sorted(topics)
    return sorted(t for t in topics if not is_lmq(t)) if is_lmq(asked) else [asked]


def batch_topics(ctx: Context) -> dict[str, list[int]]:
    """{topic: [queue ids]} of the store's BatchCQ topics: those with a batchconsumequeue/ folder, and those
    config/topics.json types `queue.type` BatchCQ (their queues from its readQueueNums)."""
    out: dict[str, set[int]] = {}
    for topic, queue_id, _ in storefs.list_queues(ctx.fs, ctx.root, "batchconsumequeue"):
        out.setdefault(topic, set()).add(queue_id)
    for topic, config in ctx.topic_configs.items():
        if (config.attributes or {}).get("queue.type") == "BatchCQ" and topic not in out:
            out[topic] = set(range(config.read_queue_nums))
    return {t: sorted(q) for t, q in out.items()}


def inner_places(ctx: Context, key: str, topics: Collection[str],
                 window: Window | None) -> tuple[list[dict[str, Any]], list[str]]:
    """(places, notes): the inner messages of the BatchCQ `topics` that carry `key` as their own UNIQ_KEY or a
    KEYS token, stored in the window; every batch of those topics is read (the index cannot name them)."""
    since, until = (window.since, window.until) if window is not None else (None, None)
    places, notes = [], []
    for topic, queue_ids in sorted(batch_topics(ctx).items()):
        if topic not in topics:
            continue
        read = 0
        for queue_id in queue_ids:
            messages = _queue_messages(ctx, topic, queue_id)
            if messages is None:
                continue
            read += messages.num_rows
            hit = np.asarray(carries(messages, [key], [topic], since, until)) & is_inner_batch(
                messages.column("sys_flag").to_numpy())
            places += _inner(messages.filter(pa.array(hit)))
        notes.append(f"read every message of BatchCQ topic {topic} ({read} messages): the index holds no inner "
                     "message's key")
    return places, notes


def _queue_messages(ctx, topic, queue_id):
    """Every message of one queue, inner messages unwrapped (None: the store holds none)."""
    try:
        source = queue_source(ctx.options.units_from, ctx.fs, ctx.root, topic, queue_id, ctx.topic_configs)
    except NotInStore:
        return None
    bounds = source.queue_bounds(ctx.fs, ctx.commitlog).get((topic, queue_id))
    if bounds is None or bounds[1] <= bounds[0]:
        return None
    return read_queue_units(ctx, topic, queue_id, list(range(bounds[0], bounds[1])))[1]


def _inner(messages):
    """The places of inner messages (rows of an unwrapped table): INNER_BASE and INNER_NUM of their record."""
    record = messages.column("batch_properties")
    base = pc.cast(pc.map_lookup(record, pa.scalar("INNER_BASE"), "last"), pa.int64()).to_pylist()
    size = pc.cast(pc.map_lookup(record, pa.scalar("INNER_NUM"), "last"), pa.int64()).to_pylist()
    uniq = pc.map_lookup(record, pa.scalar("UNIQ_KEY"), "last").to_pylist()
    rows = messages.select(["topic", "queue_id", "queue_offset", "commitlog_offset"]).to_pylist()
    return [dict(r, copy="batch_inner", copy_of=None, offsets=[r["queue_offset"]],
                 batch={"index": r["queue_offset"] - b, "size": n, "base_offset": b, "record_uniq_key": u})
            for r, b, n, u in zip(rows, base, size, uniq)]
