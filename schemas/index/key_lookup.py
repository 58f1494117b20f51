"""The messages that carry a key (a KEYS token or the UNIQ_KEY), found through the broker's index (schemas/
index_file.py) and checked against their records, or found by a scan of the commit log where the index cannot
answer: no index/ (messageIndexEnable=false, or lost), records past the index's end or before its start, and
the span of a damaged index file. No Spark.

The broker indexes `topic#key` for each non-empty space-separated KEYS token and for UNIQ_KEY of every record
it dispatches, except transaction ROLLBACK records (IndexService.buildIndex); a scan applies the same rule, so
both paths give the same answer. Every hit is read and kept only when its record carries the key in a topic
asked about: a hash or slot shared with another key is never a hit.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from schemas.arrow_schemas import MESSAGE_SCHEMA
from schemas.errors import ConfigError, NotInStore
from schemas.index.index_file import Header, index_key, key_hash, list_index_files, open_index_file
from schemas.log import layout as L
from schemas.log.lookup import read_records, record_size_at
from schemas.log.records import decode_records
from schemas.store import storefs
from schemas.store.config import (
    CONSUMER_FILTER_FILE,
    CONSUMER_OFFSET_FILE,
    SUBSCRIPTION_GROUP_FILE,
    TOPICS_FILE,
    load_store_config,
)

if TYPE_CHECKING:
    from schemas.log.files import CommitLog

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"  # MixAll: a group's retry and dead-letter topics
UNITS_FOUND_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                                ("commitlog_offset", pa.int64()), ("size", pa.int32())])


@dataclass
class Found:
    """The records that carry a key (MESSAGE_SCHEMA, bodies left out, in commit-log order), the commit-log spans
    scanned instead of read through the index [(from, to or None: the log's end, why, records scanned)], and the
    damaged index files [(path, problem)]."""

    messages: pa.Table
    scanned: list = field(default_factory=list)
    damaged: list = field(default_factory=list)
    index_files: int = 0

    def units(self) -> pa.Table:
        """UNITS_FOUND_SCHEMA: where each message is (its consume-queue unit's fields, from the record)."""
        m = self.messages
        return pa.table([m.column("topic"), m.column("queue_id"), m.column("queue_offset"),
                         m.column("commitlog_offset"), m.column("store_size")], schema=UNITS_FOUND_SCHEMA)


def find_key_units(fs: pafs.FileSystem, root: str, log: CommitLog, keys: Iterable[str],
                   topics: Iterable[str] | None = None, window: tuple[int | None, int | None] | None = None,
                   slots: int | None = None, entries: int | None = None) -> pa.Table:
    """UNITS_FOUND_SCHEMA table of the messages of `topics` (None: every topic the store names, store_topics)
    that carry one of `keys`, one row each, in commit-log order: what a data source reads for
    `array_contains(keys, K)` or `uniq_key = K`. log: the store's CommitLog (schemas/log/files.find_log);
    window: (since, until) store times or None."""
    if topics is None:
        topics = store_topics(fs, root)
    return locate_keys(fs, root, log, keys, topics, window, slots, entries).units()


def store_topics(fs: pafs.FileSystem, root: str, named: Iterable[str] = (), groups: Iterable[str] = ()) -> set[str]:
    """Every topic a store may hold a message of (the index keys a message per topic): its consume queues', the
    `named` ones (config/topics.json's, the subscriptions'), and the retry and dead-letter topics of `groups`
    and of every group a local store's config names (consumer offsets, SQL92 filters, subscription groups)."""
    topics = {t for t, _, _ in storefs.list_queues(fs, root)} | set(named)
    groups = set(groups)
    if storefs.is_local(fs):
        try:
            config = load_store_config(root, needed=(TOPICS_FILE, CONSUMER_OFFSET_FILE, CONSUMER_FILTER_FILE,
                                                     SUBSCRIPTION_GROUP_FILE))
        except ConfigError:  # names to look under, not facts the answer rests on: the listing's still count
            config = load_store_config(root, needed=())
        topics |= set(config.topics) | {t for t, _ in config.consumer_offsets}
        groups |= {g for _, g in config.consumer_offsets} | set(config.subscription_groups)
        groups |= {f.consumer_group for f in config.consumer_filters}
    return topics | {prefix + g for g in groups for prefix in (RETRY_PREFIX, DLQ_PREFIX)}


def locate_keys(fs: pafs.FileSystem, root: str, log: CommitLog, keys: Iterable[str], topics: Iterable[str],
                window: tuple[int | None, int | None] | None = None, slots: int | None = None,
                entries: int | None = None) -> Found:
    """A Found of the messages of `topics` that carry one of `keys` and were stored in `window` (since, until:
    since <= t < until, either None). slots, entries: the broker's maxHashSlotNum and maxIndexNum when known."""
    keys, topics = sorted(set(k for k in keys if k)), sorted(set(topics))  # no key is empty (buildIndex)
    since, until = window or (None, None)
    if not log.files or not keys or not topics:
        return Found(MESSAGE_SCHEMA.empty_table())
    paths = list_index_files(fs, root)
    log_start = log.files[0].start
    if paths is None:
        return _finish(Found(MESSAGE_SCHEMA.empty_table()), [], [(log_start, None, "the store has no index/")],
                       fs, log, keys, topics, since, until)
    files = [open_index_file(fs, p, slots, entries) for p in paths]
    hashes = np.array([key_hash(index_key(t, k)) for t in topics for k in keys], np.int64)
    hits = []
    for f in files:
        if f.damaged or f.count <= 1 or cast(Header, f.header).end_phy_offset < log_start:
            continue  # damaged: scanned below; empty; or every entry's record deleted by retention
        _check_end(fs, log, f)
        if f.damaged or not f.covers_time(since, until):
            continue
        _, phy, positions = f.lookup(hashes)
        hits.append((f, _hits(fs, log, f, phy, positions, log_start)))
    found = Found(MESSAGE_SCHEMA.empty_table(), index_files=len(files))
    found.damaged = [(f.path, "; ".join(cast("list[str]", f.problems))) for f in files if f.damaged]
    kept = [h for f, h in hits if not f.damaged]
    offsets = np.concatenate([h[0] for h in kept]) if kept else np.zeros(0, np.int64)
    sizes = np.concatenate([h[1] for h in kept]) if kept else np.zeros(0, np.int64)
    offsets, first = np.unique(offsets, return_index=True)
    records = [read_records(fs, log, offsets, sizes[first])] if len(offsets) else []
    return _finish(found, records, _spans(files, log_start), fs, log, keys, topics, since, until)


def _check_end(fs, log, f):
    """A file whose last entry points where no record starts (past the commit log's end) is damaged."""
    end = f.header.end_phy_offset
    try:
        record_size_at(fs, log, end)
    except NotInStore:
        f.problems.append(f"its last entry points at commit-log offset {end}, where no record starts (past the "
                          "commit log's end)")


def _hits(fs, log, f, phy, positions, log_start):
    """(offsets, sizes) of the hits' records (those below the log's first file were deleted by retention); an
    entry pointing where no record starts makes the file damaged."""
    alive = phy >= log_start
    offsets, first = np.unique(phy[alive], return_index=True)
    sizes = np.zeros(len(offsets), np.int64)
    for i, (o, p) in enumerate(zip(offsets, positions[alive][first])):
        try:
            sizes[i] = record_size_at(fs, log, int(o))
        except NotInStore:
            f.problems.append(f"entry {int(p)} points at commit-log offset {int(o)}, where no record starts")
            break
    return offsets, sizes


def _spans(files, log_start):
    """The commit-log spans the index cannot answer for: before its first good file, each damaged file's (from
    the good file before it to the good one after), and past its last good file (to the log's end, None)."""
    good = [f for f in files if not f.damaged and f.count > 1]
    spans = []
    if not good:
        return [(log_start, None, "no usable index file" if files else "index/ holds no index file")]
    if good[0].header.begin_phy_offset > log_start:
        spans.append((log_start, good[0].header.begin_phy_offset, "before the index's first entry"))
    for i, f in enumerate(files):
        if f.damaged:
            before = [g for g in files[:i] if not g.damaged and g.count > 1]
            after = [g for g in files[i + 1:] if not g.damaged and g.count > 1]
            lo = before[-1].header.end_phy_offset if before else log_start
            hi = after[0].header.begin_phy_offset if after else None
            spans.append((max(lo, log_start), hi, f"index file {f.name} is damaged"))
    spans.append((max(good[-1].header.end_phy_offset, log_start), None, "past the index's end"))
    return spans


def _finish(found, records, spans, fs, log, keys, topics, since, until):
    """Scan the spans (a file at a time, only its records that carry a key kept), keep the records that carry a
    key in a topic asked about, in the window, once each."""
    records = [r.filter(carries(r, keys, topics, since, until)) for r in records]
    for lo, hi, why in _merged(spans):
        n = 0
        for part in scan_parts(fs, log, lo, hi):
            n += part.num_rows
            records.append(part.filter(carries(part, keys, topics, since, until)))
        found.scanned.append((lo, hi, why, n))
    table = pa.concat_tables(records) if records else MESSAGE_SCHEMA.empty_table()
    offsets = table.column("commitlog_offset").to_numpy()
    first = np.unique(offsets, return_index=True)[1]
    found.messages = table.take(pa.array(first))
    return found


def _merged(spans):
    """Spans with overlapping ranges joined (a damaged last file's span and the tail meet)."""
    out = []
    for lo, hi, why in sorted(spans, key=lambda s: s[0]):
        if out and (out[-1][1] is None or lo <= out[-1][1]):
            plo, phi, pwhy = out[-1]
            out[-1] = (plo, None if hi is None or phi is None else max(hi, phi),
                       pwhy if why in pwhy else f"{pwhy}; {why}")
        else:
            out.append((lo, hi, why))
    return out


def carries(messages: pa.Table, keys: Sequence[str], topics: Sequence[str], since: int | None = None,
            until: int | None = None) -> pa.Array:
    """Boolean mask of the records that carry one of `keys` as a KEYS token or as UNIQ_KEY, in one of `topics`,
    stored since <= t < until, and that the broker indexes (not a transaction ROLLBACK record)."""
    n = messages.num_rows
    if not n:
        return pa.array(np.zeros(0, bool))
    key_set = pa.array(keys, pa.string())
    tokens = pc.split_pattern(pc.fill_null(messages.column("keys"), ""), " ")
    hit = np.zeros(n, bool)
    flat = pc.list_flatten(tokens)
    rows = pc.list_parent_indices(tokens).to_numpy()
    hit[rows[pc.is_in(flat, value_set=key_set).to_numpy(zero_copy_only=False)]] = True
    uniq = pc.map_lookup(messages.column("properties"), pa.scalar("UNIQ_KEY"), "last")
    hit |= pc.fill_null(pc.is_in(uniq, value_set=key_set), False).to_numpy(zero_copy_only=False)
    hit &= pc.is_in(messages.column("topic"), value_set=pa.array(topics, pa.string())).to_numpy(zero_copy_only=False)
    hit &= (messages.column("sys_flag").to_numpy() & L.TRANSACTION_MASK) != L.TRANSACTION_ROLLBACK
    stored = messages.column("store_timestamp").to_numpy()
    if since is not None:
        hit &= stored >= since
    if until is not None:
        hit &= stored < until
    return pa.array(hit)


def scan_parts(fs: pafs.FileSystem, log: CommitLog, lo: int, hi: int | None = None) -> Iterator[pa.Table]:
    """MESSAGE_SCHEMA tables (bodies left out), one a commit-log file, of the records that start in [lo, hi) of
    the log (hi None: to its end); lo must be a record's start or a file's. Only the files meeting the span are
    read, a plain file from lo on."""
    for f in log.files:
        if f.end <= lo or (hi is not None and f.start >= hi):
            continue
        pos = f.kind.read_from(max(lo - f.start, 0))  # a plain file read from lo on, a DLedger one whole
        buf = storefs.read_range(fs, f.path, pos)
        starts = f.kind.record_starts(buf, f.start + pos, f.path)
        at = f.start + pos + starts
        starts = starts[(at >= lo) & ((at < hi) if hi is not None else True)]
        if len(starts):
            yield pa.Table.from_batches([decode_records(buf, starts, f.start + pos, f.path, with_body=False)])
