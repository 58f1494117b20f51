"""explain --key's trace timeline: for each message found, the trace records its clients wrote (jobs/ledgers/
traces.py): when and by which producer group it was published, and each consume attempt of each group with its
time, cost, status and client host. A trace message's KEYS are the msgIds it traces, so the broker's index (or a
scan of the trace topics alone) finds the few trace messages of a key; their bodies are decoded as the job
decodes them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.explain.question import AuditNotes
from jobs.explain.times import ms_text
from jobs.ledgers.traces import SYSTEM_PREFIXES, trace_records, trace_topics
from schemas.index.key_lookup import locate_keys
from schemas.store import storefs
from schemas.trace_body import PUB, SUB_AFTER, SUB_BEFORE

if TYPE_CHECKING:
    from jobs.explain.question import Context

CONTEXT_CODES = {0: "SUCCESS", 2: "EXCEPTION", 3: "RETURNNULL", 4: "FAILED"}  # ConsumeReturnType's codes


def trace_timelines(ctx: Context, messages: pa.Table) -> dict[str, list[dict[str, Any]]]:
    """{UNIQ_KEY: [trace records naming it, in time order]} of the found messages (key_lookup.Found's records);
    {} for a store without a trace topic."""
    uniq = {dict(m["properties"] or []).get("UNIQ_KEY") or m["msg_id"]
            for m in messages.select(["properties", "msg_id"]).to_pylist()}
    topics = store_trace_topics(ctx)
    if not topics or not uniq:
        return {}
    found = locate_keys(ctx.fs, ctx.root, ctx.commitlog, sorted(uniq), sorted(topics))
    if not found.messages.num_rows:
        return {}
    records = trace_records(replace(ctx.plan, with_body=False), found.messages, AuditNotes())
    out: dict[str, list[dict[str, Any]]] = {}
    order = lambda r: (r["timestamp"] or r["trace_store_timestamp"], r["trace_commitlog_offset"],  # noqa: E731
                       r["record_index"])
    for r in sorted(records.to_pylist(), key=order):
        if r["msg_id"] in uniq:
            out.setdefault(r["msg_id"], []).append({k: v for k, v in r.items() if k not in (
                "kind", "queue_id", "queue_offset", "commitlog_offset")})
    return out


def store_trace_topics(ctx: Context) -> set[str]:
    """The store's trace topics (and --trace-topic's)."""
    return trace_topics({t for t, *_ in storefs.list_queues(ctx.fs, ctx.root)} | set(ctx.topic_configs),
                        ctx.options.trace_topics)


def not_traces(ctx: Context, rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The rows but those of trace messages found because their KEYS name the key (a trace message names the
    msgIds it traces): their records are the timeline, not copies of the message."""
    topics = store_trace_topics(ctx)
    return [r for r in rows if r["topic"] not in topics or key in (r["uniq_key"], r["msg_id"])]


def published_lines(records: Iterable[Mapping[str, Any]], topic: str) -> list[str]:
    """A message's Pub records to `topic` in words (who sent it, when, how long it took)."""
    return [f"  published at {ms_text(r['timestamp'])} by producer group {r['group']} ({r['cost_time']} ms, "
            f"{'ok' if r['success'] else 'failed'}{', client ' + r['client_host'] if r['client_host'] else ''})"
            for r in records if r["trace_type"] == PUB and r["topic"] == topic]


def traced_row(row: Mapping[str, Any]) -> bool:
    """Whether a found row is the message in its own business topic, where its consume attempts are told (not a
    retry or scheduled copy, not a system topic)."""
    return bool(row.get("traces")) and row["copy"] in (None, "", "message") and not row["topic"].startswith(
        SYSTEM_PREFIXES)


def attempt_lines(records: Sequence[Mapping[str, Any]], group: str) -> list[str]:
    """One group's consume attempts in words: each SubBefore (time, retry) with its SubAfter (cost, status)."""
    after = {(r["request_id"], r["msg_id"]): r for r in records if r["trace_type"] == SUB_AFTER}
    lines = []
    for r in records:
        if r["trace_type"] != SUB_BEFORE or r["group"] != group:
            continue
        done = after.get((r["request_id"], r["msg_id"]))
        code = None if done is None else CONTEXT_CODES.get(done["context_code"], done["context_code"])
        status = "no SubAfter record" if done is None else \
            f"{'CONSUMED' if done['success'] else 'FAILED'} ({code}, {done['cost_time']} ms)"
        host = f", client {r['client_host']}" if r["client_host"] else ""
        lines.append(f"    consume attempt {r['retry_times'] + 1 if r['retry_times'] is not None else '?'} at "
                     f"{ms_text(r['timestamp'])}: {status}{host}")
    return lines or ["    no consume trace record of this group"]
