"""The POP ledger (OUT/pop/, docs/output.md): every message a 5.x POP consumer group popped, one row per (broker,
group, topic, queue, offset), with how it ended. The tasks wrote the events of their splits
(jobs/ledgers/pop_events.py: checkpoints, acks, batch acks, the messages' keys); here one Spark step pairs them
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
otherwise such a row is in flight."""
import pyarrow as pa

from jobs.ledgers.pop_events import ACK, BATCH_ACK, CK, MESSAGE, POP_EVENT_SCHEMA
from jobs.ledgers.spark_io import read_events, remove, sizes, write_empty_part, write_table

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


def write_pop_ledger(spark, out_uri, where, written, plans, held=None, stored_keys=None, event_files=()):
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


def joined(held, night, stored_keys=None):
    """evidence's (handles, keys, copies) of the held rows and of the night (either None), with the stored keys of
    the places no evidence names the key of (with_stored_keys); None when neither has any."""
    if held is None:
        found = night
    else:
        found = held_evidence(held) if night is None else \
            tuple(a.unionByName(b) for a, b in zip(held_evidence(held), night))
    return found if found is None or stored_keys is None else with_stored_keys(found, stored_keys)


def revive_offsets(plans):
    """{"<broker>@<revive queue>": committed offset} of the brokers' revive services ("" for a broker of no name)."""
    return {f"{p.broker or ''}@{q}": o for p in plans for _, q, o in (p.pop_revive or ())}


def retry_cut(plans):
    """{broker ("" for none): the POP retry topics its window did not read to their latest offsets} (ReplayPlan.
    retry_cut): the revive service re-puts a checkpoint's messages before it commits past it, so their copies are
    in a retry topic read to its end; in one cut short a later night may still find them."""
    return {p.broker or "": sorted(p.retry_cut) for p in plans if p.retry_cut}


def evidence(events):
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


def with_stored_keys(found, stored_keys):
    """evidence's (handles, keys, copies) with the keys `stored_keys` finds of the places no evidence names the key
    of (a message read by an earlier night, popped first by a later one)."""
    handles, keys, copies = found
    bounds = keyless_bounds(handles, keys)
    extra = stored_keys(bounds) if bounds else None
    return handles, keys if extra is None else keys.unionByName(extra.select(*KEY_COLUMNS)), copies


def keyless_bounds(handles, keys):
    """{(broker, topic, queue_id): (lowest, highest queue offset)} of the places whose key no evidence holds: a
    row per queue collected, what the lake's messages are read within."""
    from pyspark.sql import functions as F

    queue = ["broker", "topic", "queue_id"]
    rows = handles.select(*queue, "queue_offset").distinct().join(
        keys.select(*queue, "queue_offset").distinct(), [*queue, "queue_offset"], "left_anti").groupBy(*queue).agg(
        F.min("queue_offset").alias("lo"), F.max("queue_offset").alias("hi")).collect()
    return {(r["broker"], r["topic"], r["queue_id"]): (r["lo"], r["hi"]) for r in rows}


def held_evidence(rows):
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


def settle(handles, keys, copies, committed, cut):
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


def count_rows(ledger):
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


def pop_summary(counts, table=None):
    """summary.json's `pop`: the night's counts per (broker, group) and their totals; with a table merged across
    nights (`table`: its counts), the same of it as `lake`."""
    out = {"groups": counts, "totals": {k: sum(r[k] for r in counts)
                                        for k in ("popped", "acked", "revived", "inflight", "lost", "redeliveries")}}
    return out if table is None else dict(out, lake=pop_summary(table))


def lost_warnings(counts):
    """The operator's alarm: messages the revive service passed without acking or reviving them (`counts`: the
    lake's when there is one, which knows what earlier nights read)."""
    return [f"POP: {r['lost']} message(s) of group {r['group']}" + (f" (broker {r['broker']})" if r["broker"] else "")
            + " lost: never acked, their checkpoint passed by the revive service, not in the POP retry topic "
            "(OUT/pop/, state lost)" for r in counts if r["lost"]]
