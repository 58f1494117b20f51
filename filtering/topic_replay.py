"""Every group of one topic over one batch of its units and their decoded messages, as a replay task
applies them: the dispatcher (every stored registration, then the run's ad hoc SQL92 as if registered),
the bitmap audit, each group's two stages and client check (message_filter), and the counters. What it
finds goes to `out.add(kind, piece)`: `message` (MessageRows), `bitmap`, `stats`, `topic_stats`,
`example` tables."""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering import bloom as bloom_mod
from filtering import dispatcher
from filtering.message_filter import UnitBatch, apply_subscription
from filtering.sql92.diagnose import failure
from schemas.arrow_schemas import BITMAP_SCHEMA, OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS
from schemas.columns import one_array


@dataclass(frozen=True)
class MessageRows:
    """The messages of one topic's batch that some group receives or that collide, once (`table`: the
    OUTPUT_MESSAGE_FIELDS), and who gets which: `delivered` and `collided` are (group index, row index)
    arrays into `groups` and `table`, ordered by group, then row; `rows`: where table's rows are in the
    topic's batch (the data source gives every other message of the batch empty lists)."""

    topic: str
    table: pa.Table
    groups: pa.Array
    delivered: tuple
    collided: tuple
    rows: np.ndarray = None


def topic_batch(topic, units, messages, bloom):
    """The UnitBatch every subscription of `topic` is applied to: its consume-queue units (ext units
    resolved) and their decoded messages, row for row."""
    stored_bitmaps, stored_valid = bloom_mod.bitmap_matrix(units.column("filter_bitmap"), bloom.m)
    is_ext = units.column("is_ext_addr").to_numpy(zero_copy_only=False)
    code_missing = units.column("tags_code").is_null().to_numpy(zero_copy_only=False)
    store_time = units.column("msg_store_time")
    return UnitBatch(
        topic=topic,
        tags_code=pc.fill_null(units.column("tags_code"), 0).to_numpy(),
        code_missing=code_missing & is_ext,
        ext_ok=store_time.is_valid().to_numpy(zero_copy_only=False),
        msg_store_time=pc.fill_null(store_time, 0).to_numpy(),
        stored_bitmaps=stored_bitmaps,
        stored_valid=stored_valid,
        properties=one_array(messages.column("properties")),
        tags=one_array(messages.column("tags")),
    )


@dataclass
class Dispatched:
    """The dispatcher's work on one topic's batch, done once for all its groups: every stored registration
    of the topic (whatever this run replays), then the run's ad hoc SQL92 subscriptions as if registered
    too, evaluated on every message; one evaluation per message serves stage 2 as well."""

    registered: list  # the stored registrations, the first columns of match
    match: np.ndarray  # (N, R): the expression returned TRUE
    errors: np.ndarray  # (N, R): it threw
    columns: dict  # a stored registration's key, or id() of an ad hoc subscription -> its column
    recomputed: tuple  # (bitmaps, valid) recomputed from all of them

    def evaluated(self, csub):
        """(matched, errors) of one subscription's expression per row, when the dispatcher evaluated it."""
        r = self.columns.get(csub.key if csub.sub.stored else id(csub))
        return None if r is None else (self.match[:, r], self.errors[:, r])


def dispatch_topic(plan, topic, batch, bloom):
    """Dispatched of one topic's batch (see Dispatched)."""
    registered = [c for c in plan.registrations if c.sub.topic == topic]
    adhoc = [c for c in plan.subscriptions
             if c.sub.topic == topic and c.sql is not None and not c.sub.stored and c.sub.bloom_bits]
    match, match_errors = dispatcher.registration_outcomes(registered + adhoc, batch.properties)
    columns = {c.key: r for r, c in enumerate(registered)}
    columns.update({id(c): len(registered) + r for r, c in enumerate(adhoc)})
    recomputed = dispatcher.recompute_bitmaps(registered + adhoc, match, bloom.m)
    return Dispatched(registered, match, match_errors, columns, recomputed)


def retry_filters(plan):
    """{group: {topic: compiled SQL92}}: the filters ExpressionForRetryMessageFilter applies on a group's
    %RETRY% topic with filterSupportRetry (empty without it)."""
    retry_sql = {}
    if plan.support_retry:
        for c in plan.subscriptions:
            if c.sql is not None:
                retry_sql.setdefault(c.sub.group, {})[c.sub.topic] = c.sql
    return retry_sql


def replay_topic(plan, topic, units, messages, out):
    """Dispatcher audit and every subscription of one topic over its units."""
    n = units.num_rows
    bloom = bloom_mod.BloomFilter(plan.bloom_f, plan.bloom_n)
    batch = topic_batch(topic, units, messages, bloom)
    raw_valid = units.column("filter_bitmap").is_valid().to_numpy(zero_copy_only=False)
    subs = [c for c in plan.subscriptions if c.sub.topic == topic]
    d = dispatch_topic(plan, topic, batch, bloom)
    stored_match = d.match[:, : len(d.registered)]
    _audit_bitmaps(topic, d.registered, stored_match, bloom, batch, units, messages, raw_valid, out,
                   plan.audit_bitmaps)
    retry_sql = retry_filters(plan)
    message_dicts = lazy_messages(messages)
    queue_ids = units.column("queue_id").to_numpy()
    queue_offsets = units.column("queue_offset").to_numpy()
    g = len(subs)
    # one row per group: a group's outcome is a contiguous row, and every counter is one reduction per matrix
    stage1, checked, broker, client, errors, ran = (np.empty((g, n), dtype=bool) for _ in range(6))
    units_in_scope = np.full(g, n, dtype=np.int64)
    ext_unreadable = np.full(g, int(batch.code_missing.sum()), dtype=np.int64)
    for k, csub in enumerate(subs):
        o = apply_subscription(csub, batch, bloom, d.recomputed, retry_sql.get(csub.sub.group), message_dicts,
                               plan.support_retry, d.evaluated(csub))
        stage1[k], checked[k], broker[k], client[k] = o.stage1, o.bloom_checked, o.broker, o.client
        errors[k], ran[k] = o.errors, o.evaluated
        scope = in_scope(plan, csub.sub, queue_ids, queue_offsets)
        if scope is not None:
            for matrix in (stage1, checked, broker, client, errors, ran):
                matrix[k] &= scope
            units_in_scope[k] = int(scope.sum())
            ext_unreadable[k] = int((batch.code_missing & scope).sum())
        if csub.sql is not None and not csub.sub.stored and errors[k].any():
            _error_example(csub, batch.properties, int(np.argmax(errors[k])), out)
    collided = broker & ~client
    count = lambda m: np.count_nonzero(m, axis=1)  # noqa: E731
    stats = {"units": units_in_scope, "stage1_passed": count(stage1), "broker_delivered": count(broker),
             "client_delivered": count(client), "collisions": count(collided),
             "bloom_false_positives": count(checked & ~broker), "evaluated": count(ran),
             "evaluation_errors": count(errors), "ext_unreadable": ext_unreadable}
    groups = [c.sub.group for c in subs]
    if g:
        out.add("stats", counters_table(groups, topic, stats))
    _message_rows(out, topic, messages, units, client, collided, groups)


def _audit_bitmaps(topic, registered, match, bloom, batch, units, messages, raw_valid, out, audit):
    """The stored ConsumeQueueExt bitmaps against the ones recomputed from all the store's registrations:
    a `bitmap` row per difference, one `topic_stats` row of counters.

    Only units with a readable ext unit carry a bitmap to compare; a batch where none holds a bitmap is a
    broker without enableCalcFilterBitMap (or without the ext), not a mismatch. Without the store's
    registrations (audit false: its consumerFilter.json is damaged) nothing is compared."""
    compared = batch.ext_ok if audit and raw_valid.any() else np.zeros(len(batch), dtype=bool)
    mismatch = explained = np.zeros(len(batch), dtype=bool)
    if compared.any():
        store_times = np.where(batch.ext_ok, batch.msg_store_time, messages.column("store_timestamp").to_numpy())
        mismatch, explained, missing = dispatcher.compare_stored(
            registered, match, bloom.m, batch.stored_bitmaps, raw_valid, store_times)
        mismatch &= compared
        rows = np.flatnonzero(mismatch)
        if len(rows):
            own, _ = dispatcher.recompute_bitmaps(registered, match, bloom.m)
            cols = message_columns(messages, units, rows)
            out.add("bitmap", pa.table({
                "topic": pa.repeat(pa.scalar(topic), len(rows)),
                **{f: cols[f] for f in ("queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_timestamp")},
                "stored_bitmap": units.column("filter_bitmap").take(pa.array(rows)),
                "recomputed_bitmap": [own[i].tobytes() if registered else None for i in rows],
                "reason": [dispatcher.REASON_BORN_AFTER if explained[i] else None for i in rows],
                "groups_missing": [",".join(missing.get(i, ())) or None for i in rows]}, schema=BITMAP_SCHEMA))
    counters = {"units": len(batch), "bitmaps_compared": int(compared.sum()),
                "bitmap_mismatches": int((mismatch & ~explained).sum()),
                "bitmap_mismatches_explained": int((mismatch & explained).sum())}
    out.add("topic_stats", pa.table({"topic": [topic], **{f: [counters[f]] for f in TOPIC_STAT_FIELDS}}))


def _error_example(csub, properties, row, out):
    """One `example` row: why the expression throws for the first message of the batch where it does."""
    text = failure(csub.sql, dict(properties.slice(row, 1).to_pylist()[0] or []))
    out.add("example", pa.table({"group": [csub.sub.group], "topic": [csub.sub.topic], "reason": [text]}))


def _message_rows(out, topic, messages, units, delivered, collided, groups):
    """The messages some group receives (or that collide), once, with who gets which (MessageRows).
    delivered, collided: (groups, units) bool."""
    rows = np.flatnonzero(delivered.any(axis=0) | collided.any(axis=0))
    if not len(rows):
        return
    cols = message_columns(messages, units, rows)
    table = pa.table({name: cols[name] for name, _ in OUTPUT_MESSAGE_FIELDS})
    # np.nonzero walks the (group, row) matrix row by row: pairs come ordered by group, then message
    out.add("message", MessageRows(topic, table, pa.array(groups, pa.string()),
                                   np.nonzero(delivered[:, rows]), np.nonzero(collided[:, rows]), rows))


def counters_table(groups, topic, counters):
    """A `stats` piece: a row per group, every STAT_FIELDS counter (absent ones 0)."""
    g = len(groups)
    return pa.table({"group": pa.array(groups, pa.string()), "topic": pa.repeat(pa.scalar(topic), g),
                     **{f: pa.array(np.broadcast_to(np.asarray(counters.get(f, 0), dtype=np.int64), (g,)))
                        for f in STAT_FIELDS}})


def in_scope(plan, sub, queue_ids, queue_offsets):
    """Rows at or after the group's committed offset of their queue (None: all rows)."""
    firsts = {q: o for g, t, q, o in plan.start_offsets if g == sub.group and t == sub.topic}
    if not plan.start_offsets:
        return None
    first = np.zeros(len(queue_ids), dtype=np.int64)
    for q, o in firsts.items():
        first[queue_ids == q] = o
    return queue_offsets >= first


# the output columns a message's consume-queue unit holds; every other one comes from its record
UNIT_FIELDS = ("queue_id", "queue_offset", "commitlog_offset")


def message_columns(messages, units, rows=None):
    """The OUTPUT_MESSAGE_FIELDS columns of a batch's messages at `rows` (None: every row, no copy)."""
    take = None if rows is None or len(rows) == units.num_rows else pa.array(rows)
    cols = {}
    for name, _ in OUTPUT_MESSAGE_FIELDS:
        column = (units if name in UNIT_FIELDS else messages).column(name)
        cols[name] = column if take is None else column.take(take)
    return cols


def lazy_messages(messages):
    """The batch as message dicts, built only if a PYTHON filter asks (per-row Python is its nature)."""
    cache = []

    def get():
        if not cache:
            rows = messages.to_pylist()
            for row in rows:
                row["properties"] = dict(row["properties"] or [])
            cache.append(rows)
        return cache[0]
    return get
