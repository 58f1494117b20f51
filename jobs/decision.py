"""The replay's decision for one group over a few units of one queue, made by the job's own code.

The units and their records are read where they are (schemas.lookup), joined into the job's UnitBatch
(topic_replay.topic_batch), dispatched (topic_replay.dispatch_topic) and filtered (message_filter.
apply_subscription) exactly as a replay task does; --from committed is topic_replay.in_scope. Nothing here
decides a match: it only says which stage dropped a unit (jobs/explain_report.py says why).
"""
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from filtering.bloom import BloomFilter
from filtering.message_filter import apply_subscription
from filtering.topic_replay import dispatch_topic, in_scope, lazy_messages, retry_filters, topic_batch
from jobs.errors import ExplainError
from jobs.plan import config_files, load_store_config_uri, plan_from_config
from jobs.replay_plan import ReplayPlan
from jobs.window import Window
from schemas import storefs
from schemas.errors import CorruptStoreError, NotInStore
from schemas.lookup import parse_offset_msg_id, queue_files, read_records, read_units, record_size_at
from schemas.store import check_store_root

STAGES = ("scope", "consume_queue", "commit_log", "client")  # in the order a unit meets them


@dataclass
class Context:
    """What every question about one store shares: a replay plan with the subscriptions compiled as the
    job compiles them (failed ones kept apart), and where the store's files are."""

    options: object  # jobs.plan.JobOptions
    plan: ReplayPlan
    compiled: list  # every CompiledSubscription, failed ones included
    fs: object
    root: str
    commitlog: tuple  # the commit log's storefs.Segments


def load_context(options):
    """Config, subscriptions and the commit-log listing of a store; no message data is read."""
    fs, root = check_store_root(options.store)
    config = load_store_config_uri(options.store, config_files(options))
    topics = {topic for topic, _, _ in storefs.list_queues(fs, root)}
    commitlog, _ = storefs.list_segments(fs, f"{root}/commitlog")
    plan, compiled = plan_from_config(options, config, topics, commitlog)
    return Context(options, plan, compiled, fs, root, tuple(commitlog))


def subscription_of(ctx, group, topic):
    """The group's compiled subscription to the topic; ExplainError when it has none. A subscription that
    did not compile is returned with its error (the caller shows where the parser stopped)."""
    for c in ctx.compiled:
        if c.key == (group, topic):
            return c
    others = sorted(c.sub.topic for c in ctx.compiled if c.sub.group == group)
    if others:
        raise ExplainError(f"group {group} has no subscription to topic {topic} (it subscribes to "
                           f"{', '.join(others)})")
    raise ExplainError(f"group {group} has no subscription: none in the store's config/consumerFilter.json "
                       f"(SQL92 only) and none given with --subscriptions or --subscription")


def read_queue_units(ctx, topic, queue_id, queue_offsets):
    """(units, messages): the consume-queue units at `queue_offsets` of one queue and their records, bodies
    as the job decodes them (null beyond max_body_mb)."""
    try:
        units = read_units(ctx.fs, queue_files(ctx.fs, ctx.root, topic, queue_id), queue_offsets)
        messages = read_records(ctx.fs, ctx.commitlog, ctx.plan.commitlog_file_size,
                                units.column("commitlog_offset"), units.column("size"), ctx.plan.max_body)
    except NotInStore as exc:
        raise ExplainError(str(exc)) from None
    agree = (pc.equal(messages.column("topic"), topic).to_numpy(zero_copy_only=False)
             & (messages.column("queue_id").to_numpy() == queue_id)
             & (messages.column("queue_offset").to_numpy() == units.column("queue_offset").to_numpy()))
    if not agree.all():
        row = int(np.argmin(agree))
        raise CorruptStoreError("commitlog", messages.column("commitlog_offset")[row].as_py(),
                                "record's topic, queue or queue offset differ from the unit", topic, queue_id)
    return units, messages


def locate_msg_id(ctx, msg_id):
    """(topic, queue id, queue offset) of the message an offsetMsgId names, read from its record alone."""
    try:
        _, _, offset = parse_offset_msg_id(msg_id)
        size = record_size_at(ctx.fs, ctx.commitlog, ctx.plan.commitlog_file_size, offset)
        record = read_records(ctx.fs, ctx.commitlog, ctx.plan.commitlog_file_size, [offset], [size]).to_pylist()[0]
    except NotInStore as exc:
        raise ExplainError(f"{exc} (--msg-id takes the offsetMsgId, not the producer's msgId / UNIQ_KEY)") from None
    if record["msg_id"].upper() != msg_id.strip().upper():
        raise ExplainError(f"message id {msg_id} is not in this store: the record at commit-log offset {offset} "
                           f"is {record['msg_id']} (another store host)")
    return record["topic"], record["queue_id"], record["queue_offset"]


@dataclass
class Verdicts:
    """The job's outcome for one group over a batch of units, and what it was computed from."""

    csub: object
    units: object
    messages: object
    batch: object  # message_filter.UnitBatch
    outcome: object  # message_filter.Outcome
    recomputed: tuple  # (bitmaps, valid) the dispatcher recomputed (ad hoc SQL92 subscriptions read these)
    window: Window
    in_scope: np.ndarray  # --from committed and the window
    stage: list  # per unit: None (delivered) or the first of STAGES that dropped it


def decide(ctx, csub, units, messages, window=Window()):
    """Verdicts of one compiled subscription over units of its topic, from the job's functions."""
    plan, topic = ctx.plan, csub.sub.topic
    bloom = BloomFilter(plan.bloom_f, plan.bloom_n)
    batch = topic_batch(topic, units, messages, bloom)
    dispatched = dispatch_topic(plan, topic, batch, bloom)
    outcome = apply_subscription(csub, batch, bloom, dispatched.recomputed, retry_filters(plan).get(csub.sub.group),
                                 lazy_messages(messages), plan.support_retry, dispatched.evaluated(csub))
    scope = in_scope(plan, csub.sub, units.column("queue_id").to_numpy(), units.column("queue_offset").to_numpy())
    scope = np.ones(len(batch), dtype=bool) if scope is None else scope
    scope &= window.contains(messages.column("store_timestamp").to_numpy())
    passed = (scope, outcome.stage1, outcome.broker, outcome.client)
    stage = [next((name for name, ok in zip(STAGES, passed) if not ok[i]), None) for i in range(len(batch))]
    return Verdicts(csub, units, messages, batch, outcome, dispatched.recomputed, window, scope, stage)
