"""OUT/report.html: the run's answer drawn, for the people who ask "what did group G receive, and why not more".

One self-contained file (inline SVG drawn here, inline CSS, no script to run, nothing fetched), written with
the run's other outputs and published with OUT. Its numbers are summary.json's and the tasks' timelines
(counted where the rows are decided: filtering/topic_replay.py), never the output read back. The data is
embedded too, as `<script type="application/json" id="report-data">`, for a scheduler to alert on.

Everything a store, a subscription or a producer named (groups, topics, expressions, property values) is
escaped for where it lands: HTML text and attributes, SVG text, and the JSON inside <script>, where `<`, `>`
and `&` are written as \\u escapes so that no `</script>` can end the element."""
from __future__ import annotations

import datetime
import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from filtering.topic_replay import timeline_width
from jobs.ledgers import pop as pop_ledger
from jobs.ledgers import timer as timer_ledger
from jobs.ledgers import transactions as transaction_ledger
from jobs.ledgers.pop import across_nights
from jobs.report.timeline import Timeline

STATUS = {0: "clean", 1: "input damaged", 2: "usage", 3: "finished, some subscriptions did not parse",
          4: "finished, damaged data skipped", 5: "failed"}
COLORS = {"delivered": "#2e7d32", "collided": "#ef6c00", "filtered": "#b0bec5"}
CHART_W, CHART_H = 720, 110


def report_data(summary: Mapping[str, Any], timelines: Mapping[tuple[str, ...], Timeline], status: int
                ) -> dict[str, Any]:
    """The page's data: the run, and per subscription its counters and timeline on the run's one time axis
    ([bucket start ms, delivered], with collided and filtered beside it)."""
    axis, width = _axis(timelines)
    subs = []
    for row in summary["subscriptions"]:
        line = timelines.get((row["broker"], row["group"], row["topic"])) if "broker" in row and \
            (row["broker"], row["group"], row["topic"]) in timelines else timelines.get((row["group"], row["topic"]))
        counts = _on_axis(line, axis, width)
        subs.append({**{k: row[k] for k in row if k not in ("error", "warning")},
                     "error": row.get("error"), "warning": row.get("warning"),
                     "timeline": [[b, c[0]] for b, c in zip(axis, counts)],
                     "collided_timeline": [[b, c[1]] for b, c in zip(axis, counts) if c[1]],
                     "filtered_timeline": [[b, c[2]] for b, c in zip(axis, counts) if c[2]]})
    attention, notes = needs_attention(subs), threw(subs)
    timers = summary.get("timers") or {"topics": [], "totals": {}}
    overdue = timers["totals"].get("overdue") or 0
    pop = summary.get("pop") or {"groups": [], "totals": {}}
    text = STATUS.get(status, "")
    if attention and status == 0:  # never "clean" while a group's expression throws or delivers nothing
        text = f"finished, {len(attention)} subscription(s) need attention"
    if overdue and status == 0 and not attention:  # nor while the timer wheel looks stuck
        text = f"finished, {overdue} timer message(s) overdue"
    settled = across_nights(pop)  # what is lost: as known across nights (the lake's, a carried ledger's)
    if settled["totals"].get("lost") and status == 0:  # nor while a POP group lost messages
        lost = f"{settled['totals']['lost']} POP message(s) lost"
        text = f"{text}; {lost}" if attention or overdue else f"finished, {lost}"
    return {"status": status, "status_text": text, "attention": attention, "notes": notes, "bucket_ms": width,
            "run": {k: summary.get(k) for k in ("store", "from", "rocketmq_version", "window", "job_seconds",
                                                "sink", "corrupt_items", "skipped_units", "uninflated_bodies")},
            "warnings": summary.get("warnings", []), "store_problems": summary.get("store_problems", []),
            "bitmap_audit": summary.get("bitmap_audit", {}).get("topics", []), "subscriptions": subs,
            "brokers": summary.get("brokers") or {}, "timers": timers, "pop": pop,
            "consumption": (summary.get("consumption") or {}).get("lake") or summary.get("consumption")
            or {"groups": [], "totals": {}},
            "pop_lost": [g for g in settled["groups"] if g["lost"]]}


def needs_attention(subs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """[{broker, group, topic, why}] of the subscriptions a reader must look at first: an expression that failed
    to parse or parsed with a warning, units skipped as damaged, and one that delivered nothing of the units in its
    scope. A subscription with no unit in scope is quiet, not an alarm: an incremental night in which its topic
    got no new message (or a retry topic no message was retried to). An expression that throws on some messages
    is RocketMQ's normal filtering (those messages are not delivered) and the same every night: a note (`threw`),
    not an alarm."""
    out = []
    for s in subs:
        why = []
        if s["status"] != "OK":
            why.append(f"expression failed: {s.get('error') or s['status']}")
        if s.get("warning"):
            why.append(f"parsed with a warning: {s['warning']}")
        if s.get("skipped"):
            why.append(f"{s['skipped']:,} unit(s) skipped as damaged (audit/corrupt/)")
        if s["status"] == "OK" and not s["client_delivered"] and s["units"] - s["skipped"] > 0:
            why.append(f"delivered nothing of {s['units'] - s['skipped']:,} unit(s) in scope")
        if why:
            out.append({"broker": s.get("broker"), "group": s["group"], "topic": s["topic"], "why": "; ".join(why)})
    return out


def threw(subs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """[{broker, group, topic, why}] of the expressions that threw on some messages (not delivered, as RocketMQ's
    broker does): said once, in a note, not in the attention list or the headline."""
    return [{"broker": s.get("broker"), "group": s["group"], "topic": s["topic"],
             "why": f"expression threw on {s['evaluation_errors']:,} of {s.get('evaluated', 0):,} messages"}
            for s in subs if s.get("evaluation_errors")]


def _axis(timelines):
    """(bucket starts, width) of one time axis for every group: the widest width of the timelines and the one
    that keeps the run's span within filtering.topic_replay.TIMELINE_BUCKETS buckets."""
    starts = [b for t in timelines.values() for b in t.counts]
    if not starts:
        return [], 0
    width = max([t.width for t in timelines.values()] + [timeline_width(min(starts), max(starts))])
    first, last = min(starts) // width * width, max(starts) // width * width
    return list(range(first, last + width, width)), width


def _on_axis(timeline, axis, width):
    if timeline is None or not axis:
        return [[0, 0, 0] for _ in axis]
    wide = Timeline()
    wide.add(width, list(timeline.counts), list(timeline.counts.values()))
    return [wide.counts.get(b, [0, 0, 0]) for b in axis]


def render(summary: Mapping[str, Any], timelines: Mapping[tuple[str, ...], Timeline], status: int) -> str:
    """The whole page: trouble first (the headline, POP messages lost, what needs attention, damaged units,
    every subscription in one table, the notes, the POP groups), then the run and the charts."""
    data = report_data(summary, timelines, status)
    parts = [_head(), _headline(data), _pop_lost(data), _timer_alarm(data), _attention(data), _damage(data),
             _overview(data), _notes(data), pop_ledger.report_section(summary.get("pop"), _e), _consumption(data),
             _run(data), timer_ledger.report_section(summary.get("timers"), _e),
             transaction_ledger.report_section(summary.get("transactions"), _e), _timelines(data), _funnels(data),
             _errors(data, summary), _bloom(data), _audit(data), _embedded(data), "</body></html>\n"]
    return "".join(parts)


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _time(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _head():
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mqreplay report</title>"
            "<style>body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
            "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}"
            "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;"
            "text-align:right}td:first-child,th:first-child,td.t{text-align:left}.ok{color:#2e7d32}"
            ".bad{color:#c62828}.key span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}"
            "figure{margin:10px 0}figcaption{font-weight:600}svg{display:block}</style></head><body>\n")


def _headline(data):
    cls = "ok" if data["status"] == 0 and not data["attention"] and not data["pop_lost"] else "bad"
    return f"<h1>mqreplay report: <span class=\"{cls}\">{_e(data['status_text'])}</span></h1>\n"


def _attention(data):
    """First on the page: every subscription that needs a look, and why."""
    if not data["attention"]:
        return ""
    return ("<h2 class=\"bad\">Needs attention</h2><ul>" + "".join(
        f"<li><strong>{_whose(data, a)}{_e(a['group'])} / {_e(a['topic'])}</strong>: {_e(a['why'])}</li>"
        for a in data["attention"])
        + "</ul>\n")


def _timer_alarm(data):
    """First of all: pending timer messages long past their due time (a stuck timer wheel), per real topic."""
    late = [t for t in data["timers"]["topics"] if t["overdue"]]
    if not late:
        return ""
    return ("<h2 class=\"bad\">Timer wheel: messages overdue</h2><ul>" + "".join(
        f"<li><strong>{_e(t['real_topic'])}</strong> (broker {_e(t['broker'])}): {t['overdue']:,} message(s) still "
        f"pending well after their due time (OUT/timers/, state pending){_by_wheel(t)}</li>" for t in late) + "</ul>\n")


def _by_wheel(t):
    """Which rule: how many of a topic's overdue messages the wheel's own read time (config/timercheck) passed."""
    n = t.get("overdue_by_wheel") or 0
    return f"; {n:,} of them due before the wheel's own read time (lost by the wheel)" if n else ""


def _pop_lost(data):
    """The POP alarm, first on the page: messages a POP group never acked that the revive service passed
    without reviving them (OUT/pop/, state lost; with --sink iceberg NS.pop's, across nights)."""
    lost = data["pop_lost"]
    if not lost:
        return ""
    return ("<h2 class=\"bad\">POP messages lost</h2><ul>" + "".join(
        f"<li><strong>{_e(g['group'])}</strong>{_e(' (broker ' + g['broker'] + ')' if g['broker'] else '')}: "
        f"{g['lost']} message(s) never acked, their checkpoint passed by the revive service, not in the POP retry "
        "topic (OUT/pop/, state lost)</li>" for g in lost) + "</ul>\n")


CONSUMPTION_COLOURS = {"consumed": "#4c9a2a", "failed_then_consumed": "#a3c95b", "failed": "#c0392b",
                       "not_consumed": "#e6a23c", "consumed_without_delivery": "#8e44ad", "untraced": "#bbbbbb"}


def _consumption(data):
    """Per group, what its consumers' trace records say of what its filter delivered (OUT/consumption/): the
    messages delivered but never consumed (a backlog, or lost), failed to the DLQ, consumed without delivery, in
    words, then a bar per group of every final."""
    groups = data["consumption"]["groups"]
    if not groups:
        return ""
    words = []
    for g in groups:
        said = [f"{g[k]} {what}" for k, what in (
            ("not_consumed", "delivered but never consumed (a backlog, or lost)"),
            ("failed", "failed every attempt (to its %DLQ%)"),
            ("consumed_without_delivery", "consumed though its filter does not deliver them"),
            ("untraced", "delivered to a group that left no trace record (trace off)")) if g[k]]
        if said:
            words.append(f"<li>{_e(g['group'])}: {_e('; '.join(said))}</li>")
    out = ["<h2>Consumption from the clients' traces (OUT/consumption/)</h2>",
           f"<ul>{''.join(words)}</ul>" if words else "<p>every delivered message was consumed</p>", "<table>"]
    for g in groups:
        total = sum(g[k] for k in CONSUMPTION_COLOURS) or 1
        bar = "".join(f"<span title=\"{_e(k)}: {g[k]}\" style=\"display:inline-block;height:12px;width:"
                      f"{400 * g[k] / total:.1f}px;background:{c}\"></span>" for k, c in CONSUMPTION_COLOURS.items()
                      if g[k])
        out.append(f"<tr><td class=\"t\">{_e(g['group'])}</td><td>{bar}</td><td class=\"t\">"
                   + _e(", ".join(f"{k.replace('_', ' ')} {g[k]}" for k in CONSUMPTION_COLOURS if g[k])) + "</td></tr>")
    return "\n".join(out) + "</table>\n"


def _overview(data):
    """One row per subscription, above every chart: what it received, what was filtered or skipped, its errors;
    a broker column in a run of several."""
    flagged = {(a["broker"], a["group"], a["topic"]) for a in data["attention"]}
    several = len(data["brokers"]) > 1
    out = ["<h2>Subscriptions</h2><table><tr>" + ("<th>broker</th>" if several else "") + "<th>group</th><th>topic"
           "</th><th>type</th><th>in scope</th><th>delivered</th><th>filtered out</th><th>collided</th><th>errors</th>"
           "<th>skipped</th><th>status</th></tr>"]
    for s in data["subscriptions"]:
        cls = " class=\"bad\"" if (s.get("broker"), s["group"], s["topic"]) in flagged else ""
        broker = f"<td>{_e(s.get('broker'))}</td>" if several else ""
        group = "<td class=\"t\">" if several else "<td>"
        out.append(f"<tr{cls}>{broker}{group}{_e(s['group'])}</td>"
                   f"<td class=\"t\">{_e(s['topic'])}</td><td class=\"t\">{_e(s['expression_type'])}</td>"
                   f"<td>{s['units'] - s['skipped']}</td><td>{s['client_delivered']}</td>"
                   f"<td>{s.get('filtered_out', 0)}</td><td>{s['collisions']}</td><td>{s['evaluation_errors']}</td>"
                   f"<td>{s['skipped']}</td><td class=\"t\">{_e(s['status'])}</td></tr>")
    return "".join(out) + "</table>\n"


def _notes(data):
    """What is normal but worth knowing, said once under the table: expressions that threw on some messages."""
    if not data["notes"]:
        return ""
    return ("<p>Note: an SQL92 expression that throws on a message (a property missing or of another type) does not "
            "deliver it, as RocketMQ's broker does not:</p><ul>" + "".join(
                f"<li>{_whose(data, n)}{_e(n['group'])} / {_e(n['topic'])}: {_e(n['why'])}</li>"
                for n in data["notes"]) + "</ul>\n")


def window_text(window: Mapping[str, Any]) -> str:
    """The window in words: the bounds asked, and how many units of how many queues it covered (the queues'
    offsets are in summary.json and offsets.json); a cluster's, broker by broker."""
    if "units" not in window:  # {broker: window} of a run of several brokers
        return "; ".join(f"broker {name}: {window_text(w)}" for name, w in sorted(window.items()) if w)
    asked = [f"{k.replace('_', '-')} {window[k] if k in ('since', 'until') else 'given'}"
             for k in ("since", "until", "starting_offsets", "ending_offsets") if window.get(k) is not None]
    queues = sum(len(q) for q in (window.get("offsets") or {}).values())
    covered = f"{window.get('units', 0)} unit(s) of {queues} queue(s)"
    return f"{', '.join(asked)}: {covered}" if asked else covered


def _run(data):
    run, status = data["run"], data["status"]
    rows = [("store", run["store"]), ("exit status", f"{status} ({data['status_text']})"),
            ("job time", f"{run['job_seconds']} s" if run.get("job_seconds") is not None else None),
            ("from", run["from"]), ("SQL92 dialect", run["rocketmq_version"]), ("sink", run.get("sink") or "parquet")]
    window = run.get("window") or {}
    if window:
        rows.append(("window", window_text(window)))
    out = ["<h2>The run</h2><table>"]
    out += [f"<tr><th>{_e(k)}</th><td class=\"t\">{_e(v)}</td></tr>" for k, v in rows if v is not None]
    out.append("</table>")
    out += _brokers(data["brokers"])
    if data["warnings"]:
        out.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in data["warnings"]) + "</ul>")
    return "\n".join(out) + "\n"


def _brokers(brokers):
    """Each broker's own figures (summary.json's `brokers`), for a run of several."""
    if len(brokers) < 2:
        return []
    keys = ["units", "skipped", "broker_delivered", "client_delivered", "collisions"]
    out = ["<h2>Brokers</h2><table><tr><th>broker</th><th>store</th>" + "".join(f"<th>{_e(k)}</th>" for k in keys)
           + "</tr>"]
    for name, b in sorted(brokers.items()):
        out.append(f"<tr><td>{_e(name)}</td><td class=\"t\">{_e(b['store'])}</td>"
                   + "".join(f"<td>{_e(b['totals'].get(k))}</td>" for k in keys) + "</tr>")
    return out + ["</table>"]


def _whose(data, sub):
    """`broker: ` before a subscription's name in a run of several brokers (each has its own rows)."""
    return f"{_e(sub.get('broker'))}: " if len(data["brokers"]) > 1 else ""


def _timelines(data):
    subs = [s for s in data["subscriptions"] if s["status"] == "OK"]
    out = ["<h2>Delivered over store time</h2>"]
    if not data["bucket_ms"]:
        return out[0] + "<p>No message in scope.</p>\n"
    axis = [b for b, _ in subs[0]["timeline"]] if subs else []
    out.append(f"<p>Buckets of {data['bucket_ms'] // 1000} s, the same axis for every group: {_e(_time(axis[0]))} "
               f"to {_e(_time(axis[-1] + data['bucket_ms']))}.</p>" if axis else "")
    out.append("<p class=\"key\">" + "".join(f"<span style=\"background:{c}\"></span>{n}" for n, c in COLORS.items())
               + "</p>")
    for s in subs:
        collided = dict(map(tuple, s["collided_timeline"]))
        filtered = dict(map(tuple, s["filtered_timeline"]))
        series = [(b, d, collided.get(b, 0), filtered.get(b, 0)) for b, d in s["timeline"]]
        out.append(f"<figure><figcaption>{_whose(data, s)}{_e(s['group'])} / {_e(s['topic'])}: "
                   f"{s['client_delivered']} delivered, "
                   f"{s['collisions']} collided, {s['filtered_out']} filtered out</figcaption>"
                   f"{_bars(series, data['bucket_ms'])}</figure>")
    return "\n".join(out) + "\n"


def _bars(series, width_ms):
    """Stacked bars per bucket (delivered, collided, filtered), each with a tooltip."""
    top = max((d + c + f for _, d, c, f in series), default=0) or 1
    n = len(series) or 1
    bw = CHART_W / n
    out = [f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{CHART_W + 60}\" height=\"{CHART_H + 20}\" "
           f"role=\"img\"><text x=\"0\" y=\"10\" font-size=\"10\">{top}</text>"
           f"<line x1=\"50\" y1=\"{CHART_H}\" x2=\"{CHART_W + 50}\" y2=\"{CHART_H}\" stroke=\"#999\"/>"]
    for i, (bucket, d, c, f) in enumerate(series):
        y = CHART_H
        for count, color in ((d, COLORS["delivered"]), (c, COLORS["collided"]), (f, COLORS["filtered"])):
            if not count:
                continue
            h = count / top * (CHART_H - 10)
            y -= h
            out.append(f"<rect x=\"{50 + i * bw:.1f}\" y=\"{y:.1f}\" width=\"{max(bw - 0.5, 0.5):.1f}\" "
                       f"height=\"{h:.1f}\" fill=\"{color}\"><title>{_e(_time(bucket))}: {d} delivered, "
                       f"{c} collided, {f} filtered</title></rect>")
    out.append("</svg>")
    return "".join(out)


def _funnels(data):
    out = ["<h2>Funnel per group: units in scope, stage 1 (consume queue), stage 2 (broker), client</h2>"]
    for s in data["subscriptions"]:
        steps = [("in scope", s["units"] - s["skipped"]), ("stage 1", s["stage1_passed"]),
                 ("broker", s["broker_delivered"]), ("client", s["client_delivered"])]
        top = max(steps[0][1], 1)
        bars = "".join(f"<rect x=\"80\" y=\"{i * 18}\" width=\"{max(n / top * 500, 0.5):.1f}\" height=\"14\" "
                       f"fill=\"#5c6bc0\"><title>{name}: {n}</title></rect><text x=\"0\" y=\"{i * 18 + 11}\" "
                       f"font-size=\"11\">{name}</text><text x=\"{86 + n / top * 500:.1f}\" y=\"{i * 18 + 11}\" "
                       f"font-size=\"11\">{n}</text>" for i, (name, n) in enumerate(steps))
        status = "" if s["status"] == "OK" else f" <span class=\"bad\">{_e(s['status'])}: {_e(s['error'])}</span>"
        out.append(f"<figure><figcaption>{_whose(data, s)}{_e(s['group'])} / {_e(s['topic'])} "
                   f"({_e(s['expression_type'])} "
                   f"{_e(s['expression'])}){status}</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" "
                   f"width=\"660\" height=\"74\" role=\"img\">{bars}</svg></figure>")
    return "\n".join(out) + "\n"


def _errors(data, summary):
    rows = [s for s in data["subscriptions"] if s["evaluation_errors"]]
    if not rows:
        return "<h2>SQL92 evaluation errors</h2><p>None.</p>\n"
    out = ["<h2>SQL92 evaluation errors</h2><table><tr><th>group / topic</th><th>evaluated</th><th>threw</th>"
           "<th>example and hint</th></tr>"]
    for s in rows:
        mine = f"{s['group']}/{s['topic']}"
        if len(data["brokers"]) > 1:  # a run of several brokers says whose each warning is
            mine = f"broker {s.get('broker')}: {mine}"
        said = [w for w in summary.get("warnings", []) if w.startswith(mine)]
        out.append(f"<tr><td>{_whose(data, s)}{_e(s['group'])} / {_e(s['topic'])}</td><td>{s['evaluated']}</td>"
                   f"<td>{s['evaluation_errors']}</td><td class=\"t\">{_e(' '.join(said))}</td></tr>")
    return "".join(out) + "</table>\n"


def _bloom(data):
    rows = [s for s in data["subscriptions"] if s["expression_type"] == "SQL92" and s["status"] == "OK"]
    out = ["<h2>Bloom filter stage: let through, then dropped on the commit log</h2>"]
    if not rows:
        return out[0] + "<p>No SQL92 group.</p>\n"
    out.append("<table><tr><th>group / topic</th><th>stage 1 passed</th><th>bloom false positives</th>"
               "<th>rate</th></tr>")
    for s in rows:
        rate = s["bloom_false_positives"] / s["stage1_passed"] if s["stage1_passed"] else 0.0
        out.append(f"<tr><td>{_whose(data, s)}{_e(s['group'])} / {_e(s['topic'])}</td><td>{s['stage1_passed']}</td>"
                   f"<td>{s['bloom_false_positives']}</td><td>{rate:.1%}</td></tr>")
    return "".join(out) + "</table>\n"


def _audit(data):
    out = ["<h2>Bitmap audit per topic (stored ConsumeQueueExt bitmaps against all the store's registrations)</h2>"]
    topics = [t for t in data["bitmap_audit"] if t["bitmaps_compared"]]
    if not topics:
        return out[0] + "<p>No stored bitmap compared.</p>\n"
    out.append("<table><tr><th>topic</th><th>compared</th><th>mismatches</th><th>explained</th></tr>")
    out += [f"<tr><td>{_whose(data, t)}{_e(t['topic'])}</td><td>{t['bitmaps_compared']}</td>"
            f"<td>{t['bitmap_mismatches']}</td><td>{t['bitmap_mismatches_explained']}</td></tr>" for t in topics]
    return "".join(out) + "</table>\n"


def _damage(data):
    run, problems = data["run"], data["store_problems"]
    if not (run.get("corrupt_items") or run.get("skipped_units") or problems or run.get("uninflated_bodies")):
        return "<h2>Damaged and skipped units</h2><p>None.</p>\n"
    out = [f"<h2>Damaged and skipped units</h2><p>{run.get('corrupt_items') or 0} item(s) audited in "
           f"audit/corrupt/, {run.get('skipped_units') or 0} unit(s) of the subscriptions skipped, "
           f"{run.get('uninflated_bodies') or 0} bod(ies) not inflated (audit/bodies/).</p>"]
    if problems:
        out.append("<table><tr><th>file</th><th>offset</th><th>reason</th></tr>")
        out += [f"<tr><td>{_e(p.get('file'))}</td><td>{_e(p.get('offset'))}</td><td class=\"t\">"
                f"{_e(p.get('reason'))}</td></tr>" for p in problems[:200]]
        out.append("</table>")
    return "".join(out) + "\n"


def _embedded(data):
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return f"<script type=\"application/json\" id=\"report-data\">{text}</script>\n"
