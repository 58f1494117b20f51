"""The timer ledger (OUT/timers/, docs/output.md): every message that went through the timer wheel, one row each,
with its fate. The tasks wrote the events of their splits (jobs/ledgers/timer_events.py: scheduled records,
delivered copies, cancel markers) under the temporary OUT; here one Spark step pairs them by (broker, UNIQ_KEY)
(the copies of a message lie in different splits) and writes the ledger with Spark's writer: no ledger row goes
through the driver, only the counts per real topic the summary shows."""
from dataclasses import dataclass

import pyarrow as pa

from jobs.ledgers.spark_io import read_events, remove, sizes, write_empty_part, write_table
from jobs.ledgers.timer_events import CANCEL, DELIVERED, SCHEDULED, TIMER_EVENT_SCHEMA

TIMERS = "timers"
TIMER_EVENTS = "_timer_events"  # a run's timer events, until the driver has paired them into timers/
DELIVERED_STATE, PENDING, CANCELLED = "delivered", "pending", "cancelled"
LEDGER_SCHEMA = pa.schema([
    ("uniq_key", pa.string()), ("real_topic", pa.string()), ("real_queue_id", pa.int32()), ("deliver_ms", pa.int64()),
    ("state", pa.string()), ("scheduled_store_timestamp", pa.int64()), ("scheduled_commitlog_offset", pa.int64()),
    ("delivered_store_timestamp", pa.int64()), ("delivered_queue_offset", pa.int64()),
    ("delivered_commitlog_offset", pa.int64()), ("cancelled_store_timestamp", pa.int64()), ("lag_ms", pa.int64()),
    ("broker", pa.string()),
])
COUNT_FIELDS = ("delivered", "pending", "cancelled", "overdue", "lag_ms_median", "lag_ms_max")


def write_ledger(spark, out_uri, where, written, reads, overdue_ms, held=None, event_files=()):
    """OUT/timers/ from the run's committed timer events (`written`: the sink's {output: (files, rows, bytes)}),
    then the events removed (`where`: OUT's (filesystem, path)). Returns ({output: (files, rows, bytes)} of
    timers/, the counts per (broker, real topic): count_rows' rows). `reads`: what the run read of each broker
    (Reads); a pending timer of a topic it read due more than `overdue_ms` before its latest record is overdue.
    `held`: a DataFrame of the ledger rows a table holds (Iceberg: jobs/sinks/iceberg/ledger_tables.py), merged with the
    run's. No row at all: a table of no row. `event_files`: the events' parts where the commit left them
    (relative to OUT: an object store's attempts, each read where it is, never copied); default timer events/."""
    events = written.pop(TIMER_EVENTS, (0, 0, 0))
    fs, root = where
    base = out_uri.rstrip("/")
    night = None
    if events[1]:
        schema = TIMER_EVENT_SCHEMA.append(pa.field("broker", pa.string()))
        night = pair(read_events(spark, schema, base, TIMER_EVENTS, event_files))
    rows = night if held is None else held if night is None else merged(held, night)
    counts = []
    if rows is None:
        write_empty_part(where, TIMERS, LEDGER_SCHEMA)
    else:
        write_table(rows, base, where, TIMERS)
        counts = count_rows(read_events(spark, LEDGER_SCHEMA, base, TIMERS), reads, overdue_ms)
    remove(fs, f"{root}/{TIMER_EVENTS}")
    return {TIMERS: sizes(fs, f"{root}/{TIMERS}")}, counts


def pair(events):
    """The ledger (LEDGER_SCHEMA's columns) of a DataFrame of timer events: per (broker, UNIQ_KEY) its first
    scheduled record, delivered copy and cancel marker (the first in commit-log order: a message parked beyond
    the roll window is stored again in the wheel, one message still), joined. Delivered wins over a cancel that
    came too late; a copy or marker whose scheduled record the run did not read (retention, the window) is a
    row with what it tells."""
    from pyspark.sql import functions as F

    def first_of(kind, name, fields):
        return events.where(F.col("kind") == kind).groupBy("broker", "uniq_key").agg(
            F.min_by(F.struct(*fields), F.col("commitlog_offset")).alias(name))

    common = ["real_topic", "real_queue_id", "deliver_ms", "store_timestamp", "commitlog_offset"]
    keys = ["broker", "uniq_key"]
    joined = first_of(SCHEDULED, "s", common) \
        .join(first_of(DELIVERED, "d", common + ["queue_offset"]), keys, "full") \
        .join(first_of(CANCEL, "c", common), keys, "full")
    return settled(joined.select(
        "broker", "uniq_key",
        *(F.coalesce(*(F.col(f"{side}.{name}") for side in "sdc")).alias(name)
          for name in ("real_topic", "real_queue_id", "deliver_ms")),
        F.col("s.store_timestamp").alias("scheduled_store_timestamp"),
        F.col("s.commitlog_offset").alias("scheduled_commitlog_offset"),
        F.col("d.store_timestamp").alias("delivered_store_timestamp"),
        F.col("d.queue_offset").alias("delivered_queue_offset"),
        F.col("d.commitlog_offset").alias("delivered_commitlog_offset"),
        F.col("c.store_timestamp").alias("cancelled_store_timestamp")))


KNOWN = ("real_topic", "real_queue_id", "deliver_ms", "scheduled_store_timestamp", "scheduled_commitlog_offset",
         "delivered_store_timestamp", "delivered_queue_offset", "delivered_commitlog_offset",
         "cancelled_store_timestamp")


def merged(old, new):
    """Ledger rows of two runs (an Iceberg table's and a night's) as one row per (broker, UNIQ_KEY): each
    column what the night tells, else what the table held (a pending row's scheduled record and a later
    night's delivered copy), the state settled again. Merging a night twice gives the same rows."""
    from pyspark.sql import functions as F

    both = old.alias("o").join(new.alias("n"), ["broker", "uniq_key"], "full")
    return settled(both.select("broker", "uniq_key", *(F.coalesce(F.col(f"n.{name}"), F.col(f"o.{name}")).alias(name)
                                                       for name in KNOWN)))


def settled(rows):
    """LEDGER_SCHEMA's columns of rows holding what is known (KNOWN, broker, uniq_key): delivered when a copy
    was delivered (a cancel that came too late then counts for nothing), else cancelled when a marker was
    stored, else pending; the lag of a delivered one."""
    from pyspark.sql import functions as F

    delivered = F.col("delivered_store_timestamp").isNotNull()
    state = F.when(delivered, DELIVERED_STATE).when(F.col("cancelled_store_timestamp").isNotNull(), CANCELLED) \
        .otherwise(PENDING)
    columns = {"state": state.alias("state"),
               "cancelled_store_timestamp": F.when(~delivered, F.col("cancelled_store_timestamp"))
               .alias("cancelled_store_timestamp"),
               "lag_ms": (F.col("delivered_store_timestamp") - F.col("deliver_ms")).alias("lag_ms")}
    return rows.select(*(columns.get(name, F.col(name)) for name in LEDGER_SCHEMA.names))


def count_rows(ledger, reads, overdue_ms):
    """Per (broker, real topic): delivered, pending, cancelled, overdue (pending, of a topic the run read, due
    more than overdue_ms before the latest record the run read of its broker: `reads`), the delivery lag's exact
    median and max (ms; null without a delivered row), and `copies_looked_for` (whether the run read the real
    topic, where a delivered copy would be). Small: a row per real topic, collected."""
    from pyspark.sql import functions as F

    state = F.col("state")
    pairs = [F.lit(x) for broker, last in sorted(reads.clocks.items()) for x in (broker, last - overdue_ms)]
    due_before = F.element_at(F.create_map(*pairs), F.col("broker")) if pairs else F.lit(None).cast("long")
    topics = [x for broker, names in sorted(reads.topics.items())
              for x in (F.lit(broker), F.array(*(F.lit(t) for t in sorted(names))).cast("array<string>"))]
    read = F.coalesce(F.array_contains(F.element_at(F.create_map(*topics), F.col("broker")), F.col("real_topic")),
                      F.lit(False)) if topics else F.lit(False)
    rows = ledger.groupBy("broker", "real_topic").agg(
        F.sum((state == DELIVERED_STATE).cast("long")).alias("delivered"),
        F.sum((state == PENDING).cast("long")).alias("pending"),
        F.sum((state == CANCELLED).cast("long")).alias("cancelled"),
        F.sum(((state == PENDING) & read & (F.col("deliver_ms") < due_before)).cast("long")).alias("overdue"),
        F.percentile(F.col("lag_ms"), F.lit(0.5)).alias("lag_ms_median"),
        F.max("lag_ms").alias("lag_ms_max")).collect()
    return sorted(({"broker": r["broker"], "real_topic": r["real_topic"],
                    **{k: (None if r[k] is None else int(r[k]) if k != "lag_ms_median" else float(r[k]))
                       for k in COUNT_FIELDS},
                    "copies_looked_for": r["real_topic"] in reads.topics.get(r["broker"], ())} for r in rows),
                  key=lambda r: (r["broker"] or "", r["real_topic"] or ""))


@dataclass(frozen=True)
class Reads:
    """What a run read of each broker: the latest store time of its records, and its topics."""

    clocks: dict  # {broker: epoch ms}
    topics: dict  # {broker: frozenset of topic names}


def timer_reads(reports, planned):
    """Reads of a run: the clocks from the tasks' `timer_clock` rows, the topics from each broker's plan."""
    clocks = {}
    for r in reports:
        if r["kind"] == "timer_clock":
            clocks[r["broker"]] = max(clocks.get(r["broker"], r["last"]), r["last"])
    return Reads(clocks, {b.name: frozenset(t for t, *_ in part.ranges) for b, part in planned.parts})


def timers_summary(counts):
    """summary.json's `timers`: the counts per (broker, real topic) and their totals (the lag's largest)."""
    lags = [r["lag_ms_max"] for r in counts if r["lag_ms_max"] is not None]
    totals = {k: sum(r[k] for r in counts) for k in ("delivered", "pending", "cancelled", "overdue")}
    return {"topics": counts, "totals": dict(totals, lag_ms_max=max(lags) if lags else None)}


def overdue_warnings(counts, overdue_ms):
    """The operator's alarm: pending timers due well before the latest record read (a stuck wheel); and the
    pending ones whose real topic the run did not read (their state is only what the wheel's records tell)."""
    out = []
    unread = sorted({r["real_topic"] for r in counts if r["pending"] and not r["copies_looked_for"]})
    if unread:
        out.append(f"timer ledger: the run did not read {', '.join(unread[:5])}{' ...' if len(unread) > 5 else ''}, "
                   "real topics of pending timer messages: their delivered copies were not looked for (give a "
                   "subscription of those topics to see them delivered)")
    for r in counts:
        if r["overdue"]:
            out.append(f"timer wheel: {r['overdue']} message(s) of {r['real_topic']} (broker {r['broker']}) still "
                       f"pending more than {overdue_ms / 1000:g} s after their due time (OUT/timers/, state "
                       "pending): is the broker's timer wheel stuck?")
    return out
