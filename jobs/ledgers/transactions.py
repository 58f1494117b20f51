"""The transaction ledger (OUT/transactions/, docs/output.md; with --sink iceberg NS.transactions): every
transactional message, one row per transaction (per first half message), with the fate the broker gave it.

How RocketMQ stores a transaction (broker TransactionalMessageBridge, TransactionalMessageServiceImpl,
TransactionalOpBatchService, EndTransactionProcessor, DefaultTransactionalMessageCheckListener; 5.3.3 and 4.9.8):
- the half message: a record of `RMQ_SYS_TRANS_HALF_TOPIC` queue 0, its real topic and queue in REAL_TOPIC /
  REAL_QID; an undecided half is checked by re-putting it into the half topic with TRANSACTION_CHECK_TIMES + 1
  (a copy: same UNIQ_KEY), and after transactionCheckMax checks it is put into `TRANS_CHECK_MAX_TIME_TOPIC`;
- a decision (commit or rollback): an op record of `RMQ_SYS_TRANS_OP_HALF_TOPIC`, tag `d`, its body the half
  queue offsets it decides, each followed by a comma (5.x batches several; 4.x writes one, without the comma);
- a commit also stores the real message in its topic, sysFlag COMMIT, with the half's UNIQ_KEY.

Task side (`transaction_events`): a row per half record, per offset an op names, per committed copy and per
discarded half (TRANS_EVENT_SCHEMA), written as the split's `trans_event` part. Driver side (`write_transactions`):
one Spark step keys the ops by the half copy whose queue offset they name, folds the events per (broker, real
topic, UNIQ_KEY) into evidence that merges (`combined`: the same fold joins an Iceberg table's rows with a night's,
and folding a night twice gives the same rows) and settles the fate: committed when the real topic holds a
committed copy, else rolled back when an op decided it, else discarded when it was moved to
TRANS_CHECK_MAX_TIME_TOPIC, else pending. No ledger row goes through the driver, only the counts per (broker,
topic, fate)."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ledgers.report_bars import stacked_bars, states_in_words
from jobs.ledgers.spark_io import write_ledger_table
from jobs.policy import report_damage
from schemas.log import layout as L
from schemas.log.lookup import read_records

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import Column, DataFrame, SparkSession

    from jobs.ledgers.timer import Reads

# `plan` below is a jobs.plan.replay_plan.ReplayPlan, `out` a jobs.task.split_task.Pieces (or explain's audit) and
# `planned` a jobs.plan.cluster plan: of layers above the ledgers (setup.cfg [importlinter]), so typed Any here

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC (4.4+)
SYSTEM_TOPICS = (HALF_TOPIC, OP_TOPIC, DISCARD_TOPIC)
# topics whose records copy a committed message's sysFlag without being a commit: a consumer's send-back
# (SendMessageProcessor.consumerSendMsgBack keeps msgExt's sysFlag) to its retry topic, a dead letter, the 4.x
# delay levels' and 5.x wheel's records of such a retry, POP's revived copies
NOT_COMMITS = ("%RETRY%", "%DLQ%", "rmq_sys_", "SCHEDULE_TOPIC_XXXX")
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG: the tag of a decision's op record
HALF, OP, COMMIT, DISCARD = "half", "op", "commit", "discard"
COMMITTED, ROLLED_BACK, DISCARDED, PENDING = "committed", "rolled_back", "discarded", "pending"
FATES = (COMMITTED, ROLLED_BACK, DISCARDED, PENDING)
TRANSACTIONS = "transactions"
TRANS_EVENTS = "_trans_events"  # a run's transaction events, until the driver has folded them into transactions/
TRANS_EVENT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("topic", pa.string()), ("uniq_key", pa.string()), ("queue_id", pa.int32()),
    ("producer_group", pa.string()), ("born_timestamp", pa.int64()), ("store_timestamp", pa.int64()),
    ("commitlog_offset", pa.int64()), ("queue_offset", pa.int64()), ("named_offset", pa.int64()),
    ("checks", pa.int32()), ("immunity_seconds", pa.int32()),
])
# the ledger: the columns, then the evidence a later night's events fold into (`combined`)
LEDGER_SCHEMA = pa.schema([
    ("broker", pa.string()), ("producer_group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("uniq_key", pa.string()), ("half_commitlog_offset", pa.int64()), ("half_queue_offset", pa.int64()),
    ("half_copies", pa.int32()), ("born_timestamp", pa.int64()), ("checks", pa.int32()),
    ("immunity_seconds", pa.int32()), ("fate", pa.string()), ("decided_timestamp", pa.int64()),
    ("committed_commitlog_offset", pa.int64()), ("committed_queue_offset", pa.int64()), ("commits", pa.int32()),
    ("cut_off", pa.bool_()), ("op_timestamp", pa.int64()), ("discard_timestamp", pa.int64()),
    ("committed_timestamp", pa.int64()), ("half_commitlog_offsets", pa.list_(pa.int64())),
    ("half_queue_offsets", pa.list_(pa.int64())), ("commit_commitlog_offsets", pa.list_(pa.int64())),
])
KEYS = ["broker", "topic", "uniq_key"]
COUNT_FIELDS = ("transactions", "stuck", "committed_twice")
# RocketMQ's BrokerConfig defaults (5.3.3): a half is checked transactionTimeOut after it was born, then every
# transactionCheckInterval, at most transactionCheckMax times
CHECK_DEFAULTS = {"transactionTimeOut": 6000, "transactionCheckMax": 15, "transactionCheckInterval": 30000}
# Long.parseLong of what the check service reads of an op body: offsets, each followed by a comma (4.x: one, bare)
_OFFSETS = r"^([0-9]{1,18},)*[0-9]{1,18},?$"
_INT = r"^[+-]?[0-9]{1,9}$"


def transaction_topics(topics_present: Collection[str], narrowed: Collection[str] = ()) -> set[str]:
    """The system topics the ledger reads whatever the subscriptions (those the store has and --topics, when
    given, keeps): their records are the halves, the decisions and the discarded halves."""
    return {t for t in SYSTEM_TOPICS if t in topics_present and (not narrowed or t in narrowed)}


def add_transaction_pieces(plan: Any, topic: str, messages: pa.Table, out: Any) -> None:
    """A decoded batch's `trans_event` piece, when it holds any (LMQ queues' records are their source topics')."""
    if not messages.num_rows or topic.startswith(L.LMQ_PREFIX):
        return
    events = transaction_events(plan, topic, messages, out)
    if events is not None and events.num_rows:
        out.add("trans_event", events)


def transaction_events(plan: Any, topic: str, messages: pa.Table, out: Any) -> pa.Table | None:
    """The TRANS_EVENT_SCHEMA rows of a decoded batch of `topic` (None when it holds none): halves, ops (one row
    per half offset named), discarded halves, committed copies. A half or discarded record without REAL_TOPIC
    (or whose REAL_QID is no number), an op `d` whose body is not offsets: damaged data under the corruption
    policy (the run stops, or they are audited and left out of the ledger; groups still decide them)."""
    if topic == OP_TOPIC:
        return _op_events(plan, messages, out)
    if topic in (HALF_TOPIC, DISCARD_TOPIC):
        return _half_events(plan, topic, messages, out)
    if topic.startswith(NOT_COMMITS):
        return None
    committed = (messages.column("sys_flag").to_numpy() & L.TRANSACTION_MASK) == L.TRANSACTION_COMMIT
    if not committed.any():
        return None
    sel = messages if committed.all() else messages.take(pa.array(np.flatnonzero(committed)))
    props = sel.column("properties")
    return _events(sel, COMMIT, sel.column("topic"), sel.column("queue_id"), _lookup(props, "PGROUP"))


def _half_events(plan, topic, messages, out):
    """Rows of half records (or discarded ones: the half as the check service put it away)."""
    props = messages.column("properties")
    real_topic = _lookup(props, "REAL_TOPIC")
    qid, qid_ok = _number(_lookup(props, "REAL_QID"), pa.int32())
    bad = ~pc.is_valid(real_topic).to_numpy(zero_copy_only=False) | ~qid_ok
    kind = HALF if topic == HALF_TOPIC else DISCARD
    if bad.any():
        _audit(plan, out, messages, bad, f"{kind} record without REAL_TOPIC or REAL_QID")
        keep = pa.array(np.flatnonzero(~bad))
        messages, real_topic, qid = messages.take(keep), real_topic.take(keep), qid.take(keep)
        props = messages.column("properties")
    checks, _ = _number(_lookup(props, "TRANSACTION_CHECK_TIMES"), pa.int32())
    immunity, _ = _number(_lookup(props, "CHECK_IMMUNITY_TIME_IN_SECONDS"), pa.int32())
    return _events(messages, kind, real_topic, qid, _lookup(props, "PGROUP"), checks=checks, immunity=immunity)


def _op_events(plan, messages, out):
    """A row per half queue offset each decision (tag `d`) names, in its body's order."""
    props = messages.column("properties")
    decision = pc.fill_null(pc.equal(_lookup(props, "TAGS"), REMOVE_TAG), False).to_numpy(zero_copy_only=False)
    if not decision.any():
        return None
    if not plan.with_body:  # read without bodies (--no-body): those of the op records (a few) read again, with theirs
        messages = messages.set_column(messages.schema.get_field_index("body"), "body", read_records(
            plan.fs, plan.log, messages.column("commitlog_offset"), messages.column("store_size"),
            plan.max_body).column("body"))
    bodies = messages.column("body")
    ok = pc.fill_null(pc.match_substring_regex(pc.cast(bodies, pa.binary()), _OFFSETS), False) \
        .to_numpy(zero_copy_only=False)
    bad = decision & ~ok
    if bad.any():
        _audit(plan, out, messages, bad, "transaction op record whose body is not half queue offsets")
    rows = np.flatnonzero(decision & ok)
    if not len(rows):
        return None
    sel = messages.take(pa.array(rows))
    lists = pc.split_pattern(pc.cast(pc.cast(sel.column("body"), pa.binary()), pa.string()), ",")
    flat = pc.list_flatten(lists)
    parent = pc.list_parent_indices(lists)
    named = pc.not_equal(flat, "")
    take = pc.filter(parent, named)
    offsets = pc.cast(pc.filter(flat, named), pa.int64())
    ops = sel.take(take)
    n = ops.num_rows
    return _events(ops, OP, pa.nulls(n, pa.string()), pa.nulls(n, pa.int32()), pa.nulls(n, pa.string()),
                   named=offsets, uniq=pa.nulls(n, pa.string()))


def _events(sel, kind, topic, queue_id, group, checks=None, immunity=None, named=None, uniq=None):
    """TRANS_EVENT_SCHEMA rows of the records `sel`, one per row."""
    n = sel.num_rows
    props = sel.column("properties")
    if uniq is None:
        uniq = pc.coalesce(_lookup(props, "UNIQ_KEY"), sel.column("msg_id"))
    nulls = pa.nulls(n, pa.int32())
    return pa.table([pa.repeat(pa.scalar(kind), n), topic, uniq, pc.cast(queue_id, pa.int32()), group,
                     sel.column("born_timestamp"), sel.column("store_timestamp"), sel.column("commitlog_offset"),
                     sel.column("queue_offset"), pa.nulls(n, pa.int64()) if named is None else named,
                     nulls if checks is None else checks, nulls if immunity is None else immunity],
                    schema=TRANS_EVENT_SCHEMA)


def _lookup(props, name):
    """The property's value per row (null where absent; a repeated name's last value, as a HashMap keeps)."""
    return pc.map_lookup(props, pa.scalar(name), "last")


def _number(values, type_):
    """(the values parsed where they are numbers, null elsewhere; where they are numbers)."""
    ok = pc.fill_null(pc.match_substring_regex(values, _INT), False)
    parsed = pc.cast(pc.if_else(ok, pc.utf8_ltrim(values, characters="+"), pa.scalar(None, pa.string())), type_)
    return parsed, ok.to_numpy(zero_copy_only=False)


def _audit(plan, out, sel, bad, reason):
    """The records at `bad` to the corruption policy (split_decode's): the run stops, or they are audited,
    still decided for the groups, left out of the ledger."""
    rows = np.flatnonzero(bad)
    paths = np.array([plan.log.file_at(int(o)).path for o in sel.column("commitlog_offset").to_numpy()[rows]],
                     dtype=object)
    for path in sorted(set(paths)):
        report_damage(plan, out, sel, rows[paths == path], f"{reason}: left out of the transaction ledger", path,
                      kept=True)


def write_transactions(
        spark: SparkSession, out_uri: str, where: tuple[pafs.FileSystem, str], written: dict[str, tuple[int, int, int]],
        reads: Reads, window_ms: Mapping[str | None, int], held: DataFrame | None = None,
        event_files: Sequence[str] = ()) -> tuple[dict[str, tuple[int, int, int]], list[dict[str, Any]]]:
    """OUT/transactions/ from the run's committed transaction events (`written`: the sink's {output: (files,
    rows, bytes)}), then the events removed. Returns ({output: (files, rows, bytes)}, count_rows' rows). `held`: a
    DataFrame of the ledger rows a table holds (Iceberg), folded with the night's. `reads`: the brokers' clocks and
    topics (timer_ledger.Reads); `window_ms`: {broker: the check window} beyond which a pending one is stuck."""
    return write_ledger_table(spark, out_uri, where, written, {TRANS_EVENTS: TRANS_EVENT_SCHEMA}, TRANSACTIONS,
                              LEDGER_SCHEMA, lambda events: evidence(events, held),
                              lambda old, night: combined(old.unionByName(night)),
                              lambda rows: count_rows(rows, reads, window_ms), held, event_files)


def evidence(events: DataFrame, held: DataFrame | None = None) -> DataFrame:
    """The ledger's rows (settled) of a DataFrame of events: each op keyed by the half copy whose queue offset it
    names (the night's halves, and the half offsets `held` rows keep), then every event folded per (broker, real
    topic, UNIQ_KEY). An op naming a half the run did not read (before its window, retention) tells nothing
    that a key can hold: left out."""
    from pyspark.sql import functions as F

    halves = events.where(F.col("kind") == HALF)
    index = halves.select("broker", F.col("queue_offset").alias("named_offset"), "topic", "uniq_key")
    if held is not None:
        index = index.unionByName(held.select("broker", F.explode("half_queue_offsets").alias("named_offset"),
                                              "topic", "uniq_key"))
    index = index.dropDuplicates(["broker", "named_offset"]).withColumnRenamed("broker", "half_broker") \
        .withColumnRenamed("named_offset", "half_offset")
    ops = events.where(F.col("kind") == OP).drop("topic", "uniq_key")
    ops = ops.join(index, F.col("broker").eqNullSafe(F.col("half_broker"))  # a bare store's broker: null
                   & (F.col("named_offset") == F.col("half_offset"))).drop("half_broker", "half_offset")
    return combined(_folded(events.where(F.col("kind") != OP).unionByName(ops)))


def _folded(events):
    """Per key, the evidence columns of its events (`combined` folds them again with a table's)."""
    from pyspark.sql import functions as F

    kind = F.col("kind")

    def when(k: str, column: Column) -> Column:
        return F.when(kind == k, column)
    first = F.struct(*(F.col(c) for c in ("producer_group", "queue_id", "born_timestamp", "immunity_seconds")))
    commit = F.struct(F.col("queue_offset").alias("committed_queue_offset"), "store_timestamp", "producer_group",
                      "queue_id", "born_timestamp")
    offset = F.col("commitlog_offset")
    rows = events.groupBy(*KEYS).agg(
        F.min_by(when(HALF, first), when(HALF, offset)).alias("first"),
        F.min(when(HALF, offset)).alias("half_commitlog_offset"),
        F.min_by(when(HALF, F.col("queue_offset")), when(HALF, offset)).alias("half_queue_offset"),
        F.max_by(when(HALF, F.coalesce(F.col("checks"), F.lit(0))), when(HALF, offset)).alias("checks"),
        F.collect_set(when(HALF, offset)).alias("half_commitlog_offsets"),
        F.collect_set(when(HALF, F.col("queue_offset"))).alias("half_queue_offsets"),
        F.min(when(OP, F.col("store_timestamp"))).alias("op_timestamp"),
        F.min(when(DISCARD, F.col("store_timestamp"))).alias("discard_timestamp"),
        F.min_by(when(COMMIT, commit), when(COMMIT, offset)).alias("c"),
        F.min(when(COMMIT, offset)).alias("committed_commitlog_offset"),
        F.collect_set(when(COMMIT, offset)).alias("commit_commitlog_offsets"),
        F.first(when(DISCARD, F.struct("producer_group", "queue_id", "born_timestamp")), True).alias("d"))
    return rows.select(
        *KEYS,
        *(F.coalesce(F.col(f"first.{c}"), F.col(f"c.{c}"), F.col(f"d.{c}")).alias(c)
          for c in ("producer_group", "queue_id", "born_timestamp")),
        F.col("first.immunity_seconds").alias("immunity_seconds"), "half_commitlog_offset", "half_queue_offset",
        "checks", "op_timestamp", "discard_timestamp", "committed_commitlog_offset",
        F.col("c.committed_queue_offset").alias("committed_queue_offset"),
        F.col("c.store_timestamp").alias("committed_timestamp"),
        "half_commitlog_offsets", "half_queue_offsets", "commit_commitlog_offsets")


EVIDENCE = ("producer_group", "queue_id", "born_timestamp", "immunity_seconds", "half_commitlog_offset",
            "half_queue_offset", "checks", "op_timestamp", "discard_timestamp", "committed_commitlog_offset",
            "committed_queue_offset", "committed_timestamp", "half_commitlog_offsets", "half_queue_offsets",
            "commit_commitlog_offsets")


def combined(rows: DataFrame) -> DataFrame:
    """Rows of evidence (EVIDENCE and KEYS: a table's and a night's, or a night's alone) as one row per key: the
    first half's fields from the earliest half, the checks of the latest, the earliest op, discard and commit,
    the sets of copies united. Folding rows twice gives the same rows (a night merged again)."""
    from pyspark.sql import functions as F

    first = F.struct(*(F.col(c) for c in ("producer_group", "queue_id", "born_timestamp", "immunity_seconds",
                                          "half_queue_offset")))
    half = F.col("half_commitlog_offset")
    last = F.array_max(F.col("half_commitlog_offsets"))
    commit = F.struct("committed_queue_offset", "committed_timestamp")

    def union(name: str) -> Column:
        return F.array_sort(F.array_distinct(F.flatten(F.collect_list(F.coalesce(
            F.col(name), F.array().cast("array<bigint>")))))).alias(name)
    out = rows.groupBy(*KEYS).agg(
        F.coalesce(F.min_by(first, half), F.first(first, True)).alias("f"), F.min(half).alias("half_commitlog_offset"),
        F.max_by(F.col("checks"), last).alias("checks"), F.min("op_timestamp").alias("op_timestamp"),
        F.min("discard_timestamp").alias("discard_timestamp"),
        F.min_by(commit, F.col("committed_commitlog_offset")).alias("c"),
        F.min("committed_commitlog_offset").alias("committed_commitlog_offset"),
        union("half_commitlog_offsets"), union("half_queue_offsets"), union("commit_commitlog_offsets"))
    first_fields = ("producer_group", "queue_id", "born_timestamp", "immunity_seconds", "half_queue_offset")
    return settled(out.select(
        *KEYS, *(F.col(f"f.{c}").alias(c) for c in first_fields), "half_commitlog_offset", "checks", "op_timestamp",
        "discard_timestamp", "committed_commitlog_offset", F.col("c.committed_queue_offset").alias(
            "committed_queue_offset"), F.col("c.committed_timestamp").alias("committed_timestamp"),
        "half_commitlog_offsets", "half_queue_offsets", "commit_commitlog_offsets"))


def settled(rows: DataFrame) -> DataFrame:
    """LEDGER_SCHEMA's columns of evidence rows: the fate (committed over rolled back over discarded over
    pending), the time of what decided it (the first op naming a copy; a commit's own time when its op was not
    read; the discard's), the copies counted, cut off when the run did not read its first half."""
    from pyspark.sql import functions as F

    committed = F.size(F.col("commit_commitlog_offsets")) > 0
    decided = F.col("op_timestamp").isNotNull()
    discarded = F.col("discard_timestamp").isNotNull()
    fate = F.when(committed, COMMITTED).when(decided, ROLLED_BACK).when(discarded, DISCARDED).otherwise(PENDING)
    columns = {
        "fate": fate.alias("fate"),
        "decided_timestamp": F.when(committed, F.coalesce("op_timestamp", "committed_timestamp"))
        .when(decided, F.col("op_timestamp")).when(discarded, F.col("discard_timestamp")).alias("decided_timestamp"),
        "half_copies": F.size("half_commitlog_offsets").cast("int").alias("half_copies"),
        "commits": F.size("commit_commitlog_offsets").cast("int").alias("commits"),
        "cut_off": F.col("half_commitlog_offset").isNull().alias("cut_off"),
        "checks": F.coalesce(F.col("checks"), F.lit(0)).cast("int").alias("checks"),
    }
    return rows.select(*(columns.get(f.name, F.col(f.name)) for f in LEDGER_SCHEMA))


def count_rows(ledger: DataFrame, reads: Reads, window_ms: Mapping[str | None, int]) -> list[dict[str, Any]]:
    """Per (broker, topic, fate): transactions, stuck (pending, born more than the broker's check window before
    the latest record the run read of it: `reads.clocks`, `window_ms`), committed_twice (the alarm: consumers got
    them twice); and whether the run read the real topic (`commits_looked_for`: where a committed copy lies,
    without which a committed transaction reads as rolled back). Small: a row per (broker, topic, fate)."""
    from pyspark.sql import functions as F

    pairs = [F.lit(x) for broker, last in sorted(reads.clocks.items(), key=lambda kv: kv[0] or "")
             for x in (broker or "", last - window_ms.get(broker, window_ms.get(None, 0)))]  # a bare store's: ""
    born_before = F.element_at(F.create_map(*pairs), F.coalesce(F.col("broker"), F.lit(""))) if pairs \
        else F.lit(None).cast("long")
    rows = ledger.groupBy("broker", "topic", "fate").agg(
        F.count(F.lit(1)).alias("transactions"),
        F.sum(((F.col("fate") == PENDING) & (F.col("born_timestamp") < born_before)).cast("long")).alias("stuck"),
        F.sum((F.col("commits") > 1).cast("long")).alias("committed_twice")).collect()
    return sorted(({"broker": r["broker"], "topic": r["topic"], "fate": r["fate"],
                    **{k: int(r[k] or 0) for k in COUNT_FIELDS},
                    "commits_looked_for": r["topic"] in reads.topics.get(r["broker"], ())} for r in rows),
                  key=lambda r: (r["broker"] or "", r["topic"] or "", FATES.index(r["fate"])))


def transactions_summary(counts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """summary.json's `transactions`: the counts per (broker, topic, fate) and their totals per fate."""
    totals = {fate: sum(r["transactions"] for r in counts if r["fate"] == fate) for fate in FATES}
    totals.update({k: sum(r[k] for r in counts) for k in ("stuck", "committed_twice")})
    return {"topics": counts, "totals": totals}


def transaction_warnings(counts: Sequence[Mapping[str, Any]], window_ms: Mapping[str | None, int]) -> list[str]:
    """The operator's alarms: transactions committed more than once (their consumers got them twice), pending
    ones older than the broker's check window (stuck), and real topics the run did not read (commits not looked
    for)."""
    out = []
    for r in counts:
        if r["committed_twice"]:
            out.append(f"transactions: {r['committed_twice']} transaction(s) of {r['topic']} (broker {r['broker']}) "
                       "committed more than once: their consumers got them twice (OUT/transactions/, commits > 1)")
        if r["stuck"]:
            window = window_ms.get(r["broker"], window_ms.get(None, 0))
            out.append(f"transactions: {r['stuck']} transaction(s) of {r['topic']} (broker {r['broker']}) still "
                       f"pending more than {window / 1000:g} s (the broker's check window) after they were born "
                       "(OUT/transactions/, fate pending): is the broker's transaction check running?")
    unread = sorted({r["topic"] for r in counts if r["fate"] == ROLLED_BACK and not r["commits_looked_for"]})
    if unread:
        out.append(f"transaction ledger: the run did not read {', '.join(unread[:5])}"
                   f"{' ...' if len(unread) > 5 else ''}: their committed copies were not looked for, so their "
                   "decided transactions read as rolled back (give a subscription of those topics)")
    return out


def check_windows(planned: Any, settings: Mapping[str, Any] | None) -> dict[str, int]:
    """{broker: its check window in ms} of a run's brokers (check_window of each store's broker.conf)."""
    return {b.name: check_window(settings, broker_conf(b.fs, b.root)) for b, _ in planned.parts}


def broker_conf(fs: pafs.FileSystem, root: str) -> dict[str, str]:
    """The broker's settings its store keeps beside it (`broker.conf` in the store root or its config/, Java
    properties: key=value lines), {} when there is none or it cannot be read."""
    for path in (f"{root}/broker.conf", f"{root}/config/broker.conf"):
        try:
            with fs.open_input_stream(path) as f:
                text = f.read().decode("utf-8", "replace")
        except (OSError, AttributeError, TypeError):
            continue
        pairs = (line.split("=", 1) for line in text.splitlines()
                 if "=" in line and not line.lstrip().startswith(("#", "!")))
        return {k.strip(): v.strip() for k, v in pairs if v.strip().lstrip("-").isdigit()}
    return {}


def check_window(settings: Mapping[str, Any] | None, stored: Mapping[str, Any] | None = None) -> int:
    """The broker's check window in ms: transactionTimeOut + transactionCheckMax x transactionCheckInterval, each
    from conf/replay.json's `transaction_check` (when given), else `stored` (the store's broker.conf), else
    RocketMQ's: a half is checked after transactionTimeOut, then every interval, at most Max times."""
    values = dict(CHECK_DEFAULTS)
    for name in CHECK_DEFAULTS:
        for source in (stored or {}, settings or {}):
            if source.get(name) is not None:
                values[name] = int(source[name])
    return values["transactionTimeOut"] + values["transactionCheckMax"] * values["transactionCheckInterval"]


FATE_WORDS = {  # what each fate means, as the report says it
    COMMITTED: ("#2e7d32", "committed: the producer (or its answer to a check) committed it; the real topic holds "
                "the copy its consumers got"),
    ROLLED_BACK: ("#b0bec5", "rolled back: an op record decided it and no committed copy exists; no consumer got it"),
    DISCARDED: ("#ef6c00", "discarded: still undecided after transactionCheckMax checks, moved to "
                "TRANS_CHECK_MAX_TIME_TOPIC; no consumer got it"),
    PENDING: ("#5c6bc0", "pending: no decision yet when the store (or the run's window) ended; stuck when older than "
              "the broker's check window"),
}


def report_section(transactions: Mapping[str, Any] | None, escape: Callable[[Any], str]) -> str:
    """The report's section (HTML) of summary.json's `transactions`: the alarms first (committed more than once,
    stuck), the fates in words, a stacked bar per (broker, topic) and the counts' table; "" without any.
    `escape`: the report's HTML escape."""
    rows = (transactions or {}).get("topics") or []
    if not rows:
        return ""
    assert transactions is not None  # its rows, above
    totals = transactions["totals"]
    out = ["<h2>Transactions (OUT/transactions/)</h2>"]
    alarms = [f"{r['committed_twice']:,} transaction(s) of <strong>{escape(r['topic'])}</strong> committed more than "
              "once: their consumers got them twice" for r in rows if r["committed_twice"]]
    alarms += [f"{r['stuck']:,} transaction(s) of <strong>{escape(r['topic'])}</strong> pending longer than the "
               "broker's check window (stuck)" for r in rows if r["stuck"]]
    if alarms:
        out.append("<ul class=\"bad\">" + "".join(f"<li>{a}</li>" for a in alarms) + "</ul>")
    out.append(states_in_words(totals, FATE_WORDS, escape))
    topics: dict[tuple[str, str], dict[str, int]] = {}
    for r in rows:
        topics.setdefault((r["broker"] or "", r["topic"] or ""), {})[r["fate"]] = r["transactions"]
    out.append(stacked_bars(topics, FATE_WORDS, escape))
    out.append("<table><tr><th>broker</th><th>topic</th><th>fate</th><th>transactions</th><th>stuck</th>"
               "<th>committed twice</th></tr>")
    out += [f"<tr><td class=\"t\">{escape(r['broker'])}</td><td class=\"t\">{escape(r['topic'])}</td>"
            f"<td class=\"t\">{escape(r['fate'])}</td><td>{r['transactions']}</td><td>{r['stuck']}</td>"
            f"<td>{r['committed_twice']}</td></tr>" for r in rows]
    return "".join(out) + "</table>\n"


def history(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One transaction's story (explain --key) from its events (dicts of TRANS_EVENT_SCHEMA, the ops keyed to
    it), by the rules the Spark step folds them with: the ledger's columns, and each half copy, op, committed
    copy and discard in commit-log order."""
    ordered = sorted(events, key=lambda e: e["commitlog_offset"])
    of = {k: [e for e in ordered if e["kind"] == k] for k in (HALF, OP, COMMIT, DISCARD)}
    halves, ops, commits, discards = of[HALF], of[OP], of[COMMIT], of[DISCARD]
    first = (halves or commits or discards)[0]
    fate = COMMITTED if commits else ROLLED_BACK if ops else DISCARDED if discards else PENDING
    op_ms = min((e["store_timestamp"] for e in ops), default=None)
    decided = {COMMITTED: op_ms if op_ms is not None else commits[0]["store_timestamp"] if commits else None,
               ROLLED_BACK: op_ms, DISCARDED: discards[0]["store_timestamp"] if discards else None,
               PENDING: None}[fate]
    return {"topic": first["topic"], "queue_id": first["queue_id"], "uniq_key": first["uniq_key"],
            "producer_group": first["producer_group"], "born_timestamp": first["born_timestamp"],
            "half_commitlog_offset": halves[0]["commitlog_offset"] if halves else None,
            "half_queue_offset": halves[0]["queue_offset"] if halves else None, "half_copies": len(halves),
            "checks": (halves[-1]["checks"] or 0) if halves else 0,
            "immunity_seconds": halves[0]["immunity_seconds"] if halves else None, "fate": fate,
            "decided_timestamp": decided, "commits": len(commits), "cut_off": not halves,
            "halves": [{k: e[k] for k in ("commitlog_offset", "queue_offset", "store_timestamp", "checks")}
                       for e in halves],
            "ops": [{"commitlog_offset": e["commitlog_offset"], "store_timestamp": e["store_timestamp"],
                     "names_half_queue_offset": e["named_offset"]} for e in ops],
            "committed": [{k: e[k] for k in ("commitlog_offset", "queue_offset", "store_timestamp")}
                          for e in commits],
            "discarded": [{k: e[k] for k in ("commitlog_offset", "store_timestamp")} for e in discards]}
