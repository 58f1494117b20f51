"""Decoding a split's records under the corruption policy: every unit's record read and checked (magic,
size, topic, queue and offset agree with the unit; body CRC on request); damaged ones fail the run or are
audited and left out (--on-corrupt skip), each with its reason."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import kernels as K
from schemas import layout as L
from schemas import storefs
from schemas.arrow_schemas import CORRUPT_SCHEMA
from schemas.commitlog import decode_records
from schemas.errors import CorruptStoreError

OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL: the commit-log file was deleted (retention)"

EXT_UNREADABLE = "ext unit unreadable"

CRC_MISMATCH = "body CRC mismatch"

def _corrupt(plan, out, units, rows, reason, path, offsets=None):
    """Skip (audit) or fail on the units at `rows`; `offsets`: positions in `path` (default commit-log)."""
    rows = np.asarray(rows)
    if not len(rows):
        return
    sel = units.take(pa.array(rows))
    where = sel.column("commitlog_offset") if offsets is None else pa.array(np.asarray(offsets)[rows])
    if plan.on_corrupt != "skip" and not reason.startswith("OFFSET_TOO_SMALL"):
        first = sel.slice(0, 1).to_pylist()[0]
        raise CorruptStoreError(path, where[0].as_py(), reason, first["topic"], first["queue_id"])
    if not reason.startswith(EXT_UNREADABLE):
        out.skipped.append(sel.select(["topic", "queue_id", "queue_offset"]))
    n = len(rows)
    out.add("corrupt", pa.table({
        "file": pa.repeat(pa.scalar(path), n), "offset": where, "topic": sel.column("topic"),
        "queue_id": sel.column("queue_id"), "queue_offset": sel.column("queue_offset"),
        "commitlog_offset": sel.column("commitlog_offset"), "reason": pa.repeat(pa.scalar(reason), n)},
        schema=CORRUPT_SCHEMA))


def check_ext(plan, units, out):
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
        _corrupt(plan, out, units, rows,
                 EXT_UNREADABLE + ": its tag code counts as missing (matches), as the broker does",
                 f"consumequeue_ext/{topic}/{queue}", offsets=positions)


def decode_messages(plan, units, out):
    """Decode the record of every unit (a batch of split_task.decoded_topics: one commit-log file); units
    whose record is missing or damaged go to the audit. (messages, the units they belong to), row for row."""
    offsets = units.column("commitlog_offset").to_numpy()
    sizes = units.column("size").to_numpy().astype(np.int64)
    file_start = int(offsets[0] // plan.commitlog_file_size * plan.commitlog_file_size)
    found = plan.file_of(file_start)
    first_start = plan.commitlog_files[0][0] if plan.commitlog_files else None
    if found is None:
        reason = OFFSET_TOO_SMALL if first_start is not None and file_start < first_start else \
            "commit-log file missing"
        path = f"commitlog/{L.file_name(file_start)}"
        _corrupt(plan, out, units, np.arange(units.num_rows), reason, path)
        return None, units.slice(0, 0)
    path, length = found
    rel = offsets - file_start
    bad = (rel + sizes > length) | (sizes < L.MIN_RECORD_SIZE)
    _corrupt(plan, out, units, np.flatnonzero(bad), "unit points outside the commit-log file", path)
    keep = ~bad
    lo = int(rel[keep].min()) if keep.any() else 0
    hi = int((rel + sizes)[keep].max()) if keep.any() else 0
    buf = storefs.read_range(plan_fs(plan), path, lo, hi - lo) if keep.any() else np.zeros(0, np.uint8)
    starts = rel - lo
    head_ok = np.zeros(len(rel), dtype=bool)
    fields = None
    if keep.any():
        idx = np.flatnonzero(keep)
        fields = K.record_fields(buf, starts[idx])  # one pass: the head checks here, the decode below
        magic_ok = np.isin(fields["magic"], L.MESSAGE_MAGICS)
        size_ok = fields["total_size"] == sizes[idx]
        head_ok[idx[magic_ok & size_ok]] = True
        _corrupt(plan, out, units, idx[~magic_ok], "unit points at no record (bad magic code)", path)
        _corrupt(plan, out, units, idx[magic_ok & ~size_ok], "unit size differs from the record's totalSize", path)
        if not (magic_ok & size_ok).all():
            fields = None  # some candidates are gone: the decode finds the fields of the rest itself
    idx = np.flatnonzero(head_ok)
    uniq, inverse = starts[idx], None  # decode in unit order
    if (np.diff(uniq) == 0).any():  # a record twice in a batch (never, in a sound store): decode it once
        uniq, inverse = np.unique(uniq, return_inverse=True)
        fields = None
    try:
        decoded = pa.Table.from_batches([decode_records(buf, uniq, file_start + lo, path, with_body=plan.with_body,
                                                        raw=plan.verify_crc, fields=fields)])
    except CorruptStoreError:
        if plan.on_corrupt != "skip":
            raise
        decoded, idx, inverse = _decode_one_by_one(plan, buf, np.unique(starts[idx]), starts, idx, file_start + lo,
                                                   path, units, out)
    messages = decoded if inverse is None else decoded.take(pa.array(inverse.reshape(-1)))
    sel = units.take(pa.array(idx))
    if plan.verify_crc and "stored_body" in messages.column_names:
        crc_ok = _crc_ok(messages)
        _corrupt(plan, out, sel, np.flatnonzero(~crc_ok), CRC_MISMATCH, path)
        keep = pa.array(np.flatnonzero(crc_ok))
        messages, sel = messages.take(keep).drop_columns(["stored_body", "properties_raw"]), sel.take(keep)
    agree = (pc.equal(messages.column("topic"), sel.column("topic")).to_numpy(zero_copy_only=False)
             & (messages.column("queue_id").to_numpy() == sel.column("queue_id").to_numpy())
             & (messages.column("queue_offset").to_numpy() == sel.column("queue_offset").to_numpy()))
    _corrupt(plan, out, sel, np.flatnonzero(~agree), "record's topic, queue or queue offset differ from the unit", path)
    if agree.all():
        return messages, sel
    keep_rows = pa.array(np.flatnonzero(agree))
    return messages.take(keep_rows), sel.take(keep_rows)


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
                                          raw=plan.verify_crc))
            good_starts.append(s)
        except CorruptStoreError as exc:
            _corrupt(plan, out, units, idx[starts[idx] == s], exc.reason, path)
    good_starts = np.array(good_starts, dtype=np.int64)
    idx = idx[np.isin(starts[idx], good_starts)]
    inverse = np.searchsorted(good_starts, starts[idx])
    from schemas.arrow_schemas import MESSAGE_SCHEMA

    table = pa.Table.from_batches(batches) if batches else MESSAGE_SCHEMA.empty_table()
    return table, idx, inverse


_FS = {}


def plan_fs(plan):
    """The store's filesystem, resolved once per process (executors get the URI, not a handle)."""
    fs = _FS.get(plan.store_uri)
    if fs is None:
        fs = _FS[plan.store_uri] = storefs.resolve(plan.store_uri)[0]
    return fs
