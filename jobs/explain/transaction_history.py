"""explain --key's transaction history: for a transactional message found, its half copies (the first and each
re-put for a check), the ops that decided it, the committed copies in its real topic and the discard, with its
fate, by the transaction ledger's rules (jobs/ledgers/transactions.history). An op names a half by its queue
offset, not its key: every record of the op topic is read (a scan of that topic alone), its offsets taken by the
job's own extraction."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.explain.question import AuditNotes, events_per_topic, read_queue_units
from jobs.explain.times import ms_text
from jobs.ledgers.transactions import COMMIT, DISCARD, HALF, OP_TOPIC, history, transaction_events
from jobs.plan.units.choose import queue_source
from schemas.store import storefs

if TYPE_CHECKING:
    from jobs.explain.question import Context

KINDS = {HALF: "transaction_half", COMMIT: "transaction_commit", DISCARD: "transaction_discarded"}


def transaction_histories(ctx: Context,
                          messages: pa.Table) -> tuple[dict[str, dict[str, Any]], dict[int, str]]:
    """({UNIQ_KEY: its transaction's history}, {commit-log offset: explain's copy kind}) of the found messages
    (key_lookup.Found's records) that belong to a transaction; ({}, {}) when none does."""
    events = events_per_topic(ctx, messages, transaction_events)
    halves = {e["queue_offset"]: e["uniq_key"] for e in events if e["kind"] == HALF}
    if not halves:
        return {}, {}
    for op in _ops(ctx):
        if op["named_offset"] in halves:
            events.append(dict(op, uniq_key=halves[op["named_offset"]]))
    by_key: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_key.setdefault(e["uniq_key"], []).append(e)
    kinds = {e["commitlog_offset"]: KINDS[e["kind"]] for e in events if e["kind"] in KINDS}
    return {key: history(mine) for key, mine in by_key.items() if any(e["kind"] == HALF for e in mine)}, kinds


def _ops(ctx):
    """The op events (one per half offset named) of every record of the op topic's queue 0."""
    if OP_TOPIC not in {t for t, *_ in storefs.list_queues(ctx.fs, ctx.root)} | set(ctx.topic_configs):
        return []
    source = queue_source(ctx.options.units_from, ctx.fs, ctx.root, OP_TOPIC, 0, ctx.topic_configs)
    bounds = source.queue_bounds(ctx.fs, ctx.commitlog).get((OP_TOPIC, 0))
    if bounds is None or bounds[1] <= bounds[0]:
        return []
    _, messages = read_queue_units(ctx, OP_TOPIC, 0, list(range(bounds[0], bounds[1])))
    found = transaction_events(ctx.plan, OP_TOPIC, messages, AuditNotes())
    return found.to_pylist() if found is not None else []


def transaction_line(h: Mapping[str, Any]) -> str:
    """A transaction's story in words: who sent it where, its copies and checks, then its fate."""
    head = (f"transaction of {h['producer_group']} to {h['topic']} queue {h['queue_id']}: {h['half_copies']} half "
            f"cop{'y' if h['half_copies'] == 1 else 'ies'} (half queue offsets "
            f"{', '.join(str(x['queue_offset']) for x in h['halves'])}), checked {h['checks']} time(s)")
    ops = "".join(f"; op at {ms_text(o['store_timestamp'])} (commit-log offset {o['commitlog_offset']}) decided half "
                  f"offset {o['names_half_queue_offset']}" for o in h["ops"])
    if h["fate"] == "committed":
        twice = ": its consumers got it more than once" if h["commits"] > 1 else ""
        end = f"committed {h['commits']} time(s){twice}"
    elif h["fate"] == "discarded":
        end = f"discarded at {ms_text(h['decided_timestamp'])} (TRANS_CHECK_MAX_TIME_TOPIC) after its checks"
    elif h["fate"] == "rolled_back":
        end = f"rolled back at {ms_text(h['decided_timestamp'])}"
    else:
        end = "pending (no decision found)"
    return f"{head}{ops}; {end}"
