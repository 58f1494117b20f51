"""The question explain answers: one group's decision over a few units of one queue, made by the job's one
decision (filtering.decision.decide_topic). The units and their records are read where they are
(schemas.log.lookup); nothing here decides a match (jobs/explain/report.py says why, from the reason codes)."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from filtering.decision import STAGE_OF, decide_topic
from jobs.errors import ExplainError
from jobs.plan.brokers import store_broker
from jobs.plan.build import config_files, load_store_config_at, plan_from_config
from jobs.plan.replay_plan import ReplayPlan
from jobs.plan.units.choose import queue_source
from jobs.plan.window import Window
from jobs.task.split_decode import INNER_BATCH_DAMAGED, records_agree
from schemas.errors import CorruptStoreError, NotInStore
from schemas.log.files import CommitLog, find_log
from schemas.log.inner_batch import unwrap
from schemas.log.lookup import parse_offset_msg_id, read_records, record_size_at
from schemas.store import storefs
from schemas.store.store import check_store_root

if TYPE_CHECKING:
    from filtering.decision import TopicDecision
    from filtering.subscriptions import CompiledSubscription
    from jobs.plan.brokers import Broker
    from jobs.settings import JobOptions


@dataclass
class Context:
    """What every question about one store shares: a replay plan with the subscriptions compiled as the
    job compiles them (failed ones kept apart), and where the store's files are."""

    options: JobOptions  # jobs.plan.build.JobOptions
    plan: ReplayPlan
    compiled: list  # every CompiledSubscription, failed ones included
    fs: object
    root: str
    commitlog: CommitLog  # the store's (schemas/log/files.py)
    topic_configs: dict  # config/topics.json: which queues a topic has, where the consume queue lacks one


def load_context(options: JobOptions, broker: Broker | None = None) -> Context:
    """Config, subscriptions and the commit-log listing of a broker's store (a jobs/plan/brokers.Broker;
    None: options.store); no message data is read."""
    broker = broker or store_broker(options.store, options.commitlog)
    fs, root = broker.fs, broker.root
    assert root is not None  # a Broker's store, resolved (store_broker, brokers_of)
    check_store_root(fs, root, broker.uri)
    config = load_store_config_at(fs, root, config_files(options))
    topics = {topic for topic, _, _ in storefs.list_queues(fs, root)} | set(config.topics)
    log, _ = find_log(fs, root, broker.log_dirs)
    plan, compiled = plan_from_config(options, config, topics, fs, log)
    return Context(options, plan, compiled, fs, root, log, config.topics)


def subscription_of(ctx: Context, group: str, topic: str) -> CompiledSubscription:
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


def read_queue_units(ctx: Context, topic: str, queue_id: int,
                     queue_offsets: Sequence[int]) -> tuple[pa.Table, pa.Table]:
    """(units, messages): the consume-queue units at `queue_offsets` of one queue and their records, bodies
    as the job decodes them (null beyond max_body_mb)."""
    try:
        units = _queue_units(ctx, topic, queue_id, queue_offsets)
        messages = read_records(ctx.fs, ctx.commitlog, units.column("commitlog_offset"), units.column("size"),
                                ctx.plan.max_body)
    except NotInStore as exc:
        raise ExplainError(str(exc)) from None
    agree = records_agree(messages, units)
    if not agree.all():
        row = int(np.argmin(agree))
        raise CorruptStoreError("commitlog", messages.column("commitlog_offset")[row].as_py(),
                                "record's topic, queue or queue offset differ from the unit", topic, queue_id)
    messages, parent, index, damaged = unwrap(messages)
    if len(damaged):
        raise CorruptStoreError("commitlog", units.column("commitlog_offset")[int(damaged[0])].as_py(),
                                INNER_BATCH_DAMAGED, topic, queue_id)
    if len(parent) == units.num_rows:
        return units, messages
    # an inner batch (a BatchCQ unit holds several messages): the message at each offset asked
    offsets = units.column("queue_offset").to_numpy()[parent] + index
    first: dict[int, int] = {}
    for row, offset in enumerate(offsets.tolist()):
        first.setdefault(offset, row)
    rows = pa.array([first[o] for o in np.asarray(queue_offsets).tolist()])
    units = units.take(pa.array(parent)).take(rows)
    units = units.set_column(units.schema.get_field_index("queue_offset"), "queue_offset",
                             pa.array(np.asarray(queue_offsets, np.int64)))
    return units, messages.take(rows)


def _queue_units(ctx, topic, queue_id, queue_offsets):
    """The units, from the source a run of this queue would read them from (jobs/plan/units/choose.py)."""
    source = queue_source(ctx.options.units_from, ctx.fs, ctx.root, topic, queue_id, ctx.topic_configs)
    return source.queue_units(ctx.fs, ctx.commitlog, topic, queue_id, queue_offsets)


def locate_msg_id(ctx: Context, msg_id: str) -> tuple[str, int, int]:
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

    decision: TopicDecision  # filtering.decision.TopicDecision
    units: pa.Table
    messages: pa.Table
    window: Window

    @property
    def csub(self) -> CompiledSubscription:
        return self.decision.subscriptions[0]

    def reason(self, i: int) -> int:
        """The reason code of unit i (filtering.decision: DELIVERED or where and why it stopped)."""
        return int(self.decision.reasons()[0, i])

    def stage(self, i: int) -> str | None:
        """None (delivered) or the first of STAGES that dropped unit i."""
        return STAGE_OF.get(self.reason(i))


def decide(ctx: Context, csub: CompiledSubscription, units: pa.Table, messages: pa.Table,
           window: Window = Window()) -> Question:
    """The job's decision (filtering.decision.decide_topic) for one compiled subscription over units of its
    topic: the dispatcher runs over all the topic's registrations as in a task, the group alone is decided."""
    decision = decide_topic(ctx.plan, csub.sub.topic, units, messages, [csub], window)
    return Question(decision, units, messages, window)


class AuditNotes:
    """Where a ledger's event extraction (timer_events, pop_records, transaction_events, trace_records) puts what
    it audits under --on-corrupt skip: a note on stderr, the record left out of explain's answer as the job leaves
    it out of its ledger."""

    def add(self, kind: str, piece: pa.Table) -> None:
        for row in piece.to_pylist():
            print(f"note: {row['file']} offset {row['offset']}: {row['reason']}", file=sys.stderr)


def events_per_topic(ctx: Context, messages: pa.Table,
                     extract: Callable[[ReplayPlan, str, pa.Table, AuditNotes], pa.Table | None]
                     ) -> list[dict[str, Any]]:
    """A ledger's events (dicts) of found records of any topics: `extract` (the ledger's task-side extraction)
    over each topic's records, as a task runs it over a topic's batch."""
    events: list[dict[str, Any]] = []
    topics = messages.column("topic").to_pylist()
    for topic in sorted(set(topics)):
        found = extract(ctx.plan, topic, messages.take([i for i, t in enumerate(topics) if t == topic]), AuditNotes())
        events += found.to_pylist() if found is not None else []
    return events
