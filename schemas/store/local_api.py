"""A Spark-free API over a whole store: every message, every consume-queue unit, as Arrow tables.

For inspection, tests and acceptance checks on stores that fit in memory; the Spark job reads the same
decoders in bounded splits. Stores are local directories here (the job resolves URIs: jobs/plan/brokers.py)."""
from __future__ import annotations

import os
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from schemas.arrow_schemas import CONSUME_QUEUE_SCHEMA, MESSAGE_SCHEMA
from schemas.log.files import file_units, record_starts
from schemas.log.records import decode_records
from schemas.queues.consume_queue import decode_cq_segment, resolve_units
from schemas.queues.cq_rebuild import UNITS_SCHEMA
from schemas.store import storefs
from schemas.store.store import QueueFiles, StoreLayout, open_store


def local_store(store_dir: str | os.PathLike[str], commitlog: str | Sequence[str] = ()) -> StoreLayout:
    """The StoreLayout of a local store directory; commitlog: directories of a log kept elsewhere (the job's
    --commitlog: a sequence, each DIR[,DIR...])."""
    if isinstance(commitlog, str):
        commitlog = [commitlog]
    dirs = tuple(os.path.abspath(d.strip()) for text in commitlog for d in str(text).split(",") if d.strip())
    return open_store(pafs.LocalFileSystem(), os.path.abspath(store_dir), dirs, str(store_dir))


def iter_message_batches(store_dir: str | os.PathLike[str], with_body: bool = True, raw: bool = False,
                         commitlog: str | Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
    """One RecordBatch per commit-log segment, in log order (blank end-of-file records excluded).

    commitlog: directories of a log kept elsewhere (the job's --commitlog)."""
    layout = local_store(store_dir, commitlog)
    fs = layout.fs
    for seg in layout.log.files:  # plain files and DLedger data files alike (schemas/log/files.py)
        buf = storefs.read_range(fs, seg.path)
        starts = record_starts(seg, buf)
        yield decode_records(buf, starts, seg.start, seg.path, with_body=with_body, raw=raw)


def rebuilt_units(store_dir: str | os.PathLike[str], commitlog: str | Sequence[str] = ()) -> pa.Table:
    """The units the broker's dispatcher builds from every commit-log record (schemas/queues/cq_rebuild.py), in log
    order: UNITS_SCHEMA plus store_timestamp."""
    layout = local_store(store_dir, commitlog)
    fs = layout.fs
    parts = [file_units(f, storefs.read_range(fs, f.path)).units for f in layout.log.files]
    return pa.concat_tables(parts) if parts else UNITS_SCHEMA.empty_table()


def read_messages(store_dir: str | os.PathLike[str], with_body: bool = True, raw: bool = False,
                  commitlog: str | Sequence[str] = ()) -> pa.Table:
    """Every message record of the commit log, in log order, as a pyarrow Table (MESSAGE_SCHEMA).

    raw=True adds `stored_body` and `properties_raw` (see decode_records)."""
    batches = list(iter_message_batches(store_dir, with_body, raw, commitlog))
    return pa.Table.from_batches(batches) if batches else MESSAGE_SCHEMA.empty_table()


def queue_batch(fs: pafs.FileSystem, queue: QueueFiles) -> pa.RecordBatch:
    """Every unit of one consume queue with its ext unit resolved (CONSUME_QUEUE_SCHEMA)."""
    return resolve_units(fs, queue, [decode_cq_segment(storefs.read_range(fs, s.path), s.start, s.path)
                                     for s in queue.cq])


def read_consume_queues(store_dir: str | os.PathLike[str]) -> pa.Table:
    """Every consume-queue unit of every topic and queue, ext addresses resolved (CONSUME_QUEUE_SCHEMA)."""
    layout = local_store(store_dir)
    fs = layout.fs
    return pa.Table.from_batches([queue_batch(fs, q) for q in layout.queues], schema=CONSUME_QUEUE_SCHEMA)
