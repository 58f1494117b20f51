"""The POP ledger (OUT/pop/, docs/output.md): every message a 5.x POP consumer group popped, one row per (broker,
group, topic, queue, offset), with how it ended, in one module: the events (task side: checkpoints, acks, batch
acks, the messages' keys of a decoded batch, written under the temporary OUT), then one Spark step that pairs them
(the checkpoint, its acks, the message and its revived copy lie in different splits) and writes the ledger with
Spark's writer: no ledger row goes through the driver, only the counts per group the summary shows.

The rules (RocketMQ 5.3.3's): a handle is a checkpoint covering the message (its wheel record and its revive-log
copy are one); an ack pairs with the handle of its (group, topic, queue, `so`, `pt`). A message's last handle
(latest pop time) decides: acked when it was acked; else revived when its copy (same UNIQ_KEY) is in its POP retry
topic (`%RETRY%<group>_<topic>`, V2 `+`; a retry topic's own message revives into that topic, further on); else
lost when the revive service has passed its checkpoint (the checkpoint's revive-log offset is at most
`CID_RMQ_SYS_REVIVE_GROUP`'s committed offset of that revive queue: PopReviveService commits the offset of the
last checkpoint it merged, and re-puts every un-acked message of an expired checkpoint first); else in flight.
An ack of an earlier handle is a changed invisible time (the broker acks the old handle when it writes the new
one).

Across nights: a row keeps its evidence (`handles`, its UNIQ_KEY, its copy), so that a later night's events join
it as one run over both nights would (`held_evidence`: NS.pop's rows merged with the night's,
jobs/sinks/iceberg/ledger_tables.py).
A night alone never calls lost what a later night may still answer: lost needs the message's key (its copy looked
for) and its POP retry topic read to its latest offset (`retry_cut`: a window that ends may stop before the copy);
otherwise such a row is in flight.

The events of one decoded batch (task side): the checkpoints, acks and batch acks a 5.x broker wrote for its POP
consumers, and the keys of the messages they popped, with what the ledger pairs them on; a part per split
(`pop_event` pieces).

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
from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from jobs.ledgers.report_bars import stacked_bars, states_in_words
from jobs.ledgers.spark_io import read_events, remove, sizes, write_empty_part, write_table
from jobs.policy import report_damage
from schemas.arrow_schemas import spark_schema
from schemas.log.lookup import read_records

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import Column, DataFrame, SparkSession

    Evidence = tuple[DataFrame, DataFrame, DataFrame]  # evidence's (handles, keys, copies)
    Bounds = dict[tuple[str, str, int], tuple[int, int]]  # keyless_bounds': {(broker, topic, queue_id): (lo, hi)}
    StoredKeys = Callable[[Bounds], DataFrame | None]  # carried_ledger's (or a lake's) keys of messages read before

# `plan` below is a jobs.plan.replay_plan.ReplayPlan and `out` a jobs.task.split_task.Pieces (or explain's audit):
# both of layers above the ledgers (setup.cfg [importlinter]), so typed Any here

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


def pop_topics(topics_present: Collection[str], narrowed: Collection[str] = ()) -> set[str]:
    """The topics the POP ledger reads whatever the subscriptions: the revive topics (`rmq_sys_REVIVE_LOG_*`) and,
    with them, the timer wheel (where checkpoints and acks wait before they reach the revive topic: a long
    invisible time's checkpoint is there only), unless --topics (`narrowed`) leaves them out."""
    revive = {t for t in topics_present if t.startswith(REVIVE_PREFIX)}
    wanted = revive | ({WHEEL_TOPIC} if revive and WHEEL_TOPIC in topics_present else set())
    return {t for t in wanted if not narrowed or t in narrowed}


def revive_progress(topics_present: Iterable[str], consumer_offsets: Mapping[tuple[str, str], Mapping[Any, Any]] | None
                    ) -> tuple[tuple[str, int, int], ...] | None:
    """((revive topic, revive queue, the revive service's committed offset), ...) of a store with a revive topic
    (consumerOffset.json's `<revive topic>@CID_RMQ_SYS_REVIVE_GROUP`: the revive service has merged every checkpoint
    up to that one); None for a store without one (no POP: the tasks extract no POP event)."""
    revive = sorted(t for t in topics_present if t.startswith(REVIVE_PREFIX))
    if not revive:
        return None
    return tuple((t, int(q), int(o)) for t in revive
                 for q, o in sorted((consumer_offsets or {}).get((t, REVIVE_GROUP), {}).items()))


def add_pop_pieces(plan: Any, topic: str, messages: pa.Table, out: Any) -> None:
    """A decoded batch's `pop_event` piece, when the store has POP (plan.pop_revive) and the batch holds any."""
    if plan.pop_revive is None or not messages.num_rows:
        return
    events = pop_records(plan, topic, messages, out) if _carries_pop(topic) else \
        None if topic.startswith(SYSTEM_PREFIX) else message_keys(messages)
    if events is not None and events.num_rows:
        out.add("pop_event", events)


def _carries_pop(topic):
    return topic == WHEEL_TOPIC or topic.startswith(REVIVE_PREFIX)


def message_keys(messages: pa.Table) -> pa.Table:
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


def pop_records(plan: Any, topic: str, messages: pa.Table, out: Any) -> pa.Table | None:
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


def history(events: Iterable[Mapping[str, Any]], copies: Iterable[Mapping[str, Any]],
            committed: Mapping[int, int]) -> dict[str, Any]:
    """One message's POP history for one group (explain --key's), by the rules the job's Spark step pairs its
    events with (jobs/ledgers/pop.py): `events` its `ck`, `ack` and `bAck` events (dicts of POP_EVENT_SCHEMA,
    a handful), `copies` the revived copies found of it (dicts: retry_topic, retry_queue_offset,
    revived_store_timestamp), `committed` {revive queue: the revive service's committed offset}. Returns the
    handles in pop order (each with its first ack; an earlier handle's ack is a changed invisible time), the state
    and where a revived copy went."""
    handles: dict[tuple[Any, Any], dict[str, Any]] = {}
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


POP = "pop"
POP_EVENTS = "_pop_events"  # a run's POP events, until the driver has paired them into pop/
ACKED, REVIVED, INFLIGHT, LOST = "acked", "revived", "inflight", "lost"
CHANGE_INVISIBLE = "changeInvisible"
NO_CHECKPOINT, NO_MESSAGE = "checkpoint not read", "message not read"
# a handle's evidence, kept with its row so that a later night's evidence joins it (merged)
HANDLE_TYPE = pa.struct([
    ("pop_time", pa.int64()), ("ck_start_offset", pa.int64()), ("checkpoint", pa.bool_()),
    ("invisible_time", pa.int64()), ("revive_queue_id", pa.int32()), ("revive_offset", pa.int64()),
    ("acked_time", pa.int64()), ("acked_by", pa.string()),
])
LEDGER_SCHEMA = pa.schema([
    ("broker", pa.string()), ("group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("uniq_key", pa.string()), ("pops", pa.int64()), ("first_pop_time", pa.int64()),
    ("last_pop_time", pa.int64()), ("invisible_time", pa.int64()), ("state", pa.string()),
    ("acked_time", pa.int64()), ("acked_by", pa.string()), ("retry_topic", pa.string()),
    ("retry_queue_offset", pa.int64()), ("revived_store_timestamp", pa.int64()), ("revive_queue_id", pa.int32()),
    ("revive_offset", pa.int64()), ("cut_off", pa.string()), ("handles", pa.list_(HANDLE_TYPE)),
])
COUNT_FIELDS = ("popped", "acked", "revived", "inflight", "lost", "redeliveries", "ack_ms_median", "ack_ms_max")
PLACE = ["broker", "group", "topic", "queue_id", "queue_offset"]
HANDLE = PLACE + ["ck_start_offset", "pop_time"]
KEY_COLUMNS = ("broker", "topic", "queue_id", "queue_offset", "uniq_key")
LAKE, CARRIED = "lake", "carried"  # summary.json's names of a ledger merged across nights (pop_summary)


def write_pop_ledger(
        spark: SparkSession, out_uri: str, where: tuple[pafs.FileSystem, str], written: dict[str, tuple[int, int, int]],
        plans: Sequence[Any], held: DataFrame | None = None, stored_keys: StoredKeys | None = None,
        event_files: Sequence[str] = ()
) -> tuple[dict[str, tuple[int, int, int]], list[dict[str, Any]], list[dict[str, Any]] | None]:
    """OUT/pop/ from the run's committed POP events (`written`: the sink's {output: (files, rows, bytes)}), then
    the events removed. Returns ({"pop": (files, rows, bytes)}, the night's counts per (broker, group), the
    written table's counts or None): count_rows' rows. `where`: OUT's (filesystem, path); `plans`: the brokers'
    ReplayPlans (their revive progress, their window). `held`: a DataFrame of the ledger rows a table holds
    (Iceberg: jobs/sinks/iceberg/ledger_tables.py), whose evidence joins the night's: pop/ is then the merged
    table, counted apart from the night (whose counts are what its records tell, as a night chained by
    offsets.json has them);
    `stored_keys`: with it, stored_keys(keyless_bounds) gives a DataFrame of keys (KEY_COLUMNS) of messages an
    earlier night read (None: none), for the merged table's places no evidence names the key of (popped first
    tonight, read before). No row at all: a table of no row."""
    events = written.pop(POP_EVENTS, (0, 0, 0))
    fs, root = where
    base = out_uri.rstrip("/")
    night = None
    progress = revive_offsets(plans), retry_cut(plans)
    if events[1]:
        schema = POP_EVENT_SCHEMA.append(pa.field("broker", pa.string()))
        night = evidence(read_events(spark, schema, base, POP_EVENTS, event_files))
    found = joined(held, night, stored_keys)
    counts = table = []
    if found is not None:
        write_table(settle(*found, *progress), base, where, POP)
        table = count_rows(read_events(spark, LEDGER_SCHEMA, base, POP))
        counts = table if held is None else count_rows(settle(*night, *progress)) if night is not None else []
    if found is None or not sizes(fs, f"{root}/{POP}")[0]:
        write_empty_part(where, POP, LEDGER_SCHEMA)
    remove(fs, f"{root}/{POP_EVENTS}")
    return {POP: sizes(fs, f"{root}/{POP}")}, counts, None if held is None else table


def joined(held: DataFrame | None, night: Evidence | None, stored_keys: StoredKeys | None = None) -> Evidence | None:
    """evidence's (handles, keys, copies) of the held rows and of the night (either None), with the stored keys of
    the places no evidence names the key of (with_stored_keys); None when neither has any."""
    if held is None:
        found = night
    else:
        found = held_evidence(held) if night is None else \
            cast("Evidence", tuple(a.unionByName(b) for a, b in zip(held_evidence(held), night)))
    return found if found is None or stored_keys is None else with_stored_keys(found, stored_keys)


def revive_offsets(plans: Iterable[Any]) -> dict[str, int]:
    """{"<broker>@<revive queue>": committed offset} of the brokers' revive services ("" for a broker of no name)."""
    return {f"{p.broker or ''}@{q}": o for p in plans for _, q, o in (p.pop_revive or ())}


def retry_cut(plans: Iterable[Any]) -> dict[str, list[str]]:
    """{broker ("" for none): the POP retry topics its window did not read to their latest offsets} (ReplayPlan.
    retry_cut): the revive service re-puts a checkpoint's messages before it commits past it, so their copies are
    in a retry topic read to its end; in one cut short a later night may still find them."""
    return {p.broker or "": sorted(p.retry_cut) for p in plans if p.retry_cut}


def evidence(events: DataFrame) -> Evidence:
    """(handles, keys, copies) of a DataFrame of POP events: a row per checkpoint or ack of a message (HANDLE's
    columns, then HANDLE_TYPE's), the messages' UNIQ_KEYs by place, the revived copies by UNIQ_KEY."""
    from pyspark.sql import functions as F

    ev = events.withColumn("broker", F.coalesce(F.col("broker"), F.lit("")))
    is_ck = F.col("kind") == CK
    handles = ev.where(F.col("kind").isin(CK, ACK, BATCH_ACK)).select(
        *HANDLE, is_ck.alias("checkpoint"), F.when(is_ck, F.col("invisible_time")).alias("invisible_time"),
        F.when(is_ck, F.col("revive_queue_id")).alias("revive_queue_id"),
        F.when(is_ck, F.col("revive_offset")).alias("revive_offset"),
        F.when(~is_ck, F.col("event_time")).alias("acked_time"), F.when(~is_ck, F.col("kind")).alias("acked_by"))
    keys = ev.where(F.col("kind") == MESSAGE).select(*KEY_COLUMNS)
    copies = ev.where((F.col("kind") == MESSAGE) & F.col("first_pop_time").isNotNull()
                      & F.col("topic").startswith("%RETRY%")).select(
        "broker", "uniq_key", F.col("topic").alias("retry_topic"), F.col("queue_offset").alias("retry_queue_offset"),
        F.col("store_timestamp").alias("revived_store_timestamp"))
    return handles, keys, copies


def with_stored_keys(found: Evidence, stored_keys: StoredKeys) -> Evidence:
    """evidence's (handles, keys, copies) with the keys `stored_keys` finds of the places no evidence names the key
    of (a message read by an earlier night, popped first by a later one)."""
    handles, keys, copies = found
    bounds = keyless_bounds(handles, keys)
    extra = stored_keys(bounds) if bounds else None
    return handles, keys if extra is None else keys.unionByName(extra.select(*KEY_COLUMNS)), copies


def carried_ledger(spark: SparkSession, earlier: str) -> tuple[DataFrame | None, StoredKeys | None]:
    """(the POP ledger an earlier night's OUT holds, its stored keys) for a Parquet night chained by its
    offsets.json (`earlier`: that OUT's local folder, the file's): its pop/ rows as a DataFrame, whose evidence
    joins the night's as NS.pop's does (so pop/ tonight is every night's ledger so far, as one run would make it),
    and stored_keys over its messages/ (the wide layout: matched/) for places popped first tonight, read by it;
    (None, None) when it holds no pop/ (the night alone then says what its records tell: write_pop_ledger)."""
    from pyspark.sql import functions as F

    def at(name: str) -> str | None:
        path = os.path.join(earlier, name)
        return "file://" + os.path.abspath(path) if os.path.isdir(path) else None

    ledger = at(POP)
    if ledger is None:
        return None, None
    held = spark.read.schema(spark_schema(LEDGER_SCHEMA)).parquet(ledger)
    source = at("messages") or at("matched")
    if source is None:
        return held, None

    def stored_keys(bounds: Bounds) -> DataFrame:
        rows = spark.read.option("basePath", source).parquet(source)
        broker = F.col("broker") if "broker" in rows.columns else F.lit(None)  # a run of a bare --store: none
        rows = rows.select(
            F.coalesce(broker, F.lit("")).alias("broker"), "topic", F.col("queue_id").cast("int"),
            "queue_offset", F.coalesce(F.col("uniq_key"), F.col("msg_id")).alias("uniq_key"))
        within = spark.createDataFrame([(b, t, q, lo, hi) for (b, t, q), (lo, hi) in sorted(bounds.items())],
                                       "broker string, topic string, queue_id int, lo long, hi long")
        return rows.join(F.broadcast(within), ["broker", "topic", "queue_id"]).where(
            F.col("queue_offset").between(F.col("lo"), F.col("hi"))).select(*KEY_COLUMNS).distinct()
    return held, stored_keys


def keyless_bounds(handles: DataFrame, keys: DataFrame) -> Bounds:
    """{(broker, topic, queue_id): (lowest, highest queue offset)} of the places whose key no evidence holds: a
    row per queue collected, what the lake's messages are read within."""
    from pyspark.sql import functions as F

    queue = ["broker", "topic", "queue_id"]
    rows = handles.select(*queue, "queue_offset").distinct().join(
        keys.select(*queue, "queue_offset").distinct(), [*queue, "queue_offset"], "left_anti").groupBy(*queue).agg(
        F.min("queue_offset").alias("lo"), F.max("queue_offset").alias("hi")).collect()
    return {(r["broker"], r["topic"], r["queue_id"]): (r["lo"], r["hi"]) for r in rows}


def held_evidence(rows: DataFrame) -> Evidence:
    """evidence's (handles, keys, copies) of ledger rows an earlier night wrote: each row's handles, its
    UNIQ_KEY, its copy. Joined with a night's, the rows come out as one run over both nights would make them."""
    from pyspark.sql import functions as F

    rows = rows.withColumn("broker", F.coalesce(F.col("broker"), F.lit("")))
    handles = rows.select(*PLACE, F.explode("handles").alias("h")).select(
        *PLACE, *(F.col(f"h.{f.name}").alias(f.name) for f in HANDLE_TYPE))
    keys = rows.where(F.col("uniq_key").isNotNull()).select(*KEY_COLUMNS)
    copies = rows.where(F.col("retry_topic").isNotNull()).select(
        "broker", "uniq_key", "retry_topic", "retry_queue_offset", "revived_store_timestamp")
    return handles.select(*HANDLE, *(f.name for f in HANDLE_TYPE if f.name not in HANDLE)), keys, copies


def settle(handles: DataFrame, keys: DataFrame, copies: DataFrame, committed: Mapping[str, int],
           cut: Mapping[str, Sequence[str]] | Column) -> DataFrame:  # `cut` is reused below as a Column
    """The ledger (LEDGER_SCHEMA's columns) of evidence's (handles, keys, copies); `committed`: revive_offsets',
    `cut`: retry_cut's. A message is lost only when its key is known (the run read it: its copy was looked for),
    the revive service passed its last checkpoint, and its POP retry topic was read to its end; else, neither
    acked nor revived, it is in flight, and its `cut_off` says what the run did not read."""
    from pyspark.sql import functions as F

    one = handles.groupBy(*HANDLE).agg(
        F.max("checkpoint").alias("checkpoint"), F.max("invisible_time").alias("invisible_time"),
        F.max("revive_queue_id").alias("revive_queue_id"), F.max("revive_offset").alias("revive_offset"),
        F.min_by(F.struct(F.col("acked_time").alias("time"), F.col("acked_by").alias("kind")), F.col("acked_time"))
        .alias("ack"))
    kept = ("pop_time", "ck_start_offset", "checkpoint", "invisible_time", "revive_queue_id", "revive_offset")
    handle = F.struct(*(F.col(c) for c in kept), F.col("ack.time").alias("acked_time"),
                      F.col("ack.kind").alias("acked_by"))
    last = F.struct(*(F.col(c) for c in ("pop_time", "invisible_time", "revive_queue_id", "revive_offset", "ack")))
    rows = one.groupBy(*PLACE).agg(
        F.sum(F.col("checkpoint").cast("long")).alias("pops"),
        F.min("pop_time").alias("first_pop_time"), F.max("pop_time").alias("last_pop_time"),
        F.max_by(last, F.struct("pop_time", "ck_start_offset")).alias("last"),
        F.array_sort(F.collect_list(handle)).alias("handles"))
    keys = keys.groupBy("broker", "topic", "queue_id", "queue_offset").agg(F.min("uniq_key").alias("uniq_key"))
    rows = rows.join(keys, ["broker", "topic", "queue_id", "queue_offset"], "left")
    r = rows.alias("r")
    c = copies.alias("c")
    own = F.col("r.topic").startswith("%RETRY%")
    goes_to = F.when(own, F.col("c.retry_topic") == F.col("r.topic")).otherwise(
        (F.col("c.retry_topic") == F.concat(F.lit("%RETRY%"), F.col("r.group"), F.lit("_"), F.col("r.topic")))
        | (F.col("c.retry_topic") == F.concat(F.lit("%RETRY%"), F.col("r.group"), F.lit("+"), F.col("r.topic"))))
    further = ~own | (F.col("c.retry_queue_offset") > F.col("r.queue_offset"))
    revived = r.join(c, (F.col("r.broker") == F.col("c.broker")) & (F.col("r.uniq_key") == F.col("c.uniq_key"))
                     & goes_to & further & (F.col("c.revived_store_timestamp") >= F.col("r.first_pop_time")), "left")
    copy = F.struct("c.retry_topic", "c.retry_queue_offset", "c.revived_store_timestamp")
    rows = revived.groupBy(*(F.col(f"r.{n}") for n in PLACE + ["pops", "first_pop_time", "last_pop_time", "last",
                                                               "uniq_key", "handles"])).agg(
        F.min_by(copy, F.col("c.retry_queue_offset")).alias("copy"))
    pairs = [F.lit(x) for key, offset in sorted(committed.items()) for x in (key, offset)]
    queue = F.concat(F.col("broker"), F.lit("@"), F.col("last.revive_queue_id").cast("string"))
    passed = F.element_at(F.create_map(*pairs), queue) if pairs else F.lit(None).cast("long")
    acked = F.col("last.ack").isNotNull()
    is_revived = F.col("copy.retry_topic").isNotNull()
    lost = (F.col("last.revive_offset") <= passed) & F.col("uniq_key").isNotNull() & ~_cut_short(cut)
    state = F.when(acked, ACKED).when(is_revived, REVIVED).when(F.coalesce(lost, F.lit(False)), LOST) \
        .otherwise(INFLIGHT)
    cut = F.concat_ws("; ", F.when(F.col("pops") == 0, F.lit(NO_CHECKPOINT)),
                      F.when(F.col("uniq_key").isNull(), F.lit(NO_MESSAGE)))
    return rows.select(
        F.when(F.col("broker") != "", F.col("broker")).alias("broker"), "group", "topic",
        F.col("queue_id").cast("int"), "queue_offset", "uniq_key", "pops", "first_pop_time", "last_pop_time",
        F.col("last.invisible_time").alias("invisible_time"), state.alias("state"),
        F.col("last.ack.time").alias("acked_time"), F.col("last.ack.kind").alias("acked_by"),
        F.col("copy.retry_topic").alias("retry_topic"), F.col("copy.retry_queue_offset").alias("retry_queue_offset"),
        F.col("copy.revived_store_timestamp").alias("revived_store_timestamp"),
        F.col("last.revive_queue_id").alias("revive_queue_id"), F.col("last.revive_offset").alias("revive_offset"),
        F.when(cut != "", cut).alias("cut_off"), "handles")


def _cut_short(cut):
    """Whether a row's POP retry topic (its own for a retry topic's message, else %RETRY%<group>_<topic> or V2's
    `+`) is one its broker's window did not read to its end (`cut`: retry_cut's)."""
    from pyspark.sql import functions as F

    if not cut:
        return F.lit(False)
    pairs = [x for broker, topics in sorted(cut.items())
             for x in (F.lit(broker), F.array(*(F.lit(t) for t in topics)).cast("array<string>"))]
    short = F.element_at(F.create_map(*pairs), F.col("broker"))
    mine = F.when(F.col("topic").startswith("%RETRY%"), F.array(F.col("topic"))).otherwise(F.array(
        *(F.concat(F.lit("%RETRY%"), F.col("group"), F.lit(sep), F.col("topic")) for sep in ("_", "+"))))
    return F.coalesce(F.arrays_overlap(short, mine), F.lit(False))


def count_rows(ledger: DataFrame) -> list[dict[str, Any]]:
    """Per (broker, group): popped, acked, revived, in flight, lost, redeliveries (rows of messages popped from a
    POP retry topic: a revived message delivered again), time to ack (acked_time - first_pop_time, ms: exact
    median and max). Small: a row per group, collected."""
    from pyspark.sql import functions as F

    state = F.col("state")
    rows = ledger.groupBy("broker", "group").agg(
        F.count(F.lit(1)).alias("popped"),
        *(F.sum((state == s).cast("long")).alias(s) for s in (ACKED, REVIVED, INFLIGHT, LOST)),
        F.sum(F.col("topic").startswith("%RETRY%").cast("long")).alias("redeliveries"),
        F.percentile(F.col("acked_time") - F.col("first_pop_time"), F.lit(0.5)).alias("ack_ms_median"),
        F.max(F.col("acked_time") - F.col("first_pop_time")).alias("ack_ms_max")).collect()
    return sorted(({"broker": r["broker"], "group": r["group"],
                    **{k: (None if r[k] is None else float(r[k]) if k == "ack_ms_median" else int(r[k]))
                       for k in COUNT_FIELDS}} for r in rows),
                  key=lambda r: (r["broker"] or "", r["group"] or ""))


def pop_summary(counts: list[dict[str, Any]], table: list[dict[str, Any]] | None = None,
                across: str = LAKE) -> dict[str, Any]:
    """summary.json's `pop`: the night's counts per (broker, group) and their totals; with a ledger merged across
    nights (`table`: its counts), the same of it under `across`: `lake` (NS.pop) or `carried` (a Parquet night's
    pop/, an earlier night's carried into it: carried_ledger)."""
    out = {"groups": counts, "totals": {k: sum(r[k] for r in counts)
                                        for k in ("popped", "acked", "revived", "inflight", "lost", "redeliveries")}}
    return out if table is None else dict(out, **{across: pop_summary(table)})


def across_nights(pop: Mapping[str, Any]) -> Mapping[str, Any]:
    """summary.json's `pop` as known across nights: the lake's or the carried ledger's when there is one, else the
    night's own."""
    return pop.get(LAKE) or pop.get(CARRIED) or pop


STATE_WORDS = {  # what each state means, as the report says it
    ACKED: ("#2e7d32", "acked: a consumer acked it (its last handle's ack; an earlier handle's is a changed invisible "
            "time)"),
    REVIVED: ("#ef6c00", "revived: not acked within its invisible time, the revive service put a copy into the "
              "group's POP retry topic, delivered again"),
    INFLIGHT: ("#5c6bc0", "in flight: popped, not acked, not (yet) revived: its invisible time runs, or its copy is "
               "after the window, or the night did not read the message (cut_off says which)"),
    LOST: ("#c62828", "lost: never acked, its checkpoint passed by the revive service, no copy in the POP retry "
           "topic"),
}
POP_COLUMNS = ("popped", "acked", "revived", "inflight", "lost", "redeliveries", "ack_ms_median", "ack_ms_max")


def report_section(pop: Mapping[str, Any] | None, escape: Callable[[Any], str]) -> str:
    """The report's section (HTML) of summary.json's `pop`: the states in words, a stacked bar per (broker, group)
    and the counts' table, as known across nights (across_nights); "" without any. `escape`: the report's HTML
    escape."""
    settled = across_nights(pop or {})
    groups = settled.get("groups") or []
    if not groups:
        return ""
    where = " (across nights)" if settled is not pop else ""
    out = [f"<h2>POP consumption (OUT/pop/){where}</h2>", states_in_words(settled["totals"], STATE_WORDS, escape),
           stacked_bars({(g["broker"] or "", g["group"] or ""): g for g in groups}, STATE_WORDS, escape),
           "<table><tr><th>broker</th><th>group</th>"
           + "".join(f"<th>{escape(n.replace('_', ' '))}</th>" for n in POP_COLUMNS) + "</tr>"]
    for g in groups:
        cls = " class=\"bad\"" if g["lost"] else ""
        out.append(f"<tr{cls}><td class=\"t\">{escape(g['broker'])}</td><td class=\"t\">{escape(g['group'])}</td>"
                   + "".join(f"<td>{escape(g[n])}</td>" for n in POP_COLUMNS) + "</tr>")
    return "".join(out) + "</table>\n"


def lost_warnings(counts: Iterable[Mapping[str, Any]]) -> list[str]:
    """The operator's alarm: messages the revive service passed without acking or reviving them (`counts`: the
    lake's when there is one, which knows what earlier nights read)."""
    return [f"POP: {r['lost']} message(s) of group {r['group']}" + (f" (broker {r['broker']})" if r["broker"] else "")
            + " lost: never acked, their checkpoint passed by the revive service, not in the POP retry topic "
            "(OUT/pop/, state lost)" for r in counts if r["lost"]]
