"""The POP ledger's events of one decoded batch (docs/output.md, "The POP ledger"): the checkpoints, acks and
batch acks a 5.x broker wrote for its POP consumers, and the keys of the messages they popped, with what the
ledger pairs them on. Task side: a part per split (`pop_event` pieces); the driver's Spark step pairs them
(jobs/ledgers/pop_ledger.py).

How RocketMQ 5.3.3 stores them (broker PopMessageProcessor.appendCheckPoint, AckMessageProcessor,
ChangeInvisibleTimeProcessor, PopReviveService; store pop/PopCheckPoint, AckMsg, BatchAckMsg): a pop writes a
checkpoint (tag `ck`, a fastjson PopCheckPoint body: `so` start offset, `d` the popped messages' offset diffs,
`n` their count, `pt` pop time, `it` invisible time, `q`, `t`, `c` group) to the revive topic
`rmq_sys_REVIVE_LOG_<cluster>` through the timer wheel: first a record in `rmq_sys_wheel_timer` with REAL_TOPIC
(the revive topic) and REAL_QID (the revive queue), then, when due, a copy in the revive queue (same UNIQ_KEY and
body). An ack is tag `ack` (AckMsg: `ao` the acked offset, `so` and `pt` of its checkpoint) or `bAck`
(BatchAckMsg: `aol` a list), the same way; 5.0/5.1's long names (`ackOffset`, `startOffset`, ...) are fastjson's
alternate names and read too. A changed invisible time is a new checkpoint (n 1) and an ack of the old one.
A message the revive service re-puts into a POP retry topic keeps its UNIQ_KEY and gets 1ST_POP_TIME.

Event kinds: `ck` (a row per message a checkpoint covers), `ack` and `bAck` (a row per acked offset),
`message` (every record of a topic a POP group may pop, and of POP retry topics: its UNIQ_KEY, the revived
copies' 1ST_POP_TIME). A checkpoint or ack whose body is not such JSON is damaged data under the corruption
policy: the run stops, or (--on-corrupt skip) it is audited and left out of the ledger."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from jobs.policy import report_damage
from schemas.log.lookup import read_records

WHEEL_TOPIC = "rmq_sys_wheel_timer"  # 5.x TimerMessageStore.TIMER_TOPIC
REVIVE_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC + cluster name
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP: the revive service's progress
SYSTEM_PREFIX = "rmq_sys_"
CK, ACK, BATCH_ACK, MESSAGE = "ck", "ack", "bAck", "message"  # PopAckConstants.CK_TAG, ACK_TAG, BATCH_ACK_TAG
POP_EVENT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("ck_start_offset", pa.int64()), ("pop_time", pa.int64()),
    ("invisible_time", pa.int64()), ("event_time", pa.int64()), ("revive_queue_id", pa.int32()),
    ("revive_offset", pa.int64()), ("uniq_key", pa.string()), ("first_pop_time", pa.int64()),
    ("store_timestamp", pa.int64()), ("commitlog_offset", pa.int64()),
])
# a body's fields, short names then fastjson's alternate (5.0/5.1) names, as read_json types them
_BODY_FIELDS = {
    "so": pa.int64(), "startOffset": pa.int64(), "pt": pa.int64(), "popTime": pa.int64(),
    "it": pa.int64(), "invisibleTime": pa.int64(), "n": pa.int64(), "num": pa.int64(),
    "q": pa.int64(), "queueId": pa.int64(), "t": pa.string(), "topic": pa.string(),
    "c": pa.string(), "cid": pa.string(), "consumerGroup": pa.string(),
    "d": pa.list_(pa.int64()), "queueOffsetDiff": pa.list_(pa.int64()),
    "ao": pa.int64(), "ackOffset": pa.int64(), "aol": pa.list_(pa.int64()), "ackOffsetList": pa.list_(pa.int64()),
}
_BODY_SCHEMA = pa.schema(list(_BODY_FIELDS.items()))
_SAME = {"so": "startOffset", "pt": "popTime", "it": "invisibleTime", "n": "num", "q": "queueId", "t": "topic",
         "d": "queueOffsetDiff", "ao": "ackOffset", "aol": "ackOffsetList"}
_NULL_ROW = pa.table({f.name: pa.nulls(1, f.type) for f in _BODY_SCHEMA})
_INT = r"^[+-]?[0-9]{1,18}$"


def pop_topics(topics_present, narrowed=()):
    """The topics the POP ledger reads whatever the subscriptions: the revive topics (`rmq_sys_REVIVE_LOG_*`) and,
    with them, the timer wheel (where checkpoints and acks wait before they reach the revive topic: a long
    invisible time's checkpoint is there only), unless --topics (`narrowed`) leaves them out."""
    revive = {t for t in topics_present if t.startswith(REVIVE_PREFIX)}
    wanted = revive | ({WHEEL_TOPIC} if revive and WHEEL_TOPIC in topics_present else set())
    return {t for t in wanted if not narrowed or t in narrowed}


def revive_progress(topics_present, consumer_offsets):
    """((revive topic, revive queue, the revive service's committed offset), ...) of a store with a revive topic
    (consumerOffset.json's `<revive topic>@CID_RMQ_SYS_REVIVE_GROUP`: the revive service has merged every checkpoint
    up to that one); None for a store without one (no POP: the tasks extract no POP event)."""
    revive = sorted(t for t in topics_present if t.startswith(REVIVE_PREFIX))
    if not revive:
        return None
    return tuple((t, int(q), int(o)) for t in revive
                 for q, o in sorted((consumer_offsets or {}).get((t, REVIVE_GROUP), {}).items()))


def add_pop_pieces(plan, topic, messages, out):
    """A decoded batch's `pop_event` piece, when the store has POP (plan.pop_revive) and the batch holds any."""
    if plan.pop_revive is None or not messages.num_rows:
        return
    events = pop_records(plan, topic, messages, out) if _carries_pop(topic) else \
        None if topic.startswith(SYSTEM_PREFIX) else message_keys(messages)
    if events is not None and events.num_rows:
        out.add("pop_event", events)


def _carries_pop(topic):
    return topic == WHEEL_TOPIC or topic.startswith(REVIVE_PREFIX)


def message_keys(messages):
    """`message` events: each record's place, UNIQ_KEY (the offset message id without one, as the client sees
    it) and 1ST_POP_TIME (a revived copy's)."""
    props = messages.column("properties")
    n = messages.num_rows
    first, _ = _number(_lookup(props, "1ST_POP_TIME"))
    nulls64 = pa.nulls(n, pa.int64())
    return pa.table([pa.repeat(pa.scalar(MESSAGE), n), pa.nulls(n, pa.string()), messages.column("topic"),
                     messages.column("queue_id"), messages.column("queue_offset"), nulls64, nulls64, nulls64,
                     nulls64, pa.nulls(n, pa.int32()), nulls64,
                     pc.coalesce(_lookup(props, "UNIQ_KEY"), messages.column("msg_id")), first,
                     messages.column("store_timestamp"), messages.column("commitlog_offset")],
                    schema=POP_EVENT_SCHEMA)


def pop_records(plan, topic, messages, out):
    """`ck`, `ack` and `bAck` events of a batch of the wheel or a revive topic: a row per message a checkpoint
    covers (`so` + each of `d`; `so` .. `so`+`n`-1 without `d`, as PopCheckPoint.ackOffsetByIndex), a row per
    offset an ack acks. The wheel's records of other real topics are the timer ledger's, not these."""
    props = messages.column("properties")
    tags = _lookup(props, "TAGS")
    is_pop = pc.is_in(tags, pa.array([CK, ACK, BATCH_ACK]))
    if topic == WHEEL_TOPIC:
        is_pop = pc.and_(is_pop, pc.starts_with(_lookup(props, "REAL_TOPIC"), REVIVE_PREFIX))
    rows = np.flatnonzero(pc.fill_null(is_pop, False).to_numpy(zero_copy_only=False))
    if not len(rows):
        return None
    sel = messages.take(pa.array(rows))
    body = sel.column("body") if plan.with_body else \
        read_records(plan.fs, plan.log, sel.column("commitlog_offset"), sel.column("store_size"), plan.max_body) \
        .column("body")  # read without bodies (--no-body): those of these few records read again, with theirs
    bodies, ok = _parsed(body)
    tag = pc.fill_null(_lookup(sel.column("properties"), "TAGS"), "").to_numpy(zero_copy_only=False)
    ok &= _complete(bodies, tag)
    if not ok.all():
        _audit(plan, out, sel, ~ok)
    if not ok.any():
        return None
    keep = pa.array(np.flatnonzero(ok))
    sel, tag = sel.take(keep), tag[ok]
    bodies = bodies.take(keep)
    props = sel.column("properties")
    wheel = topic == WHEEL_TOPIC
    if wheel:
        revive_qid, _ = _number(_lookup(props, "REAL_QID"))
        revive_qid, revive_offset = pc.cast(revive_qid, pa.int32()), pa.nulls(sel.num_rows, pa.int64())
    else:
        revive_qid, revive_offset = sel.column("queue_id"), sel.column("queue_offset")
    common = {"group": _either(bodies, "c", "cid", "consumerGroup"), "topic": _either(bodies, "t", "topic"),
              "queue_id": pc.cast(_either(bodies, "q", "queueId"), pa.int32()),
              "ck_start_offset": _either(bodies, "so", "startOffset"), "pop_time": _either(bodies, "pt", "popTime"),
              "event_time": sel.column("born_timestamp"), "revive_queue_id": revive_qid,
              "revive_offset": revive_offset, "uniq_key": _lookup(props, "UNIQ_KEY"),
              "store_timestamp": sel.column("store_timestamp"), "commitlog_offset": sel.column("commitlog_offset")}
    common = {k: _array(v) for k, v in common.items()}
    pieces = []
    for kind, lists in ((CK, _ck_offsets(bodies)), (ACK, None), (BATCH_ACK, _either(bodies, "aol", "ackOffsetList"))):
        at = np.flatnonzero(tag == kind)
        if not len(at):
            continue
        if kind == ACK:
            parents, offsets = at, _array(_either(bodies, "ao", "ackOffset")).take(pa.array(at))
        else:
            chosen = _array(lists).take(pa.array(at))
            parents = at[pc.list_parent_indices(chosen).to_numpy()]
            offsets = pc.list_flatten(chosen)
        take = pa.array(parents)
        columns = {k: v.take(take) for k, v in common.items()}
        invisible = _array(_either(bodies, "it", "invisibleTime")).take(take) if kind == CK else \
            pa.nulls(len(parents), pa.int64())
        pieces.append(pa.table({"kind": pa.repeat(pa.scalar(kind), len(parents)), **columns,
                                "queue_offset": offsets, "invisible_time": invisible,
                                "first_pop_time": pa.nulls(len(parents), pa.int64())}).select(POP_EVENT_SCHEMA.names)
                      .cast(POP_EVENT_SCHEMA))
    return pa.concat_tables(pieces) if pieces else None


def _ck_offsets(bodies):
    """Each checkpoint's offsets as a list column: `so` + each diff of `d`; without `d`, `so` .. `so`+`n`-1."""
    start = _array(_either(bodies, "so", "startOffset")).to_numpy(zero_copy_only=False)
    diffs = _array(_either(bodies, "d", "queueOffsetDiff"))
    count = pc.fill_null(_array(_either(bodies, "n", "num")), 0).to_numpy(zero_copy_only=False)
    sizes = np.where(diffs.is_null().to_numpy(zero_copy_only=False), count,
                     pc.fill_null(pc.list_value_length(diffs), 0).to_numpy(zero_copy_only=False)).astype(np.int64)
    starts = np.repeat(start, sizes)
    flat = pc.list_flatten(diffs).to_numpy(zero_copy_only=False).astype(np.int64)
    has = ~diffs.is_null().to_numpy(zero_copy_only=False)
    within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    add = within.copy()
    add[np.repeat(has, sizes)] = flat
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(starts + add, pa.int64()))


def _parsed(body):
    """(the bodies read as JSON by _BODY_SCHEMA, one row each, nulls where not; whether each is such JSON): the
    batch at once (newlines inside a body are JSON whitespace, read as spaces); where that fails, each body alone."""
    body = pc.replace_substring(pc.replace_substring(_array(body), b"\n", b" "), b"\r", b" ")
    n = len(body)
    try:
        return _read(_joined(body), n), np.ones(n, dtype=bool)
    except (pa.ArrowInvalid, ValueError):
        pass
    tables, ok = [], np.zeros(n, dtype=bool)
    for i in range(n):  # only a batch holding a damaged body comes here: find which
        try:
            tables.append(_read(_joined(body.slice(i, 1)), 1))
            ok[i] = True
        except (pa.ArrowInvalid, ValueError):
            tables.append(_NULL_ROW)
    return pa.concat_tables(tables), ok


def _joined(body):
    """The bodies of a binary array as one newline-separated buffer (its values buffer, a newline after each)."""
    lines = pc.binary_join_element_wise(body, pa.repeat(pa.scalar(b"", pa.binary()), len(body)), b"\n")
    lines = _array(lines)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return pa.py_buffer(lines.buffers()[2])[int(offsets[0]):int(offsets[-1])]


def _read(buffer, n):
    """n bodies' JSON objects as a table (ArrowInvalid or ValueError where they are not n such objects)."""
    if not buffer.size:
        raise ValueError("no body")
    table = pj.read_json(pa.BufferReader(buffer), parse_options=pj.ParseOptions(
        explicit_schema=_BODY_SCHEMA, unexpected_field_behavior="ignore", newlines_in_values=False),
        read_options=pj.ReadOptions(use_threads=False))
    if table.num_rows != n:
        raise ValueError(f"{table.num_rows} JSON objects for {n} bodies")
    return table.combine_chunks()


def _complete(bodies, tag):
    """Whether each body holds what its tag needs (the checkpoint's or ack's place, its pop time)."""
    need = ("t", "q", "so", "pt")
    ok = np.ones(bodies.num_rows, dtype=bool)
    for name in need:
        ok &= _array(_either(bodies, name, _SAME[name])).is_valid().to_numpy(zero_copy_only=False)
    ok &= _array(_either(bodies, "c", "cid", "consumerGroup")).is_valid().to_numpy(zero_copy_only=False)
    for kind, fields in ((CK, ("it",)), (ACK, ("ao",)), (BATCH_ACK, ("aol",))):
        mine = tag == kind
        for name in fields:
            ok[mine] &= _array(_either(bodies, name, _SAME[name])).is_valid().to_numpy(zero_copy_only=False)[mine]
    ck = tag == CK
    diffs = _array(_either(bodies, "d", "queueOffsetDiff")).is_valid().to_numpy(zero_copy_only=False)
    counts = _array(_either(bodies, "n", "num")).is_valid().to_numpy(zero_copy_only=False)
    ok[ck] &= (diffs | counts)[ck]
    return ok


def _either(bodies, *names):
    """A body field by its short name, else its alternate names (fastjson reads either)."""
    columns = [bodies.column(n) for n in names]
    return columns[0] if len(columns) == 1 else pc.coalesce(*columns)


def _audit(plan, out, sel, bad):
    """The POP records at `bad` to the corruption policy (jobs/task/split_decode.py's): the run stops, or
    they are audit/corrupt rows, still decided for the groups of their topic."""
    rows = np.flatnonzero(bad)
    paths = np.array([plan.log.file_at(int(o)).path for o in sel.column("commitlog_offset").to_numpy()[rows]],
                     dtype=object)
    for path in sorted(set(paths)):
        report_damage(plan, out, sel, rows[paths == path],
                      "POP checkpoint or ack whose body is not the JSON RocketMQ writes: left out of the POP ledger",
                      path, kept=True)


def _lookup(props, name):
    """The property's value per row (null where absent; a repeated name's last value, as a HashMap keeps)."""
    return pc.map_lookup(props, pa.scalar(name), "last")


def _number(values):
    """(the values parsed where they are Long.parseLong numbers, null elsewhere; where they are)."""
    ok = pc.fill_null(pc.match_substring_regex(values, _INT), False)
    parsed = pc.cast(pc.if_else(ok, pc.utf8_ltrim(values, characters="+"), pa.scalar(None, pa.string())), pa.int64())
    return parsed, ok.to_numpy(zero_copy_only=False)


def _array(values):
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def history(events, copies, committed):
    """One message's POP history for one group (explain --key's), by the rules the job's Spark step pairs its
    events with (jobs/ledgers/pop_ledger.py): `events` its `ck`, `ack` and `bAck` events (dicts of POP_EVENT_SCHEMA,
    a handful), `copies` the revived copies found of it (dicts: retry_topic, retry_queue_offset,
    revived_store_timestamp), `committed` {revive queue: the revive service's committed offset}. Returns the
    handles in pop order (each with its first ack; an earlier handle's ack is a changed invisible time), the state
    and where a revived copy went."""
    handles = {}
    for e in sorted(events, key=lambda e: (e["commitlog_offset"])):
        h = handles.setdefault((e["ck_start_offset"], e["pop_time"]), {
            "pop_time": e["pop_time"], "ck_start_offset": e["ck_start_offset"], "invisible_time": None,
            "revive_queue_id": None, "revive_offset": None, "checkpoint": False, "acked_time": None, "acked_by": None})
        if e["kind"] == CK:
            h["checkpoint"] = True
            for name in ("invisible_time", "revive_queue_id", "revive_offset"):
                h[name] = e[name] if h[name] is None or (e[name] is not None and e[name] > h[name]) else h[name]
        elif h["acked_time"] is None or e["event_time"] < h["acked_time"]:
            h["acked_time"], h["acked_by"] = e["event_time"], e["kind"]
    order = sorted(handles.values(), key=lambda h: (h["pop_time"], h["ck_start_offset"]))
    for h in order[:-1]:
        if h["acked_by"] is not None:
            h["acked_by"] = "changeInvisible"
    last = order[-1]
    first_pop = order[0]["pop_time"]
    copy = min((c for c in copies if c["revived_store_timestamp"] >= first_pop),
               key=lambda c: c["retry_queue_offset"], default=None)
    passed = committed.get(last["revive_queue_id"])
    state = "acked" if last["acked_time"] is not None else "revived" if copy else \
        "lost" if last["revive_offset"] is not None and passed is not None and last["revive_offset"] <= passed \
        else "inflight"
    return {"state": state, "handles": order, "revived": copy}
