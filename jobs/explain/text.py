"""An explain answer (jobs/explain/report.py) as text: the verdict first, then what the broker read and held,
then each stage in the order a unit meets them."""
import json
from collections.abc import Mapping
from typing import Any

from filtering.sql92.trace import render as render_tree
from jobs.explain.times import ms_text


def render(answer: Mapping[str, Any]) -> list[str]:
    """The answer as text lines."""
    outcome = "DELIVERED" if answer["delivered"] else f"NOT DELIVERED (stage {answer['stage']})"
    whose = f"{answer['broker']}: " if "broker" in answer else ""  # a unit of one of several brokers
    head = [f"{whose}{answer['group']} / {answer['topic']} queue {answer['queue_id']} offset {answer['queue_offset']}: "
            f"{outcome}", f"  {answer['verdict']}", ""]
    return (head + _unit(answer["unit"]) + _message(answer["message"]) + _subscription(answer["subscription"])
            + _scope(answer["scope"]) + _consume_queue(answer["consume_queue"]) + _commit_log(answer["commit_log"])
            + _client(answer["client"]))


def _unit(u):
    lines = ["unit (consume queue)",
             f"  commit-log offset {u['commitlog_offset']}, size {u['size']}, tag field {u['tags_code_raw']}"]
    ext = u["ext"]
    if ext is None:
        lines.append("  the tag field is the tag code (no ext address)")
    elif ext.get("unreadable"):
        lines.append(f"  ext address {ext['address']} (position {ext['position']}): ext unit unreadable")
    else:
        lines.append(f"  ext address {ext['address']} (position {ext['position']}): tag code {ext['tags_code']}, "
                     f"msgStoreTime {ext['msg_store_time']}, bitmap {ext['bitmap'] or 'none'}")
    return lines


def _message(m):
    lines = ["message (commit log)",
             f"  msgId {m['msg_id']}, storeTimestamp {ms_text(m['store_timestamp'])}, tags {m['tags']!r}, "
             f"keys {m['keys']!r}",
             f"  properties {json.dumps(m['properties'], ensure_ascii=False)}"]
    body = m["body"]
    if body["inflated"] is not None:  # a compressed body
        lines.append(f"  body {body['compression']}-compressed, inflated to {body['size']} bytes" if body["inflated"]
                     else f"  body NOT INFLATED: {body['reason']}")
    return lines


def _subscription(s):
    lines = ["subscription (as the broker holds it)",
             f"  {s['type']} {s['expression']!r} "
             + ("(the store's registration, config/consumerFilter.json)" if s["stored"]
                else "(not registered in the store: --subscriptions, --subscription or the retry rule)")]
    if "code_set" in s:
        lines.append("  '*': every tag" if s["all"] else f"  code set {s['code_set']}")
    if s["type"] == "SQL92":
        born = f"bornTime {s['born_time']} (from {s['born_from']})" if s.get("born_from") else \
            "no bornTime (registered before the first message)"
        lines.append(f"  {born}, bloom bits {s['bloom_bits']}")
    if s["retry_rule"]:
        lines.append(f"  {s['retry_rule']}")
    if s["warning"]:
        lines.append(f"  warning: {s['warning']}")
    return lines


def _scope(scope):
    lines = [f"scope: --from {scope['from']}" + ("" if scope["in_scope"] else ": OUT OF SCOPE")]
    if "committed_offset" in scope:
        c = scope["committed_offset"]
        lines.append(f"  committed offset {c} (config/consumerOffset.json)" if c is not None
                     else "  no committed offset for this queue: from its start")
    if "store_timestamp" in scope:
        lines.append(f"  window since {scope['since']} until {scope['until']} (since <= t < until), "
                     f"storeTimestamp {scope['store_timestamp']}")
    if "reason" in scope:
        lines.append(f"  {scope['reason']}")
    return lines


def _consume_queue(cq):
    return ["stage 1, consume queue: " + ("passed" if cq["passed"] else "FILTERED"), f"  {cq['reason']}"]


def _commit_log(cl):
    lines = ["stage 2, commit log: " + _state(cl)]
    if "tree" not in cl:
        return lines + [f"  {cl['reason']}"]
    outcome = cl["result"] if cl["error"] is None else f"throws {cl['error']}"
    note = "" if cl["reached"] else (" (not reached; this is what the dispatcher computed when the message was "
                                     "stored, which is why the bitmap lacks the group's bits)")
    lines += [f"  {cl['expression']}  =>  {outcome}{note}"] + [f"    {line}" for line in render_tree(cl["tree"])]
    return lines + ([f"  in short: {cl['hint']}"] if cl["hint"] else [])


def _client(client):
    return ["client (4.x consumer): " + _state(client), f"  {client['reason']}"]


def _state(stage):
    if not stage["applies"]:
        return "does not apply"
    if not stage["reached"]:
        return "not reached"
    return "passed" if stage["passed"] else "FILTERED"
