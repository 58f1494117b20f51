"""The plan a replay task needs besides its units: built on the driver (jobs/plan/build.py), shipped to every
task."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jobs.policy import CorruptPolicy

if TYPE_CHECKING:
    from schemas.log.files import CommitLog

# `options` below is a jobs.settings.JobOptions: of a layer above the plan (setup.cfg [importlinter]), so typed Any


@dataclass(frozen=True)
class ReplayPlan:
    """Everything a task needs besides its units; small, built on the driver, shipped to executors."""

    fs: object  # the store's pyarrow filesystem, resolved once with its broker (pyarrow filesystems pickle)
    log: CommitLog  # the log's files, their formats, offset -> file
    subscriptions: tuple  # CompiledSubscription, compiled without errors
    # the run's options (jobs/settings.JobOptions), no defaults of their own: `replay_plan` passes them all
    bloom_f: int
    bloom_n: int
    with_body: bool
    max_body: int  # bytes a compressed body may inflate to; beyond, it is null (audit/bodies)
    support_retry: bool
    on_corrupt: CorruptPolicy
    verify_crc: bool
    split_size: int
    registrations: tuple = ()  # every stored SQL92 registration of the store (the dispatcher's), compiled
    # False when the store's registrations are unknown (a damaged consumerFilter.json read as absent): the stored
    # bitmaps are then not compared, as every one would differ from a bitmap of no registration
    audit_bitmaps: bool = True
    start_offsets: tuple = ()  # ((group, topic, queue_id, first queue offset), ...) for --from committed
    # ((group, topic, queue_id, first, end), ...): offsets an Iceberg lake holds for the group already
    # (jobs/sinks/iceberg/lake.py held_scope), out of its scope as offsets below a committed one are
    held: tuple = ()
    data_end: int | None = None  # end of the last record any consume queue points at: no split starts beyond it
    since: int | None = None  # the store-time window, epoch ms, since <= t < until, checked on every unit
    until: int | None = None
    # with a window: commit-log [start, end) ranges its units point into (jobs/plan/window.py)
    spans: tuple | None = None
    # the broker's units sources (jobs/plan/units/), each serving its queues: what a task reads units from
    units: tuple = ()
    # --audit-consume-queue: ((topic, queue_id, first, end), ...) of the queues whose units are checked against
    # the commit log (jobs/task/cq_audit.py); None: no audit
    audit_queues: tuple | None = None
    broker: str | None = None  # the broker of the store (jobs/plan/brokers.py): every row the tasks write names it
    # a store with POP (a revive topic): ((revive topic, queue, the revive service's committed offset), ...), and
    # the tasks extract the POP ledger's events (jobs/ledgers/pop.py); None: no POP
    pop_revive: tuple | None = None
    # the POP retry topics of the store a window that ends (--until, --ending-offsets) does not read to their latest
    # offsets: a copy the revive service put before it committed its offsets may be beyond the window, so a message
    # of theirs is never called lost (jobs/ledgers/pop.py)
    retry_cut: frozenset = frozenset()
    # the timer wheel's read time (config/timercheck's lastReadTimeMs) when the run reads its topic: a pending timer
    # message due before it was passed by the wheel (jobs/ledgers/timer.py's overdue by the wheel); None: unknown
    timer_wheel_read: int | None = None
    # a store with a trace topic: a jobs/ledgers/traces.TraceScope (the tasks extract trace events); None: none
    traces: object = None

    @property
    def skips_damage(self) -> bool:
        """--on-corrupt skip: damaged data is audited and left out; otherwise it stops the run."""
        return self.on_corrupt.skips

    @property
    def sql92_properties(self) -> tuple[str, ...]:
        """The property names the run's SQL92 expressions read (the registrations' and the subscriptions'): the
        decode encodes each as a dictionary column (schemas/log/records.py `coded`)."""
        names: dict[str, None] = {}
        for c in (*self.registrations, *self.subscriptions):
            if c.sql is not None:
                names.update(dict.fromkeys(c.sql.properties))
        return tuple(names)

    @property
    def walks_records(self) -> bool:
        """Whether the tasks walk their splits' records (to rebuild units, or to audit them): splits then start
        at records (split_units.snap_to_records)."""
        return any(s.WALKS_RECORDS for s in self.units) or self.audit_queues is not None

    def for_split(self, start: int, end: int) -> ReplayPlan:
        """The plan as one split's task needs it: each units source cut to the split (a data source partition
        ships only that)."""
        return replace(self, units=tuple(s.for_split(start, end) for s in self.units))


def replay_plan(options: Any, log: CommitLog, **facts: Any) -> ReplayPlan:
    """The ReplayPlan of a run's JobOptions, its commit log and what the driver found (`facts`: ReplayPlan's other
    fields). The split size is the option's, at most a commit-log file."""
    return ReplayPlan(
        log=log, bloom_f=options.bloom_f, bloom_n=options.bloom_n,
        with_body=options.with_body, max_body=options.max_body, support_retry=options.support_retry,
        on_corrupt=options.on_corrupt, verify_crc=options.verify_crc,
        split_size=min(options.split_size, log.file_size or options.split_size), **facts)
