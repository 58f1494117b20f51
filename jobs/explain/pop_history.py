"""explain --key's POP history: for each message found, what every POP group did with it (its handles, acks,
revived copy, state), by the POP ledger's rules (jobs/ledgers/pop.history). The checkpoints and acks
name a message by its queue and offset, not its key: every record of the store's revive topics and timer wheel
is read (a scan of those topics alone), their events taken by the job's own extraction."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.explain.question import AuditNotes, read_queue_units
from jobs.explain.times import ms_text
from jobs.ledgers.pop import history, pop_records, pop_topics, revive_progress
from jobs.plan.build import load_store_config_at
from jobs.plan.units.choose import queue_source
from schemas.store import storefs
from schemas.store.config import CONSUMER_OFFSET_FILE

if TYPE_CHECKING:
    from jobs.explain.question import Context


def pop_histories(ctx: Context, messages: pa.Table) -> dict[tuple[str, int, int], dict[str, dict[str, Any]]]:
    """{(topic, queue_id, queue_offset): {group: history}} of the found messages (key_lookup.Found's records) a
    POP group popped; {} for a store without POP."""
    found = [{"topic": m["topic"], "queue_id": m["queue_id"], "queue_offset": m["queue_offset"],
              "store_timestamp": m["store_timestamp"],
              "uniq_key": dict(m["properties"] or []).get("UNIQ_KEY") or m["msg_id"],
              "first_pop_time": dict(m["properties"] or []).get("1ST_POP_TIME")}
             for m in messages.select(["topic", "queue_id", "queue_offset", "store_timestamp", "properties",
                                       "msg_id"]).to_pylist()]
    queues = storefs.list_queues(ctx.fs, ctx.root)
    topics = pop_topics({t for t, *_ in queues} | set(ctx.topic_configs))
    if not topics or not found:
        return {}
    places = {(m["topic"], m["queue_id"], m["queue_offset"]) for m in found}
    events = [e for e in _events(ctx, topics, queues) if (e["topic"], e["queue_id"], e["queue_offset"]) in places]
    if not events:
        return {}
    offsets = load_store_config_at(ctx.fs, ctx.root, (CONSUMER_OFFSET_FILE,), ctx.options.on_corrupt).consumer_offsets
    committed = {q: o for _, q, o in revive_progress(topics, offsets) or ()}
    by_place: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for e in events:
        by_place.setdefault((e["topic"], e["queue_id"], e["queue_offset"], e["group"]), []).append(e)
    keys = {(m["topic"], m["queue_id"], m["queue_offset"]): m["uniq_key"] for m in found}
    out: dict[tuple[str, int, int], dict[str, dict[str, Any]]] = {}
    for (topic, qid, offset, group), mine in sorted(by_place.items()):
        names = (topic,) if topic.startswith("%RETRY%") else \
            (f"%RETRY%{group}_{topic}", f"%RETRY%{group}+{topic}")
        copies = [{"retry_topic": m["topic"], "retry_queue_offset": m["queue_offset"],
                   "revived_store_timestamp": m["store_timestamp"]} for m in found
                  if m["topic"] in names and m["uniq_key"] == keys[(topic, qid, offset)] and m.get("first_pop_time")
                  and (not topic.startswith("%RETRY%") or m["queue_offset"] > offset)]
        out.setdefault((topic, qid, offset), {})[group] = history(mine, copies, committed)
    return out


def _events(ctx, topics, queues):
    """The ck, ack and bAck events of every record of the revive topics and the wheel (dicts)."""
    events = []
    for topic, queue_id, *_ in sorted(queues):
        if topic not in topics:
            continue
        source = queue_source(ctx.options.units_from, ctx.fs, ctx.root, topic, queue_id, ctx.topic_configs)
        bounds = source.queue_bounds(ctx.fs, ctx.commitlog).get((topic, queue_id))
        if bounds is None or bounds[1] <= bounds[0]:
            continue
        _, messages = read_queue_units(ctx, topic, queue_id, list(range(bounds[0], bounds[1])))
        found = pop_records(ctx.plan, topic, messages, AuditNotes())
        events += found.to_pylist() if found is not None else []
    return events


def history_lines(histories: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The histories of one message in words, a line per group."""
    lines = []
    for group, h in sorted(histories.items()):
        steps = []
        for x in h["handles"]:
            step = f"popped at {ms_text(x['pop_time'])}" + (
                f" (invisible {x['invisible_time']} ms)" if x["checkpoint"] else " (its checkpoint not read)")
            if x["acked_by"] is not None:
                step += f", {x['acked_by']} at {ms_text(x['acked_time'])}"
            steps.append(step)
        end = h["state"]
        if h["revived"]:
            r = h["revived"]
            end += (f" into {r['retry_topic']} offset {r['retry_queue_offset']} at "
                    f"{ms_text(r['revived_store_timestamp'])}")
        lines.append(f"  POP {group}: {end}; " + "; ".join(steps))
    return lines
