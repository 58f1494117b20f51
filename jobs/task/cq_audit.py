"""--audit-consume-queue: a split's consume-queue units checked against its commit-log records, as RocketMQ would
rebuild them (schemas/queues/cq_rebuild.py), run by the task that holds both.

A unit is right when a record the dispatcher builds a unit for starts at its commit-log offset, with its
size, and that record's topic, queue id, queue offset and tag code are the unit's. A record of an audited queue
(within the run's offsets) that no unit points at is a unit the queue lacks. Each finding is a row of
OUT/audit/consume_queue/ (CQ_AUDIT_SCHEMA): two swapped units are two rows, each naming what its record is."""
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.columns import queue_index

CQ_AUDIT_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                             ("commitlog_offset", pa.int64()), ("reason", pa.string())])
NO_RECORD = "no record starts at the unit's commit-log offset (or it is a transaction half or rollback record)"
NO_UNIT = "the commit log holds this record of the queue, and no unit points at it"


def audit_units(units: pa.Table, records: pa.Table,
                ranges: Sequence[tuple[str, int, int, int]]) -> tuple[pa.Table, np.ndarray]:
    """(CQ_AUDIT_SCHEMA rows, the rows of `units` that are wrong) of a split: `units` (CONSUME_QUEUE_SCHEMA) of
    the audited queues pointing into it, `records` (cq_rebuild.UNITS_SCHEMA, in commit-log order) the units the
    split's records make, `ranges` ((topic, queue_id, first, end), ...) the audited queues and their offsets in
    this run. A wrong unit is left out of the replay by the caller (its record is not the unit's: decoding it
    would be damaged data) and counted as skipped."""
    if not ranges:
        return CQ_AUDIT_SCHEMA.empty_table(), np.zeros(0, np.int64)
    record_keys, unit_keys = _keys(records, units)
    order = np.argsort(record_keys, kind="stable")
    at = record_keys[order]
    k = np.searchsorted(at, unit_keys)
    found = k < len(at)
    found[found] = at[k[found]] == unit_keys[found]
    k[found] = order[k[found]]
    # a unit whose record starts there but dispatched it to no such queue: compared with the record's own unit,
    # so that the finding names what the record is
    own = np.searchsorted(records.column("commitlog_offset").to_numpy(), units.column("commitlog_offset").to_numpy())
    elsewhere = ~found & (own < records.num_rows)
    elsewhere[elsewhere] = (records.column("commitlog_offset").to_numpy()[own[elsewhere]]
                            == units.column("commitlog_offset").to_numpy()[elsewhere])
    k[elsewhere] = own[elsewhere]
    found |= elsewhere
    rows, reasons = [np.flatnonzero(~found)], [np.full(int((~found).sum()), NO_RECORD, object)]
    hit = np.flatnonzero(found)
    if len(hit):
        mine = units.take(pa.array(hit))
        theirs = records.take(pa.array(k[hit]))
        same = _equal(mine, theirs, "topic") & _equal(mine, theirs, "queue_id") \
            & _equal(mine, theirs, "queue_offset") & _equal(mine, theirs, "size") \
            & (_equal(mine, theirs, "tags_code") | mine.column("tags_code").is_null().to_numpy(zero_copy_only=False))
        wrong = np.flatnonzero(~same)
        if len(wrong):
            rows.append(hit[wrong])
            reasons.append(np.array(_record_is(theirs.take(pa.array(wrong))), object))
    audited = _in_ranges(records, ranges)  # the records of audited queues: each lacks a unit unless one points at it
    lacking = records.filter(pa.array(audited & ~np.isin(record_keys, unit_keys)))
    wrong_rows = np.concatenate(rows).astype(np.int64)
    found_rows = units.take(pa.array(wrong_rows))
    out = [pa.table({"topic": found_rows.column("topic"), "queue_id": found_rows.column("queue_id"),
                     "queue_offset": found_rows.column("queue_offset"),
                     "commitlog_offset": found_rows.column("commitlog_offset"),
                     "reason": pa.array(np.concatenate(reasons), pa.string())}, schema=CQ_AUDIT_SCHEMA),
           pa.table({"topic": lacking.column("topic"), "queue_id": lacking.column("queue_id"),
                     "queue_offset": lacking.column("queue_offset"),
                     "commitlog_offset": lacking.column("commitlog_offset"),
                     "reason": pa.repeat(pa.scalar(NO_UNIT), lacking.num_rows)}, schema=CQ_AUDIT_SCHEMA)]
    return pa.concat_tables(out), wrong_rows


def _keys(records, units):
    """(keys of records, keys of units), on one numbering of their queues: a record's unit and a unit of the same
    queue at the same commit-log offset share a key (a multi-dispatched record has a unit in each of its queues at
    one offset). Every key compared comes from this one numbering: keys made on two (Arrow's group_by numbers
    queues in no fixed order, and two tables may hold other queues) would not meet."""
    both = pa.concat_tables([records.select(["topic", "queue_id"]), units.select(["topic", "queue_id"])])
    pairs = both.group_by(["topic", "queue_id"]).aggregate([]).to_pylist()
    queues = tuple((p["topic"], p["queue_id"]) for p in pairs)
    width = len(queues) + 1
    return tuple(table.column("commitlog_offset").to_numpy() * width + queue_index(table, queues) + 1
                 for table in (records, units))


def _equal(a, b, name):
    return pc.equal(a.column(name), b.column(name)).fill_null(False).to_numpy(zero_copy_only=False)


def _record_is(records):
    """What the records the units point at are, one text each (findings only: a few)."""
    return [f"the record there is topic {r['topic']} queue {r['queue_id']} offset {r['queue_offset']}, size "
            f"{r['size']}, tag code {r['tags_code']}" for r in records.to_pylist()]


def _in_ranges(records, ranges):
    """Per record: its queue is audited and its queue offset within the run's offsets of it."""
    index = queue_index(records, ranges)
    first = np.array([a for _, _, a, _ in ranges] + [0], np.int64)
    end = np.array([b for _, _, _, b in ranges] + [0], np.int64)  # index -1: no queue audited, an empty range
    offsets = records.column("queue_offset").to_numpy()
    return (offsets >= first[index]) & (offsets < end[index])
