"""Why one unit was (or was not) delivered to one group, in RocketMQ's terms: the facts behind each stage
of a decision the job made (jobs/explain/question.py), as one JSON-ready dict (jobs/explain/text.py prints it).

The verdict, every stage's pass or fail and the reasons are the job's TopicDecision (its reason codes, and
message_filter's codes for a bloom filter not consulted), put in words here; this module adds the inputs the
job looked at (the unit, the subscription, the bloom bits, the tag codes) and, for SQL92, the per-node trace
of the row evaluator (filtering/sql92/trace.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from filtering import bloom as bloom_mod
from filtering import decision as D
from filtering import message_filter as M
from filtering.decision import retry_filters
from filtering.message_filter import retry_filter_applies
from filtering.sql92 import trace as sql_trace
from filtering.sql92.diagnose import describe
from filtering.subscriptions import RETRY_PREFIX
from jobs.explain.times import with_iso
from schemas.log import layout as L
from schemas.log.records import CODECS, compression_types, not_inflated_reason
from schemas.queues.tag_codes import int32, java_hash

if TYPE_CHECKING:
    from jobs.explain.question import Context, Question

VERDICTS = {  # reason code -> (its name in the JSON answer, the verdict in words)
    D.DELIVERED: ("delivered", "delivered: the broker returns it (GetMessageStatus.FOUND) and the consumer keeps it"),
    D.BELOW_COMMITTED: ("below_committed", "not in the replay's scope: below the group's committed offset "
                                           "(--from committed): already consumed"),
    D.OUTSIDE_WINDOW: ("outside_window", "not in the replay's scope: its store time is outside the "
                                         "--since/--until window"),
    D.CQ_FILTERED: ("consume_queue_filtered", "filtered on the consume queue: ExpressionMessageFilter."
                    "isMatchedByConsumeQueue is false, the broker skips the unit without reading the message "
                    "(NO_MATCHED_MESSAGE)"),
    D.NOT_MATCHED: ("not_matched", "filtered on the commit log: isMatchedByCommitLog is false (only a Boolean "
                                   "TRUE matches), the broker does not return it"),
    D.EVALUATION_ERROR: ("evaluation_error", "filtered on the commit log: the expression threw, which the broker "
                                             "counts as not matched, and does not return it"),
    D.CLIENT_DROPPED: ("client_dropped", "returned by the broker, dropped by the 4.x consumer's exact tag check "
                                         "(PullAPIWrapper.processPullResult)"),
}
BLOOM_SKIPS = {  # message_filter's codes: why stage 1 passed without the bloom filter
    M.NO_BLOOM_DATA: "the registration has no valid bloom data",
    M.NO_EXT_UNIT: "the unit has no readable ext unit",
    M.BEFORE_BORN_TIME: "the message was stored at {store_time}, before the registration's bornTime {born_time} "
                        "(isMsgInLive false: its bitmap cannot hold the registration's bits)",
    M.NO_BITMAP: "the ext unit holds no bitmap of the bloom's width",
}


def report(ctx: Context, q: Question, i: int = 0) -> dict[str, Any]:
    """The whole answer for unit `i` of a Question (jobs/explain/question.py)."""
    unit = q.units.slice(i, 1).to_pylist()[0]
    message = q.messages.slice(i, 1).to_pylist()[0]
    message["properties"] = dict(message["properties"] or [])
    sub = q.csub.sub
    reason = q.reason(i)
    name, verdict = VERDICTS[reason]
    return {
        "group": sub.group, "topic": sub.topic, "queue_id": unit["queue_id"], "queue_offset": unit["queue_offset"],
        "delivered": reason == D.DELIVERED, "stage": q.stage(i), "reason": name, "verdict": verdict,
        "unit": _unit(unit),
        "message": {**with_iso({k: message[k] for k in ("msg_id", "tags", "keys", "store_timestamp", "born_timestamp",
                                                        "reconsume_times", "properties")},
                               ("store_timestamp", "born_timestamp")), "body": _body(ctx, message)},
        "subscription": _subscription(ctx, q.csub, message),
        "scope": _scope(ctx, q, i, unit, message),
        "consume_queue": _consume_queue(ctx, q, i, message),
        "commit_log": _commit_log(ctx, q, i, message),
        "client": _client(q, i, message),
    }


def _unit(unit):
    out = {k: unit[k] for k in ("commitlog_offset", "size", "tags_code_raw")}
    if not unit["is_ext_addr"]:
        out["tags_code"] = unit["tags_code_raw"]
        out["ext"] = None
        return out
    ext = {"address": unit["tags_code_raw"], "position": L.ext_position(unit["tags_code_raw"])}
    if unit["msg_store_time"] is None:
        ext["unreadable"] = True  # the broker's tag code is then missing, and missing matches
    else:
        bitmap = unit["filter_bitmap"]
        ext.update(tags_code=unit["tags_code"], msg_store_time=unit["msg_store_time"],
                   bitmap=bitmap.hex() if bitmap else None)
    out["ext"] = ext
    return out


def _body(ctx, message):
    """How the job writes the body: its size, and for a compressed one its codec and whether it is inflated
    (one beyond max_body_mb is not: the job writes it null and lists the message in OUT/audit/bodies/)."""
    body, sys_flag = message["body"], message["sys_flag"]
    if not sys_flag & L.COMPRESSED:
        return {"compression": None, "inflated": None, "size": len(body), "reason": None}
    ctype = int(compression_types(sys_flag))
    reason = None if body is not None else (
        f"{not_inflated_reason(ctype, ctx.plan.max_body)}: the job writes the message with a null body and lists "
        "it in OUT/audit/bodies/; the decision is the same (filters read properties, never the body)")
    return {"compression": CODECS[ctype], "inflated": body is not None, "size": None if body is None else len(body),
            "reason": reason}


def _subscription(ctx, csub, message):
    sub = csub.sub
    out = {"type": sub.expression_type, "expression": sub.expression, "stored": sub.stored}
    if csub.tag is not None:
        out["code_set"] = {t: java_hash(t) for t in sorted(csub.tag.tags)}
        out["all"] = csub.tag.match_all
    if sub.expression_type == "SQL92":
        out.update(born_time=sub.born_time, born_from=sub.born_from, bloom_bits=list(sub.bloom_bits or ()))
    out["retry_rule"] = _retry_rule(ctx, csub, message)
    out["warning"] = csub.warning  # compiled, but RocketMQ ignores part of it (trailing text)
    return out


def _retry_rule(ctx, csub, message):
    """The %RETRY% rule that applies, in words (None on other topics)."""
    sub = csub.sub
    if not sub.topic.startswith(RETRY_PREFIX):
        return None
    if retry_filter_applies(sub, ctx.plan.support_retry):
        original = message["properties"].get("RETRY_TOPIC")
        expression = _retry_expression(ctx, csub, message)
        if expression is None:
            return (f"filterSupportRetry: stage 1 passes; {sub.group} has no SQL92 filter on the original topic "
                    f"{original!r} (property RETRY_TOPIC), so the broker returns it")
        return (f"filterSupportRetry: stage 1 passes and stage 2 applies {sub.group}'s SQL92 filter of the original "
                f"topic {original} (property RETRY_TOPIC): {expression.text}")
    if (sub.expression_type, sub.expression) == ("TAG", "*"):
        return (f"{sub.topic} is read with TAG '*', a push consumer's retry subscription (every group gets it "
                f"unless --no-retry)")
    return None


def _retry_expression(ctx, csub, message):
    original = message["properties"].get("RETRY_TOPIC") or ""
    return retry_filters(ctx.plan).get(csub.sub.group, {}).get(original)


def _scope(ctx, q, i, unit, message):
    sub, window, reason = q.csub.sub, q.window, q.reason(i)
    out = {"from": ctx.options.start_from, "in_scope": bool(q.decision.in_scope[0, i])}
    if ctx.options.start_from == "committed":
        committed = {q: o for g, t, q, o in ctx.plan.start_offsets if (g, t) == (sub.group, sub.topic)}
        out["committed_offset"] = committed.get(unit["queue_id"])
    if window.since is not None or window.until is not None:
        out.update(since=window.since, until=window.until, store_timestamp=message["store_timestamp"])
    if reason == D.BELOW_COMMITTED:
        out["reason"] = (f"queue offset {unit['queue_offset']} is below {sub.group}'s committed offset "
                         f"{out['committed_offset']}: already consumed")
    elif reason == D.OUTSIDE_WINDOW:
        out["reason"] = f"storeTimestamp {message['store_timestamp']} is outside the window"
    return out


def _consume_queue(ctx, q, i, message):
    csub, passed = q.csub, bool(q.decision.stage1[0, i])
    if retry_filter_applies(csub.sub, ctx.plan.support_retry):
        return {"passed": passed, "reason": "filterSupportRetry on a %RETRY% topic: the consume-queue stage passes"}
    if csub.tag is not None:
        return _tag_stage(csub, q.decision.batch, i, message, passed)
    if csub.sql is not None:
        return _bloom_stage(ctx, q, i, passed)
    return {"passed": passed, "reason": "a custom (PYTHON) filter has no consume-queue stage"}


def _tag_stage(csub, batch, i, message, passed):
    out = {"passed": passed, "tags_code": int(batch.tags_code[i]), "code_missing": bool(batch.code_missing[i])}
    if csub.tag.match_all:
        out["reason"] = "subscription '*': every tag code passes"
    elif batch.code_missing[i]:
        out["reason"] = "the ext unit cannot be read: the tag code is missing, and a missing code matches"
    else:
        code, tag = int32(int(batch.tags_code[i])), message["tags"]
        of = f" (of tag {tag!r})" if tag else " (no tag)"
        where = "is in" if passed else "is not in"
        out["reason"] = f"tag code {code}{of} {where} the subscription's code set {_code_set(csub.tag)}"
    return out


def _code_set(tag_sub):
    return "{" + ", ".join(f"{t}: {java_hash(t)}" for t in sorted(tag_sub.tags)) + "}"


def _bloom_stage(ctx, q, i, passed):
    sub, d = q.csub.sub, q.decision
    skip = int(d.bloom_skips[0][i])
    if sub.stored:
        bitmap = d.batch.stored_bitmaps[i] if d.batch.stored_valid[i] else None
        source = "the ext unit's stored bitmap"
    else:
        bitmap = d.dispatched.recomputed[0][i] if d.dispatched.recomputed[1][i] else None
        source = "the bitmap recomputed from the registrations (an ad hoc subscription has no stored bits)"
    bits = list(sub.bloom_bits or ())
    checked = skip == M.BLOOM_CONSULTED
    out = {"passed": passed, "bloom_checked": checked, "bloom_bits": bits,
           "bitmap": bitmap.tobytes().hex() if bitmap is not None else None, "bitmap_source": source}
    if checked:
        out["bits_set"] = {str(p): bool(bloom_mod.is_hit_array(bitmap[None, :], [p])[0]) for p in bits}
        shown = ", ".join(f"{p} {'set' if s else 'not set'}" for p, s in out["bits_set"].items())
        out["reason"] = f"bloom isHit of bits [{shown}] in {source}: {'true' if passed else 'false'}"
    else:
        words = BLOOM_SKIPS[skip].format(store_time=int(d.batch.msg_store_time[i]), born_time=sub.born_time)
        out["reason"] = words + ": stage 1 passes without the bloom"
    return out


def _commit_log(ctx, q, i, message):
    d = q.decision
    csub, reached = q.csub, bool(d.stage1[0, i])
    expression = csub.sql
    if retry_filter_applies(csub.sub, ctx.plan.support_retry):
        expression = _retry_expression(ctx, csub, message)
        if expression is None:
            return {"applies": False, "reason": "no SQL92 filter of the original topic: nothing to evaluate"}
    elif csub.tag is not None:
        return {"applies": False, "reason": "a TAG subscription is decided on the consume queue alone"}
    if expression is None:  # a PYTHON filter
        return {"applies": True, "reached": reached, "passed": bool(d.broker[0, i]) if reached else None,
                "error": bool(d.errors[0, i]),
                "reason": "the custom filter's return value (an exception counts as not matched)"}
    result, error, root = sql_trace.trace(expression, message["properties"])
    return {"applies": True, "reached": reached, "passed": bool(d.broker[0, i]) if reached else None,
            "expression": expression.text,
            "result": sql_trace.java_text(result) if error is None else None,
            "error": sql_trace.error_text(error) if error is not None else None,
            "hint": describe(error) if error is not None else None, "tree": sql_trace.rows(root)}


def _client(q, i, message):
    csub, d = q.csub, q.decision
    if csub.tag is None or not csub.tag.tags:
        why = "subscription '*'" if csub.tag is not None else f"a {csub.sub.expression_type} subscription"
        return {"applies": False, "reason": f"{why}: the consumer keeps what the broker returns"}
    reached = bool(d.broker[0, i])
    tag = message["tags"]
    out = {"applies": True, "reached": reached, "passed": bool(d.client[0, i]) if reached else None,
           "tag": tag, "tags": sorted(csub.tag.tags)}
    if not reached:
        out["reason"] = "not reached: the broker did not return it"
    elif out["passed"]:
        out["reason"] = f"tag {tag!r} is one of {sorted(csub.tag.tags)}"
    else:
        same = [t for t in sorted(csub.tag.tags) if tag is not None and java_hash(t) == java_hash(tag)]
        collision = f"tag {tag} has the hash code of {', '.join(same)} ({java_hash(tag)}): " if same else ""
        out["reason"] = f"{collision}tag {tag!r} is not one of {sorted(csub.tag.tags)}, so the client drops it"
    return out
