"""Driver-side planning: list the store, merge and compile subscriptions, describe the work units.

Only metadata is handled here (file names, sizes, config JSON, and the head and tail of each consume-queue
file the run needs: jobs/plan/cq_index.py); the rest of the store's bytes are read by the tasks."""
from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from filtering.bloom import BloomFilter
from filtering.subscriptions import RETRY_PREFIX, compile_subscription, merge_subscriptions
from jobs.errors import UsageError
from jobs.ledgers.pop import pop_topics, revive_progress
from jobs.ledgers.timer import WHEEL_TOPIC, timer_topics
from jobs.ledgers.traces import trace_scope, trace_topics
from jobs.ledgers.transactions import transaction_topics
from jobs.plan.brokers import store_broker
from jobs.plan.cq_index import SegmentIndex
from jobs.plan.replay_plan import ReplayPlan, replay_plan
from jobs.plan.units.choose import BrokerUnits, choose, store_topics
from jobs.plan.window import Window, resolve
from jobs.policy import CorruptPolicy
from schemas.errors import ConfigError, CorruptStoreError
from schemas.log import layout as L
from schemas.log.multi_dispatch import is_lmq
from schemas.queues import rocksdb_store
from schemas.store.checks import consume_queue_file_size, layout_problems, without_foreign_units
from schemas.store.config import (
    CONSUMER_FILTER_FILE,
    CONSUMER_OFFSET_FILE,
    EXPRESSION_TYPES,
    TOPICS_FILE,
    Registration,
    load_registrations,
    load_store_config,
)
from schemas.store.timer_wheel import read_timer_state

if TYPE_CHECKING:
    from filtering.subscriptions import CompiledSubscription, Subscription
    from jobs.plan.brokers import Broker
    from schemas.log.files import CommitLog
    from schemas.store.config import ConsumerFilterData, StoreConfig, TopicConfig
    from schemas.store.store import StoreLayout

# `options` below is a jobs.settings.JobOptions and `scope` a sink's (jobs/sinks/iceberg/tables.LakeScope): of
# layers above the plan (setup.cfg [importlinter]), so typed Any here

log = logging.getLogger("mqreplay")


@dataclass
class Planned:
    plan: ReplayPlan
    layout: object
    subscriptions: list  # every CompiledSubscription, failed ones included
    committed: dict  # (topic, group) -> {queue_id: offset}, for --from committed
    problems: list | None = None  # listing and config problems: [{file, offset, topic, queue_id, reason}]
    lost_units: tuple = ()  # LostUnits: consume-queue units a truncated file no longer holds
    warnings: list = field(default_factory=list)  # what the run must say besides its counters
    segments: SegmentIndex | None = None  # the consume-queue segments of the needed queues, probed once
    ranges: tuple = ()  # ((topic, queue_id, first, end), ...): the queue offsets the run covers (pipeline/window.py)
    sources: BrokerUnits | None = None  # where each queue's units come from (jobs/plan/units/)
    # a broker of several (build_plan's `several`): what the run's check of names that match nothing needs,
    # made over all brokers at once (jobs/plan/cluster.py): (user registrations, subscriptions, topics present)
    names: tuple | None = None
    window: Window | None = None  # the window the plan was made of (the sink's starting offsets in it)


@dataclass(frozen=True)
class LostUnits:
    """Units of one queue that a truncated consume-queue file lost: queue offsets [first, first + count)."""

    topic: str
    queue_id: int
    first: int
    count: int
    file: str


def build_plan(options: Any, broker: Broker | None = None, several: bool = False, layout: StoreLayout | None = None,
               scope: Any = None) -> Planned:
    """Everything the tasks need; with on_corrupt=fail the first problem found in what the run reads (the
    listing of the queues it needs, the config) stops the job here. `broker`: the store's
    jobs/plan/brokers.Broker (its filesystem and root, resolved once; its name every row carries), None:
    options.store as one broker of no name; `several`: one broker of several, whose names that match
    nothing are checked over all of them (jobs/plan/cluster.py), not here; `layout`: the store already
    listed; `scope`: what the sink holds (Sink.scope: a lake's LakeScope), asked once the run's groups are known
    where each starts (the window's starting offsets) and, once its ranges are, what they hold already
    (ReplayPlan.held): the plan is made once, nothing changes it after.

    Raises UsageError (exit 2) for arguments that name nothing: unknown expression types, topics the
    store does not have, --groups / --topics that match no subscription (warnings with allow_missing).
    A RocksDB consume queue opened to plan is closed when the plan is made."""
    with rocksdb_store.held():
        return _build_plan(options, broker, several, layout, scope)


def _build_plan(options, broker, several, layout, scope):
    broker = broker or store_broker(options.store, options.commitlog)
    fs = broker.fs
    layout = layout or broker.open_store()
    problems = layout_problems(layout)
    layout = without_foreign_units(layout)  # after the problems: they name the file as it is on disk
    config = load_store_config_at(fs, broker.root, config_files(options), options.on_corrupt, problems)
    stored = _stored_sql92(config, problems)
    regs = _user_registrations(options)
    bloom = BloomFilter(options.bloom_f, options.bloom_n)
    topics_present = store_topics(fs, layout, config.topics)
    unknown_topics = topics_present is None
    if unknown_topics:  # no consume queue, no topics.json: the names the subscriptions give are taken as they are
        topics_present = {r.topic for r in regs} | {f.topic for f in stored} | \
            {RETRY_PREFIX + g for g in {r.group for r in regs} | {f.consumer_group for f in stored}}
    # LMQ queues are named by their consume queue alone: one it lacks (no consume queue at all, or a lost LMQ
    # folder) is a lost queue, its units rebuilt from the records whose INNER_MULTI_DISPATCH names it
    lmqs = set() if unknown_topics or layout.rocksdb_cq else \
        ({r.topic for r in regs if is_lmq(r.topic)} | {f.topic for f in stored if is_lmq(f.topic)}) - topics_present
    topics_present |= lmqs
    everything = merge_subscriptions(stored, regs, bloom, topics_present, options.retry)
    warnings = [] if several else _names_that_match_nothing(options, regs, everything, topics_present)
    born_notes = []
    subs = merge_subscriptions(stored, regs, bloom, topics_present, options.retry,
                               set(options.groups) or None, set(options.topics) or None, born_notes)
    if several and not unknown_topics:  # a topic of another broker: no subscription of it here
        subs = [s for s in subs if s.topic in topics_present]
    if not subs and not warnings and not options.read_all and not several:
        raise UsageError("no subscription to replay: give --subscriptions FILE or --subscription "
                         "(the store's config/consumerFilter.json holds none)")
    if unknown_topics:
        warnings.append("topic names not checked: the store has neither a consume queue nor config/topics.json, "
                        "so only its commit log knows its topics (a topic it lacks gets no units)")
    if lmqs and not layout.queues:  # a lost LMQ folder beside others: the units' line names it once, as any lost queue
        warnings.append(f"LMQ queue names not checked: {_first_few(sorted(lmqs))}: the store has no consume queue, "
                        "which alone lists LMQ queues, so their units are rebuilt from the records that name them "
                        "(INNER_MULTI_DISPATCH; a queue no record names gets no units)")
    if CONSUMER_FILTER_FILE in config.damaged:
        warnings.append(f"bitmap audit not done: config/{CONSUMER_FILTER_FILE} is damaged (audited, read as absent), "
                        "so the store's SQL92 registrations, which its stored bitmaps are compared with, are unknown")
    warnings += config_file_warnings(config, config_files(options), broker,
                                     any(s.expression_type == "SQL92" for s in subs)) + born_notes
    compiled = [compile_subscription(s, options.dialect) for s in subs]
    for c in compiled:
        if c.error:
            log.error("group %s topic %s: %s", c.sub.group, c.sub.topic, c.error)
        if c.warning:
            warnings.append(f"{c.sub.group}/{c.sub.topic}: {c.warning}")
    runnable = tuple(c for c in compiled if not c.error)
    if scope is not None:  # the run's groups continue where the sink holds them
        starts = scope.starts(broker.name, {(c.sub.group, c.sub.topic) for c in runnable})
        options = replace(options, window=replace(options.window, starting=starts))
    topics = read_topics(options, topics_present) if options.read_all else \
        needed_topics(runnable, stored, options.groups, options.topics) | timer_topics(topics_present, options.topics) \
        | pop_topics(topics_present, options.topics) | transaction_topics(topics_present, options.topics) \
        | trace_topics(topics_present, options.trace_topics, options.topics)
    if several and not unknown_topics:  # a registration every broker holds, of a topic another broker has:
        topics &= topics_present  # nothing of it here to audit, and no commit log to walk for it
    warnings += _unreadable_topics(config.topics, topics)
    wheel_read = _timer_wheel_read(fs, broker.root, topics, problems)
    # a damaged file of a queue this run does not read is not this run's business
    problems = [p for p in problems if p["queue_id"] is None or p["topic"] in topics]
    if problems and not options.skips_damage:
        p = problems[0]
        raise CorruptStoreError(p["file"], p["offset"], p["reason"], p["topic"], p["queue_id"])
    units = choose(options.units_from, fs, layout, topics, config.topics)
    if units.problems and not options.skips_damage:
        p = units.problems[0]
        raise CorruptStoreError(p["file"], p["offset"], p["reason"], p["topic"], p["queue_id"])
    problems += units.problems
    warnings += units.warnings
    window = resolve(options.window, fs, layout, units.mapped(lambda s: s.prepared(fs)), topics_present,
                     options.allow_missing)
    units = window.units
    warnings += window.warnings
    problems += window.problems  # OFFSET_TOO_SMALL: audited whatever --on-corrupt, as for a deleted record
    plan = replay_plan(
        options, layout.log,
        fs=fs, broker=broker.name,
        pop_revive=_pop_progress(options, fs, broker.root, topics_present, config, problems),
        subscriptions=runnable,
        registrations=_dispatched_registrations(stored, compiled, bloom, options.dialect),
        audit_bitmaps=CONSUMER_FILTER_FILE not in config.damaged,
        start_offsets=_start_offsets(options, compiled, config.consumer_offsets),
        data_end=None if options.audit_consume_queue else units.data_end,
        since=options.window.since, until=options.window.until,
        spans=tuple(span for s in units.sources for span in s.spans(fs, layout.log, options.window))
        if options.window.given else None,
        units=units.sources,
        audit_queues=_audited(window.ranges, options.window) if options.audit_consume_queue else None,
        retry_cut=_retry_cut(options.window, window, topics_present),
        timer_wheel_read=wheel_read,
        traces=_trace_scope(options, fs, broker.root, topics_present, config, problems, runnable),
        held=() if scope is None else scope.held(broker.name, runnable, window.ranges),
    )
    lost = tuple(x for x in _lost_units(layout, window.ranges if options.window.given else ()) if x.topic in topics)
    return Planned(plan, layout, compiled, config.consumer_offsets, problems, lost, warnings, units.files.segments,
                   window.ranges, units, (regs, everything, topics_present) if several else None, options.window)


def plan_from_config(options: Any, config: StoreConfig, topics_present: Collection[str] | None, fs: pafs.FileSystem,
                     log: CommitLog) -> tuple[ReplayPlan, list[CompiledSubscription]]:
    """(ReplayPlan, every compiled subscription, failed ones included) of a run over all subscriptions, from
    the store's config, its topic names, its filesystem and its commit log (a CommitLog) alone: what
    jobs/explain/__init__.py decides one unit with, without build_plan's listing and checks of every queue. The
    subscriptions are merged and compiled, and the dispatcher's registrations chosen, as build_plan does."""
    bloom = BloomFilter(options.bloom_f, options.bloom_n)
    stored = _stored_sql92(config, [])
    subs = merge_subscriptions(stored, _user_registrations(options), bloom, topics_present, options.retry)
    compiled = [compile_subscription(s, options.dialect) for s in subs]
    plan = replay_plan(
        options, log, fs=fs,
        subscriptions=tuple(c for c in compiled if not c.error),
        registrations=_dispatched_registrations(stored, compiled, bloom, options.dialect),
        start_offsets=_start_offsets(options, compiled, config.consumer_offsets))
    return plan, compiled


def _user_registrations(options):
    """Registrations of the subscription files and the command line, in precedence order."""
    regs = []
    for path in options.subscription_files:
        try:
            regs.extend(load_registrations(path))
        except (ConfigError, OSError) as exc:
            raise UsageError(f"--subscriptions {path}: {exc}") from exc
    for group, topic, etype, expression in options.ad_hoc:
        if etype.upper() not in EXPRESSION_TYPES:
            raise UsageError(f"--subscription {group} {topic}: unknown expression type {etype!r} "
                             f"(expected one of {', '.join(EXPRESSION_TYPES)})")
        regs.append(Registration(group, topic, etype.upper(), expression, None, None, "<command line>"))
    return regs


def _stored_sql92(config, problems):
    """The store's registrations a broker can hold: SQL92 only. Any other type in consumerFilter.json is
    damaged config (a PYTHON one would make the job import and run what a copied store names): a problem,
    never loaded."""
    kept = []
    for fd in config.consumer_filters:
        if fd.expression_type == "SQL92":
            kept.append(fd)
            continue
        problems.append(dict(
            file=config.paths.get(CONSUMER_FILTER_FILE, CONSUMER_FILTER_FILE), offset=None, topic=fd.topic,
            queue_id=None, reason=f"registration of group {fd.consumer_group!r} has expressionType "
                                  f"{fd.expression_type!r}: a broker stores only SQL92 filters; not loaded, not run"))
    return kept


# the topic attributes (config/topics.json, 5.x) this version reads: the consume queue's type
READ_QUEUE_TYPES = ("SimpleCQ", "BatchCQ")


def unreadable_reason(config: TopicConfig) -> str | None:
    """Why this version cannot replay a topic (a 5.x attribute it does not read), None when it can."""
    attributes = config.attributes or {}
    if str(attributes.get("cleanup.policy", "DELETE")).upper() == "COMPACTION":
        return ("a compaction topic (cleanup.policy=COMPACTION): its compacted log (compaction/) is not read by "
                "this version, and its commit-log records may be gone")
    queue_type = attributes.get("queue.type", "SimpleCQ")
    if queue_type not in READ_QUEUE_TYPES:
        return f"its consume queue is of type {queue_type!r}, which this version does not read"
    return None


def _unreadable_topics(topic_configs, selected):
    """Warnings for the store's topics this version cannot read that the run leaves alone; a UsageError (exit 2,
    before Spark) naming the first it selects."""
    unreadable = {t: why for t, c in sorted(topic_configs.items()) if (why := unreadable_reason(c))}
    chosen = [t for t in unreadable if t in selected]
    if chosen:
        raise UsageError(f"topic {chosen[0]!r}: {unreadable[chosen[0]]}"
                         + (f" (and {len(chosen) - 1} more: {_first_few(chosen[1:])})" if len(chosen) > 1 else "")
                         + "; leave it out (--topics, --groups) to replay the rest")
    return [f"topic {t!r} left alone: {why}" for t, why in unreadable.items()]


def names_that_match_nothing(options: Any, regs: Iterable[Registration], subs: Iterable[Subscription],
                             topics_present: Collection[str]) -> list[str]:
    """_names_that_match_nothing over several brokers: `subs` and `topics_present` of all of them."""
    return _names_that_match_nothing(options, regs, subs, topics_present)


def _names_that_match_nothing(options, regs, subs, topics_present):
    """Typos: topics a user's subscription names that the store lacks, --groups / --topics that match no
    subscription. UsageError, or warnings with allow_missing (a nightly run whose topics come and go).
    The implicit %RETRY%<group> subscriptions are exempt: a group without retries has no retry topic.
    One problem per kind, naming the first few names: ten typos are one readable line, not ten."""
    groups, topics = set(options.groups), set(options.topics)
    problems = []
    absent = list(dict.fromkeys(f"topic {reg.topic!r} of group {reg.group!r} ({reg.source})" for reg in regs
                                if reg.topic not in topics_present and (not groups or reg.group in groups)
                                and (not topics or reg.topic in topics)))
    if absent:
        problems.append(f"not in the store: {_first_few(absent)}")
    known_groups = sorted({s.group for s in subs})
    unknown = sorted(groups - set(known_groups))
    if unknown:
        plural = "" if len(known_groups) == 1 else "s"
        known = f"the subscriptions name {len(known_groups)} group{plural}: {_first_few(known_groups)}" \
            if known_groups else "no group has a subscription"
        problems.append(f"--groups {_first_few(unknown)}: no subscription of "
                        f"{'that group' if len(unknown) == 1 else f'these {len(unknown)} groups'} ({known})")
    unsubscribed = sorted(topics - {s.topic for s in subs})
    for where, names in (("not in the store", [t for t in unsubscribed if t not in topics_present]),
                         ("in the store, without a subscription", [t for t in unsubscribed if t in topics_present])):
        if names:
            problems.append(f"--topics {_first_few(names)}: {where}")
    if problems and not options.allow_missing:
        raise UsageError("; ".join(problems) + " (--allow-missing runs anyway)")
    return problems


def _first_few(names, shown=5):
    """`a, b, c, d, e and 7 more`: a list a console line can hold."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _dispatched_registrations(stored, compiled, bloom, dialect):
    """Every stored SQL92 registration of the store, compiled, whatever the run replays: the dispatcher
    ORs all of them into a message's bitmap, so the bitmap audit compares against all of them."""
    by_key = {c.key: c for c in compiled if c.sub.stored and c.sql is not None}
    out = []
    for s in merge_subscriptions(stored, [], bloom, None, retry=False):
        c = by_key.get((s.group, s.topic)) or compile_subscription(s, dialect)
        if c.sql is not None and c.sub.bloom_bits:
            out.append(c)
    return tuple(out)


def _lost_units(layout, ranges):
    """Units that truncated consume-queue files no longer hold: a file shorter than the others lost the
    units up to the next file's start; the last file of a queue lost at least its partial unit. Within the
    run's ranges of queue offsets where it has one for the queue."""
    window = {(t, q): (a, b) for t, q, a, b in ranges}
    cq_size = consume_queue_file_size(layout.queues)
    lost = []
    for q in layout.queues:
        for k, seg in enumerate(q.cq):
            if seg.length >= cq_size:
                continue
            kept = seg.length // L.CQ_UNIT_SIZE
            end = q.cq[k + 1].start if k + 1 < len(q.cq) else seg.start + seg.length + L.CQ_UNIT_SIZE - 1
            count = (min(end, seg.start + cq_size) - seg.start) // L.CQ_UNIT_SIZE - kept
            first = (seg.start // L.CQ_UNIT_SIZE) + kept
            lo, hi = window.get((q.topic, q.queue_id), (first, first + count))
            first, count = max(first, lo), min(first + count, hi) - max(first, lo)
            if count > 0:
                lost.append(LostUnits(q.topic, q.queue_id, first, count, seg.path))
    return tuple(lost)


def _audited(ranges, window):
    """The consume-queue audit's queues and offsets: the run's ranges, open where the window leaves a side open
    (units a queue lacks past its last unit, a consume queue behind its commit log, are found)."""
    lower = window.since is not None or bool(window.starting)
    upper = window.until is not None or bool(window.ending)
    return tuple((t, q, a if lower else -(1 << 62), b if upper else 1 << 62) for t, q, a, b in ranges)


def needed_topics(subscriptions: Iterable[CompiledSubscription], stored_filters: Iterable[ConsumerFilterData],
                  groups: Collection[str] = (), topics: Collection[str] = ()) -> set[str]:
    """Topics whose consume queues the run reads: those of its subscriptions (the %RETRY% topics they
    include), and those of the store's SQL92 registrations, whose stored bitmaps the audit compares;
    within --groups and --topics, so that a narrowed run reads nothing else."""
    needed = {c.sub.topic for c in subscriptions}
    needed.update(fd.topic for fd in stored_filters
                  if (not groups or fd.consumer_group in groups) and (not topics or fd.topic in topics))
    return needed


def read_topics(options: Any, topics_present: set[str]) -> set[str]:
    """Topics a plain read reads: every topic of the store, or those of read_topics it has."""
    return topics_present if options.read_topics is None else topics_present & set(options.read_topics)


def _retry_cut(asked, resolved, topics_present):
    """ReplayPlan.retry_cut: with a window that ends (--until, --ending-offsets), the store's POP retry topics
    (%RETRY%) it does not read to their latest offsets (window.Resolved.to_end)."""
    if asked.until is None and not asked.ending and not asked.ending_by_broker:
        return frozenset()
    return frozenset(t for t in topics_present if t.startswith("%RETRY%")) - resolved.to_end


def _pop_progress(options, fs, root, topics_present, config, problems):
    """The revive service's committed offsets of a store with POP (pop_events.revive_progress), from
    consumerOffset.json (read here when the run did not read it for --from committed; a damaged one is as
    for --from committed: the run stops, or with --on-corrupt skip it is audited and read as absent)."""
    if not pop_topics(topics_present):
        return None
    offsets = config.consumer_offsets
    if CONSUMER_OFFSET_FILE not in config_files(options):
        offsets = load_store_config_at(fs, root, (CONSUMER_OFFSET_FILE,), options.on_corrupt, problems).consumer_offsets
    return revive_progress(topics_present, offsets)


def _timer_wheel_read(fs, root, topics, problems):
    """The timer wheel's read time (config/timercheck's lastReadTimeMs: every slot before it was dequeued) when the
    run reads the wheel's topic, else None; the wheel's state checked on the way (schemas/store/timer_wheel.py:
    a timer log of partial units or bad magic, a checkpoint of the wrong size or zeroed beside units), its damage
    added to `problems` (the run stops on it, or under --on-corrupt skip it is audited). A damaged checkpoint
    gives no read time."""
    if WHEEL_TOPIC not in topics:
        return None
    state = read_timer_state(fs, root)
    problems += state.problems
    cp = state.checkpoint
    if cp is None or cp.zeroed or any(p["file"] == state.checkpoint_path for p in state.problems):
        return None
    return cp.last_read_time_ms


def _trace_scope(options, fs, root, topics_present, config, problems, runnable):
    """The traces' scope of a store with a trace topic (traces.trace_scope), its groups' committed offsets from
    consumerOffset.json (read here as for the POP ledger when --from committed did not read it)."""
    if not trace_topics(topics_present, options.trace_topics):
        return None
    offsets = config.consumer_offsets
    if CONSUMER_OFFSET_FILE not in config_files(options):
        offsets = load_store_config_at(fs, root, (CONSUMER_OFFSET_FILE,), options.on_corrupt, problems).consumer_offsets
    return trace_scope(topics_present, options.trace_topics, [c.sub for c in runnable], offsets)


def _start_offsets(options, compiled, committed):
    """--from committed: each group starts at its committed offset per queue (earliest where it has none)."""
    if options.start_from == "earliest":
        return ()
    if options.start_from != "committed":
        raise UsageError(f"--from must be earliest or committed, got {options.start_from!r}")
    out = []
    for c in compiled:
        for qid, offset in committed.get((c.sub.topic, c.sub.group), {}).items():
            out.append((c.sub.group, c.sub.topic, int(qid), int(offset)))
    return tuple(out)


# what a run cannot know without each config file it reads
WITHOUT = {TOPICS_FILE: "the topics' queue counts are unknown (a queue the consume queue lacks goes unnoticed)",
           CONSUMER_FILTER_FILE: "the store's own SQL92 registrations (their bornTime, their stored bitmaps) are "
                                 "unknown",
           CONSUMER_OFFSET_FILE: "no group's committed offset is known (--from committed)"}


def config_file_warnings(config: StoreConfig, needed: Iterable[str], broker: Broker, sql92: bool = True) -> list[str]:
    """A warning per config file the run reads that is missing or unreadable (a damaged one read as absent under
    --on-corrupt skip): what the run cannot know without it; for topics.json of a store given without a name,
    that the store does not name its broker (the name its rows carry, and its identity in a lake). A missing
    consumerFilter.json only where the run replays a SQL92 subscription (`sql92`): it holds SQL92 registrations
    alone, and a store whose consumers filter by tag (most 5.x stores) never writes one."""
    out = []
    for name in needed:
        if name in config.paths and name not in config.damaged or name == CONSUMER_FILTER_FILE and name in \
                config.damaged:  # present and read, or damaged registrations, which the bitmap audit's warning names
            continue
        if name == CONSUMER_FILTER_FILE and not sql92:
            continue
        state = "damaged (audited, read as absent)" if name in config.damaged else "missing"
        line = f"config/{name} is {state}: {WITHOUT[name]}"
        if name == TOPICS_FILE and not broker.named and broker.name is not None:
            line += (f", and the store does not name its broker: this run calls it {broker.name!r} (give "
                     "--store NAME=STORE to keep the name an earlier run or a lake knows it by)")
        out.append(line)
    return out


def config_files(options: Any) -> tuple[str, ...]:
    """The store's config files a run reads: the SQL92 registrations (stage 1 and the bitmap audit), the topics'
    queue counts (a queue the consume queue lacks is rebuilt or audited, never silently missing), and the
    committed offsets for --from committed. subscriptionGroup.json is not read."""
    return (CONSUMER_FILTER_FILE, TOPICS_FILE) + ((CONSUMER_OFFSET_FILE,) if options.start_from == "committed" else ())


def load_store_config_at(fs: pafs.FileSystem, root: str, needed: Collection[str],
                         on_corrupt: CorruptPolicy = CorruptPolicy.FAIL,
                         problems: list[dict[str, Any]] | None = None) -> StoreConfig:
    """The `needed` config files of the store at `root` on `fs` (remote ones are copied through pyarrow to a
    temporary directory first). With a CorruptPolicy that skips, a malformed file is recorded in `problems` and read as
    absent."""
    if isinstance(fs, pafs.LocalFileSystem):
        return _load_config_dir(root, needed, on_corrupt, problems)
    with tempfile.TemporaryDirectory(prefix="mqreplay-config-") as tmp:
        os.makedirs(f"{tmp}/config")
        wanted = set(needed) | {f"{name}.bak" for name in needed}
        for info in fs.get_file_info(pafs.FileSelector(f"{root}/config", allow_not_found=True)):
            if info.type == pafs.FileType.File and info.base_name in wanted:
                with fs.open_input_file(info.path) as src, open(f"{tmp}/config/{info.base_name}", "wb") as dst:
                    dst.write(src.read())
        return _load_config_dir(tmp, needed, on_corrupt, problems)


def _load_config_dir(root, needed, on_corrupt, problems):
    absent = set()
    while True:
        try:
            return load_store_config(root, absent, needed)
        except ConfigError as exc:
            if not on_corrupt.skips or problems is None or not exc.path or str(exc.path) in absent \
                    or not os.path.exists(exc.path):
                raise
            problems.append(dict(file=str(exc.path), offset=None, topic=None, queue_id=None,
                                 reason=f"malformed config, read as absent: {exc}"))
            absent.add(str(exc.path))
