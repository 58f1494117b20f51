"""CommitLogDispatcherCalcBitMap, recomputed: every message's bitmap from all SQL92 registrations of its
topic, and the comparison with the bitmap the broker stored in the message's ext unit.

The broker evaluates each registration of the topic when the message is dispatched and ORs the bits of
those that return TRUE (errors and non-TRUE results add nothing). A topic with no registration gets no
bitmap at all. Registrations born after the message was dispatched are absent from its stored bitmap:
such a difference is explained; any other is a real mismatch."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from filtering import bloom as bloom_mod
from filtering.sql92.vectorized import outcomes_many

if TYPE_CHECKING:
    from filtering.sql92 import Expression
    from filtering.subscriptions import CompiledSubscription

REASON_BORN_AFTER = "registration born after the message"


def registration_outcomes(registrations: Sequence[CompiledSubscription], properties: pa.Array,
                          coded: Mapping[str, pa.Array] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(match, errors): (N, R) bool matrices of where each registration's SQL92 returns TRUE, and where
    it throws, per message. All registrations share one extraction of the property columns (coded: those the
    decode encoded already, {name: dictionary column})."""
    n = len(properties)
    match = np.zeros((n, len(registrations)), dtype=bool)
    errors = np.zeros((n, len(registrations)), dtype=bool)
    if registrations and n:
        sqls = [cast("Expression", c.sql) for c in registrations]  # SQL92 registrations, compiled
        for r, (matched, failed) in enumerate(outcomes_many(sqls, properties, coded)):
            match[:, r], errors[:, r] = matched, failed
    return match, errors


def registration_matches(registrations: Sequence[CompiledSubscription], properties: pa.Array) -> np.ndarray:
    """(N, R) bool matrix: which registration's SQL92 returns TRUE per message."""
    return registration_outcomes(registrations, properties)[0]


def recompute_bitmaps(registrations: Sequence[CompiledSubscription], match: np.ndarray,
                      m: int) -> tuple[np.ndarray, np.ndarray]:
    """(bitmaps (N, m/8) uint8, valid) for the given registrations; no registrations, no bitmap."""
    n = match.shape[0]
    if not registrations:
        return np.zeros((n, m // 8), dtype=np.uint8), np.zeros(n, dtype=bool)
    bits = [cast("tuple[int, ...]", c.sub.bloom_bits) for c in registrations]  # an SQL92 registration's
    return bloom_mod.or_bits(match, bits, m), np.ones(n, dtype=bool)


def compare_stored(registrations: Sequence[CompiledSubscription], match: np.ndarray, m: int, stored: np.ndarray,
                   stored_valid: np.ndarray,
                   msg_store_time: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[Any, list[str]]]:
    """Rows whose stored bitmap differs from the recomputed one: (mismatch, explained, {row: missing groups}).

    explained: the stored bitmap equals the one recomputed from only the registrations born at or before
    the message's store time (or strictly before: the same millisecond can go either way)."""
    n = match.shape[0]
    full, full_valid = recompute_bitmaps(registrations, match, m)
    width = stored.shape[1]
    if width != m // 8:
        return stored_valid | full_valid, np.zeros(n, dtype=bool), {}
    same = (stored_valid == full_valid) & ((stored == full).all(axis=1) | ~full_valid)
    mismatch = ~same
    explained = np.zeros(n, dtype=bool)
    missing: dict[Any, list[str]] = {}  # row -> groups whose bits the stored bitmap lacks (mismatch rows only)
    if mismatch.any() and registrations:
        born = np.array([c.sub.born_time if c.sub.born_time is not None else -1 for c in registrations])
        for strict in (False, True):
            alive = (born[None, :] < msg_store_time[:, None]) if strict else (born[None, :] <= msg_store_time[:, None])
            part, _ = recompute_bitmaps(registrations, match & alive, m)
            part_valid = alive.any(axis=1)
            ok = (stored_valid == part_valid) & ((stored == part).all(axis=1) | ~part_valid)
            explained |= mismatch & ok
        for i in np.flatnonzero(mismatch):
            missing[i] = [c.sub.group for r, c in enumerate(registrations)
                          if match[i, r] and (born[r] >= msg_store_time[i] or not stored_valid[i])]
    return mismatch, explained, missing
