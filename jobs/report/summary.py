"""What a run says it did: summary.json (counters per group and topic, the bitmap audit per topic, warnings)
from the tasks' reports, the console table, and the exit code that goes with it."""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobs.ledgers.pop import CARRIED, LAKE
from jobs.plan.window import describe
from jobs.report.timeline import Timeline
from schemas.arrow_schemas import STAT_FIELDS, TOPIC_STAT_FIELDS

if TYPE_CHECKING:
    from jobs.plan.build import Planned

# `options` below is a jobs.settings.JobOptions: of a layer above the report (setup.cfg [importlinter]), so typed Any


class Counters:
    """What the tasks counted, summed over tasks: per (group, topic), per topic, and the audit's size."""

    def __init__(self, groups: dict[tuple[str, str], dict[str, int]] | None = None,
                 topics: dict[str, dict[str, int]] | None = None, examples: dict[tuple[str, str], str] | None = None,
                 corrupt_items: int = 0, uninflated_bodies: int = 0,
                 timelines: dict[tuple[str, str], Timeline] | None = None,
                 rebuilt: tuple[tuple[str, int, int, int], ...] = (), cq_findings: int = 0) -> None:
        self.groups, self.topics = groups or {}, topics or {}
        self.rebuilt = rebuilt  # ((topic, queue_id, first, end), ...): the offsets the rebuilt queues' units cover
        self.cq_findings = cq_findings  # rows of audit/consume_queue: --audit-consume-queue's findings
        self.timelines = timelines or {}  # (group, topic) -> sink.Timeline: the report's charts
        self.examples, self.corrupt_items = examples or {}, corrupt_items
        self.uninflated_bodies = uninflated_bodies  # rows of audit/bodies: bodies beyond max_body_mb, left null

    @classmethod
    def of(cls, reports: Iterable[Mapping[str, Any]], driver_problems: int = 0) -> Counters:
        """The counters of the successful attempts' reports (jobs/output/writers.py's report rows)."""
        groups: dict[tuple[str, str], dict[str, int]]
        topics: dict[str, dict[str, int]]
        examples: dict[tuple[str, str], str]
        timelines: dict[tuple[str, str], Timeline]
        marks: list[Mapping[str, Any]]
        groups, topics, examples, corrupt, bodies, timelines, marks = {}, {}, {}, driver_problems, 0, {}, []
        cq_findings = 0
        for r in reports:
            if r["kind"] == "stats":
                _add(groups.setdefault((r["group"], r["topic"]), {}), STAT_FIELDS, r["stats"])
            elif r["kind"] == "topic_stats":
                _add(topics.setdefault(r["topic"], {}), TOPIC_STAT_FIELDS, r["stats"])
            elif r["kind"] == "example":
                examples.setdefault((r["group"], r["topic"]), r["reason"])
            elif r["kind"] == "timeline":
                timelines.setdefault((r["group"], r["topic"]), Timeline()).add(r["width"], r["buckets"], r["counts"])
            elif r["kind"] == "queue_marks":
                marks.append(r)
            elif r["kind"] == "file" and r["output"] == "audit/corrupt":
                corrupt += r["rows"]
            elif r["kind"] == "file" and r["output"] == "audit/bodies":
                bodies += r["rows"]
            elif r["kind"] == "file" and r["output"] == "audit/consume_queue":
                cq_findings += r["rows"]
        return cls(groups, topics, examples, corrupt, bodies, timelines, rebuilt_ranges(marks), cq_findings)


def rebuilt_ranges(marks: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, int, int, int], ...]:
    """((topic, queue_id, first, end), ...) of the rebuilt queues, from the splits' queue marks
    (split_units.QUEUE_MARKS_SCHEMA rows): a queue ends at its first unit stored at or after --until where a
    split saw one, else one past the last before it; it starts at its first unit stored at or after --since
    (at its end when it has none in the window)."""
    merged: dict[tuple[str, int], tuple[Any, Any, Any]] = {}  # (first, end, after): offsets or None
    for m in marks:
        first, end, after = merged.get((m["topic"], m["queue_id"]), (None, None, None))
        end = end if m["end"] is None else max(end or 0, m["end"])
        merged[(m["topic"], m["queue_id"])] = (_least(first, m["first"]), end, _least(after, m["after"]))
    out = []
    for (topic, qid), (first, end, after) in sorted(merged.items()):
        end = after if after is not None else end
        end = end if end is not None else first
        out.append((topic, qid, end if first is None or first > end else first, end))
    return tuple(out)


def _least(a, b):
    return b if a is None else a if b is None else min(a, b)


def _add(into, names, values):
    for name, value in zip(names, values):
        into[name] = into.get(name, 0) + value


def build_summary(planned: Planned, counters: Counters, options: Any) -> dict[str, Any]:
    """summary.json: per group and topic every counter, per topic the bitmap audit, failed subscriptions
    with RocketMQ's status, and the warnings a user must read."""
    rows = []
    lost = _lost_per_subscription(planned)
    for c in planned.subscriptions:
        key = (c.sub.group, c.sub.topic)
        row = {"group": c.sub.group, "topic": c.sub.topic, "expression_type": c.sub.expression_type,
               "expression": c.sub.expression, "status": "FAILED" if c.error else "OK"}
        found = counters.groups.get(key, {})
        row.update({name: int(found.get(name) or 0) for name in STAT_FIELDS})
        if not c.error:  # units a truncated consume-queue file lost: skipped, with the file in audit/corrupt
            row["units"] += lost.get(key, 0)
            row["skipped"] += lost.get(key, 0)
        row["filtered_out"] = row["units"] - row["skipped"] - row["broker_delivered"]
        if c.error:
            row["error"] = c.error
        if c.warning:
            row["warning"] = c.warning
        rows.append(row)
    topics = [{"topic": t, **{name: int(v.get(name) or 0) for name in TOPIC_STAT_FIELDS}}
              for t, v in sorted(counters.topics.items())]
    assert planned.sources is not None  # build_plan's: always chosen
    return {
        "store": options.store,
        "from": options.start_from,
        "rocketmq_version": options.dialect,
        "subscriptions": rows,
        "failed_subscriptions": [r["group"] + "/" + r["topic"] for r in rows if r["status"] != "OK"],
        "store_problems": planned.problems or [],
        "corrupt_items": counters.corrupt_items,
        "uninflated_bodies": counters.uninflated_bodies,
        "skipped_units": sum(r["skipped"] for r in rows),
        "totals": {name: sum(r[name] for r in rows) for name in STAT_FIELDS + ["filtered_out"]},
        "bitmap_audit": {"topics": topics,
                         "totals": {name: sum(t[name] for t in topics) for name in TOPIC_STAT_FIELDS}},
        "warnings": list(planned.warnings) + _error_warnings(planned, rows, counters.examples)
        + _body_warnings(counters, options),
        "window": describe(options.window, planned.ranges) if options.window.given else None,
        "units_source": planned.sources.describe(),
        # --audit-consume-queue: the findings (rows of audit/consume_queue/); null when not asked
        "consume_queue_audit": counters.cq_findings if options.audit_consume_queue else None,
        "units_source_notes": list(planned.sources.notes),
    }


def _lost_per_subscription(planned):
    """{(group, topic): units of its queues that truncated consume-queue files lost, in its scope}."""
    starts = {(g, t, q): o for g, t, q, o in planned.plan.start_offsets}
    out = {}
    for c in planned.subscriptions:
        for lost in planned.lost_units:
            if lost.topic != c.sub.topic:
                continue
            first = max(lost.first, starts.get((c.sub.group, c.sub.topic, lost.queue_id), 0))
            out[c.key] = out.get(c.key, 0) + max(0, lost.first + lost.count - first)
    return out


def _error_warnings(planned, rows, examples):
    """Ad hoc SQL92 that throws for more than half of the messages it was evaluated on, or that throws and
    matches nothing: say why, once."""
    adhoc = {c.key for c in planned.subscriptions if c.sub.expression_type == "SQL92" and not c.sub.stored}
    out = []
    for r in rows:
        key = (r["group"], r["topic"])
        errors = r["evaluation_errors"]
        if key in adhoc and errors and (errors * 2 > r["evaluated"] or not r["broker_delivered"]):
            example = examples.get(key) or "an exception"
            out.append(f"{r['group']}/{r['topic']} `{r['expression']}`: {r['evaluation_errors']} of "
                       f"{r['evaluated']} messages threw {example}")
    return out


def _body_warnings(counters, options):
    """Messages delivered with a null body: their body inflates beyond max_body_mb (OUT/audit/bodies/)."""
    n = counters.uninflated_bodies
    if not n:
        return []
    inflate = "body inflates" if n == 1 else "bodies inflate"
    return [f"{n} message {inflate} beyond max_body_mb ({options.max_body / (1 << 20):g} MiB): not inflated, "
            "delivered with a null body; listed in OUT/audit/bodies/"]


def exit_code(summary: Mapping[str, Any]) -> int:
    """0 clean; 4 finished, but damaged data was skipped (audit/corrupt) or the consume-queue audit found units
    that disagree with the commit log (audit/consume_queue); 3 some subscription failed."""
    if summary.get("corrupt_items") or summary.get("consume_queue_audit"):
        return 4
    if summary["failed_subscriptions"]:
        return 3
    return 0


def summary_table(summary: Mapping[str, Any]) -> str:
    """The summary as a fixed-width text table (stdout: what a pipe takes), then what a user must read
    (summary_notes: stderr)."""
    heads = ["group", "topic", "units", "skipped", "stage1", "broker", "client", "collisions", "bloom_fp",
             "errors", "status"]
    keys = ["group", "topic", "units", "skipped", "stage1_passed", "broker_delivered", "client_delivered",
            "collisions", "bloom_false_positives", "evaluation_errors", "status"]
    several = len(summary.get("brokers") or ()) > 1
    if several:  # a run of brokers: each row is one broker's
        heads, keys = ["broker"] + heads, ["broker"] + keys
    rows = [[str(r[k]) for k in keys] for r in summary["subscriptions"]]
    out = _table(heads, rows)
    audit = [t for t in summary.get("bitmap_audit", {}).get("topics", []) if t["bitmaps_compared"]]
    if audit:
        out += ["", "bitmap audit (stored ConsumeQueueExt bitmaps against all the store's registrations):"]
        names = (["broker"] if several else []) + ["topic", "compared", "mismatches", "explained"]
        keys = (["broker"] if several else []) + ["topic", "bitmaps_compared", "bitmap_mismatches",
                                                  "bitmap_mismatches_explained"]
        out += _table(names, [[str(t[k]) for k in keys] for t in audit])
    timers = (summary.get("timers") or {}).get("topics") or []
    if timers:
        out += ["", "timer messages per real topic (OUT/timers/):"]
        names = ["broker", "real_topic", "delivered", "pending", "cancelled", "overdue", "overdue_by_wheel",
                 "lag_ms_median", "lag_ms_max"]
        out += _table(names, [[str(t.get(k)) for k in names] for t in timers])
    transactions = (summary.get("transactions") or {}).get("topics") or []
    if transactions:
        out += ["", "transactions per topic and fate (OUT/transactions/):"]
        names = ["broker", "topic", "fate", "transactions", "stuck", "committed_twice"]
        out += _table(names, [[str(t[k]) for k in names] for t in transactions])
    names = ["popped", "acked", "revived", "inflight", "lost", "redeliveries", "ack_ms_median", "ack_ms_max"]
    pop: Any  # summary.json's sections, JSON: each a dict or None
    c: Any
    for title, pop in (("POP consumption per group (what the run's records tell)", summary.get("pop")),
                       ("POP consumption per group in the lake (NS.pop, across nights)",
                        (summary.get("pop") or {}).get(LAKE)),
                       ("POP consumption per group across nights (pop/, carried from the earlier night's OUT)",
                        (summary.get("pop") or {}).get(CARRIED))):
        if (pop or {}).get("groups"):
            out += ["", f"{title}:"]
            out += _table(["broker", "group"] + names, [[str(g[k]) for k in ["broker", "group"] + names]
                                                        for g in pop["groups"]])
    consumption = summary.get("consumption") or {}
    for title, c in (("consumption per group, from the clients' trace records (OUT/consumption/)", consumption),
                     ("consumption per group in the lake (NS.consumption, across nights)", consumption.get("lake"))):
        if (c or {}).get("groups"):
            names = [k for k in c["totals"]]
            out += ["", f"{title}:"]
            out += _table(["broker", "group"] + names, [[str(g[k]) for k in ["broker", "group"] + names]
                                                        for g in c["groups"]])
    out += [""] + summary["units_source_notes"] if summary.get("units_source_notes") else []
    if several:
        for name, window in sorted((summary.get("window") or {}).items()):
            out += [f"{line} (broker {name})" if line.startswith("window:") else line for line in _window_lines(window)]
    else:
        out += _window_lines(summary.get("window"))
    return "\n".join(out)


def summary_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a user must read, a line each, for stderr: the errors of subscriptions, then the warnings."""
    out = [f"error: {r['group']}/{r['topic']}: {r['error']}" for r in summary["subscriptions"] if r.get("error")]
    return out + [f"warning: {w}" for w in summary.get("warnings", [])]


def _window_lines(window):
    """The window asked, and the queue offsets [first, end) it covered (those of 20 queues at most)."""
    if not window:
        return []
    asked = [f"{k.replace('_', '-')} {window[k]}" for k in ("since", "until", "starting_offsets", "ending_offsets")
             if window[k] is not None]
    covered = [(t, q, a, b) for t, queues in sorted(window["offsets"].items()) for q, (a, b) in sorted(queues.items())]
    out = ["", f"window: {', '.join(asked)}: {window['units']} unit(s) of {len(covered)} queue(s)"]
    if len(covered) <= 20:
        out += _table(["topic", "queue", "first", "end"], [[t, q, str(a), str(b)] for t, q, a, b in covered])
    return out


def _table(heads, rows):
    """Columns padded by display width: a CJK character takes two cells of a terminal."""
    widths = [max([_width(h)] + [_width(r[i]) for r in rows]) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c + " " * (w - _width(c)) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _width(text):
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def cluster_summary(summaries: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """summary.json of a run of brokers from each broker's (build_summary's): `summaries` [(name, summary)].
    One broker's summary is as before, with its `broker`; several
    brokers' rows (subscriptions, bitmap audit topics, store problems) each name their broker, warnings say
    whose they are, and `brokers` holds each broker's own figures (store, totals, audit totals, skipped
    units, failures, window)."""
    per_broker = {name: {"store": s["store"], "totals": s["totals"], "bitmap_audit": s["bitmap_audit"]["totals"],
                         "skipped_units": s["skipped_units"], "corrupt_items": s["corrupt_items"],
                         "failed_subscriptions": s["failed_subscriptions"], "window": s["window"],
                         "units_source": s["units_source"]} for name, s in summaries}
    if len(summaries) == 1:
        name, only = summaries[0]
        out = dict(only, broker=name, brokers=per_broker)
        out["subscriptions"] = [dict(r, broker=name) for r in only["subscriptions"]]
        return out
    first = summaries[0][1]
    rows = [dict(r, broker=name) for name, s in summaries for r in s["subscriptions"]]
    topics = [dict(t, broker=name) for name, s in summaries for t in s["bitmap_audit"]["topics"]]
    audit_cq = [s["consume_queue_audit"] for _, s in summaries]
    return {
        "store": ", ".join(f"{name}={s['store']}" for name, s in summaries),
        "from": first["from"],
        "rocketmq_version": first["rocketmq_version"],
        "subscriptions": rows,
        "failed_subscriptions": [f"{r['broker']}:{r['group']}/{r['topic']}" for r in rows if r["status"] != "OK"],
        "store_problems": [dict(p, broker=name) for name, s in summaries for p in s["store_problems"]],
        "corrupt_items": sum(s["corrupt_items"] for _, s in summaries),
        "uninflated_bodies": sum(s["uninflated_bodies"] for _, s in summaries),
        "skipped_units": sum(s["skipped_units"] for _, s in summaries),
        "totals": {name: sum(s["totals"][name] for _, s in summaries) for name in first["totals"]},
        "bitmap_audit": {"topics": topics, "totals": {name: sum(s["bitmap_audit"]["totals"][name] for _, s in summaries)
                                                      for name in first["bitmap_audit"]["totals"]}},
        "warnings": [w if w.startswith("broker ") else f"broker {name}: {w}" for name, s in summaries
                     for w in s["warnings"]],
        "window": None if all(s["window"] is None for _, s in summaries) else
        {name: s["window"] for name, s in summaries},
        "units_source": {name: s["units_source"] for name, s in summaries},
        "consume_queue_audit": None if audit_cq[0] is None else sum(audit_cq),
        "units_source_notes": [f"broker {name}: {n}" for name, s in summaries for n in s["units_source_notes"]],
        "brokers": per_broker,
    }
