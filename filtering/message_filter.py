"""The broker's two-stage filter and the 4.x client's tag check, vectorized over a batch of one topic.

ExpressionMessageFilter (4.9.x):
  stage 1, consume queue  TAG: code missing, `*`, or int32(code) in the subscription's codes.
                          SQL92: passes unless the unit has a readable ext unit stored at or after the
                          registration's bornTime (isMsgInLive) with a bitmap of the bloom's width and
                          valid bloom data, and then only when all the registration's bits are set.
                          PYTHON (class filter mode): passes.
  stage 2, commit log     SQL92 evaluated on the properties: True only for a Boolean TRUE result.
  client (4.x consumer)   TAG only: the tag string is one of the subscription's tags (unless `*`).
ExpressionForRetryMessageFilter (filterSupportRetry): on %RETRY% topics stage 1 passes and stage 2 uses
the SQL92 registration of (RETRY_TOPIC property, group), when there is one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering import bloom as bloom_mod
from filtering import tags as tags_mod
from filtering.custom import FilterContext, run_filter
from filtering.sql92 import FilterEvaluationError, vectorized
from filtering.subscriptions import RETRY_PREFIX

if TYPE_CHECKING:
    from filtering.sql92 import Expression
    from filtering.subscriptions import CompiledSubscription, Subscription


@dataclass
class UnitBatch:
    """Columns of one topic's units joined with their decoded messages (numpy where fixed-width)."""

    topic: str
    tags_code: np.ndarray  # int64, resolved
    code_missing: np.ndarray  # bool: ext unit unreadable, the broker's `null` tag code
    ext_ok: np.ndarray  # bool: a readable ext unit exists (cqExtUnit != null)
    msg_store_time: np.ndarray  # int64 from the ext unit
    stored_bitmaps: np.ndarray  # (N, w) uint8
    stored_valid: np.ndarray  # bool: the ext unit holds a bitmap
    properties: pa.Array  # map<string, string>
    tags: pa.Array  # string
    coded: dict | None = None  # {name: dictionary column} of the properties SQL92 reads, when the decode encoded them
    _tags_encoded: tuple | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.tags_code)

    def tags_encoded(self) -> tuple[np.ndarray, list[Any]]:
        """tags.encode_tags of the batch, computed once for all its groups."""
        if self._tags_encoded is None:
            self._tags_encoded = tags_mod.encode_tags(self.tags)
        return self._tags_encoded


@dataclass
class Outcome:
    """Per-row results of one subscription over a batch."""

    stage1: np.ndarray
    bloom_checked: np.ndarray  # stage 1 decided by the bloom filter (and it hit)
    broker: np.ndarray  # what the broker returns
    client: np.ndarray  # what the consumer finally receives
    errors: np.ndarray  # evaluation errors (SQL92 exceptions, PYTHON exceptions) wherever it was evaluated
    evaluated: np.ndarray  # where the expression was evaluated (dispatcher: every row; else stage 2)
    bloom_skips: np.ndarray | None = None  # SQL92: why stage 1 did not consult the bloom filter (stage1_sql)


def sql_outcomes(expression: Expression, properties: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(matched, errors) of an SQL92 expression over a properties column."""
    matched, errors = vectorized.outcomes_batch(expression, properties)
    return np.asarray(matched, dtype=bool), np.asarray(errors, dtype=bool)


def row_outcomes(expression: Expression, properties: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The row-at-a-time reference of sql_outcomes (RocketMQ's evaluate per message)."""
    rows = properties.to_pylist()
    matched = np.zeros(len(rows), dtype=bool)
    errors = np.zeros(len(rows), dtype=bool)
    for i, props in enumerate(rows):
        try:
            matched[i] = expression.evaluate(dict(props or [])) is True
        except FilterEvaluationError:
            errors[i] = True
    return matched, errors


# Why stage 1 of an SQL92 group passed without consulting the bloom filter, in the order the broker tests
BLOOM_CONSULTED, NO_BLOOM_DATA, NO_EXT_UNIT, BEFORE_BORN_TIME, NO_BITMAP = range(5)


def _bloom_skips(sub, batch, bloom, bitmaps, bitmaps_valid):
    """Per row, why isMatchedByConsumeQueue does not consult the bloom filter for an SQL92 group (uint8 codes
    above; BLOOM_CONSULTED where it does): the registration has no valid bloom data; the unit has no readable
    ext unit; the message is older than the registration (isMsgInLive; an ad hoc subscription without
    bornTime is live everywhere); the ext unit holds no bitmap of the bloom's width. Ad hoc subscriptions test
    recomputed bitmaps where the broker keeps ext units: a broker without them has none to test."""
    n = len(batch)
    bits = sub.bloom_bits
    if not bits or bloom is None or len(bits) != bloom.k or bitmaps.shape[1] * 8 != bloom.m:
        return np.full(n, NO_BLOOM_DATA, dtype=np.uint8)
    born = sub.born_time if sub.born_time is not None else (0 if sub.stored else None)
    before = batch.msg_store_time < born if born is not None else np.zeros(n, dtype=bool)
    return np.select([~batch.ext_ok, before, ~np.asarray(bitmaps_valid, dtype=bool)],
                     [NO_EXT_UNIT, BEFORE_BORN_TIME, NO_BITMAP], BLOOM_CONSULTED).astype(np.uint8)


def stage1_sql(sub: Subscription, batch: UnitBatch, bloom: bloom_mod.BloomFilter | None, bitmaps: np.ndarray,
               bitmaps_valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(passed, bloom_checked, skips) of ExpressionMessageFilter.isMatchedByConsumeQueue for an SQL92 group:
    a row the bloom filter is not consulted for passes (skips says why); one it is passes on isHit."""
    skips = _bloom_skips(sub, batch, bloom, bitmaps, bitmaps_valid)
    checked = skips == BLOOM_CONSULTED
    hit = bloom_mod.is_hit_array(bitmaps, cast("tuple[int, ...]", sub.bloom_bits)) if checked.any() \
        else np.zeros(len(batch), dtype=bool)
    return ~checked | hit, checked & hit, skips


def retry_filter_applies(sub: Subscription, support_retry: bool) -> bool:
    """ExpressionForRetryMessageFilter's case: filterSupportRetry and a %RETRY% topic (custom filters aside)."""
    return support_retry and sub.topic.startswith(RETRY_PREFIX) and sub.expression_type != "PYTHON"


def apply_subscription(csub: CompiledSubscription, batch: UnitBatch, bloom: bloom_mod.BloomFilter | None,
                       recomputed: tuple[np.ndarray, np.ndarray] | None = None,
                       retry_sql: Mapping[str, Expression] | None = None,
                       messages: Callable[[], list[dict[str, Any]]] | None = None, support_retry: bool = False,
                       evaluated: tuple[np.ndarray, np.ndarray] | None = None) -> Outcome:
    """Outcome of one compiled subscription over a batch of its topic.

    evaluated: (matched, errors) of this SQL92 expression over every row of the batch, when the
    dispatcher already computed it (a row's result does not depend on the other rows). Its errors count on
    every row: the replay's dispatcher evaluated the expression there, as the broker's does.

    recomputed: (bitmaps, valid) from the dispatcher, used for ad hoc SQL92 subscriptions.
    retry_sql: {original topic: compiled SQL92 of this group}, for ExpressionForRetryMessageFilter.
    messages: callable returning the batch as a list of message dicts (PYTHON filters only)."""
    sub = csub.sub
    n = len(batch)
    ones = np.ones(n, dtype=bool)
    errors = np.zeros(n, dtype=bool)
    checked = np.zeros(n, dtype=bool)
    ran = np.zeros(n, dtype=bool)
    if retry_filter_applies(sub, support_retry):
        stage1 = ones
        broker = ones.copy()
        original = pc.fill_null(pc.map_lookup(batch.properties, "RETRY_TOPIC", "first"), "").to_numpy(
            zero_copy_only=False)
        for topic, expression in (retry_sql or {}).items():
            rows = original == topic
            if rows.any():
                m, e = sql_outcomes(expression, batch.properties.filter(pa.array(rows)))
                broker[rows] = m
                errors[rows] = e
                ran |= rows
        client = broker.copy()
        if csub.tag is not None and not csub.tag.match_all:
            client &= tags_mod.client_tag_match_encoded(csub.tag, batch.tags_encoded())
        return Outcome(stage1, checked, broker, client, errors, ran)
    if csub.tag is not None:
        stage1 = tags_mod.broker_tag_match_array(csub.tag, batch.tags_code, batch.code_missing)
        broker = stage1
        client = broker & tags_mod.client_tag_match_encoded(csub.tag, batch.tags_encoded())
    elif csub.sql is not None:
        if sub.stored:
            stage1, checked, skips = stage1_sql(sub, batch, bloom, batch.stored_bitmaps, batch.stored_valid)
        else:
            assert recomputed is not None  # an ad hoc SQL92 subscription: the dispatcher's bitmaps
            stage1, checked, skips = stage1_sql(sub, batch, bloom, *recomputed)
        broker = np.zeros(n, dtype=bool)
        if evaluated is not None:
            broker = stage1 & evaluated[0]
            errors, ran = evaluated[1], ones
        elif stage1.any():
            props = batch.properties if stage1.all() else batch.properties.filter(pa.array(stage1))
            m, e = sql_outcomes(csub.sql, props)
            broker[stage1] = m
            errors[stage1] = e
            ran = stage1
        client = broker
        return Outcome(stage1, checked, broker, client, errors, ran, skips)
    elif csub.python is not None:
        stage1 = ones
        assert messages is not None  # a PYTHON filter is handed the batch's messages
        broker, errors = run_filter(csub.python, messages(), FilterContext(sub.group, sub.topic))
        client, ran = broker, ones
    else:
        raise ValueError(f"subscription {sub.group}/{sub.topic} did not compile: {csub.error}")
    return Outcome(stage1, checked, broker, client, errors, ran)
