"""The question explain answers: one group's decision over a few units of one queue, made by the job's one
decision (filtering.decision.decide_topic). The units and their records are read where they are
(schemas.lookup); nothing here decides a match (jobs/explain/report.py says why, from the reason codes)."""
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from filtering.decision import STAGE_OF, decide_topic
from jobs.errors import ExplainError
from jobs.pipeline.plan import config_files, load_store_config_uri, plan_from_config
from jobs.pipeline.replay_plan import ReplayPlan
from jobs.pipeline.window import Window
from schemas import storefs
from schemas.commitlog_files import find_log, resolve_dirs
from schemas.errors import CorruptStoreError, NotInStore
from schemas.lookup import (
    parse_offset_msg_id,
    queue_files,
    read_records,
    read_units,
    rebuilt_queue_units,
    record_size_at,
    rocksdb_units,
)
from schemas.rocksdb_store import is_rocksdb
from schemas.store import check_store_root


@dataclass
class Context:
    """What every question about one store shares: a replay plan with the subscriptions compiled as the
    job compiles them (failed ones kept apart), and where the store's files are."""

    options: object  # jobs.pipeline.plan.JobOptions
    plan: ReplayPlan
    compiled: list  # every CompiledSubscription, failed ones included
    fs: object
    root: str
    commitlog: object  # the store's CommitLog (schemas/commitlog_files.py)
    topic_configs: dict  # config/topics.json: which queues a topic has, where the consume queue lacks one


def load_context(options):
    """Config, subscriptions and the commit-log listing of a store; no message data is read."""
    fs, root = check_store_root(options.store)
    config = load_store_config_uri(options.store, config_files(options))
    topics = {topic for topic, _, _ in storefs.list_queues(fs, root)} | set(config.topics)
    log, _ = find_log(fs, root, resolve_dirs(fs, options.commitlog))
    plan, compiled = plan_from_config(options, config, topics, log)
    return Context(options, plan, compiled, fs, root, log, config.topics)


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
        units = _queue_units(ctx, topic, queue_id, queue_offsets)
        messages = read_records(ctx.fs, ctx.commitlog, units.column("commitlog_offset"), units.column("size"),
                                ctx.plan.max_body)
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


def _queue_units(ctx, topic, queue_id, queue_offsets):
    """The units, from where --units-from says (jobs/pipeline/units_source.py): the queue's consume-queue files,
    else a RocksDB consume queue holding it, else (auto, commitlog) rebuilt from the commit log."""
    units_from = ctx.options.units_from
    if units_from == "commitlog":
        return rebuilt_queue_units(ctx.fs, ctx.commitlog, topic, queue_id, queue_offsets)
    try:
        return read_units(ctx.fs, queue_files(ctx.fs, ctx.root, topic, queue_id), queue_offsets)
    except NotInStore as missing:
        if "has no consume queue" not in str(missing):  # the queue is there, the offset is not
            raise
        rocks = f"{ctx.root}/consumequeue"
        if storefs.is_local(ctx.fs) and is_rocksdb(rocks):
            return rocksdb_units(rocks, topic, queue_id, queue_offsets)
        config = ctx.topic_configs.get(topic)
        named = config is not None and queue_id < max(config.read_queue_nums, config.write_queue_nums)
        if units_from == "consumequeue" or not (named or not ctx.topic_configs):
            raise
    return rebuilt_queue_units(ctx.fs, ctx.commitlog, topic, queue_id, queue_offsets)


def locate_msg_id(ctx, msg_id):
    """(topic, queue id, queue offset) of the message an offsetMsgId names, read from its record alone."""
    try:
        _, _, offset = parse_offset_msg_id(msg_id)
        size = record_size_at(ctx.fs, ctx.commitlog, offset)
        record = read_records(ctx.fs, ctx.commitlog, [offset], [size]).to_pylist()[0]
    except NotInStore as exc:
        raise ExplainError(f"{exc} (--msg-id takes the offsetMsgId, not the producer's msgId / UNIQ_KEY)") from None
    if record["msg_id"].upper() != msg_id.strip().upper():
        raise ExplainError(f"message id {msg_id} is not in this store: the record at commit-log offset {offset} "
                           f"is {record['msg_id']} (another store host)")
    return record["topic"], record["queue_id"], record["queue_offset"]


@dataclass
class Question:
    """One group's decision over units of one queue, as the job makes it: the TopicDecision (a single row, the
    group's), the units and messages it was made on, and the window that scoped it."""

    decision: object  # filtering.decision.TopicDecision
    units: object
    messages: object
    window: Window

    @property
    def csub(self):
        return self.decision.subscriptions[0]

    def reason(self, i):
        """The reason code of unit i (filtering.decision: DELIVERED or where and why it stopped)."""
        return int(self.decision.reasons()[0, i])

    def stage(self, i):
        """None (delivered) or the first of STAGES that dropped unit i."""
        return STAGE_OF.get(self.reason(i))


def decide(ctx, csub, units, messages, window=Window()):
    """The job's decision (filtering.decision.decide_topic) for one compiled subscription over units of its
    topic: the dispatcher runs over all the topic's registrations as in a task, the group alone is decided."""
    decision = decide_topic(ctx.plan, csub.sub.topic, units, messages, [csub], window)
    return Question(decision, units, messages, window)
