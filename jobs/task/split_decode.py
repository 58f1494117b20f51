"""Decoding a split's records under the corruption policy: every unit's record read and checked (magic,
size, topic, queue and offset agree with the unit; body CRC on request); damaged ones fail the run or are
audited and left out (--on-corrupt skip), each with its reason."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.policy import report_damage
from schemas import kernels as K
from schemas.arrow_schemas import BODIES_SCHEMA, MESSAGE_SCHEMA
from schemas.columns import one_array
from schemas.errors import CorruptStoreError
from schemas.log import layout as L
from schemas.log.files import header_problems
from schemas.log.inner_batch import unwrap
from schemas.log.multi_dispatch import dispatched_at
from schemas.log.records import compression_types, decode_records, decompress, inflated_into, not_inflated_reason
from schemas.store import storefs

if TYPE_CHECKING:
    from jobs.plan.replay_plan import ReplayPlan
    from jobs.task.split_task import Pieces
    from schemas.log.files import LogFile

OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL: the commit-log file was deleted (retention)"

EXT_UNREADABLE = "ext unit unreadable"

CRC_MISMATCH = "body CRC mismatch"

INNER_BATCH_DAMAGED = "inner batch damaged: its body does not hold whole messages (the client cannot unwrap it)"


def check_ext(plan: ReplayPlan, units: pa.Table, out: Pieces) -> None:
    """Units whose ext unit cannot be read: the broker treats the tag code as missing; audited, kept."""
    missing = (units.column("is_ext_addr").to_numpy(zero_copy_only=False)
               & units.column("tags_code").is_null().to_numpy(zero_copy_only=False))
    if not missing.any():
        return
    positions = L.ext_position(units.column("tags_code_raw").to_numpy())
    topics = units.column("topic").to_numpy(zero_copy_only=False)
    queues = units.column("queue_id").to_numpy()
    for topic, queue in sorted({(topics[i], int(queues[i])) for i in np.flatnonzero(missing)}):
        rows = np.flatnonzero(missing & (topics == topic) & (queues == queue))
        report_damage(plan, out, units, rows,
                      EXT_UNREADABLE + ": its tag code counts as missing (matches), as the broker does",
                      f"consumequeue_ext/{topic}/{queue}", offsets=positions, kept=True)


def decode_messages(plan: ReplayPlan, units: pa.Table, out: Pieces) -> tuple[pa.Table | None, pa.Table]:
    """Decode the record of every unit (a batch of split_task.decoded_topics: one commit-log file); units
    whose record is missing or damaged go to the audit. (messages, the units they belong to), row for row;
    compressed bodies as stored (`inflated` inflates them, a budget at a time)."""
    offsets = units.column("commitlog_offset").to_numpy()
    sizes = units.column("size").to_numpy().astype(np.int64)
    found = plan.log.file_at(int(offsets[0]))  # a plain or DLedger data file (schemas/log/files.py)
    if found is None:
        path, deleted = plan.log.missing(int(offsets[0]))
        reason = OFFSET_TOO_SMALL if deleted else "commit-log file missing"
        report_damage(plan, out, units, np.arange(units.num_rows), reason, path, deleted=deleted)
        return None, units.slice(0, 0)
    path, length, file_start, head = found.path, found.length, found.start, found.header_size
    rel = offsets - file_start
    bad = (rel + sizes > length) | (sizes < L.MIN_RECORD_SIZE) | (rel < head)
    report_damage(plan, out, units, np.flatnonzero(bad), "unit points outside the commit-log file", path)
    keep = ~bad
    lo = int(rel[keep].min()) - head if keep.any() else 0  # a DLedger entry's header is read with its record
    hi = int((rel + sizes)[keep].max()) if keep.any() else 0
    buf = _read(plan, path, lo, hi - lo) if keep.any() else np.zeros(0, np.uint8)
    starts = rel - lo
    if head and keep.any():
        keep = _entry_headers_ok(plan, out, units, found, buf, starts, offsets, sizes, keep)
    head_ok = np.zeros(len(rel), dtype=bool)
    fields = None
    if keep.any():
        idx = np.flatnonzero(keep)
        fields = K.record_fields(buf, starts[idx])  # one pass: the head checks here, the decode below
        magic_ok = np.isin(fields["magic"], L.MESSAGE_MAGICS)
        size_ok = fields["total_size"] == sizes[idx]
        head_ok[idx[magic_ok & size_ok]] = True
        report_damage(plan, out, units, idx[~magic_ok], "unit points at no record (bad magic code)", path)
        report_damage(plan, out, units, idx[magic_ok & ~size_ok], "unit size differs from the record's totalSize", path)
        if not (magic_ok & size_ok).all():
            fields = None  # some candidates are gone: the decode finds the fields of the rest itself
    idx = np.flatnonzero(head_ok)
    uniq, inverse = starts[idx], None  # decode in unit order
    if (np.diff(uniq) == 0).any():  # a record twice in a batch (never, in a sound store): decode it once
        uniq, inverse = np.unique(uniq, return_inverse=True)
        fields = None
    try:
        decoded = pa.Table.from_batches([decode_records(buf, uniq, file_start + lo, path, with_body=plan.with_body,
                                                        raw=plan.verify_crc, fields=fields, inflate=False,
                                                        coded=plan.sql92_properties)])
    except CorruptStoreError:
        if not plan.skips_damage:
            raise
        decoded, idx, inverse = _decode_one_by_one(plan, buf, np.unique(starts[idx]), starts, idx, file_start + lo,
                                                   path, units, out)
    messages = decoded if inverse is None else decoded.take(pa.array(inverse.reshape(-1)))
    sel = units if len(idx) == units.num_rows else units.take(pa.array(idx))  # idx ascends: all rows, in order
    if plan.verify_crc and "stored_body" in messages.column_names:
        crc_ok = _crc_ok(messages)
        report_damage(plan, out, sel, np.flatnonzero(~crc_ok), CRC_MISMATCH, path)
        keep = pa.array(np.flatnonzero(crc_ok))
        messages, sel = messages.take(keep).drop_columns(["stored_body", "properties_raw"]), sel.take(keep)
    agree = records_agree(messages, sel)
    report_damage(plan, out, sel, np.flatnonzero(~agree), "record's topic, queue or queue offset differ from the unit",
                  path)
    if agree.all():
        return messages, sel
    keep_rows = pa.array(np.flatnonzero(agree))
    return messages.take(keep_rows), sel.take(keep_rows)


def records_agree(messages: pa.Table, units: pa.Table) -> np.ndarray:
    """Per row, whether a record is the one its unit names: the unit's topic, queue and offset are the record's,
    or the record's multi-dispatch wrote the unit (an LMQ queue's: schemas/log/multi_dispatch.py)."""
    agree = (pc.equal(messages.column("topic"), units.column("topic")).to_numpy(zero_copy_only=False)
             & (messages.column("queue_id").to_numpy() == units.column("queue_id").to_numpy())
             & (messages.column("queue_offset").to_numpy() == units.column("queue_offset").to_numpy()))
    if not agree.all():
        rows = np.flatnonzero(~agree)
        take = pa.array(rows)
        agree[rows[dispatched_at(messages.column("topic").take(take), messages.column("queue_id").to_numpy()[rows],
                                 one_array(messages.column("properties")).take(take),
                                 units.column("topic").take(take), units.column("queue_id").to_numpy()[rows],
                                 units.column("queue_offset").to_numpy()[rows])]] = True
    return agree


def unwrapped(plan: ReplayPlan, messages: pa.Table, units: pa.Table, out: Pieces) -> tuple[pa.Table, pa.Table]:
    """(messages, units) with every inner batch (a 5.x BatchCQ record) unwrapped into its messages, a row each
    (schemas/log/inner_batch.py), each unit repeated for its messages at its queue offset + the message's place in
    the batch; a batch whose body does not hold whole messages is damaged data (the corruption policy)."""
    messages, parent, index, damaged = unwrap(messages, plan.with_body)
    if len(damaged):
        path = _log_file(plan, int(units.column("commitlog_offset")[int(damaged[0])].as_py())).path
        report_damage(plan, out, units, damaged, INNER_BATCH_DAMAGED, path)
    if len(parent) == units.num_rows and not len(damaged):
        return messages, units
    units = units.take(pa.array(parent))
    offsets = units.column("queue_offset").to_numpy() + index
    return messages, units.set_column(units.schema.get_field_index("queue_offset"), "queue_offset", pa.array(offsets))


def _entry_headers_ok(plan, out, units, file, buf, starts, offsets, sizes, keep):
    """`keep` without the units whose DLedger entry header is damaged: damaged data, as a damaged record is
    (fails the run, or audited and left out under --on-corrupt skip), at the entry's offset."""
    idx = np.flatnonzero(keep)
    keep = keep.copy()
    for reason, rows in header_problems(file, buf, starts[idx], offsets[idx], sizes[idx]):
        report_damage(plan, out, units, idx[rows], reason, file.path, offsets=offsets - file.header_size)
        keep[idx[rows]] = False
    return keep


def _crc_ok(messages):
    """bodyCRC check (UtilAll.crc32 & 0x7fffffff of the stored body), per record: zlib's C loop."""
    import zlib

    bodies = messages.column("stored_body").to_pylist()
    crcs = messages.column("body_crc").to_numpy()
    return np.array([(zlib.crc32(b or b"") & 0x7FFFFFFF) == c for b, c in zip(bodies, crcs)], dtype=bool)


def _decode_one_by_one(plan, buf, uniq, starts, idx, base, path, units, out):
    """Slow path after a decode error in skip mode: isolate the damaged records."""
    good_starts, batches = [], []
    for s in uniq:
        try:
            batches.append(decode_records(buf, np.array([s]), base, path, with_body=plan.with_body,
                                          raw=plan.verify_crc, inflate=False, coded=plan.sql92_properties))
            good_starts.append(s)
        except CorruptStoreError as exc:
            report_damage(plan, out, units, idx[starts[idx] == s], exc.reason, path)
    good_starts = np.array(good_starts, dtype=np.int64)
    idx = idx[np.isin(starts[idx], good_starts)]
    inverse = np.searchsorted(good_starts, starts[idx])
    table = pa.Table.from_batches(batches) if batches else MESSAGE_SCHEMA.empty_table()
    return table, idx, inverse


def inflated(plan: ReplayPlan, messages: pa.Table, units: pa.Table, out: Pieces,
             budget: int) -> Iterator[tuple[pa.Table, pa.Table]]:
    """(messages, units) pieces of a decoded batch, its compressed bodies inflated, each piece holding at most
    `budget` bytes of bodies (or one body larger than that alone) and inflated only when the one before has
    been handed on: however large legitimate bodies are, a task holds one piece's, and no body column nears
    Arrow's 2 GiB. A batch with no compressed body (or read without bodies) passes as it is.

    A body that inflates beyond plan.max_body stays null and its message is listed in `bodies` (BODIES_SCHEMA):
    it is decided and delivered as any other, filters reading properties only. One that does not inflate is
    damaged (the corruption policy). Sizes of uncompressed bodies are Arrow's; compressed ones are inflated
    one by one, in Python."""
    sys_flag = messages.column("sys_flag").to_numpy()
    rows = np.flatnonzero(sys_flag & L.COMPRESSED) if plan.with_body else ()
    if not len(rows):
        yield messages, units
        return
    stored = one_array(messages.column("body"))
    sizes = pc.binary_length(stored).to_numpy(zero_copy_only=False).astype(np.int64)
    stored_sizes = sizes.copy()
    sizes[rows] = 0  # a compressed body's size is known once inflated
    plain = np.r_[0, np.cumsum(sizes)]  # bytes of the uncompressed bodies before each row
    ctypes, offsets = compression_types(sys_flag), messages.column("commitlog_offset").to_numpy()
    path = _log_file(plan, int(offsets[0])).path
    held = _Held(messages, units, stored)
    lo, inflated_bytes = 0, 0  # the piece being filled starts at lo; its compressed bodies' bytes so far
    for i, data in zip([*rows, len(sizes)], stored.take(pa.array(rows)).to_pylist() + [None]):
        while lo < i and plain[i] - plain[lo] + inflated_bytes > budget:  # rows [lo, i) pass the budget
            hi = lo + max(1, int(np.searchsorted(np.cumsum(sizes[lo:i]), budget, side="right")))
            inflated_bytes -= int(sizes[lo:hi].sum() - (plain[hi] - plain[lo]))
            yield held.piece(lo, hi, out)
            lo = hi
        if i == len(sizes):
            break
        try:
            body = decompress(data, ctypes[i], path, int(offsets[i]), plan.max_body)
        except CorruptStoreError as exc:
            report_damage(plan, out, units, [i], exc.reason, path)  # raises unless --on-corrupt skip
            held.damaged.add(i)
            body = None
        else:
            if body is None:
                held.too_large[i] = (int(stored_sizes[i]), not_inflated_reason(ctypes[i], plan.max_body))
        held.bodies[i] = body
        sizes[i] = len(body or b"")
        inflated_bytes += sizes[i]
    if lo < len(sizes):
        yield held.piece(lo, len(sizes), out)


class _Held:
    """The inflated bodies of `inflated` not handed on yet, and which of them are too large or damaged."""

    def __init__(self, messages: pa.Table, units: pa.Table, stored: pa.Array) -> None:
        self.messages, self.units, self.stored = messages, units, stored
        # by row
        self.bodies: dict[int, bytes | None] = {}
        self.too_large: dict[int, tuple[int, str]] = {}
        self.damaged: set[int] = set()

    def piece(self, lo: int, hi: int, out: Pieces) -> tuple[pa.Table, pa.Table]:
        """(messages, units) of rows [lo, hi) with their inflated bodies; its too large ones to `out`."""
        rows = [r for r in self.bodies if r < hi]
        body = inflated_into(self.stored.slice(lo, hi - lo), np.array(rows, np.int64) - lo,
                             [self.bodies.pop(r) for r in rows])
        messages = self.messages.slice(lo, hi - lo)
        messages = messages.set_column(messages.schema.get_field_index("body"), messages.schema.field("body"), body)
        units = self.units.slice(lo, hi - lo)
        large = [r for r in rows if r in self.too_large]
        if large:
            sel = self.units.take(pa.array(large))
            sizes, reasons = zip(*(self.too_large.pop(r) for r in large))
            out.add("bodies", pa.table({
                "topic": sel.column("topic"), "queue_id": sel.column("queue_id"),
                "queue_offset": sel.column("queue_offset"), "commitlog_offset": sel.column("commitlog_offset"),
                "stored_size": pa.array(sizes, pa.int32()), "reason": pa.array(reasons, pa.string())},
                schema=BODIES_SCHEMA))
        damaged = [r - lo for r in rows if r in self.damaged]
        if damaged:
            keep = pa.array(np.setdiff1d(np.arange(hi - lo), damaged))
            messages, units = messages.take(keep), units.take(keep)
        return messages, units


_HELD: dict = {}  # commit-log path -> (start, bytes) of the split a task is decoding (held_split)


@contextmanager
def held_split(plan: ReplayPlan, units: pa.Table) -> Iterator[None]:
    """The byte range all of a split's units point into, mapped once while the task decodes it (local files).

    A split's batches (a topic's units at a time) each span most of the split, and a fresh mapping of a range
    faults its pages in again: with one batch mapping after another the task faulted its split's pages in
    some four times (measured: a decode pass over a range mapped fresh 0.42 s per GiB, over one mapped
    already 0.25 s). Each batch's range is then a view of this one. Units that point into more than one file
    or outside it (damaged ones) hold nothing: each batch maps its own range, as without this."""
    fs = plan.fs
    found = plan.log.file_at(int(pc.min(units.column("commitlog_offset")).as_py())) \
        if units.num_rows else None
    if found is None or not storefs.is_local(fs):
        yield
        return
    rel = units.column("commitlog_offset").to_numpy() - found.start
    ends = rel + units.column("size").to_numpy().astype(np.int64)
    if (rel < found.header_size).any() or (ends > found.length).any():
        yield
        return
    lo = int(rel.min()) - found.header_size
    _HELD[found.path] = (lo, storefs.read_range(fs, found.path, lo, int(ends.max()) - lo))
    try:
        yield
    finally:
        _HELD.pop(found.path, None)


def _read(plan, path, lo, n):
    """Bytes [lo, lo + n) of a commit-log file: a view of the split held mapped, else read (mapped) now."""
    held = _HELD.get(path)
    if held is not None and held[0] <= lo and lo + n <= held[0] + len(held[1]):
        return held[1][lo - held[0]:lo - held[0] + n]
    return storefs.read_range(plan.fs, path, lo, n)


def _log_file(plan: ReplayPlan, offset: int) -> LogFile:
    """The commit-log file of a record the task has just read (so it is there: never None)."""
    found = plan.log.file_at(offset)
    assert found is not None
    return found
