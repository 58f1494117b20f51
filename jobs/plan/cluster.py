"""A run's plan over its brokers: each broker planned on its own (its files and queues, its own
config/consumerFilter.json bornTimes and bloom bits, consumerOffset.json, topics.json: jobs/plan/build.py),
then the checks that concern the whole run. One broker is the case of one: the same path.

What is checked over all brokers: a topic a subscription names must exist on at least one broker (a topic on
broker-b only is normal), --groups and --topics must match a subscription on some broker (warnings with
--allow-missing, as for one store). A broker whose store is missing, with --allow-missing, is left out of
the run with a warning, and its starting offsets are carried to offsets.json, so the next night continues it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jobs.errors import UsageError
from jobs.plan.brokers import Broker, bare
from jobs.plan.build import build_plan, names_that_match_nothing
from jobs.plan.window import Window, offsets_by_broker, offsets_json
from schemas.errors import StoreNotFound


@dataclass
class ClusterPlan:
    """The brokers planned: `parts` ((Broker, plan.Planned), ...) in the order given; `missing` the Brokers
    left out (store missing, --allow-missing); `warnings` the run's own (names that match nothing anywhere);
    `window` the run's window as asked (per broker, or per topic for a run of one)."""

    parts: tuple
    missing: tuple = ()
    warnings: list = field(default_factory=list)
    window: Window | None = None

    def walked(self, rebuilt: Mapping[str, Sequence[tuple[str, int, int, int]]]) -> ClusterPlan:
        """This plan as the stage walked it: each broker's ranges with those of its rebuilt queues (`rebuilt`:
        {broker name: ((topic, queue, first, end), ...)}, known once their tasks walked them); a new ClusterPlan."""
        return replace(self, parts=tuple((b, replace(p, ranges=tuple(p.ranges) + tuple(rebuilt.get(b.name, ()))))
                                         for b, p in self.parts))

    @property
    def brokers(self) -> tuple[Broker, ...]:
        return tuple(b for b, _ in self.parts)

    @property
    def bare(self) -> bool:
        """One bare --store (brokers.bare)."""
        return bare(self.brokers) and not self.missing

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Every broker's listing and config problems, each naming its broker."""
        return [dict(p, broker=b.name) for b, planned in self.parts for p in planned.problems or []]

    def offsets(self) -> dict[str, Any]:
        """OUT/offsets.json: per topic and queue for a bare --store (as before brokers), else per broker."""
        if self.bare:
            return offsets_json(self.parts[0][1].ranges)
        carried = {}
        for b in self.missing:
            carried[b.name] = (self.window.starting_by_broker or {}).get(b.name, {}) if self.window else {}
        if self.window is not None and self.window.starting_by_broker:  # brokers not in tonight's run at all
            ran = {b.name for b in self.brokers} | set(carried)
            carried.update({n: o for n, o in self.window.starting_by_broker.items() if n not in ran})
        return offsets_by_broker({b.name: planned.ranges for b, planned in self.parts}, carried)


def plan_cluster(options: Any, brokers: Sequence[Broker], scope: Any = None) -> ClusterPlan:
    """ClusterPlan of the run's JobOptions (its store the first broker's) and its Brokers; `scope`: what the sink
    holds (build_plan's), which also gives a broker left out (--allow-missing) the offsets it carries on."""
    several = len(brokers) > 1
    layouts, missing, warnings = [], [], []
    for b in brokers:
        try:
            layouts.append((b, b.open_store()))
        except StoreNotFound as exc:
            if not (several and options.allow_missing):
                raise
            missing.append(b)
            warnings.append(f"broker {b.name}: {exc}: left out of this run (--allow-missing), its offsets kept")
    if not layouts:
        raise StoreNotFound(f"no broker's store found: {', '.join(b.uri for b in brokers)}")
    parts = []
    for b, layout in layouts:
        mine = replace(options, store=b.uri, window=options.window.for_broker(b.name, several))
        planned = build_plan(mine, broker=b, several=several, layout=layout, scope=scope)
        if several:
            planned.warnings = [f"broker {b.name}: {w}" for w in planned.warnings]
        parts.append((b, planned))
    if several:
        warnings += _names_checked(options, [p for _, p in parts])
    window = options.window
    if scope is not None and missing:
        window = replace(window, starting_by_broker={**(window.starting_by_broker or {}),
                                                     **{b.name: scope.starts(b.name) for b in missing}})
    return ClusterPlan(tuple(parts), tuple(missing), warnings, window)


def _names_checked(options, planned):
    """Names that match nothing on any broker: UsageError, or warnings with --allow-missing; and a run
    with nothing to replay anywhere is refused as one store's is."""
    regs = planned[0].names[0]
    subs = [s for p in planned for s in p.names[1]]
    present = set().union(*(p.names[2] for p in planned))
    warnings = names_that_match_nothing(options, regs, subs, present)
    if not any(p.plan.subscriptions or p.subscriptions for p in planned) and not warnings and not options.read_all:
        raise UsageError("no subscription to replay: give --subscriptions FILE or --subscription "
                         "(no broker's config/consumerFilter.json holds one)")
    return warnings
