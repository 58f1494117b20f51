"""The one decision for a topic batch: every subscription of one topic over one batch of its units and
their decoded messages, as the broker and a 4.x client decide it. The dispatcher runs once for all groups
(every stored registration, then the run's ad hoc SQL92 as if registered), the stored bitmaps are audited
against it, then each group meets its scope (--from committed, the window), the consume-queue stage, the
commit-log stage and the client check (message_filter). The result, a TopicDecision, is what the replay
task writes (filtering/topic_replay.py), what the data source's delivered_to and collided_for are made of,
and what explain puts in words: per subscription and message where it stopped and the reason code, the
counters, and the audits."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering import bloom as bloom_mod
from filtering import dispatcher
from filtering.message_filter import UnitBatch, apply_subscription
from filtering.sql92.diagnose import failure
from schemas.arrow_schemas import CODED_PROPERTIES
from schemas.columns import one_array

if TYPE_CHECKING:
    from filtering.sql92 import Expression
    from filtering.subscriptions import CompiledSubscription, Subscription

# Where a message stops for a group (the stages in the order a unit meets them), and why: reason codes
STAGES = ("scope", "consume_queue", "commit_log", "client")
DELIVERED = 0
BELOW_COMMITTED = 1  # scope: its queue offset is below the group's committed offset (--from committed), or held
OUTSIDE_WINDOW = 2  # scope: its store time is outside --since/--until
CQ_FILTERED = 3  # consume queue: the tag code is not in the subscription's code set, or bloom isHit is false
NOT_MATCHED = 4  # commit log: the SQL92 result is not TRUE, or the custom filter returned false
EVALUATION_ERROR = 5  # commit log: the expression (or the custom filter) threw
CLIENT_DROPPED = 6  # client: the broker returned it, the tag string is not in the subscription (a collision)
STAGE_OF = {BELOW_COMMITTED: "scope", OUTSIDE_WINDOW: "scope", CQ_FILTERED: "consume_queue",
            NOT_MATCHED: "commit_log", EVALUATION_ERROR: "commit_log", CLIENT_DROPPED: "client"}


def topic_batch(topic: str, units: pa.Table, messages: pa.Table, bloom: bloom_mod.BloomFilter) -> UnitBatch:
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
        # what SQL92 reads: a record's own properties (an inner batch's, for each of its messages: the broker
        # filters the batch as one record, schemas/log/inner_batch.py)
        properties=one_array(messages.column("batch_properties" if "batch_properties" in messages.column_names
                                             else "properties")),
        tags=one_array(messages.column("tags")),
        coded=coded_properties(messages),
    )


def coded_properties(messages: pa.Table) -> dict[str, pa.Array] | None:
    """{name: dictionary column} of the decode's CODED_PROPERTIES (the record's own properties, as SQL92 reads
    them), or None when the batch was decoded without."""
    if CODED_PROPERTIES not in messages.column_names:
        return None
    struct = one_array(messages.column(CODED_PROPERTIES))
    return dict(zip([f.name for f in struct.type], struct.flatten()))


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

    def evaluated(self, csub: CompiledSubscription) -> tuple[np.ndarray, np.ndarray] | None:
        """(matched, errors) of one subscription's expression per row, when the dispatcher evaluated it."""
        r = self.columns.get(csub.key if csub.sub.stored else id(csub))
        return None if r is None else (self.match[:, r], self.errors[:, r])


def dispatch_topic(plan: Any, topic: str, batch: UnitBatch, bloom: bloom_mod.BloomFilter) -> Dispatched:
    """Dispatched of one topic's batch (see Dispatched)."""
    registered = [c for c in plan.registrations if c.sub.topic == topic]
    adhoc = [c for c in plan.subscriptions
             if c.sub.topic == topic and c.sql is not None and not c.sub.stored and c.sub.bloom_bits]
    match, match_errors = dispatcher.registration_outcomes(registered + adhoc, batch.properties, batch.coded)
    columns = {c.key: r for r, c in enumerate(registered)}
    columns.update({id(c): len(registered) + r for r, c in enumerate(adhoc)})
    recomputed = dispatcher.recompute_bitmaps(registered + adhoc, match, bloom.m)
    return Dispatched(registered, match, match_errors, columns, recomputed)


@dataclass
class BitmapAudit:
    """The stored ConsumeQueueExt bitmaps of a batch against the ones recomputed from all the store's
    registrations: per row, compared, mismatch and explained (a registration born after the message),
    the groups each mismatch misses, and the recomputed bitmaps."""

    compared: np.ndarray
    mismatch: np.ndarray
    explained: np.ndarray
    missing: dict = field(default_factory=dict)  # row -> groups whose bits the stored bitmap lacks
    recomputed: np.ndarray | None = None  # (N, w) of the stored registrations alone

    def counters(self) -> dict[str, int]:
        return {"units": len(self.compared), "bitmaps_compared": int(self.compared.sum()),
                "bitmap_mismatches": int((self.mismatch & ~self.explained).sum()),
                "bitmap_mismatches_explained": int((self.mismatch & self.explained).sum())}


@dataclass
class TopicDecision:
    """Every subscription of one topic (a row each, `subscriptions`) over one batch (a column per message):
    (G, N) bool matrices of what passed each stage as the filters decide it, the scope that applies to them
    (--from committed, the window), and the batch and dispatcher they came from. `delivered` and `collided`
    are what a run writes, `counters()` what it counts, `reasons()` where and why each message stopped."""

    topic: str
    subscriptions: list  # CompiledSubscription per row
    batch: UnitBatch
    dispatched: Dispatched
    audit: BitmapAudit
    below_committed: np.ndarray  # (G, N) below the group's committed offset, or an offset the lake holds for it
    outside_window: np.ndarray  # (N,) store time outside the window
    stage1: np.ndarray  # (G, N) passes the consume-queue stage
    bloom_checked: np.ndarray  # the bloom filter decided stage 1, and it hit
    broker: np.ndarray  # the broker returns it
    client: np.ndarray  # the consumer keeps it
    errors: np.ndarray  # the expression threw wherever it was evaluated
    evaluated: np.ndarray  # where it was evaluated (the dispatcher: every row; else stage 2)
    bloom_skips: list  # per row: message_filter's why-not-consulted codes (SQL92 groups), else None

    @property
    def groups(self) -> list[str]:
        return [c.sub.group for c in self.subscriptions]

    @property
    def in_scope(self) -> np.ndarray:
        return ~self.below_committed & ~self.outside_window

    def _scoped(self, matrix):
        """The matrix where the scope holds (False elsewhere); as it is when every message is in scope."""
        if not self.below_committed.any() and not self.outside_window.any():
            return matrix
        return matrix & self.in_scope

    @property
    def delivered(self) -> np.ndarray:
        """(G, N) what each group receives: the client keeps it, in scope."""
        return self._scoped(self.client)

    @property
    def collided(self) -> np.ndarray:
        """(G, N) the broker returned it and the client dropped it (a tag hash collision), in scope."""
        return self._scoped(self.broker & ~self.client)

    def reasons(self) -> np.ndarray:
        """(G, N) uint8 reason codes: DELIVERED, or the first stage that dropped the message and why."""
        return np.select(
            [self.below_committed, np.broadcast_to(self.outside_window, self.stage1.shape), ~self.stage1,
             self.errors & ~self.broker, ~self.broker, ~self.client],
            [BELOW_COMMITTED, OUTSIDE_WINDOW, CQ_FILTERED, EVALUATION_ERROR, NOT_MATCHED, CLIENT_DROPPED],
            DELIVERED).astype(np.uint8)

    def counters(self) -> dict[str, np.ndarray]:
        """Per group (arrays in row order): the STAT_FIELDS counters of this batch, in scope."""
        count = lambda m: np.count_nonzero(self._scoped(m), axis=1)  # noqa: E731
        return {"units": count(np.ones(self.stage1.shape, dtype=bool)), "stage1_passed": count(self.stage1),
                "broker_delivered": count(self.broker), "client_delivered": count(self.client),
                "collisions": count(self.broker & ~self.client),
                "bloom_false_positives": count(self.bloom_checked & ~self.broker),
                "evaluated": count(self.evaluated), "evaluation_errors": count(self.errors),
                "ext_unreadable": count(np.broadcast_to(self.batch.code_missing, self.stage1.shape))}

    def error_examples(self) -> dict[int, str | None]:
        """{row: why} for each ad hoc SQL92 subscription whose expression throws in scope: the reason for the
        first message where it does (a stored registration's errors are the broker's own business)."""
        out: dict[int, str | None] = {}
        for k, csub in enumerate(self.subscriptions):
            if csub.sql is None or csub.sub.stored:
                continue
            errors = self._scoped(self.errors[k:k + 1])[0]
            if errors.any():
                row = int(np.argmax(errors))
                out[k] = failure(csub.sql, dict(self.batch.properties.slice(row, 1).to_pylist()[0] or []))
        return out


def decide_topic(plan: Any, topic: str, units: pa.Table, messages: pa.Table,
                 subscriptions: Iterable[CompiledSubscription] | None = None, window: Any = None) -> TopicDecision:
    """The TopicDecision of `subscriptions` (default: the plan's of `topic`) over a batch of the topic's units
    and their decoded messages, row for row. window: a jobs.plan.window.Window whose store-time bounds scope the
    batch (the job's tasks drop messages outside it before deciding; explain asks about one that may be)."""
    n = units.num_rows
    bloom = bloom_mod.BloomFilter(plan.bloom_f, plan.bloom_n)
    batch = topic_batch(topic, units, messages, bloom)
    subs = [c for c in plan.subscriptions if c.sub.topic == topic] if subscriptions is None else list(subscriptions)
    d = dispatch_topic(plan, topic, batch, bloom)
    audit = audit_bitmaps(d, bloom, batch, units, messages, plan.audit_bitmaps)
    retry_sql = retry_filters(plan)
    message_dicts = lazy_messages(messages)
    queue_ids = units.column("queue_id").to_numpy()
    queue_offsets = units.column("queue_offset").to_numpy()
    g = len(subs)
    # one row per group: a group's outcome is a contiguous row, and every counter is one reduction per matrix
    stage1, checked, broker, client, errors, ran = (np.empty((g, n), dtype=bool) for _ in range(6))
    below = np.zeros((g, n), dtype=bool)
    outside = np.zeros(n, dtype=bool) if window is None else \
        ~window.contains(messages.column("store_timestamp").to_numpy())
    skips = []
    for k, csub in enumerate(subs):
        o = apply_subscription(csub, batch, bloom, d.recomputed, retry_sql.get(csub.sub.group), message_dicts,
                               plan.support_retry, d.evaluated(csub))
        stage1[k], checked[k], broker[k], client[k] = o.stage1, o.bloom_checked, o.broker, o.client
        errors[k], ran[k] = o.errors, o.evaluated
        skips.append(o.bloom_skips)
        scope = in_scope(plan, csub.sub, queue_ids, queue_offsets)
        if scope is not None:
            below[k] = ~scope
    return TopicDecision(topic, subs, batch, d, audit, below, outside, stage1, checked, broker, client, errors, ran,
                         skips)


def audit_bitmaps(d: Dispatched, bloom: bloom_mod.BloomFilter, batch: UnitBatch, units: pa.Table, messages: pa.Table,
                  audit: bool) -> BitmapAudit:
    """BitmapAudit of a batch. Only units with a readable ext unit carry a bitmap to compare; a batch where none
    holds a bitmap is a broker without enableCalcFilterBitMap (or without the ext), not a mismatch. Without the
    store's registrations (audit false: its consumerFilter.json is damaged) nothing is compared."""
    raw_valid = units.column("filter_bitmap").is_valid().to_numpy(zero_copy_only=False)
    compared = batch.ext_ok if audit and raw_valid.any() else np.zeros(len(batch), dtype=bool)
    none = np.zeros(len(batch), dtype=bool)
    if not compared.any():
        return BitmapAudit(compared, none, none)
    match = d.match[:, : len(d.registered)]
    store_times = np.where(batch.ext_ok, batch.msg_store_time, messages.column("store_timestamp").to_numpy())
    mismatch, explained, missing = dispatcher.compare_stored(
        d.registered, match, bloom.m, batch.stored_bitmaps, raw_valid, store_times)
    mismatch &= compared
    own = dispatcher.recompute_bitmaps(d.registered, match, bloom.m)[0] if mismatch.any() and d.registered else None
    return BitmapAudit(compared, mismatch, explained, missing, own)


def retry_filters(plan: Any) -> dict[str, dict[str, Expression]]:
    """{group: {topic: compiled SQL92}}: the filters ExpressionForRetryMessageFilter applies on a group's
    %RETRY% topic with filterSupportRetry (empty without it)."""
    retry_sql: dict[str, dict[str, Expression]] = {}
    if plan.support_retry:
        for c in plan.subscriptions:
            if c.sql is not None:
                retry_sql.setdefault(c.sub.group, {})[c.sub.topic] = c.sql
    return retry_sql


def in_scope(plan: Any, sub: Subscription, queue_ids: np.ndarray, queue_offsets: np.ndarray) -> np.ndarray | None:
    """Rows at or after the group's committed offset of their queue (--from committed) and outside the offsets an
    Iceberg lake already holds for the group (the plan's `held`); None: all rows."""
    firsts = [(q, o) for g, t, q, o in plan.start_offsets if g == sub.group and t == sub.topic]
    held = [(q, lo, hi) for g, t, q, lo, hi in plan.held if g == sub.group and t == sub.topic]
    if not firsts and not held:
        return None
    out = np.zeros(len(queue_ids), dtype=bool)
    for q, lo, hi in [(q, 0, o) for q, o in firsts] + held:
        out |= (queue_ids == q) & (queue_offsets >= lo) & (queue_offsets < hi)
    return ~out


def lazy_messages(messages: pa.Table) -> Callable[[], list[dict[str, Any]]]:
    """The batch as message dicts, built only if a PYTHON filter asks (per-row Python is its nature)."""
    cache: list[list[dict[str, Any]]] = []

    def get() -> list[dict[str, Any]]:
        if not cache:
            rows = messages.to_pylist()
            for row in rows:
                row["properties"] = dict(row["properties"] or [])
            cache.append(rows)
        return cache[0]
    return get
