"""One replay task: the consume-queue units that point into one commit-log split, in, result rows out.

Pure Arrow and numpy (no Spark): the Spark job runs it per split inside mapInArrow, tests run it
directly. The task reads only its split's byte range of one commit-log file; record starts come from the
units, so no header walk is needed; every message is decoded once and serves all groups."""
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filtering import bloom as bloom_mod
from filtering import dispatcher
from filtering.message_filter import UnitBatch, apply_subscription
from schemas import kernels as K
from schemas import layout as L
from schemas import storefs
from schemas.arrow_schemas import BITMAP_SCHEMA, CORRUPT_SCHEMA, OUTPUT_MESSAGE_FIELDS, STAT_FIELDS, TOPIC_STAT_FIELDS
from schemas.commitlog import decode_records
from schemas.errors import CorruptStoreError

OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL: the commit-log file was deleted (retention)"
EXT_UNREADABLE = "ext unit unreadable"
CRC_MISMATCH = "body CRC mismatch"
# records decoded and filtered per batch: arrays stay cache- and allocator-friendly (measured: 64k rows
# decode at 1.6 M/s, 270k at 1.2 M/s), and a batch's memory is a small part of its split's
BATCH_ROWS = 65536


@dataclass(frozen=True)
class ReplayPlan:
    """Everything a task needs besides its units; small, built on the driver, shipped to executors."""

    store_uri: str
    commitlog_file_size: int
    commitlog_files: tuple  # ((start, path, length), ...)
    subscriptions: tuple  # CompiledSubscription, compiled without errors
    registrations: tuple = ()  # every stored SQL92 registration of the store (the dispatcher's), compiled
    bloom_f: int = 20
    bloom_n: int = 32
    with_body: bool = True
    support_retry: bool = False
    on_corrupt: str = "fail"
    verify_crc: bool = False
    split_size: int = 128 << 20
    start_offsets: tuple = ()  # ((group, topic, queue_id, first queue offset), ...) for --from committed
    data_end: int = None  # end of the last record any consume queue points at: no split starts beyond it
    files_by_start: dict = field(default=None, compare=False)

    def file_of(self, start):
        if self.files_by_start is None:
            object.__setattr__(self, "files_by_start", {s: (p, n) for s, p, n in self.commitlog_files})
        return self.files_by_start.get(start)


@dataclass(frozen=True)
class MessageRows:
    """The messages of one topic's batch that some group receives or that collide, once (`table`: the
    OUTPUT_MESSAGE_FIELDS), and who gets which: `delivered` and `collided` are (group index, row index)
    arrays into `groups` and `table`, ordered by group, then row."""

    topic: str
    table: pa.Table
    groups: pa.Array
    delivered: tuple
    collided: tuple


def iter_split(plan, units):
    """What one split's units (a CONSUME_QUEUE_SCHEMA table) produce, as a stream of (kind, piece) pairs,
    batch by batch: `message` (MessageRows), `bitmap` (BITMAP_SCHEMA), `corrupt` (CORRUPT_SCHEMA),
    `stats` (group, topic and STAT_FIELDS), `topic_stats` (topic and TOPIC_STAT_FIELDS), `example`
    (group, topic, reason: why an expression throws). The sink writes each as it comes."""
    if units.num_rows == 0:
        return
    # topic by topic, each in log order: every topic is then a zero-copy slice of the decoded columns
    units = _by_topic_then_offset(units)
    out = _Pieces()
    _check_ext(plan, units, out)
    messages, units = _decode_messages(plan, units, out)
    _skipped_stats(plan, out)
    yield from out.flush()
    if units.num_rows:
        # one batch per topic and decoded chunk: each is a zero-copy slice of one chunk
        # topic runs from integer codes (comparing 270 k Python strings costs more than the encoding)
        encoded = pc.dictionary_encode(_one_array(units.column("topic")))
        names, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
        chunks = np.cumsum([len(c) for c in messages.column(0).chunks])[:-1]
        bounds = np.union1d(np.flatnonzero(codes[1:] != codes[:-1]) + 1, chunks)
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)]):
            _replay_topic(plan, names[codes[lo]], units.slice(lo, hi - lo), messages.slice(lo, hi - lo), out)
            yield from out.flush()


def _by_topic_then_offset(units):
    """units sorted by (topic, commit-log offset): a sort of small integer topic ranks and offsets, not of
    strings, and no copy when they already are in that order."""
    encoded = pc.dictionary_encode(_one_array(units.column("topic")))
    names = encoded.dictionary.to_pylist()
    rank = np.argsort(np.argsort(names, kind="stable"))  # alphabetical rank of each distinct topic
    topic_rank = rank[encoded.indices.to_numpy(zero_copy_only=False)]
    offsets = units.column("commitlog_offset").to_numpy()
    order = np.lexsort((offsets, topic_rank))
    if (order == np.arange(len(order))).all():
        return units
    return units.take(pa.array(order))


class _Pieces:
    """(kind, piece) pairs collected until the task hands them on; units audited and left out, by topic."""

    def __init__(self):
        self.pieces = []
        self.skipped = []  # (topic, queue_id, queue_offset) tables of units audited and left out

    def add(self, kind, piece):
        self.pieces.append((kind, piece))

    def flush(self):
        pieces, self.pieces = self.pieces, []
        yield from pieces


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


def _check_ext(plan, units, out):
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


def _skipped_stats(plan, out):
    """Per (group, topic): units audited and left out, so that every unit is accounted for."""
    if not out.skipped:
        return
    skipped = pa.concat_tables(out.skipped)
    topics = skipped.column("topic").to_numpy(zero_copy_only=False)
    for csub in plan.subscriptions:
        rows = np.flatnonzero(topics == csub.sub.topic)
        if not len(rows):
            continue
        sel = skipped.take(pa.array(rows))
        scope = in_scope(plan, csub.sub, sel.column("queue_id").to_numpy(), sel.column("queue_offset").to_numpy())
        n = len(rows) if scope is None else int(scope.sum())
        if n:
            out.add("stats", _counters([csub.sub.group], csub.sub.topic, {"units": n, "skipped": n}))


def _decode_messages(plan, units, out):
    """Decode the record of every unit; units whose record is missing or damaged go to the audit."""
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
    uniq, inverse = starts[idx], None  # decode in unit order, a run of ascending starts (a topic's) at a time
    if (np.diff(uniq) == 0).any():  # a record twice in a run (never, in a sound store): decode it once
        uniq, inverse = np.unique(uniq, return_inverse=True)
        fields = None
    try:
        cuts = np.flatnonzero(np.diff(uniq) < 0) + 1
        bounds = [(a + k, min(a + k + BATCH_ROWS, b)) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(uniq)])
                  for k in range(0, b - a, BATCH_ROWS)] or [(0, 0)]
        decoded = pa.Table.from_batches([  # no records: one empty batch, for the schema
            decode_records(buf, uniq[a:b], file_start + lo, path, with_body=plan.with_body, raw=plan.verify_crc,
                           fields=None if fields is None else {k: v[a:b] for k, v in fields.items()})
            for a, b in bounds])
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
        properties=_one_array(messages.column("properties")),
        tags=_one_array(messages.column("tags")),
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


def _replay_topic(plan, topic, units, messages, out):
    """Dispatcher audit and every subscription of one topic over its units."""
    n = units.num_rows
    bloom = bloom_mod.BloomFilter(plan.bloom_f, plan.bloom_n)
    batch = topic_batch(topic, units, messages, bloom)
    raw_valid = units.column("filter_bitmap").is_valid().to_numpy(zero_copy_only=False)
    subs = [c for c in plan.subscriptions if c.sub.topic == topic]
    d = dispatch_topic(plan, topic, batch, bloom)
    stored_match = d.match[:, : len(d.registered)]
    _audit_bitmaps(topic, d.registered, stored_match, bloom, batch, units, messages, raw_valid, out)
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
        out.add("stats", _counters(groups, topic, stats))
    _message_rows(out, topic, messages, units, client, collided, groups)


def _audit_bitmaps(topic, registered, match, bloom, batch, units, messages, raw_valid, out):
    """The stored ConsumeQueueExt bitmaps against the ones recomputed from all the store's registrations:
    a `bitmap` row per difference, one `topic_stats` row of counters.

    Only units with a readable ext unit carry a bitmap to compare; a batch where none holds a bitmap is a
    broker without enableCalcFilterBitMap (or without the ext), not a mismatch."""
    compared = batch.ext_ok if raw_valid.any() else np.zeros(len(batch), dtype=bool)
    mismatch = explained = np.zeros(len(batch), dtype=bool)
    if compared.any():
        store_times = np.where(batch.ext_ok, batch.msg_store_time, messages.column("store_timestamp").to_numpy())
        mismatch, explained, missing = dispatcher.compare_stored(
            registered, match, bloom.m, batch.stored_bitmaps, raw_valid, store_times)
        mismatch &= compared
        rows = np.flatnonzero(mismatch)
        if len(rows):
            own, _ = dispatcher.recompute_bitmaps(registered, match, bloom.m)
            cols = _message_columns(messages, units, rows)
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
    from filtering.sql92.diagnose import failure

    text = failure(csub.sql, dict(properties.slice(row, 1).to_pylist()[0] or []))
    out.add("example", pa.table({"group": [csub.sub.group], "topic": [csub.sub.topic], "reason": [text]}))


def _message_rows(out, topic, messages, units, delivered, collided, groups):
    """The messages some group receives (or that collide), once, with who gets which (MessageRows).
    delivered, collided: (groups, units) bool."""
    rows = np.flatnonzero(delivered.any(axis=0) | collided.any(axis=0))
    if not len(rows):
        return
    cols = _message_columns(messages, units, rows)
    table = pa.table({name: cols[name] for name, _ in OUTPUT_MESSAGE_FIELDS})
    # np.nonzero walks the (group, row) matrix row by row: pairs come ordered by group, then message
    out.add("message", MessageRows(topic, table, pa.array(groups, pa.string()),
                                   np.nonzero(delivered[:, rows]), np.nonzero(collided[:, rows])))


def _counters(groups, topic, counters):
    """A `stats` piece: a row per group, every STAT_FIELDS counter (absent ones 0)."""
    g = len(groups)
    return pa.table({"group": pa.array(groups, pa.string()), "topic": pa.repeat(pa.scalar(topic), g),
                     **{f: pa.array(np.broadcast_to(np.asarray(counters.get(f, 0), dtype=np.int64), (g,)))
                        for f in STAT_FIELDS}})


def _one_array(column):
    """A ChunkedArray as one Array: its only chunk as is (combine_chunks would copy it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def in_scope(plan, sub, queue_ids, queue_offsets):
    """Rows at or after the group's committed offset of their queue (None: all rows)."""
    firsts = {q: o for g, t, q, o in plan.start_offsets if g == sub.group and t == sub.topic}
    if not plan.start_offsets:
        return None
    first = np.zeros(len(queue_ids), dtype=np.int64)
    for q, o in firsts.items():
        first[queue_ids == q] = o
    return queue_offsets >= first


def _message_columns(messages, units, rows):
    if len(rows) == units.num_rows:  # every row: no copy
        return {name: (units if name in ("queue_id", "queue_offset", "commitlog_offset") else messages).column(name)
                for name, _ in OUTPUT_MESSAGE_FIELDS}
    take = pa.array(rows)
    cols = {}
    for name, _ in OUTPUT_MESSAGE_FIELDS:
        source = units if name in ("queue_id", "queue_offset", "commitlog_offset") else messages
        cols[name] = source.column(name).take(take)
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
